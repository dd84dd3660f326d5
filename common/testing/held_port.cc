#include "common/testing/held_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kubetrain::test_support {

absl::StatusOr<HeldPort> HeldPort::Take() {
  // No SO_REUSEADDR or SO_REUSEPORT: a server that sets them still cannot
  // bind beside this socket.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string message = std::strerror(errno);
    close(fd);
    return absl::UnavailableError("cannot bind a port on 127.0.0.1: " + message);
  }
  return HeldPort(fd, ntohs(addr.sin_port));
}

HeldPort::HeldPort(HeldPort&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}

HeldPort& HeldPort::operator=(HeldPort&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

HeldPort::~HeldPort() { Release(); }

std::string HeldPort::address() const { return absl::StrCat("127.0.0.1:", port_); }

int HeldPort::Release() {
  if (fd_ >= 0) close(std::exchange(fd_, -1));
  return port_;
}

}  // namespace kubetrain::test_support
