// Checkpoint ownership on the Kubernetes backend, end to end: the real
// kubetrain-operator (on the fake API server) creates each trial's pod; this
// test is the kubelet: it runs the pod's command (a real `kubetrain-runtime
// train`) with the pod's environment and reports its exit. Three tuning jobs
// share one jobDir, as a resubmitted config does: the second (other layer
// widths) and the third (only the learning rate: shapes that a restore would
// accept) train every trial from step 0 with checkpoints of their own, and
// the first job's checkpoints stay as they were.
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/child_process.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "kubetrain/v1/graph.pb.h"
#include "nlohmann/json.hpp"
#include "operator/kube/test_objects.h"
#include "tests/deploy/fake_cluster.h"
#include "tests/fake_apiserver/fake_apiserver.h"

#if !defined(KUBETRAIN_OPERATOR_BINARY) || !defined(KUBETRAIN_RUNTIME_BINARY)
#error "KUBETRAIN_OPERATOR_BINARY and KUBETRAIN_RUNTIME_BINARY must name the binaries"
#endif

namespace kubetrain::deploy_testing {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;

constexpr char kToken[] = "job-isolation-token";

using test_support::ReadFile;

class JobIsolationE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = StartFakeCluster(
        {.bookmark_interval = absl::Milliseconds(200), .bearer_token = kToken}, "job_isolation");
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    server_ = std::move(cluster->server);
    folder_.emplace(std::move(cluster->folder));
    dir_ = cluster->dir;
    {
      std::mt19937 rng(3);
      std::normal_distribution<double> noise(0.0, 1.0);
      std::ofstream out(dir_ + "/data.csv");
      for (int i = 0; i < 200; ++i) {
        const int label = i % 2;
        out << (label ? 1.0 : -1.0) + noise(rng) << "," << noise(rng) << "," << label << "\n";
      }
    }
    op_ = std::make_unique<test_support::ChildProcess>(
        std::vector<std::string>{
            KUBETRAIN_OPERATOR_BINARY, "--kubeconfig", dir_ + "/kubeconfig", "--namespace", "ns1",
            "--leader-elect=false", "--http-address=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            "--metrics-address=kubetrain-operator-trials.kubetrain-system.svc:9091"},
        dir_ + "/operator.log");
    ASSERT_TRUE(op_->Start().ok());
    ASSERT_TRUE(test_support::WaitUntil(
        [&] {
          const std::string log = op_->Log();
          const std::string prefix = "serving trial metrics on ";
          size_t at = log.find(prefix);
          if (at == std::string::npos || log.find('\n', at) == std::string::npos) return false;
          metrics_address_ =
              log.substr(at + prefix.size(), log.find('\n', at) - at - prefix.size());
          return true;
        },
        absl::Seconds(60)))
        << op_->Log();
  }

  void TearDown() override {
    if (op_ != nullptr) op_->Stop();
  }

  // A BASIC study of two trials over `param` (DISCRETE, GRID_SEARCH), one at a
  // time, writing to the shared jobDir.
  json Study(const std::string& name, const std::string& param, const json& values,
             const std::vector<std::string>& extra_args) {
    json job = kube::testing::TuningJobObject(name, 2, 1);
    json& input = job["spec"]["trainingInput"];
    input["hyperparameters"].erase("hyperparameterMetricTag");  // training/hptuning/metric
    input["hyperparameters"]["algorithm"] = "GRID_SEARCH";
    input["hyperparameters"]["params"] = {
        {{"parameterName", param}, {"type", "DISCRETE"}, {"discreteValues", values}}};
    input["args"] = {"--train_data_paths=" + dir_ + "/data.csv",
                     "--eval_data_paths=" + dir_ + "/data.csv",
                     "--max_steps=30",
                     "--batch_size=20",
                     "--hidden2=4",
                     "--threads=1",
                     "--save_checkpoints_steps=10",
                     "--eval_every_steps=10"};
    for (const std::string& a : extra_args) input["args"].push_back(a);
    input["jobDir"] = dir_ + "/out";
    return job;
  }

  json Job(const std::string& name) {
    auto object = server_->Get("trainingjobs", "ns1", name);
    return object.ok() ? *object : json::object();
  }

  // Runs the job's trial pods one by one, as a kubelet would, until the job
  // ends. Returns the state it ended in; fills logs_ (pod name -> output).
  std::string RunToTheEnd(const std::string& name) {
    std::set<std::string> ran;
    for (;;) {
      json pod;
      std::string state;
      if (!server_->WaitUntil(
              [&] {
                state = Job(name).value("status", json::object()).value("state", "");
                if (state == "SUCCEEDED" || state == "FAILED") return true;
                for (const json& p : server_->List("pods", "ns1")) {
                  if (p["metadata"]["labels"].value("kubetrain.io/job-name", "") == name &&
                      ran.count(p["metadata"]["name"]) == 0) {
                    pod = p;
                    return true;
                  }
                }
                return false;
              },
              absl::Seconds(120))) {
        return "TIMEOUT";
      }
      if (!pod.is_object()) return state;
      const std::string pod_name = pod["metadata"]["name"];
      ran.insert(pod_name);
      // The pod's command with its environment; TF_CONFIG (one master at a
      // cluster DNS name) is left out, and the Metrics address is the one
      // the operator bound (on a cluster: the trials' Service).
      const json& container = pod["spec"]["containers"][0];
      std::vector<std::string> argv = {"/usr/bin/env", "-u", "TF_CONFIG"};
      for (const json& var : container["env"]) {
        const std::string var_name = var["name"], value = var.value("value", "");
        if (var_name == "TF_CONFIG") continue;
        argv.push_back(var_name + "=" +
                       (var_name == "KUBETRAIN_METRICS_ADDR" ? metrics_address_ : value));
      }
      argv.push_back(KUBETRAIN_RUNTIME_BINARY);
      for (size_t i = 1; i < container["command"].size(); ++i) {
        argv.push_back(container["command"][i]);
      }
      for (const json& arg : container["args"]) argv.push_back(arg);
      test_support::ChildProcess trial(argv, dir_ + "/" + pod_name + ".log");
      if (!trial.Start().ok()) return "NOT STARTED";
      if (!test_support::WaitUntil([&] { return trial.Exited(); }, absl::Seconds(120))) {
        return "TRIAL HANGS";
      }
      logs_[pod_name] = trial.Log();
      const int code = trial.exit_code().value_or(1);
      if (!server_
               ->MergePatch(
                   "pods", "ns1", pod_name,
                   kube::testing::TerminatedPodStatus(code == 0 ? "Succeeded" : "Failed", code),
                   "status")
               .ok()) {
        return "PATCH FAILED";
      }
    }
  }

  // Checks that every trial of `name` trained from step 0 and that the
  // checkpoints in its folder are its own; `own_subfolder`: the trial wrote
  // to its own subfolder of <jobDir>/<trial> (the folder held another job's
  // checkpoints).
  void ExpectTrainedFromScratchWithItsOwnCheckpoints(const std::string& name, bool own_subfolder) {
    const json job = Job(name);
    const std::string uid = job["metadata"]["uid"];
    const json& trials = job["status"]["trainingOutput"]["trials"];
    ASSERT_EQ(trials.size(), 2u) << job["status"];
    for (const json& t : trials) {
      const std::string id = t["trialId"];
      SCOPED_TRACE(name + " trial " + id);
      EXPECT_EQ(t["state"], "SUCCEEDED");
      ASSERT_EQ(t["allMetrics"].size(), 3u) << t;  // steps 10, 20, 30
      EXPECT_EQ(t["allMetrics"][0]["trainingStep"], 10);
      EXPECT_EQ(t["finalMetric"]["trainingStep"], 30);
      const std::string log = logs_[absl::StrCat(name, "-t", id, "-master-0")];
      EXPECT_EQ(log.find("Restored checkpoint"), std::string::npos) << log;
      std::string folder = absl::StrCat(dir_, "/out/", id);
      if (own_subfolder) {
        folder += "/" + name + "-" + uid.substr(0, 8);
        EXPECT_NE(log.find("This run writes to " + folder), std::string::npos) << log;
      }
      int checkpoints = 0;
      for (const auto& e : std::filesystem::directory_iterator(folder)) {
        if (e.path().filename().string().rfind("model.ckpt-", 0) != 0) continue;
        v1::Checkpoint checkpoint;
        ASSERT_TRUE(checkpoint.ParseFromString(ReadFile(e.path().string()))) << e.path();
        EXPECT_EQ(checkpoint.owner().job_uid(), uid) << e.path();
        EXPECT_EQ(checkpoint.owner().job_name(), name) << e.path();
        EXPECT_EQ(checkpoint.owner().trial_id(), id) << e.path();
        ++checkpoints;
      }
      EXPECT_EQ(checkpoints, 3) << folder;
    }
  }

  std::unique_ptr<FakeApiServer> server_;
  std::optional<test_support::TempDir> folder_;  // the cluster's, removed after the operator stops
  std::string dir_;
  std::unique_ptr<test_support::ChildProcess> op_;
  std::string metrics_address_;
  std::map<std::string, std::string> logs_;
};

TEST_F(JobIsolationE2eTest, JobsSharingAJobDirNeverRestoreEachOthersCheckpoints) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Study("first", "hidden1", {4, 6}, {})).ok());
  ASSERT_EQ(RunToTheEnd("first"), "SUCCEEDED") << Job("first")["status"] << op_->Log();
  ExpectTrainedFromScratchWithItsOwnCheckpoints("first", false);
  std::map<std::string, std::string> first_files;
  for (const char* trial : {"1", "2"}) {
    for (const auto& e : std::filesystem::directory_iterator(dir_ + "/out/" + trial)) {
      if (e.is_regular_file()) first_files[e.path().string()] = ReadFile(e.path().string());
    }
  }

  // Other widths: a restore would fail on the shapes, trial after trial.
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Study("widths", "hidden1", {9, 12}, {})).ok());
  ASSERT_EQ(RunToTheEnd("widths"), "SUCCEEDED") << Job("widths")["status"] << op_->Log();
  ExpectTrainedFromScratchWithItsOwnCheckpoints("widths", true);

  // Only the learning rate: trial 1 has the first job's trial-1 shapes, so a
  // restore would go through and continue the first job's weights.
  ASSERT_TRUE(server_
                  ->Create("trainingjobs", "ns1",
                           Study("rates", "learning_rate", {0.003, 0.03}, {"--hidden1=4"}))
                  .ok());
  ASSERT_EQ(RunToTheEnd("rates"), "SUCCEEDED") << Job("rates")["status"] << op_->Log();
  ExpectTrainedFromScratchWithItsOwnCheckpoints("rates", true);

  // The first job's files are as it left them.
  for (const auto& [path, bytes] : first_files) {
    EXPECT_EQ(ReadFile(path), bytes) << path;
  }
}

}  // namespace
}  // namespace kubetrain::deploy_testing
