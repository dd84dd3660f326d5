#include "operator/metrics/metrics_service.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace kubetrain::metrics {
namespace {

std::string Key(const std::string& job, const std::string& trial) {
  // Length-prefixed so ("a/b", "c") and ("a", "b/c") differ.
  return absl::StrCat(job.size(), ":", job, "/", trial);
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace

bool TokensEqual(const std::string& a, const std::string& b) {
  if (a.empty() || a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string NewTrialToken() {
  std::random_device device;  // the OS's entropy source
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 4; ++i) {
    uint32_t word = device();
    for (int j = 0; j < 8; ++j, word >>= 4) token.push_back(kHex[word & 0xf]);
  }
  return token;
}

void TokenRegistry::Register(const std::string& job, const std::string& trial,
                             const std::string& token) {
  absl::MutexLock lock(&mu_);
  tokens_[Key(job, trial)] = token;
}

void TokenRegistry::Revoke(const std::string& job, const std::string& trial) {
  absl::MutexLock lock(&mu_);
  tokens_.erase(Key(job, trial));
}

bool TokenRegistry::Check(const std::string& job, const std::string& trial,
                          const std::string& token) const {
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(Key(job, trial));
  return it != tokens_.end() && TokensEqual(it->second, token);
}

absl::Status TokenRegistry::Authorize(const std::string& job, const std::string& trial,
                                      const std::string& token) const {
  if (Check(job, trial, token)) return absl::OkStatus();
  return absl::PermissionDeniedError("unknown trial or wrong token");
}

grpc::Status MetricsServiceImpl::Report(grpc::ServerContext* context,
                                        const v1::MetricsReportRequest* request,
                                        v1::MetricsReportResponse* response) {
  const std::string who =
      absl::StrCat("job \"", request->job(), "\" trial \"", request->trial(), "\"");
  // The token is checked first: an unauthenticated caller learns nothing
  // about which trials exist or what a valid report looks like.
  if (absl::Status authorized =
          tokens_->Authorize(request->job(), request->trial(), request->token());
      absl::IsPermissionDenied(authorized)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("metrics report for ", who,
                                     ": unknown trial or wrong token (KUBETRAIN_METRICS_TOKEN)"));
  } else if (!authorized.ok()) {
    return ToGrpc(absl::Status(
        authorized.code(), absl::StrCat("metrics report for ", who, ": ", authorized.message())));
  }
  if (request->values().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("metrics report for ", who, ": no values"));
  }
  if (request->step() < 0) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("metrics report for ", who, ": negative step ", request->step()));
  }
  MetricsReport report;
  report.job = request->job();
  report.trial = request->trial();
  report.task = request->task();
  report.step = request->step();
  report.final = request->final();
  for (const auto& [tag, value] : request->values()) {
    if (tag.empty() || !std::isfinite(value)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("metrics report for ", who, ": value of \"", tag,
                                       "\" must have a name and be finite"));
    }
    report.values.emplace(tag, value);
  }
  return ToGrpc(sink_->Accept(report));
}

}  // namespace kubetrain::metrics
