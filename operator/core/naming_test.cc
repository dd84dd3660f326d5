#include "operator/core/naming.h"

#include <string>

#include "gtest/gtest.h"

namespace kubetrain::core {
namespace {

using api::Role;

TEST(NamingTest, ReplicaNames) {
  struct Case {
    ReplicaKey key;
    std::string want;
  };
  const Case cases[] = {
      {{"", Role::kMaster, 0}, "mnist-master-0"},
      {{"", Role::kWorker, 3}, "mnist-worker-3"},
      {{"", Role::kParameterServer, 1}, "mnist-ps-1"},
      {{"", Role::kEvaluator, 0}, "mnist-evaluator-0"},
      {{"12", Role::kWorker, 2}, "mnist-t12-worker-2"},
  };
  for (const Case& c : cases) EXPECT_EQ(ReplicaName("mnist", c.key), c.want);
}

TEST(NamingTest, JobObjectNameFollowsKubernetesName) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("Fmnist_HPTuning");
  EXPECT_EQ(JobObjectName(job), "fmnist-hptuning");
}

TEST(NamingTest, LongNamesAreShortenedDeterministicallyAndStayDistinct) {
  const std::string job(60, 'a');
  const std::string a = ReplicaName(job, {"1", Role::kWorker, 10});
  const std::string b = ReplicaName(job, {"1", Role::kWorker, 11});
  EXPECT_LE(a.size(), kMaxObjectNameLength);
  EXPECT_LE(b.size(), kMaxObjectNameLength);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, ReplicaName(job, {"1", Role::kWorker, 10}));
  EXPECT_EQ(a.substr(0, 10), "aaaaaaaaaa");
}

TEST(NamingTest, LabelsRoundTrip) {
  const ReplicaKey key{"7", Role::kParameterServer, 2};
  const auto labels = ReplicaLabels("mnist", key);
  EXPECT_EQ(labels.at(kLabelJobName), "mnist");
  EXPECT_EQ(labels.at(kLabelReplicaType), "ps");
  EXPECT_EQ(labels.at(kLabelReplicaIndex), "2");
  EXPECT_EQ(labels.at(kLabelTrialId), "7");
  EXPECT_EQ(ReplicaKeyFromLabels(labels), key);

  const auto plain = ReplicaLabels("mnist", {"", Role::kMaster, 0});
  EXPECT_EQ(plain.count(kLabelTrialId), 0u);
  EXPECT_EQ(ReplicaKeyFromLabels(plain), (ReplicaKey{"", Role::kMaster, 0}));
}

TEST(NamingTest, MalformedLabelsAreNotReplicas) {
  const std::map<std::string, std::string> cases[] = {
      {},
      {{kLabelReplicaType, "worker"}},
      {{kLabelReplicaType, "driver"}, {kLabelReplicaIndex, "0"}},
      {{kLabelReplicaType, "worker"}, {kLabelReplicaIndex, "-1"}},
      {{kLabelReplicaType, "worker"}, {kLabelReplicaIndex, "x"}},
  };
  for (const auto& labels : cases) EXPECT_FALSE(ReplicaKeyFromLabels(labels).has_value());
}

TEST(NamingTest, ChiefNamesTheMasterWhenAsked) {
  const ReplicaKey master{"", Role::kMaster, 0};
  EXPECT_EQ(ReplicaName("mnist", master, /*use_chief=*/true), "mnist-chief-0");
  EXPECT_EQ(ReplicaName("mnist", {"", Role::kWorker, 0}, true), "mnist-worker-0");
  EXPECT_EQ(TaskName(master, true), "chief-0");
  const auto labels = ReplicaLabels("mnist", master, true);
  EXPECT_EQ(labels.at(kLabelReplicaType), "chief");
  EXPECT_EQ(ReplicaKeyFromLabels(labels), master);
}

TEST(NamingTest, TaskNamesAndSelector) {
  EXPECT_EQ(TaskName({"", Role::kWorker, 2}), "worker-2");
  EXPECT_EQ(TaskName({"3", Role::kMaster, 0}), "trial 3 master-0");
  EXPECT_EQ(JobSelector("mnist"), "kubetrain.io/job-name=mnist");
}

TEST(NamingTest, StableHashIsFnv1a) {
  // FNV-1a 64 reference values.
  EXPECT_EQ(StableHash(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(StableHash("a"), 0xaf63dc4c8601ec8cull);
}

}  // namespace
}  // namespace kubetrain::core
