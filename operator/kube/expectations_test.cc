#include "operator/kube/expectations.h"

#include "gtest/gtest.h"

namespace kubetrain::kube {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(ExpectationsTest, UnknownJobIsSatisfied) {
  Expectations e;
  EXPECT_TRUE(e.Satisfied("ns/j", kT0));
}

TEST(ExpectationsTest, SatisfiedOnlyWhenEveryCreateAndDeleteIsObserved) {
  Expectations e;
  e.ExpectCreations("ns/j", {"pods/a", "pods/b"}, kT0);
  e.ExpectDeletions("ns/j", {"pods/c"}, kT0);
  EXPECT_FALSE(e.Satisfied("ns/j", kT0));
  EXPECT_EQ(e.Pending("ns/j"), 3u);
  e.CreationObserved("ns/j", "pods/a");
  e.CreationObserved("ns/j", "pods/a");  // repeated events are harmless
  e.CreationObserved("ns/j", "pods/b");
  EXPECT_FALSE(e.Satisfied("ns/j", kT0));
  e.DeletionObserved("ns/j", "pods/c");
  EXPECT_TRUE(e.Satisfied("ns/j", kT0));
  EXPECT_TRUE(e.Satisfied("ns/other", kT0));
}

TEST(ExpectationsTest, ExpireSoALostEventDoesNotBlockForever) {
  Expectations e(absl::Minutes(5));
  e.ExpectCreations("ns/j", {"pods/a"}, kT0);
  EXPECT_FALSE(e.Satisfied("ns/j", kT0 + absl::Minutes(4)));
  EXPECT_TRUE(e.Satisfied("ns/j", kT0 + absl::Minutes(6)));
}

TEST(ExpectationsTest, ForgetClearsTheJob) {
  Expectations e;
  e.ExpectCreations("ns/j", {"pods/a"}, kT0);
  e.Forget("ns/j");
  EXPECT_TRUE(e.Satisfied("ns/j", kT0));
}

}  // namespace
}  // namespace kubetrain::kube
