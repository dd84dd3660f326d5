#include "trainer-runtime/observability/runtime_metrics.h"

#include <map>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace kubetrain::observability {
namespace {

const prometheus::ClientMetric* Find(const std::vector<prometheus::MetricFamily>& families,
                                     const std::string& family,
                                     const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& f : families) {
    if (f.name != family) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> got;
      for (const auto& l : m.label) got[l.name] = l.value;
      if (got == labels) return &m;
    }
  }
  return nullptr;
}

const std::map<std::string, std::string> kTask = {{"task_type", "worker"}, {"task_index", "1"}};

std::map<std::string, std::string> WithOp(const std::string& op) {
  auto labels = kTask;
  labels["op"] = op;
  return labels;
}

TEST(RuntimeMetricsTest, StepsCountTimeAndThroughput) {
  prometheus::Registry registry;
  RuntimeMetrics metrics(registry, {kTask.begin(), kTask.end()});
  metrics.ObserveStep(0.5, 128);
  metrics.ObserveStep(0.25, 128);
  auto families = registry.Collect();
  const auto* steps = Find(families, "kubetrain_runtime_steps_total", kTask);
  const auto* time = Find(families, "kubetrain_runtime_step_duration_seconds", kTask);
  const auto* rate = Find(families, "kubetrain_runtime_examples_per_second", kTask);
  ASSERT_NE(steps, nullptr);
  ASSERT_NE(time, nullptr);
  ASSERT_NE(rate, nullptr);
  EXPECT_EQ(steps->counter.value, 2.0);
  EXPECT_EQ(time->histogram.sample_count, 2u);
  EXPECT_DOUBLE_EQ(time->histogram.sample_sum, 0.75);
  EXPECT_DOUBLE_EQ(rate->gauge.value, 512.0);  // the last step: 128 / 0.25
}

TEST(RuntimeMetricsTest, ZeroLengthStepLeavesThroughputAlone) {
  prometheus::Registry registry;
  RuntimeMetrics metrics(registry, {kTask.begin(), kTask.end()});
  metrics.ObserveStep(0.5, 100);
  metrics.ObserveStep(0.0, 100);
  auto families = registry.Collect();
  EXPECT_DOUBLE_EQ(Find(families, "kubetrain_runtime_examples_per_second", kTask)->gauge.value,
                   200.0);
}

TEST(RuntimeMetricsTest, CollectivesByOp) {
  prometheus::Registry registry;
  RuntimeMetrics metrics(registry, {kTask.begin(), kTask.end()});
  metrics.ObserveCollective(RuntimeMetrics::Collective::kAllReduce, 4096, 0.002);
  metrics.ObserveCollective(RuntimeMetrics::Collective::kAllReduce, 4096, 0.003);
  metrics.ObserveCollective(RuntimeMetrics::Collective::kPush, 100, 0.001);
  auto families = registry.Collect();
  const auto* all_reduce =
      Find(families, "kubetrain_runtime_collective_bytes_total", WithOp("allreduce"));
  const auto* push = Find(families, "kubetrain_runtime_collective_bytes_total", WithOp("push"));
  const auto* pull = Find(families, "kubetrain_runtime_collective_bytes_total", WithOp("pull"));
  ASSERT_TRUE(all_reduce && push && pull);
  EXPECT_EQ(all_reduce->counter.value, 8192.0);
  EXPECT_EQ(push->counter.value, 100.0);
  EXPECT_EQ(pull->counter.value, 0.0);
  EXPECT_EQ(Find(families, "kubetrain_runtime_collective_duration_seconds", WithOp("allreduce"))
                ->histogram.sample_count,
            2u);
}

TEST(RuntimeMetricsTest, LossAndObjective) {
  prometheus::Registry registry;
  RuntimeMetrics metrics(registry, {kTask.begin(), kTask.end()});
  metrics.SetLoss(0.42);
  metrics.SetObjective(0.91);
  auto families = registry.Collect();
  EXPECT_DOUBLE_EQ(Find(families, "kubetrain_runtime_loss", kTask)->gauge.value, 0.42);
  EXPECT_DOUBLE_EQ(Find(families, "kubetrain_runtime_objective", kTask)->gauge.value, 0.91);
}

}  // namespace
}  // namespace kubetrain::observability
