#include "common/testing/wait_until.h"

#include "absl/time/clock.h"

namespace kubetrain::test_support {

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout, absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(poll);
  }
  return done();
}

}  // namespace kubetrain::test_support
