#pragma once

#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "trainer-runtime/dist/transport.h"

namespace kubetrain::dist {

// N ranks in one process (one thread each, in tests), connected through
// unbounded in-memory mailboxes: Send copies and never waits.
//
// The hub owns the transports; it must outlive every thread using them.
// Kill(rank) simulates a crashed peer: every later or pending Send/Recv
// involving that rank fails with Unavailable.
class InProcessHub {
 public:
  explicit InProcessHub(int size);
  ~InProcessHub();

  int size() const { return static_cast<int>(transports_.size()); }
  Transport& transport(int rank);

  void Kill(int rank);

 private:
  class RankTransport;
  friend class RankTransport;

  // (from, to, tag) -> messages in send order.
  using Key = std::tuple<int, int, Tag>;

  absl::Mutex mu_;
  std::map<Key, std::deque<std::vector<std::byte>>> mailboxes_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> dead_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<RankTransport>> transports_;
};

}  // namespace kubetrain::dist
