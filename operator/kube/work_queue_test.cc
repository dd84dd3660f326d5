#include "operator/kube/work_queue.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "operator/kube/backoff.h"

namespace kubetrain::kube {
namespace {

TEST(WorkQueueTest, DeduplicatesWaitingKeys) {
  WorkQueue q;
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.TryGet(), "a");
  EXPECT_EQ(q.TryGet(), "b");
  EXPECT_EQ(q.TryGet(), std::nullopt);
}

TEST(WorkQueueTest, KeyAddedWhileProcessingWaitsForDone) {
  WorkQueue q;
  q.Add("a");
  ASSERT_EQ(q.TryGet(), "a");
  q.Add("a");  // an event arrives while a worker holds "a"
  EXPECT_EQ(q.TryGet(), std::nullopt) << "a second worker must not get the same key";
  q.Done("a");
  EXPECT_EQ(q.TryGet(), "a");
  q.Done("a");
  EXPECT_EQ(q.TryGet(), std::nullopt);
}

TEST(WorkQueueTest, NoKeyIsProcessedByTwoWorkersAtOnce) {
  WorkQueue q;
  std::atomic<int> in_flight{0}, max_in_flight{0}, processed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) {
        int now = ++in_flight;
        int seen = max_in_flight.load();
        while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
        }
        ++processed;
        --in_flight;
        q.Done(*key);
      }
    });
  }
  for (int i = 0; i < 2000; ++i) q.Add("same-key");
  // Drain: once nothing is queued or processing, shut down.
  while (q.Len() > 0 || in_flight.load() > 0) std::this_thread::yield();
  q.ShutDown();
  for (auto& t : workers) t.join();
  EXPECT_EQ(max_in_flight.load(), 1);
  EXPECT_GE(processed.load(), 1);
  EXPECT_LE(processed.load(), 2000);
}

TEST(WorkQueueTest, AddAfterBecomesReadyLater) {
  WorkQueue q;
  q.AddAfter("a", absl::Milliseconds(30));
  q.AddAfter("a", absl::Seconds(60));  // the earlier delay wins
  EXPECT_EQ(q.TryGet(), std::nullopt);
  absl::Time start = absl::Now();
  EXPECT_EQ(q.Get(), "a");  // blocks until due
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(25));
}

TEST(WorkQueueTest, RateLimitedBacksOffPerKeyUntilForget) {
  WorkQueue q(
      WorkQueue::Options{.base_delay = absl::Milliseconds(5), .max_delay = absl::Seconds(1)});
  q.AddRateLimited("a");
  q.AddRateLimited("a");
  EXPECT_EQ(q.NumRequeues("a"), 2);
  EXPECT_EQ(q.NumRequeues("b"), 0);
  q.Forget("a");
  EXPECT_EQ(q.NumRequeues("a"), 0);
  EXPECT_EQ(q.Get(), "a");
}

TEST(WorkQueueTest, ShutDownReleasesWaiters) {
  WorkQueue q;
  std::thread waiter([&] { EXPECT_EQ(q.Get(), std::nullopt); });
  q.ShutDown();
  waiter.join();
}

// The wait Get reports is bounded by the time since the key became ready to
// be taken: since Add, or, for a key added while processing, since Done.
TEST(WorkQueueTest, GetReportsTheTimeAKeyWaitedReady) {
  WorkQueue queue;
  const absl::Time before_add = absl::Now();
  queue.Add("a");
  absl::Duration waited = absl::InfiniteDuration();
  ASSERT_EQ(queue.Get(&waited), "a");
  EXPECT_GE(waited, absl::ZeroDuration());
  EXPECT_LE(waited, absl::Now() - before_add);
  queue.Add("a");  // while processing: ready again only at Done
  const absl::Time before_done = absl::Now();
  queue.Done("a");
  waited = absl::InfiniteDuration();
  ASSERT_EQ(queue.Get(&waited), "a");
  EXPECT_GE(waited, absl::ZeroDuration());
  EXPECT_LE(waited, absl::Now() - before_done);
  queue.Done("a");
}

TEST(BackoffTest, ExponentialAndCapped) {
  EXPECT_EQ(ExponentialBackoff(0, absl::Milliseconds(5), absl::Seconds(1)), absl::ZeroDuration());
  EXPECT_EQ(ExponentialBackoff(1, absl::Milliseconds(5), absl::Seconds(1)), absl::Milliseconds(5));
  EXPECT_EQ(ExponentialBackoff(4, absl::Milliseconds(5), absl::Seconds(1)), absl::Milliseconds(40));
  EXPECT_EQ(ExponentialBackoff(40, absl::Milliseconds(5), absl::Seconds(1)), absl::Seconds(1));
  EXPECT_EQ(Jittered(absl::Seconds(2), 0.5, 0.0), absl::Seconds(2));
  EXPECT_EQ(Jittered(absl::Seconds(2), 0.5, 0.5), absl::Milliseconds(1500));
}

}  // namespace
}  // namespace kubetrain::kube
