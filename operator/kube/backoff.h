#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace kubetrain::kube {

// base * 2^(failures-1), capped at `max`; zero for failures <= 0.
absl::Duration ExponentialBackoff(int failures, absl::Duration base, absl::Duration max);

// `delay` scaled by a factor in [1 - jitter, 1] taken from `random01` (a
// number in [0, 1)), so that many clients reconnecting after the same outage
// spread out instead of arriving together.
absl::Duration Jittered(absl::Duration delay, double jitter, double random01);

}  // namespace kubetrain::kube
