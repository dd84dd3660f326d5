#pragma once

// `kubetrain ui`'s web server: the pages (built into the binary) and the
// read-only JSON endpoints behind them (docs/ui.md), over a JobSource.
//
//   GET /                        the app (jobs page at #/, a job at #/jobs/ID)
//   GET /static/NAME             its scripts and style sheet
//   GET /api/jobs[?state=S]      ui_api.h JobListJson
//   GET /api/jobs/ID             JobPageJson
//   GET /api/jobs/ID/logs        LogStreamsJson (either backend: a cluster's through pods/log)
//   GET /api/jobs/ID/log?task=T[&trial=N][&offset=B][&lines=K]   LogChunkJson
//
// Nothing else: HttpServer answers every method but GET and HEAD with 405,
// so no request can change a job. Every reply carries a Content-Security-
// Policy that allows only this server's own scripts and styles (no inline
// script, no other origin) and nosniff. When bound to a loopback address,
// a request whose Host header names another host is refused (403): a web
// page elsewhere cannot reach the server through DNS rebinding.
//
// Errors come back as {"error": message} with 400 (bad parameter), 404 (no
// such job or log), 501 (not on this backend) or 502 (the backend failed,
// e.g. the cluster is unreachable).

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cli/ui/job_source.h"
#include "common/observability/http_server.h"

namespace kubetrain::cli::ui {

class UiServer {
 public:
  struct Options {
    std::string address = "127.0.0.1:0";
    size_t threads = 4;
    // For durations of running jobs.
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };

  // Errors: as HttpServer::Start (bad address, address in use).
  static absl::StatusOr<std::unique_ptr<UiServer>> Start(const Options& options,
                                                         std::unique_ptr<JobSource> source);
  ~UiServer();

  int port() const { return http_->port(); }
  // "http://127.0.0.1:PORT/" (a wildcard address shows as 127.0.0.1).
  std::string url() const;
  // True when bound to a loopback address (only this machine can connect).
  bool loopback() const { return check_host_; }

  // The reply to one request, as the HTTP server sends it (for tests that
  // need no socket).
  observability::HttpReply Handle(const observability::HttpRequest& request);

 private:
  UiServer() = default;
  observability::HttpReply HandleApi(const std::string& path, const std::string& query);

  Options options_;
  absl::Mutex source_mu_;
  std::unique_ptr<JobSource> source_ ABSL_GUARDED_BY(source_mu_);
  // Set once the address is bound; until then the strict answer.
  std::atomic<bool> check_host_{true};
  // Last, so that its workers stop before what they use goes.
  std::unique_ptr<observability::HttpServer> http_;
};

// Percent-decoding of a URL path segment or query value ('+' is a space in
// a query). nullopt for a malformed escape.
std::optional<std::string> PercentDecode(absl::string_view text, bool plus_is_space);

}  // namespace kubetrain::cli::ui
