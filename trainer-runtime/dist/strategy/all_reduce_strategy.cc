#include "trainer-runtime/dist/strategy/all_reduce_strategy.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "api/status_macros.h"
#include "trainer-runtime/dist/collectives.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::dist {

using runtime::engine::NamedGradient;
using runtime::engine::Tensor;
using runtime::engine::TrainingContext;

AllReduceStrategy::AllReduceStrategy(std::unique_ptr<Transport> transport, const Options& options,
                                     std::shared_ptr<void> keepalive)
    : transport_(std::move(transport)), keepalive_(std::move(keepalive)), options_(options) {}

AllReduceStrategy::~AllReduceStrategy() {
  // The transport may depend on what keepalive holds.
  transport_.reset();
}

absl::Status AllReduceStrategy::Fail(absl::Status status, absl::string_view what,
                                     int64_t step) const {
  std::string ranks;
  for (size_t r = 0; r < options_.replica_names.size(); ++r) {
    absl::StrAppend(&ranks, r == 0 ? " [" : ", ", "rank ", r, " is ", options_.replica_names[r]);
  }
  if (!ranks.empty()) ranks += "]";
  absl::Status out(status.code(), absl::StrCat("replica ", transport_->rank(), ": ", what,
                                               " at step ", step, ": ", status.message(), ranks));
  const bool transient = status.code() == absl::StatusCode::kUnavailable ||
                         status.code() == absl::StatusCode::kDeadlineExceeded;
  return runtime::WithExitCode(out, transient ? runtime::kExitRetryable : runtime::kExitInternal);
}

absl::StatusOr<int64_t> AllReduceStrategy::Initialize(TrainingContext& ctx,
                                                      const v1::Checkpoint* restored) {
  int64_t step = 0;
  if (restored != nullptr) {
    RETURN_IF_ERROR(ctx.RestoreLocal(*restored));
    step = restored->global_step();
  } else {
    RETURN_IF_ERROR(runtime::engine::InitializeVariables(ctx.model.graph, ctx.options.seed,
                                                         ctx.variables));
  }
  // The chief's values win: one flat buffer of every variable in name order,
  // with the global step in front.
  size_t total = 2;
  for (const auto& [name, tensor] : ctx.variables.values()) total += tensor.num_elements();
  std::vector<float> flat(total);
  // The step as two floats that hold it exactly (each < 2^24).
  flat[0] = static_cast<float>(step >> 24);
  flat[1] = static_cast<float>(step & 0xffffff);
  size_t at = 2;
  for (const auto& [name, tensor] : ctx.variables.values()) {
    std::memcpy(flat.data() + at, tensor.data(), tensor.num_elements() * sizeof(float));
    at += tensor.num_elements();
  }
  absl::Status s = Broadcast(*transport_, 0, absl::MakeSpan(flat), op_++,
                             absl::Now() + options_.step_timeout);
  if (!s.ok()) return Fail(s, "broadcast of the initial variables", step);
  at = 2;
  for (auto& [name, tensor] : ctx.variables.values()) {
    std::memcpy(tensor.data(), flat.data() + at, tensor.num_elements() * sizeof(float));
    at += tensor.num_elements();
  }
  return (static_cast<int64_t>(flat[0]) << 24) + static_cast<int64_t>(flat[1]);
}

absl::StatusOr<AllReduceStrategy::StepResult> AllReduceStrategy::Step(
    TrainingContext& ctx, const runtime::data::Batch& batch, int64_t global_step) {
  ASSIGN_OR_RETURN(runtime::engine::GradientResult g, ctx.ComputeGradients(batch, global_step));
  std::vector<const NamedGradient*> order;
  for (const NamedGradient& n : g.gradients) order.push_back(&n);
  std::sort(order.begin(), order.end(),
            [](const NamedGradient* a, const NamedGradient* b) { return a->name < b->name; });

  // Plan the buckets: consecutive gradients until a bucket holds bucket_bytes.
  const size_t bucket_floats = std::max<size_t>(1, options_.bucket_bytes / sizeof(float));
  std::vector<std::pair<size_t, size_t>> spans;  // [first gradient, end) per bucket
  std::vector<size_t> sizes;
  size_t first = 0, filled = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    filled += order[i]->gradient.num_elements();
    if (filled >= bucket_floats) {
      spans.push_back({first, i + 1});
      sizes.push_back(filled);
      first = i + 1;
      filled = 0;
    }
  }
  if (first < order.size() || spans.empty()) {
    spans.push_back({first, order.size()});
    sizes.push_back(filled);
  }
  sizes.back() += 2;  // loss and accuracy
  buckets_.resize(spans.size());

  const absl::Time deadline = absl::Now() + options_.step_timeout;
  const float scale = 1.0f / static_cast<float>(transport_->size());
  std::vector<NamedGradient> averaged;
  averaged.reserve(order.size());
  float loss = g.loss, accuracy = g.accuracy;
  for (size_t b = 0; b < spans.size(); ++b) {
    std::vector<float>& bucket = buckets_[b];
    bucket.resize(sizes[b]);
    size_t at = 0;
    for (size_t i = spans[b].first; i < spans[b].second; ++i) {
      const Tensor& t = order[i]->gradient;
      std::memcpy(bucket.data() + at, t.data(), t.num_elements() * sizeof(float));
      at += t.num_elements();
    }
    if (b + 1 == spans.size()) {
      bucket[at] = loss;
      bucket[at + 1] = accuracy;
    }
    absl::Status s = AllReduce(*transport_, absl::MakeSpan(bucket), op_++, deadline);
    if (!s.ok()) return Fail(s, "gradient all-reduce", global_step);
    for (float& x : bucket) x *= scale;
    at = 0;
    for (size_t i = spans[b].first; i < spans[b].second; ++i) {
      const Tensor& t = order[i]->gradient;
      averaged.push_back(
          {order[i]->name, Tensor::WrapHost(t.shape(), bucket.data() + at, nullptr)});
      at += t.num_elements();
    }
    if (b + 1 == spans.size()) {
      loss = bucket[at];
      accuracy = bucket[at + 1];
    }
  }
  RETURN_IF_ERROR(ctx.optimizer.Apply(ctx.variables, averaged));
  return StepResult{global_step + 1, loss, accuracy};
}

}  // namespace kubetrain::dist
