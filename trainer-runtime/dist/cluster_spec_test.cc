#include "trainer-runtime/dist/cluster_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::dist {
namespace {

using api::Role;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kKubeflow[] =
    R"({"cluster":{"chief":["mnist-chief-0.default.svc:2222"],"ps":["mnist-ps-0.default.svc:2222"],)"
    R"("worker":["mnist-worker-0.default.svc:2222","mnist-worker-1.default.svc:2222"]},)"
    R"("task":{"type":"worker","index":1},"environment":"cloud"})";

TEST(ClusterSpecTest, ParsesKubeflowTfConfig) {
  auto spec = ClusterSpec::FromTfConfig(kKubeflow);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task(), (TaskId{Role::kWorker, 1}));
  EXPECT_EQ(spec->environment(), "cloud");
  EXPECT_EQ(spec->master_name(), "chief");
  EXPECT_FALSE(spec->IsChief());
  EXPECT_TRUE(spec->IsChief(TaskId{Role::kMaster, 0}));
  EXPECT_EQ(spec->NumTasks(Role::kParameterServer), 1);
  EXPECT_EQ(spec->NumReplicas(), 3);
  EXPECT_EQ(spec->ReplicaRank(), 2);
  EXPECT_THAT(spec->ReplicaAddresses(),
              ElementsAre("mnist-chief-0.default.svc:2222", "mnist-worker-0.default.svc:2222",
                          "mnist-worker-1.default.svc:2222"));
  EXPECT_EQ(spec->TaskName(), "/job:worker/task:1");
  EXPECT_EQ(spec->TaskName(TaskId{Role::kMaster, 0}), "/job:chief/task:0");
  EXPECT_EQ(*spec->Address(TaskId{Role::kParameterServer, 0}), "mnist-ps-0.default.svc:2222");
  EXPECT_EQ(spec->Address(TaskId{Role::kParameterServer, 1}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ClusterSpecTest, CloudMlMasterWithTrial) {
  auto spec = ClusterSpec::FromTfConfig(
      R"({"cluster":{"master":["m:2222"],"worker":["w0:2222"]},)"
      R"("task":{"type":"master","index":0,"trial":"7"},"environment":"cloud"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->IsChief());
  EXPECT_EQ(spec->trial(), "7");
  EXPECT_EQ(spec->ReplicaRank(), 0);
  EXPECT_EQ(spec->TaskName(), "/job:master/task:0");
}

TEST(ClusterSpecTest, WorkerZeroIsChiefWithoutMaster) {
  auto spec = ClusterSpec::FromTfConfig(
      R"({"cluster":{"worker":["a:1","b:2","c:3"]},"task":{"type":"worker","index":0}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->IsChief());
  EXPECT_EQ(spec->ReplicaRank(), 0);
  EXPECT_EQ(spec->NumReplicas(), 3);
}

TEST(ClusterSpecTest, PsAndEvaluatorHaveNoReplicaRank) {
  auto ps = ClusterSpec::FromTfConfig(
      R"({"cluster":{"worker":["a:1"],"ps":["p:2"]},"task":{"type":"ps","index":0}})");
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->ReplicaRank(), std::nullopt);
  // The evaluator is not listed in the cluster.
  auto eval = ClusterSpec::FromTfConfig(
      R"({"cluster":{"chief":["c:1"],"worker":["a:1"]},"task":{"type":"evaluator","index":0}})");
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->task().role, Role::kEvaluator);
  EXPECT_EQ(eval->ReplicaRank(), std::nullopt);
}

TEST(ClusterSpecTest, EmptyIsLocal) {
  for (const char* text : {"", "  \n", R"({})"}) {
    auto spec = ClusterSpec::FromTfConfig(text);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(spec->IsChief());
    EXPECT_EQ(spec->NumReplicas(), 1);
    EXPECT_EQ(spec->ReplicaRank(), 0);
  }
}

TEST(ClusterSpecTest, TrialMayBeAnInteger) {
  auto spec = ClusterSpec::FromTfConfig(
      R"({"cluster":{"master":["m:1"]},"task":{"type":"master","trial":12}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->trial(), "12");
}

struct BadCase {
  const char* tf_config;
  const char* message;
};

class ClusterSpecErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ClusterSpecErrorTest, NamesTheProblem) {
  auto spec = ClusterSpec::FromTfConfig(GetParam().tf_config);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, ClusterSpecErrorTest,
    ::testing::Values(
        BadCase{R"({"cluster": {"worker": ["a:1",]}})", "malformed JSON at byte 31"},
        BadCase{R"({"cluster":)", "malformed JSON at byte 12"},
        BadCase{R"([1,2])", "(root): want an object, got an array"},
        // Found by the fuzzer: a number out of double range.
        BadCase{"9999999E9000008015056820827586", "malformed JSON"},
        BadCase{R"({"cluster":[]})", "cluster: want an object, got an array"},
        BadCase{R"({"cluster":{"boss":["a:1"]}})", "cluster.boss: unknown role"},
        BadCase{R"({"cluster":{"worker":"a:1"}})", "cluster.worker: want a list"},
        BadCase{R"({"cluster":{"worker":["a:1",2]},"task":{"type":"worker"}})",
                "cluster.worker[1]: want \"host:port\", got 2"},
        BadCase{R"({"cluster":{"worker":["a"]},"task":{"type":"worker"}})",
                "cluster.worker[0]: want \"host:port\""},
        BadCase{R"({"cluster":{"worker":["a:99999"]},"task":{"type":"worker"}})",
                "cluster.worker[0]: port must be 1..65535"},
        BadCase{R"({"cluster":{"worker":["a:-1"]},"task":{"type":"worker"}})", "port must be"},
        BadCase{R"({"cluster":{"worker":["a:1","a:1"]},"task":{"type":"worker"}})",
                "cluster.worker[1]: address \"a:1\" is used twice"},
        BadCase{R"({"cluster":{"master":["m:1"],"chief":["c:1"]}})",
                "both \"master\" and \"chief\""},
        BadCase{R"({"cluster":{"chief":["m:1","n:1"]}})", "cluster.chief: at most one task"},
        BadCase{R"({"cluster":{"worker":["a:1","b:1"]}})", "task: missing"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"index":0}})", "task.type: missing"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"boss"}})",
                "task.type: unknown role \"boss\""},
        BadCase{R"({"cluster":{"chief":["a:1"]},"task":{"type":"master"}})",
                "task.type: \"master\" but the cluster names it \"chief\""},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":-1}})",
                "task.index: want a non-negative integer"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":"0"}})",
                "task.index: want a non-negative integer"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":1}})",
                "task.index: worker task 1 is not in the cluster (it lists 1)"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"ps"}})",
                "ps task 0 is not in the cluster"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","trial":[]}})",
                "task.trial: want a string"},
        BadCase{R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker"},"environment":1})",
                "environment: want a string"}));

}  // namespace
}  // namespace kubetrain::dist
