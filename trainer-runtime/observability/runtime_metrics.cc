#include "trainer-runtime/observability/runtime_metrics.h"

namespace kubetrain::observability {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Steps and collectives span sub-millisecond (small models on CPU) to
// tens of seconds (large all-reduces across hosts).
const Histogram::BucketBoundaries& Buckets() {
  static const Histogram::BucketBoundaries buckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                      0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                      1,      2.5,     5,      10,    30};
  return buckets;
}

prometheus::Labels With(prometheus::Labels labels, const std::string& name,
                        const std::string& value) {
  labels[name] = value;
  return labels;
}

}  // namespace

RuntimeMetrics::RuntimeMetrics(prometheus::Registry& registry,
                               const prometheus::Labels& task_labels)
    : steps_total_(BuildCounter()
                       .Name("kubetrain_runtime_steps_total")
                       .Help("Training steps this task has run.")
                       .Register(registry)
                       .Add(task_labels)),
      step_duration_seconds_(BuildHistogram()
                                 .Name("kubetrain_runtime_step_duration_seconds")
                                 .Help("Time of one training step.")
                                 .Register(registry)
                                 .Add(task_labels, Buckets())),
      examples_per_second_(BuildGauge()
                               .Name("kubetrain_runtime_examples_per_second")
                               .Help("Training throughput of the last step.")
                               .Register(registry)
                               .Add(task_labels)),
      loss_(BuildGauge()
                .Name("kubetrain_runtime_loss")
                .Help("Training loss of the last step.")
                .Register(registry)
                .Add(task_labels)),
      objective_(BuildGauge()
                     .Name("kubetrain_runtime_objective")
                     .Help("Last objective value reported (hyperparameter metric tag).")
                     .Register(registry)
                     .Add(task_labels)) {
  auto& bytes = BuildCounter()
                    .Name("kubetrain_runtime_collective_bytes_total")
                    .Help("Bytes sent by all-reduce, parameter-server push and pull.")
                    .Register(registry);
  auto& seconds = BuildHistogram()
                      .Name("kubetrain_runtime_collective_duration_seconds")
                      .Help("Time of one all-reduce, push or pull.")
                      .Register(registry);
  auto per_op = [&](const std::string& op) {
    return PerOp{&bytes.Add(With(task_labels, "op", op)),
                 &seconds.Add(With(task_labels, "op", op), Buckets())};
  };
  all_reduce_ = per_op("allreduce");
  push_ = per_op("push");
  pull_ = per_op("pull");
}

const RuntimeMetrics::PerOp& RuntimeMetrics::Op(Collective op) const {
  switch (op) {
    case Collective::kAllReduce:
      return all_reduce_;
    case Collective::kPush:
      return push_;
    case Collective::kPull:
      break;
  }
  return pull_;
}

void RuntimeMetrics::ObserveStep(double seconds, int64_t examples) {
  steps_total_.Increment();
  step_duration_seconds_.Observe(seconds);
  // A zero-length step (clock granularity) says nothing about throughput.
  if (seconds > 0) examples_per_second_.Set(static_cast<double>(examples) / seconds);
}

void RuntimeMetrics::ObserveCollective(Collective op, int64_t bytes, double seconds) {
  const PerOp& metrics = Op(op);
  if (bytes > 0) metrics.bytes->Increment(static_cast<double>(bytes));
  metrics.seconds->Observe(seconds);
}

}  // namespace kubetrain::observability
