#pragma once

#include <string>
#include <string_view>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/labels.h"
#include "prometheus/registry.h"

namespace kubetrain::observability {

// Every Prometheus metric of one kubetrain-runtime task, declared here and
// nowhere else. Each task serves its own /metrics; `task_labels` (e.g.
// {job, task_type, task_index, trial}) are attached to every series so that
// scrapes of different tasks stay apart even without relabelling.
//
//   kubetrain_runtime_steps_total                         counter
//   kubetrain_runtime_step_duration_seconds               histogram
//   kubetrain_runtime_examples_per_second                 gauge
//   kubetrain_runtime_collective_bytes_total{op}          counter  op: allreduce|push|pull
//   kubetrain_runtime_collective_duration_seconds{op}     histogram
//   kubetrain_runtime_loss                                gauge (last training loss)
//   kubetrain_runtime_objective                           gauge (last reported objective)
//
// The Registry must outlive this object. Thread-safe.
class RuntimeMetrics {
 public:
  enum class Collective { kAllReduce, kPush, kPull };

  RuntimeMetrics(prometheus::Registry& registry, const prometheus::Labels& task_labels);

  RuntimeMetrics(const RuntimeMetrics&) = delete;
  RuntimeMetrics& operator=(const RuntimeMetrics&) = delete;

  // One training step of `examples` examples that took `seconds`; also sets
  // the throughput gauge to examples / seconds.
  void ObserveStep(double seconds, int64_t examples);
  // One all-reduce, push or pull of `bytes` that took `seconds`.
  void ObserveCollective(Collective op, int64_t bytes, double seconds);
  void SetLoss(double loss) { loss_.Set(loss); }
  void SetObjective(double objective) { objective_.Set(objective); }

 private:
  struct PerOp {
    prometheus::Counter* bytes;
    prometheus::Histogram* seconds;
  };
  const PerOp& Op(Collective op) const;

  prometheus::Counter& steps_total_;
  prometheus::Histogram& step_duration_seconds_;
  prometheus::Gauge& examples_per_second_;
  PerOp all_reduce_, push_, pull_;
  prometheus::Gauge& loss_;
  prometheus::Gauge& objective_;
};

}  // namespace kubetrain::observability
