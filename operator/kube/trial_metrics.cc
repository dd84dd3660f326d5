#include "operator/kube/trial_metrics.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kubetrain::kube {

// The key: a fresh random token (128 bits from the OS's entropy source).
TrialTokenIssuer::TrialTokenIssuer() : key_(metrics::NewTrialToken()) {}

std::string TrialTokenIssuer::Token(const std::string& job_uid, const std::string& trial_id) const {
  // Length-prefixed, so ("a/b", "c") and ("a", "b/c") differ.
  const std::string message = absl::StrCat(job_uid.size(), ":", job_uid, "/", trial_id);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  // 16 bytes (128 bits) are plenty against guessing and keep the env short.
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), std::min(length, 16u)));
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
  studies_->Report(*uid, report.trial,
                   core::MetricReport{report.step, report.values, report.final});
  // The controller writes the status within a reconcile; the cache follows by
  // watch. Polled: gRPC gives each call its own thread.
  const absl::Time deadline = absl::Now() + record_timeout_;
  while (!controller_->TrialReportRecorded(report.job, report.trial, report.step, report.values)) {
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("the report is not yet recorded in TrainingJob ",
                                                 report.job, "'s status; retry"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::kube
