#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/dist/strategy/parameter_server.h"
#include "trainer-runtime/dist/strategy/task_runner.h"

namespace kubetrain::dist {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PlaceVariablesTest, GreedyBySizeLargestFirst) {
  // 1000 -> ps0, 600 -> ps1, 500 -> ps1 (600 < 1000), 10 -> ps0 (1000 < 1100),
  // 10 -> ps0 (1010 < 1100).
  std::vector<int> placement = PlaceVariables(
      {{"a/bias", 10}, {"a/kernel", 1000}, {"b/kernel", 600}, {"c/kernel", 500}, {"b/bias", 10}}, 2);
  EXPECT_THAT(placement, ElementsAre(0, 0, 1, 1, 0));
}

TEST(PlaceVariablesTest, SameAnswerWhateverTheInputOrder) {
  std::vector<std::pair<std::string, int64_t>> vars = {{"x", 5}, {"y", 5}, {"z", 5}, {"w", 7}};
  std::vector<int> forward = PlaceVariables(vars, 3);
  std::vector<std::pair<std::string, int64_t>> reversed(vars.rbegin(), vars.rend());
  std::vector<int> backward = PlaceVariables(reversed, 3);
  for (size_t i = 0; i < vars.size(); ++i) EXPECT_EQ(forward[i], backward[vars.size() - 1 - i]);
}

TEST(PlaceVariablesTest, OnePsTakesAll) {
  EXPECT_THAT(PlaceVariables({{"a", 1}, {"b", 2}}, 1), ElementsAre(0, 0));
}

TEST(DistributedFlagsTest, TakesItsFlagsAndLeavesTheRest) {
  std::vector<std::string> args = {"--batch_size=64", "--strategy", "ps", "--sync-replicas",
                                   "--transport=grpc", "--connect_timeout_secs=5", "--seed=1"};
  auto flags = ExtractDistributedFlags(args);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->strategy, "ps");
  EXPECT_TRUE(flags->sync_replicas);
  EXPECT_EQ(flags->transport, "grpc");
  EXPECT_EQ(flags->connect_timeout, absl::Seconds(5));
  EXPECT_THAT(args, ElementsAre("--batch_size=64", "--seed=1"));
}

TEST(DistributedFlagsTest, BadValuesNameTheFlag) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--strategy=mirrored"}, {"--transport=tcp"}, {"--sync_replicas=maybe"},
           {"--connect_timeout_secs=-1"}, {"--strategy"}}) {
    auto flags = ExtractDistributedFlags(args);
    ASSERT_FALSE(flags.ok()) << args[0];
    EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(flags.status().message()), HasSubstr(args[0].substr(0, 8)));
  }
}

TEST(ChooseStrategyTest, DefaultsFromTheClusterShape) {
  DistributedFlags flags;
  auto local = ClusterSpec::FromTfConfig("");
  auto ps = ClusterSpec::FromTfConfig(
      R"({"cluster":{"master":["m:1"],"worker":["w:1"],"ps":["p:1"]},"task":{"type":"master"}})");
  auto workers = ClusterSpec::FromTfConfig(
      R"({"cluster":{"worker":["w:1","v:1"]},"task":{"type":"worker","index":1}})");
  ASSERT_TRUE(local.ok() && ps.ok() && workers.ok());
  EXPECT_EQ(*ChooseStrategy(*local, flags), "local");
  EXPECT_EQ(*ChooseStrategy(*ps, flags), "ps");
  EXPECT_EQ(*ChooseStrategy(*workers, flags), "allreduce");
  flags.strategy = "ps";
  EXPECT_THAT(std::string(ChooseStrategy(*workers, flags).status().message()), HasSubstr("no ps tasks"));
  flags.strategy = "allreduce";
  EXPECT_EQ(*ChooseStrategy(*ps, flags), "allreduce");
}

}  // namespace
}  // namespace kubetrain::dist
