#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "trainer-runtime/dist/transport.h"
#include "trainer-runtime/engine/trainer.h"

namespace kubetrain::dist {

// Synchronous data parallelism across replicas (MultiWorkerMirroredStrategy):
// every replica holds all variables, computes gradients on its own shard of
// the data, and the gradients are averaged by all-reduce (AllReduce: the
// ring, or one exchange round for buckets of a few KiB) before each
// replica applies the same update with its own optimizer, so the replicas stay
// identical.
//
//   Initialize  rank 0 (the chief) restores or initialises the variables and
//               broadcasts them with the global step; every replica restores
//               the optimizer state from the same checkpoint when there is one.
//   Step        as the backward pass produces each gradient (the output layer
//               first, as in PyTorch DDP), it is copied into the current
//               bucket; a bucket is closed once it holds `bucket_bytes`. With
//               `overlap` a communication thread all-reduces (and divides by
//               the number of replicas) each bucket closed while the backward
//               pass goes on; once it is done, the step waits for that thread
//               and reduces the last bucket itself, then applies the
//               optimizer update. Without it the buckets are all-reduced one
//               after another once the backward pass is done. The buckets,
//               and so every sum's order, are the same either way: the two
//               give bit-identical variables. The batch's loss and accuracy
//               travel in the last bucket, so every replica logs the global
//               means. The global batch is the per-replica batch times the
//               number of replicas.
//
// A lost peer or a deadline fails the step with exit code 138 (retryable),
// naming the peer, whichever thread ran the failing all-reduce; a step that
// fails has waited for every bucket it handed to the communication thread.
// Not thread-safe: the training thread only. The communication thread is
// started by the first overlapped step and joined by the destructor.
class AllReduceStrategy final : public runtime::engine::TrainingStrategy {
 public:
  struct Options {
    size_t bucket_bytes = size_t{4} << 20;
    // All-reduce buckets during the backward pass (--allreduce_overlap).
    bool overlap = true;
    // How long one collective may wait for the slowest replica.
    absl::Duration step_timeout = absl::Minutes(5);
    // "/job:worker/task:2 (host:port)" per rank, for error messages.
    std::vector<std::string> replica_names;
  };

  // `transport` connects the replicas, rank 0 being the chief. `keepalive`
  // holds anything else the transport needs (e.g. the gRPC transport the
  // shared-memory one was bootstrapped through).
  AllReduceStrategy(std::unique_ptr<Transport> transport, const Options& options,
                    std::shared_ptr<void> keepalive = nullptr);
  ~AllReduceStrategy() override;

  absl::StatusOr<int64_t> Initialize(runtime::engine::TrainingContext& ctx,
                                     const v1::Checkpoint* restored) override;
  absl::StatusOr<StepResult> Step(runtime::engine::TrainingContext& ctx,
                                  const runtime::data::Batch& batch, int64_t global_step) override;
  bool IsChief() const override { return transport_->rank() == 0; }
  int shard_index() const override { return transport_->rank(); }
  int shard_count() const override { return transport_->size(); }

 private:
  class BucketReducer;
  class BucketFiller;
  // A bucket ready to be all-reduced, and the id of its collective.
  struct Closed {
    absl::Span<float> data;
    uint64_t op;
  };

  absl::Status Fail(absl::Status status, absl::string_view what, int64_t step) const;

  std::unique_ptr<Transport> transport_;
  std::shared_ptr<void> keepalive_;
  Options options_;
  uint64_t op_ = 0;
  // The step's buckets, kept across steps so a steady loop allocates
  // nothing; a deque, so a bucket being all-reduced never moves.
  std::deque<std::vector<float>> buckets_;
  // Where each variable's gradient lies: (bucket, offset), by variable index.
  std::vector<std::pair<size_t, size_t>> placement_;
  std::vector<runtime::engine::NamedGradient> averaged_;
  // The communication thread; null until the first overlapped step.
  std::unique_ptr<BucketReducer> reducer_;
};

}  // namespace kubetrain::dist
