#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kubetrain::kube {

// Client-side QPS/burst limit (client-go's --kube-api-qps/--kube-api-burst):
// a token bucket holding at most `burst` tokens, refilled at `qps` per second.
// qps <= 0 disables the limit. Thread-safe.
class TokenBucket {
 public:
  TokenBucket(double qps, int burst);

  // Takes one token at time `now` and returns how long the caller must wait
  // before using it (zero when a token was available). Tokens are reserved in
  // call order, so waiting callers are served first come first served.
  absl::Duration Reserve(absl::Time now);

  // Reserve(absl::Now()) and sleep the returned time.
  void Wait();

 private:
  const double qps_;
  const double burst_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace kubetrain::kube
