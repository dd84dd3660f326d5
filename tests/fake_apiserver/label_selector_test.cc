#include "tests/fake_apiserver/label_selector.h"

#include "gtest/gtest.h"

namespace kubetrain::fake_apiserver {
namespace {

TEST(LabelSelectorTest, EmptyMatchesEverything) {
  auto s = LabelSelector::Parse("");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
  EXPECT_TRUE(s->Matches({}));
}

TEST(LabelSelectorTest, EqualityAndInequality) {
  auto s = LabelSelector::Parse("app=kubetrain,tier!=ps");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->Matches({{"app", "kubetrain"}, {"tier", "worker"}}));
  EXPECT_TRUE(s->Matches({{"app", "kubetrain"}}));
  EXPECT_FALSE(s->Matches({{"app", "kubetrain"}, {"tier", "ps"}}));
  EXPECT_FALSE(s->Matches({{"app", "other"}}));
}

TEST(LabelSelectorTest, SetBasedAndExistence) {
  auto s = LabelSelector::Parse("kubetrain.io/job-name,role in (worker, ps),!skip,env notin (dev)");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->Matches({{"kubetrain.io/job-name", "a"}, {"role", "ps"}}));
  EXPECT_FALSE(s->Matches({{"role", "ps"}}));
  EXPECT_FALSE(s->Matches({{"kubetrain.io/job-name", "a"}, {"role", "master"}}));
  EXPECT_FALSE(s->Matches({{"kubetrain.io/job-name", "a"}, {"role", "ps"}, {"skip", ""}}));
  EXPECT_FALSE(s->Matches({{"kubetrain.io/job-name", "a"}, {"role", "ps"}, {"env", "dev"}}));
}

TEST(LabelSelectorTest, RejectsMalformed) {
  EXPECT_FALSE(LabelSelector::Parse("=x").ok());
  EXPECT_FALSE(LabelSelector::Parse("a in x").ok());
  EXPECT_FALSE(LabelSelector::Parse("a b=c").ok());
}

}  // namespace
}  // namespace kubetrain::fake_apiserver
