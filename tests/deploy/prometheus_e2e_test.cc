// A real Prometheus (Debian's /usr/bin/prometheus) scrapes the real binaries:
// kubetrain-operator reconciling a job on the fake API server, and a
// kubetrain-runtime `train` task with --metrics_address. Prometheus' HTTP API
// must return the operator's and the runtime's series. Skips without
// Prometheus.
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/child_process.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/deploy/prometheus_server.h"
#include "tests/deploy/prometheus_test_fixture.h"
#include "tests/fake_apiserver/fake_apiserver.h"

#if !defined(KUBETRAIN_OPERATOR_BINARY) || !defined(KUBETRAIN_RUNTIME_BINARY)
#error "KUBETRAIN_OPERATOR_BINARY and KUBETRAIN_RUNTIME_BINARY must name the binaries"
#endif

namespace kubetrain::deploy_testing {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;

constexpr char kToken[] = "prometheus-e2e-token";

using Samples = std::vector<PrometheusServer::Sample>;

// Accepts when some sample from scrape job `job` has a value `accept` holds
// for.
template <typename Accept>
auto SampleFrom(std::string job, Accept accept) {
  return [job = std::move(job), accept](const Samples& samples) {
    for (const auto& sample : samples) {
      if (sample.labels.value("job", "") == job && accept(sample.value)) return true;
    }
    return false;
  };
}

// The port a child printed in its log as "<prefix>HOST:PORT"; nullopt until
// it has.
std::optional<int> PrintedPort(const test_support::ChildProcess& child, const std::string& prefix) {
  std::smatch match;
  const std::string log = child.Log();
  if (!std::regex_search(log, match, std::regex(prefix + "[^\\s:]*:([0-9]+)"))) {
    return std::nullopt;
  }
  int port;
  return absl::SimpleAtoi(match[1].str(), &port) ? std::optional<int>(port) : std::nullopt;
}

using PrometheusE2eTest = PrometheusFixture;

TEST_F(PrometheusE2eTest, ScrapesTheRealOperatorAndARuntimeTask) {
  // The operator, reconciling one BASIC job on the fake API server.
  FakeApiServer::Options options;
  options.bearer_token = kToken;
  auto server = FakeApiServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  fake_apiserver::WriteKubeconfig(dir_, (*server)->url(), kToken);
  test_support::ChildProcess op(
      {KUBETRAIN_OPERATOR_BINARY, "--kubeconfig", dir_ + "/kubeconfig", "--namespace", "ns1",
       "--leader-elect=false", "--http-address=127.0.0.1:0"},
      dir_ + "/operator.log");
  ASSERT_TRUE(op.Start().ok());
  json job = {{"apiVersion", "kubetrain.io/v1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "scraped"}}},
              {"spec", {{"trainingInput", {{"scaleTier", "BASIC"}}}}}};
  ASSERT_TRUE((*server)->Create("trainingjobs", "ns1", job).ok());

  // A runtime task on a small two-class data set, with far more steps than
  // the test waits for: it is stopped once scraped. The classes overlap, so
  // the loss stays above zero however long it trains.
  {
    std::mt19937 rng(3);
    std::normal_distribution<double> noise(0.0, 2.0);
    std::ofstream out(dir_ + "/train.csv");
    for (int i = 0; i < 200; ++i) {
      int label = i % 2;
      out << (label ? 1.5 : -1.5) + noise(rng) << "," << noise(rng) << "," << label << "\n";
    }
  }
  test_support::ChildProcess task(
      {KUBETRAIN_RUNTIME_BINARY, "train", "--train_data_paths=" + dir_ + "/train.csv",
       "--eval_data_paths=" + dir_ + "/train.csv", "--output_path=" + dir_ + "/out",
       "--max_steps=100000000", "--batch_size=20", "--hidden1=8", "--hidden2=4", "--threads=1",
       "--seed=5", "--eval_every_secs=0.5", "--log_every_steps=100000",
       "--metrics_address=127.0.0.1:0"},
      dir_ + "/runtime.log");
  ASSERT_TRUE(task.Start().ok());

  // Both print the address they bound.
  std::optional<int> op_port, task_port;
  test_support::WaitUntil(
      [&] {
        if (op.Exited() || task.Exited()) return true;
        if (!op_port) op_port = PrintedPort(op, "serving http on ");
        if (!task_port) task_port = PrintedPort(task, "serving metrics on ");
        return op_port && task_port;
      },
      absl::Seconds(60), absl::Milliseconds(50));
  ASSERT_TRUE(op_port.has_value()) << op.Log();
  ASSERT_TRUE(task_port.has_value()) << task.Log();

  auto prometheus = PrometheusServer::Start(
      dir_, {{"kubetrain-operator", *op_port}, {"kubetrain-runtime", *task_port}});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  const PrometheusServer& prom = **prometheus;

  // One deadline for every wait below: scrapes are every second.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  auto is = [](double want) { return [want](double v) { return v == want; }; };
  auto positive = [](double v) { return v > 0; };
  const std::string kOp = "kubetrain-operator", kTask = "kubetrain-runtime";
  auto eventually = [&](const std::string& query, const std::string& job, auto accept) {
    return WaitForSamples(prom, query, SampleFrom(job, accept), deadline);
  };
  EXPECT_EQ(eventually("up", kOp, is(1)), absl::OkStatus()) << prom.Targets() << op.Log();
  EXPECT_EQ(eventually("up", kTask, is(1)), absl::OkStatus()) << prom.Targets() << task.Log();
  EXPECT_EQ(eventually("kubetrain_operator_leader", kOp, is(1)), absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_reconcile_total{result=\"success\"}", kOp, positive),
            absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_reconcile_duration_seconds_count{result=\"success\"}",
                       kOp, positive),
            absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_workqueue_wait_seconds_count", kOp, positive),
            absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_api_requests_total{verb=\"create\",code=\"201\"}", kOp,
                       [](double v) { return v >= 2; }),
            absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_jobs{state=\"PREPARING\"}", kOp, is(1)),
            absl::OkStatus())
      << op.Log();
  EXPECT_EQ(eventually("kubetrain_runtime_steps_total{task_type=\"master\"}", kTask, positive),
            absl::OkStatus())
      << task.Log();
  EXPECT_EQ(eventually("kubetrain_runtime_step_duration_seconds_count", kTask, positive),
            absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_runtime_examples_per_second", kTask, positive), absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_runtime_loss", kTask, positive), absl::OkStatus()) << task.Log();
  EXPECT_EQ(eventually("kubetrain_runtime_objective", kTask, positive), absl::OkStatus());
  // The task keeps training: its step counter goes on rising in Prometheus.
  auto steps = prom.Query("kubetrain_runtime_steps_total");
  ASSERT_TRUE(steps.ok() && !steps->empty())
      << (steps.ok() ? "no samples" : steps.status().ToString());
  const double seen = (*steps)[0].value;
  EXPECT_EQ(
      eventually("kubetrain_runtime_steps_total", kTask, [seen](double v) { return v > seen; }),
      absl::OkStatus());

  task.Stop();
  op.Stop();
  (*prometheus)->Stop();
}

}  // namespace
}  // namespace kubetrain::deploy_testing
