// A real Prometheus (Debian's /usr/bin/prometheus) scrapes two MetricsServers,
// one holding the operator's metrics and one a runtime task's, and its HTTP
// API returns their series, then their changes.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/observability/metrics_server.h"
#include "gtest/gtest.h"
#include "operator/observability/operator_metrics.h"
#include "prometheus/registry.h"
#include "tests/deploy/prometheus_server.h"
#include "tests/deploy/prometheus_test_fixture.h"
#include "trainer-runtime/observability/runtime_metrics.h"

namespace kubetrain::deploy_testing {
namespace {

using observability::MetricsServer;
using Samples = std::vector<PrometheusServer::Sample>;

// Accepts exactly one sample, from scrape job `job`, equal to `want`.
auto OnlySample(std::string job, double want) {
  return [job = std::move(job), want](const Samples& samples) {
    return samples.size() == 1 && samples[0].value == want &&
           samples[0].labels.value("job", "") == job;
  };
}

using PrometheusTest = PrometheusFixture;

TEST_F(PrometheusTest, ScrapesOperatorAndRuntimeMetrics) {
  auto operator_registry = std::make_shared<prometheus::Registry>();
  observability::OperatorMetrics operator_metrics(*operator_registry);
  for (int i = 0; i < 3; ++i) operator_metrics.ObserveReconcile("success", 0.01);
  operator_metrics.SetLeader(true);
  operator_metrics.SetJobsByState({{"RUNNING", 2}});

  auto runtime_registry = std::make_shared<prometheus::Registry>();
  observability::RuntimeMetrics runtime_metrics(*runtime_registry,
                                                {{"task_type", "worker"}, {"task_index", "0"}});
  runtime_metrics.ObserveStep(0.5, 256);
  runtime_metrics.ObserveCollective(observability::RuntimeMetrics::Collective::kAllReduce, 4096,
                                    0.002);

  auto operator_server = MetricsServer::Start({.address = "127.0.0.1:0"}, {operator_registry});
  ASSERT_TRUE(operator_server.ok()) << operator_server.status();
  auto runtime_server = MetricsServer::Start({.address = "127.0.0.1:0"}, {runtime_registry});
  ASSERT_TRUE(runtime_server.ok()) << runtime_server.status();

  auto prometheus =
      PrometheusServer::Start(dir_, {{"kubetrain-operator", (*operator_server)->port()},
                                     {"kubetrain-runtime", (*runtime_server)->port()}});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  const PrometheusServer& prom = **prometheus;

  // One deadline for all the waits below: scrapes are every second.
  const absl::Time timeout = absl::Now() + absl::Seconds(90);
  auto eventually = [&](const std::string& query, double want, const std::string& job) {
    return WaitForSamples(prom, query, OnlySample(job, want), timeout);
  };
  EXPECT_EQ(eventually("up{job=\"kubetrain-operator\"}", 1, "kubetrain-operator"), absl::OkStatus())
      << prom.Log() << prom.Targets();
  EXPECT_EQ(eventually("up{job=\"kubetrain-runtime\"}", 1, "kubetrain-runtime"), absl::OkStatus())
      << prom.Targets();
  EXPECT_EQ(
      eventually("kubetrain_operator_reconcile_total{result=\"success\"}", 3, "kubetrain-operator"),
      absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_reconcile_duration_seconds_count{result=\"success\"}", 3,
                       "kubetrain-operator"),
            absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_leader", 1, "kubetrain-operator"), absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_jobs{state=\"RUNNING\"}", 2, "kubetrain-operator"),
            absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_runtime_examples_per_second{task_type=\"worker\"}", 512,
                       "kubetrain-runtime"),
            absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_runtime_collective_bytes_total{op=\"allreduce\"}", 4096,
                       "kubetrain-runtime"),
            absl::OkStatus());

  // Later changes arrive too: the series are scraped live, not once.
  operator_metrics.ObserveReconcile("success", 0.01);
  operator_metrics.SetLeader(false);
  EXPECT_EQ(
      eventually("kubetrain_operator_reconcile_total{result=\"success\"}", 4, "kubetrain-operator"),
      absl::OkStatus());
  EXPECT_EQ(eventually("kubetrain_operator_leader", 0, "kubetrain-operator"), absl::OkStatus());

  (*prometheus)->Stop();
}

}  // namespace
}  // namespace kubetrain::deploy_testing
