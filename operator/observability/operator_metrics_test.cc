#include "operator/observability/operator_metrics.h"

#include <map>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace kubetrain::observability {
namespace {

// The value of the sample of `family` whose labels are exactly `labels`
// (counter, gauge, or a histogram's sample count).
std::optional<double> Sample(prometheus::Registry& registry, const std::string& family,
                             const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> got;
      for (const auto& l : m.label) got[l.name] = l.value;
      if (got != labels) continue;
      switch (f.type) {
        case prometheus::MetricType::Counter:
          return m.counter.value;
        case prometheus::MetricType::Gauge:
          return m.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(m.histogram.sample_count);
        default:
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

TEST(OperatorMetricsTest, EveryDocumentedSeriesExistsAtZero) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  for (std::string_view result : OperatorMetrics::kResults) {
    EXPECT_EQ(
        Sample(registry, "kubetrain_operator_reconcile_total", {{"result", std::string(result)}}),
        0.0);
    EXPECT_EQ(Sample(registry, "kubetrain_operator_reconcile_duration_seconds",
                     {{"result", std::string(result)}}),
              0.0);
  }
  for (std::string_view state : OperatorMetrics::kStates) {
    EXPECT_EQ(Sample(registry, "kubetrain_operator_jobs", {{"state", std::string(state)}}), 0.0);
    EXPECT_EQ(Sample(registry, "kubetrain_operator_trials", {{"state", std::string(state)}}), 0.0);
  }
  EXPECT_EQ(Sample(registry, "kubetrain_operator_workqueue_depth", {}), 0.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_workqueue_wait_seconds", {}), 0.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_trial_suggestion_duration_seconds", {}), 0.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_leader", {}), 0.0);
}

TEST(OperatorMetricsTest, ReconcilesCountAndTimeByResult) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.ObserveReconcile("success", 0.01);
  metrics.ObserveReconcile("success", 0.02);
  metrics.ObserveReconcile("error", 0.5);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_reconcile_total", {{"result", "success"}}), 2.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_reconcile_total", {{"result", "error"}}), 1.0);
  EXPECT_EQ(
      Sample(registry, "kubetrain_operator_reconcile_duration_seconds", {{"result", "error"}}),
      1.0);
}

TEST(OperatorMetricsTest, UnknownLabelValuesAreBounded) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.ObserveReconcile("something-new", 0.01);
  metrics.CountApiRequest("DROP TABLE", 200);
  metrics.CountApiRequest("get", 1234);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_reconcile_total", {{"result", "other"}}), 1.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_api_requests_total",
                   {{"verb", "other"}, {"code", "200"}}),
            1.0);
  EXPECT_EQ(
      Sample(registry, "kubetrain_operator_api_requests_total", {{"verb", "get"}, {"code", "0"}}),
      1.0);
}

TEST(OperatorMetricsTest, ApiRequestsByVerbAndCode) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.CountApiRequest("create", 201);
  metrics.CountApiRequest("create", 201);
  metrics.CountApiRequest("create", 409);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_api_requests_total",
                   {{"verb", "create"}, {"code", "201"}}),
            2.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_api_requests_total",
                   {{"verb", "create"}, {"code", "409"}}),
            1.0);
}

TEST(OperatorMetricsTest, SettingStatesZeroesTheOnesNoLongerPresent) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.SetJobsByState({{"RUNNING", 3}, {"QUEUED", 1}});
  EXPECT_EQ(Sample(registry, "kubetrain_operator_jobs", {{"state", "RUNNING"}}), 3.0);
  metrics.SetJobsByState({{"SUCCEEDED", 4}});
  EXPECT_EQ(Sample(registry, "kubetrain_operator_jobs", {{"state", "RUNNING"}}), 0.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_jobs", {{"state", "QUEUED"}}), 0.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_jobs", {{"state", "SUCCEEDED"}}), 4.0);
  metrics.SetTrialsByState({{"FAILED", 2}});
  EXPECT_EQ(Sample(registry, "kubetrain_operator_trials", {{"state", "FAILED"}}), 2.0);
}

TEST(OperatorMetricsTest, QueueLeaderAndSuggestions) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.SetWorkQueueDepth(12);
  metrics.ObserveWorkQueueWait(0.3);
  metrics.ObserveTrialSuggestion(1.5);
  metrics.ObserveTrialSuggestion(2.5);
  metrics.SetLeader(true);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_workqueue_depth", {}), 12.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_workqueue_wait_seconds", {}), 1.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_trial_suggestion_duration_seconds", {}), 2.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_leader", {}), 1.0);
  metrics.SetLeader(false);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_leader", {}), 0.0);
}

TEST(OperatorMetricsTest, Admission) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_admission_queued_jobs", {}), 0.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_admission_admitted_total", {}), 0.0);
  metrics.SetQueuedJobs(3);
  metrics.ObserveAdmission(42);
  metrics.ObserveAdmission(7);
  metrics.ObserveAdmissionPass(0.02);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_admission_queued_jobs", {}), 3.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_admission_admitted_total", {}), 2.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_admission_wait_seconds", {}), 2.0);
  EXPECT_EQ(Sample(registry, "kubetrain_operator_admission_pass_duration_seconds", {}), 1.0);
}

}  // namespace
}  // namespace kubetrain::observability
