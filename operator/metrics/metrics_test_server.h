#pragma once

// A Metrics service on 127.0.0.1 for tests, on a port the kernel picks (or
// a given one, for an operator that comes back where it was), and a sink that
// keeps what the service accepted.

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "operator/metrics/metrics_service.h"

namespace kubetrain::metrics {

class LoopbackServer {
 public:
  // Serves `service` (not owned; must outlive the server) on 127.0.0.1:port,
  // any free port when 0. Null when the port cannot be bound.
  static std::unique_ptr<LoopbackServer> Start(grpc::Service* service, int port = 0) {
    grpc::ServerBuilder builder;
    int bound = 0;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                             &bound);
    builder.RegisterService(service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (server == nullptr || bound <= 0) return nullptr;
    return std::unique_ptr<LoopbackServer>(new LoopbackServer(std::move(server), bound));
  }
  // Stops serving: connections to address() are refused from then on.
  ~LoopbackServer() { server_->Shutdown(); }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  LoopbackServer(std::unique_ptr<grpc::Server> server, int port)
      : server_(std::move(server)), port_(port) {}
  std::unique_ptr<grpc::Server> server_;
  int port_;
};

// The reports a Metrics service accepted, in order.
class RecordingReportSink : public ReportSink {
 public:
  absl::Status Accept(const MetricsReport& report) override {
    absl::MutexLock lock(&mu_);
    reports_.push_back(report);
    return absl::OkStatus();
  }
  std::vector<MetricsReport> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  absl::Mutex mu_;
  std::vector<MetricsReport> reports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kubetrain::metrics
