#include "common/observability/http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kubetrain::observability {

// Accepted connections waiting for a worker.
struct HttpServer::Connections {
  absl::Mutex mu;
  std::deque<int> waiting ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
};

namespace {

// A request line and headers larger than this are refused: browsers,
// scrapers and probes send a few hundred bytes.
constexpr size_t kMaxRequestBytes = 16 << 10;
// A peer that stops sending or reading mid-request does not hold a worker
// for longer than this.
constexpr int kSocketTimeoutSeconds = 5;

struct HostPort {
  std::string host;  // empty: every interface
  std::string port;
};

// "HOST:PORT", "[V6HOST]:PORT" or ":PORT"; 0.0.0.0 means every interface.
absl::StatusOr<HostPort> ParseAddress(const std::string& name, const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " address '", address, "': want HOST:PORT or :PORT"));
  }
  int port;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " address '", address, "': port must be 0..65535"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "0.0.0.0") host.clear();
  return HostPort{host, std::to_string(port)};
}

absl::StatusOr<int> Listen(const std::string& name, const std::string& address,
                           const HostPort& where) {
  addrinfo hints{};
  hints.ai_family = where.host.empty() ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(where.host.empty() ? nullptr : where.host.c_str(), where.port.c_str(),
                             &hints, &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " address '", address, "': ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      freeaddrinfo(found);
      return fd;
    }
    last_error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat(name, " server on '", address, "': cannot listen: ", last_error));
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t length = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

void SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t sent = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return;  // the peer went away or stalled past the timeout
    data.remove_prefix(static_cast<size_t>(sent));
  }
}

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    default:
      return code < 500 ? "Client Error" : "Internal Server Error";
  }
}

void Send(int fd, const HttpReply& reply, bool head) {
  std::string response = absl::StrCat("HTTP/1.1 ", reply.status, " ", Reason(reply.status),
                                      "\r\nContent-Type: ", reply.content_type,
                                      "\r\nContent-Length: ", reply.body.size(), "\r\n");
  bool cache_control = false;
  for (const auto& [name, value] : reply.headers) {
    absl::StrAppend(&response, name, ": ", value, "\r\n");
    cache_control = cache_control || absl::EqualsIgnoreCase(name, "Cache-Control");
  }
  if (!cache_control) response += "Cache-Control: no-store\r\n";
  response += "Connection: close\r\n\r\n";
  if (!head) response += reply.body;
  SendAll(fd, response);
}

HttpReply PlainReply(int status, std::string body) {
  HttpReply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

// Closing a socket with unread input makes the kernel send a reset, which can
// destroy the reply before the client reads it (a refused oversized request,
// say). So: end our side, drain what the client still sends for a moment,
// then close.
void CloseAfterReply(int fd) {
  shutdown(fd, SHUT_WR);
  const timeval linger{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &linger, sizeof(linger));
  char buffer[4096];
  size_t drained = 0;
  while (drained < (1 << 20)) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  close(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options,
                                                              Handler handler) {
  absl::StatusOr<HostPort> where = ParseAddress(options.name, options.address);
  if (!where.ok()) return where.status();
  absl::StatusOr<int> fd = Listen(options.name, options.address, *where);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->handler_ = std::move(handler);
  server->listen_fd_ = *fd;
  server->port_ = BoundPort(*fd);
  server->host_ = where->host;
  server->connections_ = std::make_unique<Connections>();
  for (size_t i = 0; i < std::max<size_t>(1, options.threads); ++i) {
    server->workers_.emplace_back([s = server.get()] { s->WorkerLoop(); });
  }
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

HttpServer::~HttpServer() {
  {
    absl::MutexLock lock(&connections_->mu);
    connections_->stopping = true;
  }
  // Wakes the blocked accept(); no new connection is taken after this.
  shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  close(listen_fd_);
  // Workers answer what was already accepted, then leave.
  for (std::thread& worker : workers_) worker.join();
}

void HttpServer::AcceptLoop() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    const int error = errno;
    absl::MutexLock lock(&connections_->mu);
    if (connections_->stopping) {
      if (fd >= 0) close(fd);
      return;
    }
    if (fd < 0) {
      // EINTR or a connection reset before it was taken: try again at once.
      // Anything else (out of descriptors): pause rather than spin.
      if (error != EINTR && error != ECONNABORTED) {
        connections_->mu.AwaitWithTimeout(
            absl::Condition(
                +[](Connections* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) { return c->stopping; },
                connections_.get()),
            absl::Milliseconds(50));
      }
      continue;
    }
    connections_->waiting.push_back(fd);
  }
}

void HttpServer::WorkerLoop() {
  while (true) {
    int fd;
    {
      absl::MutexLock lock(&connections_->mu);
      connections_->mu.Await(absl::Condition(
          +[](Connections* c)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) { return c->stopping || !c->waiting.empty(); },
          connections_.get()));
      if (connections_->waiting.empty()) return;  // stopping, nothing left
      fd = connections_->waiting.front();
      connections_->waiting.pop_front();
    }
    Serve(fd);
    CloseAfterReply(fd);
  }
}

void HttpServer::Serve(int fd) {
  const timeval timeout{kSocketTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));

  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos) {
    if (request.size() > kMaxRequestBytes) {
      Send(fd, PlainReply(400, "request too large\n"), false);
      return;
    }
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed or timed out before a whole request
    request.append(buffer, static_cast<size_t>(n));
  }
  const absl::string_view head_block =
      absl::string_view(request).substr(0, request.find("\r\n\r\n"));
  std::vector<absl::string_view> lines = absl::StrSplit(head_block, "\r\n");
  // Request line: METHOD SP TARGET SP VERSION.
  const absl::string_view line = lines[0];
  const size_t first = line.find(' ');
  const size_t second = first == absl::string_view::npos ? first : line.find(' ', first + 1);
  if (second == absl::string_view::npos) {
    Send(fd, PlainReply(400, "malformed request line\n"), false);
    return;
  }
  HttpRequest parsed;
  parsed.method = std::string(line.substr(0, first));
  const absl::string_view target = line.substr(first + 1, second - first - 1);
  const size_t question = target.find('?');
  parsed.path = std::string(target.substr(0, question));
  if (question != absl::string_view::npos) parsed.query = std::string(target.substr(question + 1));
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) {
      Send(fd, PlainReply(400, "malformed header line\n"), false);
      return;
    }
    parsed.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  const bool head = parsed.method == "HEAD";
  if (parsed.method != "GET" && !head) {
    HttpReply refused = PlainReply(405, "only GET and HEAD\n");
    refused.headers.emplace_back("Allow", "GET, HEAD");
    Send(fd, refused, false);
    return;
  }
  Send(fd, handler_(parsed), head);
}

}  // namespace kubetrain::observability
