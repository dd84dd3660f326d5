#include "operator/observability/metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/text_serializer.h"

namespace kubetrain::observability {

struct MetricsServer::Health {
  absl::Mutex mu;
  bool ready ABSL_GUARDED_BY(mu) = false;
  std::function<absl::Status()> liveness ABSL_GUARDED_BY(mu);
  std::function<absl::Status()> readiness ABSL_GUARDED_BY(mu);
};

// Accepted connections waiting for a worker.
struct MetricsServer::Connections {
  absl::Mutex mu;
  std::deque<int> waiting ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
};

namespace {

// A request line and headers larger than this are refused: scrapers and
// probes send a few hundred bytes.
constexpr size_t kMaxRequestBytes = 16 << 10;
// A peer that stops sending or reading mid-request does not hold a worker
// for longer than this.
constexpr int kSocketTimeoutSeconds = 5;

struct HostPort {
  std::string host;  // empty: every interface
  std::string port;
};

// "HOST:PORT", "[V6HOST]:PORT" or ":PORT"; 0.0.0.0 means every interface.
absl::StatusOr<HostPort> ParseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': want HOST:PORT or :PORT"));
  }
  int port;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': port must be 0..65535"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "0.0.0.0") host.clear();
  return HostPort{host, std::to_string(port)};
}

absl::StatusOr<int> Listen(const std::string& address, const HostPort& where) {
  addrinfo hints{};
  hints.ai_family = where.host.empty() ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(where.host.empty() ? nullptr : where.host.c_str(),
                             where.port.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': ", gai_strerror(rc)));
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
      absl::StrCat("metrics server on '", address, "': cannot listen: ", last_error));
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

void Reply(int fd, int code, absl::string_view content_type, absl::string_view body, bool head) {
  const char* reason = code == 200   ? "OK"
                       : code == 400 ? "Bad Request"
                       : code == 404 ? "Not Found"
                       : code == 405 ? "Method Not Allowed"
                       : code == 503 ? "Service Unavailable"
                                     : "Internal Server Error";
  std::string response = absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ",
                                      content_type, "\r\nContent-Length: ", body.size(),
                                      "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n");
  if (!head) response.append(body.data(), body.size());
  SendAll(fd, response);
}

constexpr absl::string_view kPlainText = "text/plain; charset=utf-8";

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

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const Options& options,
    const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables) {
  absl::StatusOr<HostPort> where = ParseAddress(options.address);
  if (!where.ok()) return where.status();
  absl::StatusOr<int> fd = Listen(options.address, *where);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->listen_fd_ = *fd;
  server->port_ = BoundPort(*fd);
  server->collectables_ = collectables;
  server->health_ = std::make_unique<Health>();
  server->connections_ = std::make_unique<Connections>();
  for (size_t i = 0; i < std::max<size_t>(1, options.threads); ++i) {
    server->workers_.emplace_back([s = server.get()] { s->WorkerLoop(); });
  }
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

MetricsServer::~MetricsServer() {
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

void MetricsServer::AcceptLoop() {
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
            absl::Condition(+[](Connections* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) {
              return c->stopping;
            }, connections_.get()),
            absl::Milliseconds(50));
      }
      continue;
    }
    connections_->waiting.push_back(fd);
  }
}

void MetricsServer::WorkerLoop() {
  while (true) {
    int fd;
    {
      absl::MutexLock lock(&connections_->mu);
      connections_->mu.Await(absl::Condition(
          +[](Connections* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) {
            return c->stopping || !c->waiting.empty();
          },
          connections_.get()));
      if (connections_->waiting.empty()) return;  // stopping, nothing left
      fd = connections_->waiting.front();
      connections_->waiting.pop_front();
    }
    Serve(fd);
    CloseAfterReply(fd);
  }
}

void MetricsServer::Serve(int fd) {
  const timeval timeout{kSocketTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));

  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos) {
    if (request.size() > kMaxRequestBytes) {
      Reply(fd, 400, kPlainText, "request too large\n", false);
      return;
    }
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed or timed out before a whole request
    request.append(buffer, static_cast<size_t>(n));
  }
  // Request line: METHOD SP TARGET SP VERSION.
  const absl::string_view line = absl::string_view(request).substr(0, request.find("\r\n"));
  const size_t first = line.find(' ');
  const size_t second = first == absl::string_view::npos ? first : line.find(' ', first + 1);
  if (second == absl::string_view::npos) {
    Reply(fd, 400, kPlainText, "malformed request line\n", false);
    return;
  }
  const absl::string_view method = line.substr(0, first);
  absl::string_view path = line.substr(first + 1, second - first - 1);
  path = path.substr(0, path.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    Reply(fd, 405, kPlainText, "only GET and HEAD\n", false);
    return;
  }

  if (path == "/metrics") {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& weak : collectables_) {
      if (std::shared_ptr<prometheus::Collectable> collectable = weak.lock()) {
        std::vector<prometheus::MetricFamily> collected = collectable->Collect();
        families.insert(families.end(), std::make_move_iterator(collected.begin()),
                        std::make_move_iterator(collected.end()));
      }
    }
    Reply(fd, 200, "text/plain; version=0.0.4; charset=utf-8",
          prometheus::TextSerializer().Serialize(families), head);
    return;
  }
  const bool live = path == "/healthz" || path == "/livez";
  if (!live && path != "/readyz") {
    Reply(fd, 404, kPlainText, "not found\n", head);
    return;
  }
  bool ready;
  std::function<absl::Status()> check;
  {
    absl::MutexLock lock(&health_->mu);
    ready = health_->ready;
    check = live ? health_->liveness : health_->readiness;
  }
  if (!live && !ready) {
    Reply(fd, 503, kPlainText, "not ready\n", head);
    return;
  }
  const absl::Status status = check ? check() : absl::OkStatus();
  if (!status.ok()) {
    Reply(fd, live ? 500 : 503, kPlainText, absl::StrCat(status.ToString(), "\n"), head);
    return;
  }
  Reply(fd, 200, kPlainText, "ok\n", head);
}

void MetricsServer::SetReady(bool ready) {
  absl::MutexLock lock(&health_->mu);
  health_->ready = ready;
}

void MetricsServer::SetLivenessCheck(std::function<absl::Status()> check) {
  absl::MutexLock lock(&health_->mu);
  health_->liveness = std::move(check);
}

void MetricsServer::SetReadinessCheck(std::function<absl::Status()> check) {
  absl::MutexLock lock(&health_->mu);
  health_->readiness = std::move(check);
}

}  // namespace kubetrain::observability
