#include "operator/metrics/metrics_reporter.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace kubetrain::metrics {

MetricsReporter::MetricsReporter(std::string address, Identity identity, std::string token)
    : address_(std::move(address)), identity_(std::move(identity)), token_(std::move(token)) {
  stub_ = v1::Metrics::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<MetricsReporter> MetricsReporter::Create(const std::string& address,
                                                         Identity identity, std::string token) {
  return std::unique_ptr<MetricsReporter>(
      new MetricsReporter(address, std::move(identity), std::move(token)));
}

absl::StatusOr<std::unique_ptr<MetricsReporter>> MetricsReporter::FromEnvironment(
    Identity identity, const std::function<std::optional<std::string>(const char*)>& getenv) {
  auto read = [&](const char* name) -> std::optional<std::string> {
    if (getenv) return getenv(name);
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  std::optional<std::string> address = read("KUBETRAIN_METRICS_ADDR");
  if (!address || address->empty()) {
    return absl::FailedPreconditionError(
        "KUBETRAIN_METRICS_ADDR is not set: the operator gives it to tuning trials");
  }
  std::optional<std::string> token = read("KUBETRAIN_METRICS_TOKEN");
  if (!token || token->empty()) {
    return absl::FailedPreconditionError(
        "KUBETRAIN_METRICS_TOKEN is not set: the operator gives it to tuning trials");
  }
  return Create(*address, std::move(identity), *std::move(token));
}

absl::Status MetricsReporter::Report(int64_t step, const std::map<std::string, double>& values,
                                     std::chrono::milliseconds timeout) {
  v1::MetricsReportRequest request;
  request.set_job(identity_.job);
  request.set_trial(identity_.trial);
  request.set_task(identity_.task);
  request.set_step(step);
  request.set_token(token_);
  for (const auto& [tag, value] : values) (*request.mutable_values())[tag] = value;
  v1::MetricsReportResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::Status status = stub_->Report(&context, request, &response);
  if (status.ok()) return absl::OkStatus();
  // gRPC and absl share the canonical code numbering.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("metrics report to ", address_, " (step ", step,
                                   "): ", status.error_message()));
}

}  // namespace kubetrain::metrics
