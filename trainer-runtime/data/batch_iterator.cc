#include "trainer-runtime/data/batch_iterator.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kubetrain::runtime::data {
namespace {

// SplitMix64: tiny, fast, and the same on every platform, which std::shuffle
// and std::uniform_int_distribution do not promise.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound > 0, by rejection (no modulo bias).
  uint64_t Below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do {
      r = Next();
    } while (r >= limit);
    return r % bound;
  }

 private:
  uint64_t state_;
};

}  // namespace

absl::Status ValidateBatchOptions(const BatchOptions& options, int64_t num_examples) {
  if (options.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be positive, got ", options.batch_size));
  }
  if (options.shard_count <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_count must be positive, got ", options.shard_count));
  }
  if (options.shard_index < 0 || options.shard_index >= options.shard_count) {
    return absl::InvalidArgumentError(absl::StrCat("shard_index ", options.shard_index,
                                                   " is outside [0, ", options.shard_count, ")"));
  }
  if (num_examples <= options.shard_index) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", options.shard_index, " of ", options.shard_count,
                     " is empty: the dataset has ", num_examples, " examples"));
  }
  const int64_t shard_size =
      (num_examples - options.shard_index + options.shard_count - 1) / options.shard_count;
  if (options.drop_remainder && shard_size < options.batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard ", options.shard_index, " of ", options.shard_count, " has ", shard_size,
        " examples, fewer than batch_size ", options.batch_size, " with drop_remainder"));
  }
  return absl::OkStatus();
}

BatchPlan::BatchPlan(int64_t num_examples, const BatchOptions& options) : options_(options) {
  if (!ValidateBatchOptions(options, num_examples).ok()) return;
  shard_size_ =
      (num_examples - options.shard_index + options.shard_count - 1) / options.shard_count;
  batches_per_epoch_ = options.drop_remainder
                           ? shard_size_ / options.batch_size
                           : (shard_size_ + options.batch_size - 1) / options.batch_size;
}

std::vector<int64_t> BatchPlan::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(shard_size_));
  for (int64_t i = 0; i < shard_size_; ++i) {
    order[i] = options_.shard_index + i * options_.shard_count;
  }
  if (options_.shuffle && shard_size_ > 1) {
    SplitMix64 rng(options_.seed + static_cast<uint64_t>(epoch));
    for (int64_t i = shard_size_ - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
      std::swap(order[i], order[j]);
    }
  }
  return order;
}

std::vector<int64_t> BatchPlan::BatchIndices(int64_t batch,
                                             const std::vector<int64_t>& epoch_order) const {
  if (batches_per_epoch_ == 0 || batch < 0) return {};
  const int64_t within = batch % batches_per_epoch_;
  const int64_t begin = within * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, shard_size_);
  return std::vector<int64_t>(epoch_order.begin() + begin, epoch_order.begin() + end);
}

BatchIterator::BatchIterator(std::shared_ptr<const Dataset> dataset, BatchOptions options,
                             int64_t start_batch)
    : dataset_(std::move(dataset)),
      options_(options),
      plan_(dataset_ != nullptr ? dataset_->num_examples : 0, options),
      next_to_consume_(std::max<int64_t>(start_batch, 0)),
      next_to_build_(next_to_consume_) {
  if (options_.prefetch > 0 && plan_.batches_per_epoch() > 0) {
    prefetcher_ = std::thread([this] { PrefetchLoop(); });
  }
}

BatchIterator::~BatchIterator() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (prefetcher_.joinable()) prefetcher_.join();
}

absl::StatusOr<std::unique_ptr<BatchIterator>> BatchIterator::Create(
    std::shared_ptr<const Dataset> dataset, BatchOptions options, int64_t start_batch) {
  if (dataset == nullptr) return absl::InvalidArgumentError("BatchIterator: no dataset");
  if (absl::Status s = ValidateBatchOptions(options, dataset->num_examples); !s.ok()) return s;
  if (start_batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("start_batch must be >= 0, got ", start_batch));
  }
  return std::make_unique<BatchIterator>(std::move(dataset), options, start_batch);
}

Batch BatchIterator::Build(int64_t batch_number) {
  Batch batch;
  batch.index = batch_number;
  const int64_t per_epoch = plan_.batches_per_epoch();
  if (per_epoch == 0) return batch;
  batch.epoch = batch_number / per_epoch;
  if (batch.epoch != cached_epoch_) {
    cached_order_ = plan_.EpochOrder(batch.epoch);
    cached_epoch_ = batch.epoch;
  }
  batch.example_indices = plan_.BatchIndices(batch_number, cached_order_);
  batch.size = static_cast<int64_t>(batch.example_indices.size());
  const int64_t example_size = dataset_->example_size();
  batch.features.resize(static_cast<size_t>(batch.size * example_size));
  batch.labels.resize(static_cast<size_t>(batch.size));
  for (int64_t i = 0; i < batch.size; ++i) {
    const int64_t example = batch.example_indices[i];
    std::memcpy(batch.features.data() + i * example_size,
                dataset_->features.data() + example * example_size, sizeof(float) * example_size);
    batch.labels[i] = dataset_->labels[example];
  }
  return batch;
}

bool BatchIterator::StoppingOrRoomToBuild() const {
  return stopping_ || ready_.size() < static_cast<size_t>(options_.prefetch);
}

bool BatchIterator::HasReadyBatch() const { return !ready_.empty(); }

void BatchIterator::PrefetchLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BatchIterator::StoppingOrRoomToBuild));
      if (stopping_) return;
    }
    // Built outside the lock so that Next() can take ready batches meanwhile.
    Batch batch = Build(next_to_build_++);
    absl::MutexLock lock(&mu_);
    ready_.push_back(std::move(batch));
  }
}

Batch BatchIterator::Next() {
  const int64_t number = next_to_consume_++;
  if (!prefetcher_.joinable()) return Build(number);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &BatchIterator::HasReadyBatch));
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  return batch;
}

}  // namespace kubetrain::runtime::data
