#include "operator/kube/slow_start.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::kube {
namespace {

using ::testing::ElementsAre;

// Which indices each batch called, from the calls' start times: a call of
// the next batch starts only after every call of this one has returned.
struct Recorder {
  absl::Mutex mu;
  std::vector<size_t> order;
  std::atomic<int> running{0};
  std::atomic<int> peak{0};

  // `together`: how many calls this one waits to see running at once (its
  // batch) before it returns, for at most 3 s.
  bool Call(size_t index, bool succeed, int together = 1) {
    const int now = ++running;
    int seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(3);
    while (peak.load() < together && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    {
      absl::MutexLock lock(&mu);
      order.push_back(index);
    }
    --running;
    return succeed;
  }
};

TEST(SlowStartBatchesTest, BatchesDoubleAndEveryIndexIsCalledOnce) {
  for (size_t n : {0u, 1u, 2u, 3u, 7u, 16u, 31u}) {
    SCOPED_TRACE(n);
    Recorder recorder;
    const size_t called = SlowStartBatches(n, [&](size_t i) { return recorder.Call(i, true); });
    EXPECT_EQ(called, n);
    std::vector<size_t> sorted = recorder.order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<size_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = i;
    EXPECT_EQ(sorted, want);
  }
}

TEST(SlowStartBatchesTest, TheCallsOfABatchRunTogether) {
  Recorder recorder;
  // Batches 1, 2, 4, 8 (indices 0, 1-2, 3-6, 7-14): the last eight run at
  // once. Each call waits for its batch; called one by one, they would not
  // get there.
  auto batch_of = [](size_t i) {
    int size = 1;
    while (static_cast<size_t>(2 * size) <= i + 1) size *= 2;
    return size;
  };
  EXPECT_EQ(SlowStartBatches(15, [&](size_t i) { return recorder.Call(i, true, batch_of(i)); }),
            15u);
  EXPECT_EQ(recorder.peak.load(), 8);
}

TEST(SlowStartBatchesTest, ABatchWithAFailureIsTheLast) {
  // Index 4 fails: batches {0}, {1, 2}, {3, 4, 5, 6} run; 7.. are not called.
  Recorder recorder;
  const size_t called = SlowStartBatches(20, [&](size_t i) { return recorder.Call(i, i != 4); });
  EXPECT_EQ(called, 7u);
  std::vector<size_t> sorted = recorder.order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_THAT(sorted, ElementsAre(0, 1, 2, 3, 4, 5, 6));
  // The very first call failing costs one call.
  Recorder first;
  EXPECT_EQ(SlowStartBatches(20, [&](size_t i) { return first.Call(i, false); }), 1u);
}

TEST(SlowStartBatchesTest, ALargerFirstBatch) {
  Recorder recorder;
  // Batches 4 (indices 0-3), 2 (what is left).
  EXPECT_EQ(SlowStartBatches(
                6, [&](size_t i) { return recorder.Call(i, true, i < 4 ? 4 : 1); }, 4),
            6u);
  EXPECT_EQ(recorder.peak.load(), 4);
}

}  // namespace
}  // namespace kubetrain::kube
