#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/child_process.h"
#include "nlohmann/json.hpp"

namespace kubetrain::deploy_testing {

// A real Prometheus (Debian's /usr/bin/prometheus) for tests: it scrapes
// local HTTP endpoints every second and answers instant queries over its
// HTTP API on a port it chose itself.
//
// Query() and Targets() only read from the server and may be called from any
// thread; Stop() and destruction must not race with them.
class PrometheusServer {
 public:
  static constexpr char kBinary[] = "/usr/bin/prometheus";

  // One scrape job with a single static target, 127.0.0.1:`port`. `job` is
  // written into the YAML config as is: a plain name like "kubetrain-operator".
  struct ScrapeTarget {
    std::string job;
    int port = 0;
  };

  // One sample of an instant query's vector result.
  struct Sample {
    nlohmann::json labels;  // the series' labels, "job" included
    double value = 0;
  };

  // Whether kBinary can be run here (tests skip when it cannot).
  static bool Installed();

  // Writes `dir`/prometheus.yml (scrape and evaluation every second), starts
  // Prometheus with its storage in `dir`/data and stdout/stderr in
  // `dir`/prometheus.log, and returns once it listens, within 60 s. `dir`
  // must exist and outlive the server; the caller removes it.
  //
  // Errors: Internal, with the path, when the config cannot be written or the
  // binary cannot be started; Unavailable, with Prometheus' log, when it
  // exits or does not listen in time.
  static absl::StatusOr<std::unique_ptr<PrometheusServer>> Start(
      const std::string& dir, const std::vector<ScrapeTarget>& targets);

  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;
  ~PrometheusServer() = default;  // stops the process (see test_support::ChildProcess)

  int port() const { return port_; }
  // What Prometheus has written to stdout and stderr so far.
  std::string Log() const { return process_.Log(); }

  // The samples `promql` returns now. Errors: what the HTTP GET returned
  // (Unavailable when unreachable), Internal when Prometheus answers with an
  // error or with a body that is not a vector result.
  absl::StatusOr<std::vector<Sample>> Query(const std::string& promql) const;

  // Prometheus' view of its scrape targets (the /api/v1/targets JSON, with
  // each target's health and last error), or why it could not be fetched:
  // text for failure messages.
  std::string Targets() const;

  // Stops Prometheus now (SIGTERM, then SIGKILL after 30 s); idempotent.
  void Stop() { process_.Stop(); }

 private:
  explicit PrometheusServer(const std::string& dir);

  test_support::ChildProcess process_;
  int port_ = 0;
};

// Polls `promql` (every 200 ms) until `accept` holds for the samples it
// returns. Returns OK then, or DeadlineExceeded once `deadline` passes, naming
// the query and what the last poll saw (the samples or the query's error).
absl::Status WaitForSamples(
    const PrometheusServer& server, const std::string& promql,
    const std::function<bool(const std::vector<PrometheusServer::Sample>&)>& accept,
    absl::Time deadline);

}  // namespace kubetrain::deploy_testing
