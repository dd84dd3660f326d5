#include "operator/kube/trial_metrics.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kubetrain::kube {

TrialTokenIssuer::TrialTokenIssuer() {
  std::random_device device;  // the OS's entropy source
  for (int i = 0; i < 8; ++i) {
    uint32_t word = device();
    for (int j = 0; j < 4; ++j, word >>= 8) key_.push_back(static_cast<char>(word & 0xff));
  }
}

std::string TrialTokenIssuer::Token(const std::string& job_uid,
                                    const std::string& trial_id) const {
  // Length-prefixed, so ("a/b", "c") and ("a", "b/c") differ.
  const std::string message = absl::StrCat(job_uid.size(), ":", job_uid, "/", trial_id);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  // 16 bytes (128 bits) are plenty against guessing and keep the env short.
  for (unsigned int i = 0; i < 16 && i < length; ++i) {
    token.push_back(kHex[digest[i] >> 4]);
    token.push_back(kHex[digest[i] & 0xf]);
  }
  return token;
}

absl::Status ClusterTrialMetrics::Authorize(const std::string& job, const std::string& trial,
                                            const std::string& token) const {
  if (!leading_.load()) {
    return absl::UnavailableError("this operator replica is not the leader; retry");
  }
  if (trial.empty() || !controller_->TrialPodHasToken(job, trial, token)) {
    return absl::PermissionDeniedError("unknown trial or wrong token");
  }
  return absl::OkStatus();
}

absl::Status ClusterTrialMetrics::Accept(const metrics::MetricsReport& report) {
  std::optional<std::string> uid = controller_->CachedJobUid(report.job);
  if (!uid.has_value()) {
    return absl::NotFoundError(absl::StrCat("TrainingJob ", report.job, " no longer exists"));
  }
  studies_->Report(*uid, report.trial, core::MetricReport{report.step, report.values});
  // The controller writes the status within a reconcile; the cache follows by
  // watch. Polled: gRPC gives each call its own thread.
  const absl::Time deadline = absl::Now() + record_timeout_;
  while (!controller_->TrialReportRecorded(report.job, report.trial, report.step, report.values)) {
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "the report is not yet recorded in TrainingJob ", report.job, "'s status; retry"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::kube
