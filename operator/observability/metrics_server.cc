#include "operator/observability/metrics_server.h"

#include <CivetServer.h>
#include <civetweb.h>

#include <exception>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/exposer.h"

namespace kubetrain::observability {

struct MetricsServer::Health {
  absl::Mutex mu;
  bool ready ABSL_GUARDED_BY(mu) = false;
  std::function<absl::Status()> liveness ABSL_GUARDED_BY(mu);
  std::function<absl::Status()> readiness ABSL_GUARDED_BY(mu);
};

namespace {

// civetweb's callbacks carry no user pointer of ours (the Exposer owns the
// CivetServer), so the callback finds its server's health state by the local
// port the request arrived on. One MetricsServer per port per process.
struct HealthByPort {
  absl::Mutex mu;
  std::map<int, std::shared_ptr<MetricsServer::Health>> servers ABSL_GUARDED_BY(mu);
};

HealthByPort& Registry() {
  static HealthByPort* registry = new HealthByPort;  // never destroyed: used at exit
  return *registry;
}

void Reply(mg_connection* conn, int code, const std::string& body, bool head) {
  const char* reason = code == 200   ? "OK"
                       : code == 503 ? "Service Unavailable"
                                     : "Internal Server Error";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            code, reason, body.size());
  if (!head) mg_write(conn, body.data(), body.size());
}

// Returns 1 when it answered the request, 0 to let civetweb (the Exposer's
// /metrics handler, or its 404) take it.
int BeginRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr) return 0;
  const std::string path = info->local_uri;
  const bool live = path == "/healthz" || path == "/livez";
  if (!live && path != "/readyz") return 0;

  std::shared_ptr<MetricsServer::Health> health;
  {
    HealthByPort& registry = Registry();
    absl::MutexLock lock(&registry.mu);
    auto it = registry.servers.find(info->server_port);
    if (it != registry.servers.end()) health = it->second;
  }
  const bool head = info->request_method != nullptr && std::string(info->request_method) == "HEAD";
  if (health == nullptr) {
    // Start() has not registered the port yet: not ready to say anything.
    Reply(conn, 503, "starting\n", head);
    return 1;
  }
  bool ready;
  std::function<absl::Status()> check;
  {
    absl::MutexLock lock(&health->mu);
    ready = health->ready;
    check = live ? health->liveness : health->readiness;
  }
  if (!live && !ready) {
    Reply(conn, 503, "not ready\n", head);
    return 1;
  }
  absl::Status status = check ? check() : absl::OkStatus();
  if (!status.ok()) {
    Reply(conn, live ? 500 : 503, absl::StrCat(status.ToString(), "\n"), head);
    return 1;
  }
  Reply(conn, 200, "ok\n", head);
  return 1;
}

const CivetCallbacks& Callbacks() {
  static const CivetCallbacks callbacks = [] {
    CivetCallbacks c;  // zeroes every mg_callbacks field
    c.begin_request = &BeginRequest;
    return c;
  }();
  return callbacks;
}

// civetweb wants "HOST:PORT" for IPv4, "[HOST]:PORT" for IPv6, "PORT" for all
// interfaces.
absl::StatusOr<std::string> ListeningPorts(const std::string& address) {
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
  if (host.empty() || host == "0.0.0.0") return std::to_string(port);
  return absl::StrCat(host, ":", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const Options& options,
    const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables) {
  auto ports = ListeningPorts(options.address);
  if (!ports.ok()) return ports.status();
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->health_ = std::make_shared<Health>();
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", *ports, "num_threads",
                                 std::to_string(std::max<size_t>(1, options.threads))},
        &Callbacks());
  } catch (const std::exception& e) {
    // CivetServer throws when it cannot bind.
    return absl::UnavailableError(
        absl::StrCat("metrics server on '", options.address, "': ", e.what()));
  }
  std::vector<int> bound = server->exposer_->GetListeningPorts();
  if (bound.empty()) {
    return absl::UnavailableError(
        absl::StrCat("metrics server on '", options.address, "': no listening port"));
  }
  server->port_ = bound.front();
  {
    HealthByPort& registry = Registry();
    absl::MutexLock lock(&registry.mu);
    if (!registry.servers.emplace(server->port_, server->health_).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("metrics server on '", options.address, "': port ", server->port_,
                       " already served by another MetricsServer in this process"));
    }
  }
  for (const auto& collectable : collectables) server->exposer_->RegisterCollectable(collectable);
  return server;
}

MetricsServer::~MetricsServer() {
  // Stop serving (joins civetweb's workers) before the health state goes.
  exposer_.reset();
  if (port_ != 0) {
    HealthByPort& registry = Registry();
    absl::MutexLock lock(&registry.mu);
    auto it = registry.servers.find(port_);
    if (it != registry.servers.end() && it->second == health_) registry.servers.erase(it);
  }
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
