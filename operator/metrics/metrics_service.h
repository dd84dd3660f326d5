#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kubetrain/v1/metrics.grpc.pb.h"

namespace kubetrain::metrics {

// One accepted report.
struct MetricsReport {
  std::string job;
  std::string trial;
  std::string task;
  int64_t step = 0;
  std::map<std::string, double> values{};
  bool final = false;  // the trainer's last evaluation (metrics.proto)
};

// Where accepted reports go (the reconciler's trial bookkeeping). Called on
// gRPC threads, concurrently: implementations must be thread-safe. A non-OK
// status is returned to the reporting trial as the RPC's status.
class ReportSink {
 public:
  virtual ~ReportSink() = default;
  virtual absl::Status Accept(const MetricsReport& report) = 0;
};

// A fresh random token for a trial: 32 hex characters from the OS's random
// source. The operator puts it in the trial's environment as
// KUBETRAIN_METRICS_TOKEN and registers it with the service.
std::string NewTrialToken();

// Decides whether a report's token is the trial's. OK: accept;
// PERMISSION_DENIED: unknown trial or wrong token (the service answers with
// its own message, so a caller learns nothing about which trials exist);
// any other error (e.g. UNAVAILABLE on an operator that is not the leader)
// goes back to the caller as is, so it knows to retry. Thread-safe.
class TrialAuthority {
 public:
  virtual ~TrialAuthority() = default;
  virtual absl::Status Authorize(const std::string& job, const std::string& trial,
                                 const std::string& token) const = 0;
};

// Compares two tokens in time independent of where they differ; an empty
// token never matches.
bool TokensEqual(const std::string& a, const std::string& b);

// Per-trial tokens held in memory: the authority for a single process that
// issues the tokens itself. Thread-safe.
class TokenRegistry : public TrialAuthority {
 public:
  // Issues (or replaces) the token for (job, trial).
  void Register(const std::string& job, const std::string& trial, const std::string& token);
  // Forgets the trial: its reports are rejected from now on.
  void Revoke(const std::string& job, const std::string& trial);
  // True iff (job, trial) is registered with exactly this token (compared in
  // time independent of where the strings differ).
  bool Check(const std::string& job, const std::string& trial, const std::string& token) const;
  absl::Status Authorize(const std::string& job, const std::string& trial,
                         const std::string& token) const override;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> tokens_ ABSL_GUARDED_BY(mu_);
};

// The Metrics gRPC service: checks a report's token, validates the report,
// hands it to the sink. Thread-safe; the authority and sink must outlive it.
class MetricsServiceImpl final : public v1::Metrics::Service {
 public:
  MetricsServiceImpl(const TrialAuthority* tokens, ReportSink* sink)
      : tokens_(tokens), sink_(sink) {}

  grpc::Status Report(grpc::ServerContext* context, const v1::MetricsReportRequest* request,
                      v1::MetricsReportResponse* response) override;

 private:
  const TrialAuthority* tokens_;
  ReportSink* sink_;
};

}  // namespace kubetrain::metrics
