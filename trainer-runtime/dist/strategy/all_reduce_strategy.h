#pragma once

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
//   Step        gradients, in name order, are packed into buckets of about
//               `bucket_bytes`, each bucket is all-reduced as it fills, then
//               divided by the number of replicas; the batch's loss and
//               accuracy travel in the last bucket, so every replica logs the
//               global means. The global batch is the per-replica batch times
//               the number of replicas.
//
// A lost peer or a deadline fails the step with exit code 138 (retryable),
// naming the peer. Not thread-safe: the training thread only.
class AllReduceStrategy final : public runtime::engine::TrainingStrategy {
 public:
  struct Options {
    size_t bucket_bytes = size_t{4} << 20;
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
  absl::Status Fail(absl::Status status, absl::string_view what, int64_t step) const;

  std::unique_ptr<Transport> transport_;
  std::shared_ptr<void> keepalive_;
  Options options_;
  uint64_t op_ = 0;
  std::vector<std::vector<float>> buckets_;
};

}  // namespace kubetrain::dist
