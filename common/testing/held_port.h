#pragma once

#include "absl/status/statusor.h"

namespace kubetrain::test_support {

// A loopback port bound and held, never listening, for as long as this
// lives: a dial to it is refused at once, and no other process (another test
// running beside this one included) can serve on it. Fixed low ports are
// not: two tests that both take port 2 talk to each other.
class HeldPort {
 public:
  static absl::StatusOr<HeldPort> Take();

  HeldPort(HeldPort&& other) noexcept;
  HeldPort& operator=(HeldPort&& other) noexcept;
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  ~HeldPort();

  int port() const { return port_; }
  // "127.0.0.1:PORT".
  std::string address() const;

  // Lets go of the port so a process the test starts can serve on it;
  // returns it.
  int Release();

 private:
  HeldPort(int fd, int port) : fd_(fd), port_(port) {}

  int fd_ = -1;
  int port_ = 0;
};

}  // namespace kubetrain::test_support
