#include "operator/kube/slow_start.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace kubetrain::kube {

size_t SlowStartBatches(size_t n, const std::function<bool(size_t index)>& call,
                        size_t initial_batch) {
  size_t called = 0;
  for (size_t batch = std::max<size_t>(initial_batch, 1); called < n; batch *= 2) {
    const size_t size = std::min(batch, n - called);
    std::atomic<bool> failed{false};
    if (size == 1) {
      failed = !call(called);  // no thread for one call
    } else {
      std::vector<std::thread> threads;
      threads.reserve(size);
      for (size_t i = called; i < called + size; ++i) {
        threads.emplace_back([&call, &failed, i] {
          if (!call(i)) failed = true;
        });
      }
      for (std::thread& t : threads) t.join();
    }
    called += size;
    if (failed) break;
  }
  return called;
}

}  // namespace kubetrain::kube
