#include "operator/core/tf_config.h"

#include <string>

#include "api/defaults.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kubetrain::core {
namespace {

using api::Role;

v1::TrainingJob CustomJob(int workers, int ps, int evaluators) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("mnist");
  job.mutable_metadata()->set_namespace_("default");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_scale_tier(v1::TrainingInput::CUSTOM);
  input->set_master_type("standard");
  if (workers > 0) {
    input->set_worker_type("standard");
    input->set_worker_count(workers);
  }
  if (ps > 0) {
    input->set_parameter_server_type("standard");
    input->set_parameter_server_count(ps);
  }
  if (evaluators > 0) {
    input->set_evaluator_type("standard");
    input->set_evaluator_count(evaluators);
  }
  api::ApplyDefaults(&job);
  return job;
}

std::string Config(const v1::TrainingJob& job, const ReplicaKey& task, bool include_job = false) {
  return BuildTfConfig(job, api::ReplicaGroups(job.spec().training_input()), task,
                       KubernetesAddresses(job.metadata().namespace_()), {include_job});
}

// The example Kubeflow documents for worker 1 of job "mnist" (REFERENCE.md §7).
TEST(TfConfigTest, MatchesKubeflowExactly) {
  v1::TrainingJob job = CustomJob(2, 1, 0);
  job.mutable_spec()->mutable_training_input()->set_use_chief_in_tf_config(true);
  EXPECT_EQ(Config(job, {"", Role::kWorker, 1}),
            R"({"cluster":{"chief":["mnist-chief-0.default.svc:2222"],)"
            R"("ps":["mnist-ps-0.default.svc:2222"],)"
            R"("worker":["mnist-worker-0.default.svc:2222","mnist-worker-1.default.svc:2222"]},)"
            R"("task":{"type":"worker","index":1},"environment":"cloud"})");
}

TEST(TfConfigTest, Table) {
  struct Case {
    std::string name;
    v1::TrainingJob job;
    ReplicaKey task;
    std::string want;
  };
  v1::TrainingJob basic = CustomJob(0, 0, 0);
  v1::TrainingJob with_eval = CustomJob(1, 0, 1);
  v1::TrainingJob eval_in_cluster = with_eval;
  eval_in_cluster.mutable_spec()->set_evaluator_in_cluster(true);
  v1::TrainingJob port = CustomJob(1, 0, 0);
  port.mutable_spec()->set_port(3000);
  const Case cases[] = {
      {"single replica lists only itself",
       basic,
       {"", Role::kMaster, 0},
       R"({"cluster":{"master":["mnist-master-0.default.svc:2222"]},)"
       R"("task":{"type":"master","index":0},"environment":"cloud"})"},
      {"evaluator left out of cluster",
       with_eval,
       {"", Role::kEvaluator, 0},
       R"({"cluster":{"master":["mnist-master-0.default.svc:2222"],)"
       R"("worker":["mnist-worker-0.default.svc:2222"]},)"
       R"("task":{"type":"evaluator","index":0},"environment":"cloud"})"},
      {"evaluator in cluster on request",
       eval_in_cluster,
       {"", Role::kMaster, 0},
       R"({"cluster":{"evaluator":["mnist-evaluator-0.default.svc:2222"],)"
       R"("master":["mnist-master-0.default.svc:2222"],)"
       R"("worker":["mnist-worker-0.default.svc:2222"]},)"
       R"("task":{"type":"master","index":0},"environment":"cloud"})"},
      {"trial names its replicas and task",
       CustomJob(1, 0, 0),
       {"4", Role::kWorker, 0},
       R"({"cluster":{"master":["mnist-t4-master-0.default.svc:2222"],)"
       R"("worker":["mnist-t4-worker-0.default.svc:2222"]},)"
       R"("task":{"type":"worker","index":0,"trial":"4"},"environment":"cloud"})"},
      {"spec port",
       port,
       {"", Role::kMaster, 0},
       R"({"cluster":{"master":["mnist-master-0.default.svc:3000"],)"
       R"("worker":["mnist-worker-0.default.svc:3000"]},)"
       R"("task":{"type":"master","index":0},"environment":"cloud"})"},
  };
  for (const Case& c : cases) EXPECT_EQ(Config(c.job, c.task), c.want) << c.name;
}

TEST(TfConfigTest, LoopbackAddressesUseEachReplicasPort) {
  v1::TrainingJob job = CustomJob(2, 0, 0);
  std::map<std::string, int> ports = {
      {"mnist-master-0", 41000}, {"mnist-worker-0", 41001}, {"mnist-worker-1", 41002}};
  const std::string config = BuildTfConfig(
      job, api::ReplicaGroups(job.spec().training_input()), {"", Role::kWorker, 0},
      LoopbackAddresses([&](std::string_view name) { return ports.at(std::string(name)); }),
      {false});
  EXPECT_EQ(
      config,
      R"({"cluster":{"master":["127.0.0.1:41000"],"worker":["127.0.0.1:41001","127.0.0.1:41002"]},)"
      R"("task":{"type":"worker","index":0},"environment":"cloud"})");
}

TEST(TfConfigTest, JobIsTheTrainingInputInCloudMlJson) {
  v1::TrainingJob job = CustomJob(2, 0, 0);
  job.mutable_spec()->mutable_training_input()->add_args("--epochs=3");
  const auto config = nlohmann::json::parse(Config(job, {"", Role::kMaster, 0}, true));
  ASSERT_TRUE(config.contains("job"));
  EXPECT_EQ(config["job"]["scaleTier"], "CUSTOM");
  EXPECT_EQ(config["job"]["workerCount"], "2");  // int64 as a string, as Cloud ML printed it
  EXPECT_EQ(config["job"]["args"][0], "--epochs=3");
}

}  // namespace
}  // namespace kubetrain::core
