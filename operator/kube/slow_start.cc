#include "operator/kube/slow_start.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace kubetrain::kube {
namespace {

// Threads kept for the batches' calls. A batch's calls are API requests a few
// milliseconds long, made by every reconcile; a thread started and ended for
// each one cost the operator more than the request itself (clone, a fresh
// stack, and an allocator cache that never warms up: a new thread's first
// allocations all go to the shared arena). Threads here stay for the next
// batch and end after a minute without work.
class CallThreads {
 public:
  static CallThreads& Get() {
    // Never destroyed: its threads may still wait for work when the process
    // ends.
    static auto* threads = new CallThreads();
    return *threads;
  }

  // Runs `task` on a thread of its own at once: an idle thread takes it, or
  // a new one is started when every thread is busy, so the calls of a batch
  // always run together (one may wait on another; none waits for a thread).
  void Run(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    if (idle_ >= tasks_.size()) {
      wake_.notify_one();
      return;
    }
    std::thread([this] { Serve(); }).detach();
  }

 private:
  static constexpr std::chrono::seconds kIdleLife{60};

  void Serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      while (tasks_.empty()) {
        ++idle_;
        const bool woken = wake_.wait_for(lock, kIdleLife, [this] { return !tasks_.empty(); });
        --idle_;
        if (!woken) return;
      }
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  size_t idle_ = 0;  // threads waiting in Serve
};

}  // namespace

size_t SlowStartBatches(size_t n, const std::function<bool(size_t index)>& call,
                        size_t initial_batch) {
  size_t called = 0;
  for (size_t batch = std::max<size_t>(initial_batch, 1); called < n; batch *= 2) {
    const size_t size = std::min(batch, n - called);
    std::atomic<bool> failed{false};
    if (size == 1) {
      failed = !call(called);  // no other thread for one call
    } else {
      // The other calls go to kept threads; the last one runs here.
      std::mutex mu;
      std::condition_variable all_done;
      size_t done = 0;
      for (size_t i = called; i + 1 < called + size; ++i) {
        CallThreads::Get().Run([&, i] {
          const bool ok = call(i);
          std::lock_guard<std::mutex> lock(mu);
          if (!ok) failed = true;
          if (++done == size - 1) all_done.notify_one();
        });
      }
      if (!call(called + size - 1)) failed = true;
      std::unique_lock<std::mutex> lock(mu);
      all_done.wait(lock, [&] { return done == size - 1; });
    }
    called += size;
    if (failed) break;
  }
  return called;
}

}  // namespace kubetrain::kube
