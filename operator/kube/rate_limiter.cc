#include "operator/kube/rate_limiter.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace kubetrain::kube {

TokenBucket::TokenBucket(double qps, int burst)
    : qps_(qps), burst_(std::max(1, burst)), tokens_(std::max(1, burst)) {}

absl::Duration TokenBucket::Reserve(absl::Time now) {
  if (qps_ <= 0) return absl::ZeroDuration();
  absl::MutexLock lock(&mu_);
  if (last_ != absl::InfinitePast() && now > last_) {
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
  }
  if (last_ == absl::InfinitePast() || now > last_) last_ = now;
  tokens_ -= 1;  // may go negative: the debt is paid by waiting
  if (tokens_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

void TokenBucket::Wait() {
  absl::Duration wait = Reserve(absl::Now());
  if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
}

}  // namespace kubetrain::kube
