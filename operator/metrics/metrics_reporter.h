#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kubetrain/v1/metrics.grpc.pb.h"

namespace kubetrain::metrics {

// The trial side of the Metrics service: reports a trial's metric values to
// the operator. Thread-safe (gRPC stubs are); one per trial task.
class MetricsReporter {
 public:
  struct Identity {
    std::string job;    // "namespace/name"
    std::string trial;  // CLOUD_ML_TRIAL_ID
    std::string task;   // e.g. "master-0"
  };

  // Connects (lazily, as gRPC channels do) to `address` ("host:port").
  static std::unique_ptr<MetricsReporter> Create(const std::string& address, Identity identity,
                                                 std::string token);

  // Reads KUBETRAIN_METRICS_ADDR and KUBETRAIN_METRICS_TOKEN through `getenv`
  // (the process environment by default). FailedPrecondition naming the
  // variable when one is unset or empty.
  static absl::StatusOr<std::unique_ptr<MetricsReporter>> FromEnvironment(
      Identity identity,
      const std::function<std::optional<std::string>(const char*)>& getenv = nullptr);

  // Sends one report and waits for the answer, at most `timeout`. The
  // service's status comes back as is (PERMISSION_DENIED for a wrong token,
  // UNAVAILABLE/DEADLINE_EXCEEDED when the operator cannot be reached), with
  // the address in the message.
  absl::Status Report(int64_t step, const std::map<std::string, double>& values,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  MetricsReporter(std::string address, Identity identity, std::string token);

  std::string address_;
  Identity identity_;
  std::string token_;
  std::unique_ptr<v1::Metrics::Stub> stub_;
};

}  // namespace kubetrain::metrics
