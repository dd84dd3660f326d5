#include "common/observability/http_get.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kubetrain::observability {
namespace {

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                                     absl::Duration timeout) {
  return HttpExchange(host, port,
                      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, ":", port,
                                   "\r\nAccept: */*\r\nConnection: close\r\n\r\n"),
                      timeout);
}

absl::StatusOr<HttpResponse> HttpExchange(const std::string& host, int port,
                                          const std::string& request, absl::Duration timeout) {
  // "http://127.0.0.1:8080: GET /metrics HTTP/1.0", for messages.
  const std::string where =
      absl::StrCat("http://", host, ":", port, ": ", request.substr(0, request.find("\r\n")));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat(where, ": resolve: ", gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);

  const timeval tv = absl::ToTimeval(timeout);
  std::string last_error = "no address";
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    Socket socket(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
    if (socket.fd() < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    setsockopt(socket.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(socket.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(socket.fd(), a->ai_addr, a->ai_addrlen) != 0) {
      last_error = absl::StrCat("connect: ", std::strerror(errno));
      continue;
    }
    size_t sent = 0;
    while (sent < request.size()) {
      ssize_t n = send(socket.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        return absl::UnavailableError(absl::StrCat(where, ": send: ", std::strerror(errno)));
      }
      sent += static_cast<size_t>(n);
    }
    std::string reply;
    char buffer[16384];
    for (;;) {
      ssize_t n = recv(socket.fd(), buffer, sizeof(buffer), 0);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(absl::StrCat(where, ": recv: ", std::strerror(errno)));
      }
      reply.append(buffer, static_cast<size_t>(n));
    }

    const size_t head_end = reply.find("\r\n\r\n");
    if (head_end == std::string::npos) {
      return absl::InternalError(
          absl::StrCat(where, ": reply has no header end (", reply.size(), " bytes)"));
    }
    std::vector<std::string> lines = absl::StrSplit(reply.substr(0, head_end), "\r\n");
    std::vector<std::string> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
    HttpResponse response;
    if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/") ||
        !absl::SimpleAtoi(status_line[1], &response.status)) {
      return absl::InternalError(absl::StrCat(where, ": bad status line '", lines[0], "'"));
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      response.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    response.body = reply.substr(head_end + 4);
    return response;
  }
  return absl::UnavailableError(absl::StrCat(where, ": ", last_error));
}

}  // namespace kubetrain::observability
