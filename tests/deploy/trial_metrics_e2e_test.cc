// A tuning trial's metrics, end to end across real processes: the real
// kubetrain-operator (on the fake API server) issues the trial's pod with its
// Metrics address and token; a real `kubetrain-runtime train`, started with
// that pod's command and environment, reports each evaluation over gRPC; the
// trial ends with the reported objective in the job's status.
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/testing/child_process.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
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

constexpr char kToken[] = "trial-metrics-token";

// The first "<prefix>VALUE" line in `log`, VALUE up to the line's end.
std::optional<std::string> Printed(const std::string& log, const std::string& prefix) {
  size_t at = log.find(prefix);
  if (at == std::string::npos) return std::nullopt;
  size_t end = log.find('\n', at);
  if (end == std::string::npos) return std::nullopt;
  return log.substr(at + prefix.size(), end - at - prefix.size());
}

TEST(TrialMetricsE2eTest, TheRuntimesReportsBecomeTheTrialsObjective) {
  auto cluster = StartFakeCluster(
      {.bookmark_interval = absl::Milliseconds(200), .bearer_token = kToken}, "trial_metrics_e2e");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  FakeApiServer* server = cluster->server.get();
  const std::string dir = cluster->dir;
  // A small two-class data set whose classes overlap.
  {
    std::mt19937 rng(3);
    std::normal_distribution<double> noise(0.0, 1.0);
    std::ofstream out(dir + "/data.csv");
    for (int i = 0; i < 200; ++i) {
      int label = i % 2;
      out << (label ? 1.0 : -1.0) + noise(rng) << "," << noise(rng) << "," << label << "\n";
    }
  }
  test_support::ChildProcess op(
      {KUBETRAIN_OPERATOR_BINARY, "--kubeconfig", dir + "/kubeconfig", "--namespace", "ns1",
       "--leader-elect=false", "--http-address=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
       "--metrics-address=kubetrain-operator-trials.kubetrain-system.svc:9091"},
      dir + "/operator.log");
  ASSERT_TRUE(op.Start().ok());
  std::optional<std::string> metrics_address;
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        metrics_address = Printed(op.Log(), "serving trial metrics on ");
        return metrics_address.has_value();
      },
      absl::Seconds(60)))
      << op.Log();

  // One trial of a study over the runtime's --hidden1, 40 steps.
  json job = kube::testing::TuningJobObject("hp", 1, 1);
  json& input = job["spec"]["trainingInput"];
  input["hyperparameters"].erase("hyperparameterMetricTag");  // training/hptuning/metric
  input["hyperparameters"]["params"][0]["parameterName"] = "hidden1";
  input["hyperparameters"]["params"][0]["minValue"] = 4;
  input["hyperparameters"]["params"][0]["maxValue"] = 8;
  input["args"] = {"--train_data_paths=" + dir + "/data.csv",
                   "--eval_data_paths=" + dir + "/data.csv",
                   "--max_steps=40",
                   "--batch_size=20",
                   "--hidden2=4",
                   "--threads=1",
                   "--seed=5",
                   "--eval_every_secs=0.2"};
  input["jobDir"] = dir + "/out";
  ASSERT_TRUE(server->Create("trainingjobs", "ns1", job).ok());
  json pod;
  ASSERT_TRUE(server->WaitUntil([&] {
    for (const json& p : server->List("pods", "ns1")) {
      if (p["metadata"]["labels"].value("kubetrain.io/trial-id", "") == "1") pod = p;
    }
    return pod.is_object();
  })) << op.Log();

  // The pod's command, run here with its environment. The trial reaches the
  // operator at the address it bound (on a cluster: the trials' Service);
  // TF_CONFIG is left out, its one master address being a cluster DNS name.
  const json& container = pod["spec"]["containers"][0];
  std::vector<std::string> argv = {"/usr/bin/env", "-u", "TF_CONFIG"};
  bool token_given = false;
  for (const json& var : container["env"]) {
    const std::string name = var["name"], value = var.value("value", "");
    if (name == "TF_CONFIG") continue;
    if (name == "KUBETRAIN_METRICS_TOKEN") token_given = !value.empty();
    if (name == "KUBETRAIN_METRICS_ADDR") {
      EXPECT_EQ(value, "kubetrain-operator-trials.kubetrain-system.svc:9091");
      argv.push_back(name + "=" + *metrics_address);
    } else {
      argv.push_back(name + "=" + value);
    }
  }
  EXPECT_TRUE(token_given);
  ASSERT_EQ(container["command"][0], "kubetrain-runtime");
  argv.push_back(KUBETRAIN_RUNTIME_BINARY);
  for (size_t i = 1; i < container["command"].size(); ++i) argv.push_back(container["command"][i]);
  for (const json& arg : container["args"]) argv.push_back(arg);
  test_support::ChildProcess trial(argv, dir + "/trial.log");
  ASSERT_TRUE(trial.Start().ok());
  ASSERT_TRUE(test_support::WaitUntil([&] { return trial.Exited(); }, absl::Seconds(120)))
      << trial.Log();
  // "Final metrics after N steps, loss: X, accuracy: Y": the last evaluation.
  std::smatch final_line;
  const std::string log = trial.Log();
  ASSERT_TRUE(std::regex_search(log, final_line,
                                std::regex(R"(Final metrics after (\d+) steps, loss: ([0-9.]+), )"
                                           R"(accuracy: ([0-9.]+))")))
      << log;
  double accuracy = 0;
  ASSERT_TRUE(absl::SimpleAtod(final_line[3].str(), &accuracy));

  // The kubelet would now report the container's exit.
  ASSERT_TRUE(server
                  ->MergePatch("pods", "ns1", pod["metadata"]["name"].get<std::string>(),
                               kube::testing::TerminatedPodStatus("Succeeded", 0), "status")
                  .ok());
  auto trial_status = [&]() -> json {
    auto object = server->Get("trainingjobs", "ns1", "hp");
    if (!object.ok()) return json::object();
    json trials =
        (*object)["status"].value("trainingOutput", json::object()).value("trials", json::array());
    return trials.empty() ? json::object() : trials[0];
  };
  ASSERT_TRUE(server->WaitUntil([&] { return trial_status().value("state", "") == "SUCCEEDED"; },
                                absl::Seconds(60)))
      << trial_status() << op.Log();
  const json metric = trial_status()["finalMetric"];
  EXPECT_EQ(metric["trainingStep"], std::stoll(final_line[1].str())) << metric;  // a number
  // The log prints the accuracy rounded.
  EXPECT_NEAR(metric["objectiveValue"].get<double>(), accuracy, 1e-3) << metric << log;
  op.Stop();
}

}  // namespace
}  // namespace kubetrain::deploy_testing
