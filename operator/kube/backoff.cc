#include "operator/kube/backoff.h"

#include <algorithm>

namespace kubetrain::kube {

absl::Duration ExponentialBackoff(int failures, absl::Duration base, absl::Duration max) {
  if (failures <= 0) return absl::ZeroDuration();
  absl::Duration d = base;
  for (int i = 1; i < failures && d < max; ++i) d *= 2;
  return std::min(d, max);
}

absl::Duration Jittered(absl::Duration delay, double jitter, double random01) {
  jitter = std::clamp(jitter, 0.0, 1.0);
  random01 = std::clamp(random01, 0.0, 1.0);
  return delay * (1.0 - jitter * random01);
}

}  // namespace kubetrain::kube
