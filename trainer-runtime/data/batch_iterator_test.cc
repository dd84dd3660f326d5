#include "trainer-runtime/data/batch_iterator.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::runtime::data {
namespace {

using ::testing::HasSubstr;

// Example i has features {i, -i} and label i % 7, so a batch shows which
// examples it holds.
std::shared_ptr<const Dataset> CountingDataset(int64_t n) {
  auto d = std::make_shared<Dataset>();
  d->example_shape = {2};
  d->num_examples = n;
  for (int64_t i = 0; i < n; ++i) {
    d->features.push_back(static_cast<float>(i));
    d->features.push_back(-static_cast<float>(i));
    d->labels.push_back(static_cast<int32_t>(i % 7));
  }
  d->num_classes = 7;
  return d;
}

void ExpectSameBatch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.example_indices, b.example_indices);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
}

TEST(BatchIteratorTest, BatchesCarryTheRowsOfTheirExamples) {
  auto data = CountingDataset(50);
  BatchIterator it(data, {.batch_size = 8, .seed = 3});
  for (int k = 0; k < 20; ++k) {
    const Batch b = it.Next();
    ASSERT_EQ(b.index, k);
    ASSERT_EQ(b.features.size(), static_cast<size_t>(2 * b.size));
    ASSERT_EQ(b.labels.size(), static_cast<size_t>(b.size));
    for (int64_t i = 0; i < b.size; ++i) {
      const int64_t e = b.example_indices[i];
      EXPECT_EQ(b.features[2 * i], static_cast<float>(e));
      EXPECT_EQ(b.features[2 * i + 1], -static_cast<float>(e));
      EXPECT_EQ(b.labels[i], e % 7);
    }
  }
}

TEST(BatchIteratorTest, StartBatchKEqualsTheKthBatchOfAFreshIterator) {
  auto data = CountingDataset(103);
  const BatchOptions options{.batch_size = 10, .seed = 42, .shard_index = 1, .shard_count = 2};
  BatchIterator fresh(data, options);
  std::vector<Batch> reference;
  for (int k = 0; k < 40; ++k) reference.push_back(fresh.Next());
  ASSERT_EQ(fresh.batches_per_epoch(), 6);  // 51 examples in shard 1
  for (int64_t start : {1, 5, 6, 7, 23, 35}) {
    BatchIterator resumed(data, options, start);
    for (int64_t k = start; k < 40; ++k) {
      SCOPED_TRACE(testing::Message() << "start " << start << " batch " << k);
      ExpectSameBatch(resumed.Next(), reference[k]);
    }
  }
}

TEST(BatchIteratorTest, PrefetchDepthDoesNotChangeTheBatches) {
  auto data = CountingDataset(64);
  BatchIterator sync(data, {.batch_size = 5, .seed = 9, .prefetch = 0});
  BatchIterator deep(data, {.batch_size = 5, .seed = 9, .prefetch = 7});
  for (int k = 0; k < 50; ++k) ExpectSameBatch(sync.Next(), deep.Next());
}

TEST(BatchIteratorTest, ShardsAreDisjointAndCoverTheDataset) {
  const int64_t n = 100;
  auto data = CountingDataset(n);
  for (int shards : {1, 3, 4, 7}) {
    std::vector<int> seen(n, 0);
    for (int s = 0; s < shards; ++s) {
      BatchIterator it(data, {.batch_size = 6, .seed = 1, .shard_index = s, .shard_count = shards});
      for (int64_t b = 0; b < it.batches_per_epoch(); ++b) {
        const Batch batch = it.Next();
        EXPECT_EQ(batch.epoch, 0);
        for (int64_t e : batch.example_indices) {
          EXPECT_EQ(e % shards, s);
          ++seen[e];
        }
      }
    }
    for (int64_t e = 0; e < n; ++e)
      EXPECT_EQ(seen[e], 1) << "example " << e << ", shards " << shards;
  }
}

TEST(BatchIteratorTest, EpochsAreReshuffledPermutationsOfTheShard) {
  auto data = CountingDataset(40);
  BatchIterator it(data, {.batch_size = 40, .seed = 5});
  ASSERT_EQ(it.batches_per_epoch(), 1);
  const Batch e0 = it.Next();
  const Batch e1 = it.Next();
  EXPECT_EQ(e0.epoch, 0);
  EXPECT_EQ(e1.epoch, 1);
  EXPECT_NE(e0.example_indices, e1.example_indices);
  std::vector<int64_t> sorted0 = e0.example_indices, sorted1 = e1.example_indices;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  EXPECT_EQ(sorted0, sorted1);
  EXPECT_EQ(std::set<int64_t>(sorted0.begin(), sorted0.end()).size(), 40u);
}

TEST(BatchIteratorTest, SeedChangesTheOrderAndNoShuffleKeepsIt) {
  auto data = CountingDataset(30);
  BatchIterator a(data, {.batch_size = 30, .seed = 1});
  BatchIterator b(data, {.batch_size = 30, .seed = 2});
  EXPECT_NE(a.Next().example_indices, b.Next().example_indices);
  BatchIterator plain(data,
                      {.batch_size = 30, .shuffle = false, .shard_index = 2, .shard_count = 3});
  const Batch p = plain.Next();
  std::vector<int64_t> expected;
  for (int64_t i = 2; i < 30; i += 3) expected.push_back(i);
  EXPECT_EQ(p.example_indices, expected);
}

TEST(BatchIteratorTest, RemainderIsKeptOrDropped) {
  auto data = CountingDataset(23);
  BatchIterator keep(data, {.batch_size = 5});
  ASSERT_EQ(keep.batches_per_epoch(), 5);
  std::vector<int64_t> sizes;
  for (int k = 0; k < 6; ++k) sizes.push_back(keep.Next().size);
  EXPECT_EQ(sizes, (std::vector<int64_t>{5, 5, 5, 5, 3, 5}));

  BatchIterator drop(data, {.batch_size = 5, .drop_remainder = true});
  ASSERT_EQ(drop.batches_per_epoch(), 4);
  std::set<int64_t> epoch0;
  for (int k = 0; k < 4; ++k) {
    const Batch b = drop.Next();
    EXPECT_EQ(b.size, 5);
    epoch0.insert(b.example_indices.begin(), b.example_indices.end());
  }
  EXPECT_EQ(epoch0.size(), 20u);
  EXPECT_EQ(drop.Next().epoch, 1);
}

TEST(BatchIteratorTest, CreateRejectsBadOptions) {
  auto data = CountingDataset(10);
  struct Case {
    BatchOptions options;
    const char* message;
  };
  const Case cases[] = {
      {{.batch_size = 0}, "batch_size must be positive, got 0"},
      {{.shard_index = 3, .shard_count = 3}, "shard_index 3 is outside [0, 3)"},
      {{.shard_count = 0}, "shard_count must be positive"},
      {{.shard_index = 11, .shard_count = 12},
       "shard 11 of 12 is empty: the dataset has 10 examples"},
      {{.batch_size = 6, .shard_index = 0, .shard_count = 2, .drop_remainder = true},
       "shard 0 of 2 has 5 examples, fewer than batch_size 6 with drop_remainder"},
  };
  for (const Case& c : cases) {
    auto it = BatchIterator::Create(data, c.options);
    EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(it.status().message(), HasSubstr(c.message));
  }
  EXPECT_TRUE(BatchIterator::Create(data, {.batch_size = 3}).ok());
}

TEST(BatchIteratorTest, InvalidOptionsGiveEmptyBatchesNotACrash) {
  auto data = CountingDataset(10);
  BatchIterator it(data, {.batch_size = -1});
  EXPECT_EQ(it.batches_per_epoch(), 0);
  EXPECT_EQ(it.Next().size, 0);
}

TEST(BatchIteratorTest, DestroyingWithAFullPrefetchQueueReturns) {
  auto data = CountingDataset(1000);
  const BatchOptions options{.batch_size = 7, .prefetch = 3};
  BatchIterator reference(data, {.batch_size = 7, .prefetch = 0});
  const Batch first = reference.Next();
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE(i);
    auto it = std::make_unique<BatchIterator>(data, options);
    // Half of them are destroyed before anything was consumed, half after
    // one batch, which is the batch an iterator without prefetching builds.
    if (i % 2 == 0) ExpectSameBatch(it->Next(), first);
    // Destroyed on another thread, so that a destructor that waits forever
    // on the full queue fails here instead of hanging the test binary.
    auto destroyed = std::make_shared<std::promise<void>>();
    std::future<void> done = destroyed->get_future();
    std::thread([it = std::move(it), destroyed]() mutable {
      it.reset();
      destroyed->set_value();
    }).detach();
    ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready)
        << "~BatchIterator did not return with " << options.prefetch << " batches prefetched";
  }
}

TEST(BatchPlanTest, BatchIndicesMatchTheIterator) {
  auto data = CountingDataset(37);
  const BatchOptions options{.batch_size = 4, .seed = 77, .shard_index = 0, .shard_count = 2};
  BatchPlan plan(37, options);
  BatchIterator it(data, options);
  for (int64_t k = 0; k < 30; ++k) EXPECT_EQ(it.Next().example_indices, plan.BatchIndices(k));
}

}  // namespace
}  // namespace kubetrain::runtime::data
