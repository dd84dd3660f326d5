#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "trainer-runtime/data/dataset.h"

namespace kubetrain::runtime::data {

struct BatchOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  uint64_t seed = 0;
  int shard_index = 0;          // this worker's task index
  int shard_count = 1;          // number of workers reading the same data
  bool drop_remainder = false;  // drop each epoch's last, short batch
  int prefetch = 2;             // batches built ahead by a background thread; 0 = none
};

struct Batch {
  int64_t size = 0;
  int64_t epoch = 0;
  int64_t index = 0;                     // global batch number since start
  std::vector<float> features;           // size * example_size(), row-major
  std::vector<int32_t> labels;           // size
  std::vector<int64_t> example_indices;  // positions in the dataset of the examples, in order
};

// OK when `options` can produce batches from `num_examples` examples; otherwise
// INVALID_ARGUMENT naming the option (batch_size <= 0, shard_index outside
// [0, shard_count), an empty shard, or a shard smaller than one batch with
// drop_remainder).
absl::Status ValidateBatchOptions(const BatchOptions& options, int64_t num_examples);

// The order in which one shard visits a dataset, as pure arithmetic: no data,
// no threads. Shard i of n holds the examples whose index % n == i. Epoch e
// visits them in a permutation drawn from a generator seeded with seed + e
// (identity when shuffle is off), cut into batches of batch_size; the last
// batch of an epoch is short unless drop_remainder. Global batch k belongs to
// epoch k / batches_per_epoch(). Results are the same on every platform (the
// generator and the shuffle are ours, not the standard library's).
// Thread-safe (immutable after construction).
class BatchPlan {
 public:
  // Invalid options (see ValidateBatchOptions) give an empty plan:
  // batches_per_epoch() == 0.
  BatchPlan(int64_t num_examples, const BatchOptions& options);

  int64_t shard_size() const { return shard_size_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Dataset indices of this shard's examples in epoch `epoch`'s order.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  // Dataset indices of global batch `batch`, given that epoch's order.
  std::vector<int64_t> BatchIndices(int64_t batch, const std::vector<int64_t>& epoch_order) const;
  std::vector<int64_t> BatchIndices(int64_t batch) const {
    return BatchIndices(batch, EpochOrder(batch / std::max<int64_t>(batches_per_epoch_, 1)));
  }

 private:
  BatchOptions options_;
  int64_t shard_size_ = 0;
  int64_t batches_per_epoch_ = 0;
};

// Endless iterator over epochs of one shard (shard i of n sees examples whose
// index % n == i, reshuffled per epoch with seed+epoch, so every worker sees a
// distinct shard). Deterministic: batch k is the same whatever `start_batch`
// the iterator was created with, so training resumed from a checkpoint at
// step k sees exactly the batches an uninterrupted run would have. A
// background thread prefetches `options.prefetch` batches.
//
// Thread-compatible: one consumer calls Next(); the prefetch thread is
// internal. The dataset is shared read-only and must not change while the
// iterator lives. With invalid options (check ValidateBatchOptions, or use
// Create) Next() returns empty batches (size 0).
class BatchIterator {
 public:
  BatchIterator(std::shared_ptr<const Dataset> dataset, BatchOptions options,
                int64_t start_batch = 0);
  ~BatchIterator();  // stops the prefetch thread
  BatchIterator(const BatchIterator&) = delete;
  BatchIterator& operator=(const BatchIterator&) = delete;

  // Validates the options against the dataset first.
  static absl::StatusOr<std::unique_ptr<BatchIterator>> Create(
      std::shared_ptr<const Dataset> dataset, BatchOptions options, int64_t start_batch = 0);

  // The next batch, global numbers start_batch, start_batch + 1, ...
  Batch Next();
  int64_t batches_per_epoch() const { return plan_.batches_per_epoch(); }

 private:
  // Builds global batch `batch`; called by one thread at a time (the prefetch
  // thread, or Next() when there is none).
  Batch Build(int64_t batch);
  void PrefetchLoop();
  bool StoppingOrRoomToBuild() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasReadyBatch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const Dataset> dataset_;
  const BatchOptions options_;
  const BatchPlan plan_;
  // Cache of the current epoch's order, owned by the building thread.
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_order_;
  int64_t next_to_consume_;  // consumer only

  mutable absl::Mutex mu_;
  std::deque<Batch> ready_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_to_build_;  // prefetch thread only
  std::thread prefetcher_;
};

}  // namespace kubetrain::runtime::data
