#pragma once

#include <cstddef>
#include <functional>

namespace kubetrain::kube {

// The first batch's size in SlowStartBatches (Kubernetes' Job and ReplicaSet
// controllers start with 1 too).
inline constexpr size_t kSlowStartInitialBatch = 1;

// Calls `call(i)` for i = 0 .. n-1 in batches of growing size, the calls of
// one batch concurrently (each on a thread of its own, the last on the
// caller's; the threads are kept for later batches), batch after batch: 1, 2, 4, 8...
// (each twice the last, the last one what is left), as Kubernetes' own
// controllers create pods ("slow start"). `call` returns whether it
// succeeded; a batch with a failure is the last: what comes after it is not
// called, so a request the server refuses for every object (a quota, an
// admission rule) costs a few calls, not one per object. Returns how many
// were called (the failed ones included). `call` must be thread-safe.
size_t SlowStartBatches(size_t n, const std::function<bool(size_t index)>& call,
                        size_t initial_batch = kSlowStartInitialBatch);

}  // namespace kubetrain::kube
