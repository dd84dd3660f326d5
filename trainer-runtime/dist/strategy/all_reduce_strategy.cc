#include "trainer-runtime/dist/strategy/all_reduce_strategy.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "trainer-runtime/dist/collectives.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::dist {

using runtime::engine::GradientResult;
using runtime::engine::NamedGradient;
using runtime::engine::Tensor;
using runtime::engine::TrainingContext;

namespace {

// Sums `bucket` across the replicas and divides it by their number: the one
// reduction of both the overlapped and the sequential step, so the two agree
// bit for bit.
absl::Status ReduceBucket(Transport& transport, absl::Span<float> bucket, uint64_t op,
                          absl::Time deadline) {
  RETURN_IF_ERROR(AllReduce(transport, bucket, op, deadline));
  const float scale = 1.0f / static_cast<float>(transport.size());
  for (float& x : bucket) x *= scale;
  return absl::OkStatus();
}

}  // namespace

// The communication thread: reduces the buckets handed to it, in the order
// given, while the training thread goes on with the backward pass. After a
// failure the step's remaining buckets are skipped (the step fails anyway)
// and the first failure is kept for Wait. Submit, Begin and Wait are for the
// training thread; the transport is used by the communication thread only
// while a bucket is pending.
class AllReduceStrategy::BucketReducer {
 public:
  explicit BucketReducer(Transport& transport) : transport_(transport) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~BucketReducer() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  // A new step, whose collectives must end by `deadline`.
  void Begin(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    deadline_ = deadline;
    status_ = absl::OkStatus();
  }

  // `bucket` must stay put and untouched until Wait returns.
  void Submit(absl::Span<float> bucket, uint64_t op) {
    absl::MutexLock lock(&mu_);
    queue_.push_back({bucket, op});
  }

  // Waits until every bucket submitted is reduced or skipped; the step's
  // first failure.
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BucketReducer::Idle));
    return status_;
  }

 private:
  struct Job {
    absl::Span<float> bucket;
    uint64_t op;
  };

  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); }

  void Loop() {
    absl::MutexLock lock(&mu_);
    for (;;) {
      mu_.Await(absl::Condition(this, &BucketReducer::HasWork));
      if (queue_.empty()) return;  // stopping
      const Job job = queue_.front();
      queue_.pop_front();
      if (!status_.ok()) continue;
      busy_ = true;
      const absl::Time deadline = deadline_;
      mu_.Unlock();
      absl::Status s = ReduceBucket(transport_, job.bucket, job.op, deadline);
      mu_.Lock();
      busy_ = false;
      if (status_.ok()) status_ = std::move(s);
    }
  }

  Transport& transport_;
  absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once everything above exists
};

// Packs the gradients into buckets as the backward pass reports them (on the
// training thread) and closes a bucket once it holds bucket_bytes, handing it
// to the reducer when there is one. The last bucket stays open for Finish.
class AllReduceStrategy::BucketFiller final : public runtime::engine::GradientObserver {
 public:
  BucketFiller(AllReduceStrategy& strategy, size_t num_gradients, BucketReducer* reducer)
      : s_(strategy),
        bucket_floats_(std::max<size_t>(1, strategy.options_.bucket_bytes / sizeof(float))),
        num_gradients_(num_gradients),
        reducer_(reducer) {
    s_.placement_.assign(num_gradients, {0, 0});
  }

  void GradientReady(size_t variable, const Tensor& gradient) override {
    if (variable >= num_gradients_) return;  // counted short in received()
    std::vector<float>& bucket = Current();
    const size_t n = static_cast<size_t>(gradient.num_elements());
    // Grown only: a bucket keeps its storage from step to step.
    if (bucket.size() < filled_ + n) bucket.resize(filled_ + n);
    std::memcpy(bucket.data() + filled_, gradient.data(), n * sizeof(float));
    s_.placement_[variable] = {closed_.size(), filled_};
    filled_ += n;
    ++received_;
    if (filled_ >= bucket_floats_ && received_ < num_gradients_) {
      Close();
      if (reducer_ != nullptr) {
        reducer_->Submit(closed_.back().data, closed_.back().op);
        ++submitted_;
      }
    }
  }

  // After the backward pass: the batch's loss and accuracy end the last
  // bucket, which is closed (and left to the caller).
  void Finish(float loss, float accuracy) {
    std::vector<float>& bucket = Current();
    bucket.resize(filled_ + 2);
    bucket[filled_] = loss;
    bucket[filled_ + 1] = accuracy;
    filled_ += 2;
    Close();
  }

  size_t received() const { return received_; }
  const std::vector<Closed>& closed() const { return closed_; }
  // closed()[0, submitted()) went to the reducer.
  size_t submitted() const { return submitted_; }

 private:
  std::vector<float>& Current() {
    if (closed_.size() == s_.buckets_.size()) s_.buckets_.emplace_back();
    return s_.buckets_[closed_.size()];
  }

  void Close() {
    std::vector<float>& bucket = Current();
    bucket.resize(filled_);
    closed_.push_back({absl::MakeSpan(bucket), s_.op_++});
    filled_ = 0;
  }

  AllReduceStrategy& s_;
  const size_t bucket_floats_;
  const size_t num_gradients_;
  BucketReducer* const reducer_;
  size_t received_ = 0;
  size_t filled_ = 0;
  size_t submitted_ = 0;
  std::vector<Closed> closed_;
};

AllReduceStrategy::AllReduceStrategy(std::unique_ptr<Transport> transport, const Options& options,
                                     std::shared_ptr<void> keepalive)
    : transport_(std::move(transport)), keepalive_(std::move(keepalive)), options_(options) {}

AllReduceStrategy::~AllReduceStrategy() {
  // The communication thread uses the transport; the transport may depend on
  // what keepalive holds.
  reducer_.reset();
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
    RETURN_IF_ERROR(
        runtime::engine::InitializeVariables(ctx.model.graph, ctx.options.seed, ctx.variables));
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
  absl::Status s =
      Broadcast(*transport_, 0, absl::MakeSpan(flat), op_++, absl::Now() + options_.step_timeout);
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
  const size_t num_gradients = ctx.model.variable_names.size();
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  // One replica has nothing to send: no thread for it.
  BucketReducer* reducer = nullptr;
  if (options_.overlap && transport_->size() > 1) {
    if (reducer_ == nullptr) reducer_ = std::make_unique<BucketReducer>(*transport_);
    reducer = reducer_.get();
    reducer->Begin(deadline);
  }
  BucketFiller filler(*this, num_gradients, reducer);
  absl::StatusOr<GradientResult> g = ctx.ComputeGradients(batch, global_step, &filler);
  absl::Status failed = g.status();
  if (failed.ok() && filler.received() != num_gradients) {
    failed = absl::InternalError(absl::StrCat("the backward pass reported ", filler.received(),
                                              " of ", num_gradients, " gradients"));
  }
  if (!failed.ok()) {
    // Nothing of this step may outlive it: the buckets already handed over
    // are finished (the peers send them too) before the error goes up.
    if (reducer != nullptr) reducer->Wait().IgnoreError();
    return failed;
  }
  filler.Finish(g->loss, g->accuracy);

  // The buckets the communication thread has not taken are reduced here, in
  // order after its own: the backward pass is over, so handing them over
  // would only cost a thread switch.
  absl::Status s;
  size_t next = 0;
  if (reducer != nullptr) {
    s = reducer->Wait();
    next = filler.submitted();
  }
  for (; s.ok() && next < filler.closed().size(); ++next) {
    const Closed& bucket = filler.closed()[next];
    s = ReduceBucket(*transport_, bucket.data, bucket.op, deadline);
  }
  if (!s.ok()) return Fail(s, "gradient all-reduce", global_step);

  const absl::Span<const float> last = filler.closed().back().data;
  const float loss = last[last.size() - 2];
  const float accuracy = last[last.size() - 1];
  averaged_.clear();
  for (size_t i = 0; i < num_gradients; ++i) {
    const NamedGradient& local = g->gradients[i];
    const auto [bucket, offset] = placement_[i];
    averaged_.push_back({local.name, Tensor::WrapHost(local.gradient.shape(),
                                                      buckets_[bucket].data() + offset, nullptr)});
  }
  RETURN_IF_ERROR(ctx.optimizer.Apply(ctx.variables, averaged_));
  return StepResult{global_step + 1, loss, accuracy};
}

}  // namespace kubetrain::dist
