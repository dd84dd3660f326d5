#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/observability/http_server.h"
#include "prometheus/collectable.h"

namespace kubetrain::observability {

// The HTTP endpoint of a kubetrain process:
//
//   GET /metrics  the registries, Prometheus text format
//   GET /healthz  200 "ok" while the liveness check passes, else 500 + reason
//   GET /readyz   200 "ok" once ready and while the readiness check passes,
//                 else 503 + reason
//
// All three share one port, served by a small HTTP/1.1 server of our own
// (HttpServer: one request per connection, identity encoding, GET and HEAD
// only) with `threads` workers on ordinary thread stacks. prometheus-cpp's Exposer is
// not used because civetweb, under it, starts its workers with fixed 100 KiB
// stacks that the process's static thread-local storage shares: with
// OpenBLAS (60 KiB of it) and the CUDA runtime and NCCL linked, a gzip-encoded
// scrape overflowed the rest and crashed kubetrain-runtime.
//
// Liveness says "this process is not wedged" (a failing check makes the
// kubelet restart the container); readiness says "this replica can do its
// work" (e.g. informers synced). A standby replica under leader election is
// ready: it is healthy, merely not leading.
//
// Thread-safe. The checks run on the server's worker threads, so they must be
// cheap and thread-safe, and must not call back into this server.
class MetricsServer {
 public:
  struct Options {
    // "HOST:PORT" or ":PORT" (all interfaces); port 0 picks a free port.
    std::string address = "0.0.0.0:8080";
    // Worker threads of the HTTP server.
    size_t threads = 2;
  };

  // Binds and starts serving. Errors: InvalidArgument for a malformed
  // address, Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const Options& options,
      const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables);

  // Stops serving; in-flight requests finish first.
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (the real one when Options asked for 0).
  int port() const { return server_->port(); }

  // Ready starts false: /readyz answers 503 until SetReady(true).
  void SetReady(bool ready);
  // Optional extra checks; OK means healthy. Default: always OK.
  void SetLivenessCheck(std::function<absl::Status()> check);
  void SetReadinessCheck(std::function<absl::Status()> check);

 private:
  struct Health;  // readiness and the checks

  MetricsServer() = default;
  HttpReply Serve(const HttpRequest& request);

  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<Health> health_;
  // Last, so that it stops (its workers joined) before what they read goes.
  std::unique_ptr<HttpServer> server_;
};

}  // namespace kubetrain::observability
