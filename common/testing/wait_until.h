#pragma once

#include <functional>

#include "absl/time/time.h"

namespace kubetrain::test_support {

// Polls `done` every `poll` until it holds or `timeout` passes: a test waits
// for a condition, never for a fixed delay. Returns the last value of
// `done`, which is called once more at the deadline.
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(60),
               absl::Duration poll = absl::Milliseconds(20));

}  // namespace kubetrain::test_support
