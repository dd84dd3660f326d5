#include "trainer-runtime/cmd/trial_reporter.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/kubetrain/v1/metrics_reporter.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::cmd {
namespace {

std::string GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

absl::StatusOr<std::chrono::milliseconds> DeadlineFromEnvironment() {
  const std::string text = GetEnv(kMetricsDeadlineEnv);
  if (text.empty()) return std::chrono::milliseconds(std::chrono::seconds(60));
  absl::Duration deadline;
  if (!absl::ParseDuration(text, &deadline) || deadline <= absl::ZeroDuration()) {
    return WithExitCode(
        absl::InvalidArgumentError(absl::StrCat(
            kMetricsDeadlineEnv, "=\"", text, "\": must be a positive duration such as 60s or 2m")),
        kExitUsage);
  }
  return absl::ToChronoMilliseconds(deadline);
}

// Serialises warning lines from the sending thread and the caller's.
class LockedLog {
 public:
  explicit LockedLog(std::ostream& out) : out_(out) {}
  void Line(const std::string& line) {
    absl::MutexLock lock(&mu_);
    out_ << line << std::endl;
  }

 private:
  absl::Mutex mu_;
  std::ostream& out_;
};

class GrpcTrialReporter : public TrialReporter {
 public:
  GrpcTrialReporter(std::unique_ptr<metrics::MetricsReporter> reporter,
                    std::chrono::milliseconds deadline, std::ostream& log)
      : address_(reporter->address()), deadline_(deadline), log_(log) {
    metrics::QueuedMetricsReporter::Options options;
    options.retry.deadline = deadline;
    options.on_lost = [this](const absl::Status& reason) {
      log_.Line(absl::StrCat("Warning: ", reason.message()));
    };
    queue_ = std::make_unique<metrics::QueuedMetricsReporter>(std::move(reporter), options);
  }

  void Report(int64_t step, const std::map<std::string, double>& values, bool final) override {
    std::map<std::string, double> finite;
    for (const auto& [tag, value] : values) {
      if (std::isfinite(value)) {
        finite.emplace(tag, value);
      } else {
        log_.Line(absl::StrCat("Warning: metric \"", tag, "\" at step ", step, " is ", value,
                               ": not reported to ", address_));
      }
    }
    if (!finite.empty()) queue_->Enqueue(step, std::move(finite), final);
  }

  absl::Status permanent_error() const override {
    absl::Status denied = queue_->permanent_error();
    if (denied.ok()) return denied;
    return WithExitCode(
        absl::PermissionDeniedError(absl::StrCat(
            "the operator's Metrics service at ", address_,
            " refused this trial's token (KUBETRAIN_METRICS_TOKEN): ", denied.message())),
        kExitInternal);
  }

  absl::Status Finish() override {
    // The last attempt may start just before the retry deadline and run its
    // full attempt timeout: wait for it, or a delivered report would read as
    // lost and restart the trial for nothing.
    absl::Status s =
        queue_->Flush(deadline_ + metrics::MetricsReporter::RetryOptions().attempt_timeout);
    if (s.ok()) return s;
    if (absl::IsPermissionDenied(s)) return permanent_error();
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s)) {
      // Ending now would leave the trial without an objective: a retryable
      // exit restarts the replica, which resumes and reports again.
      return WithExitCode(
          absl::UnavailableError(absl::StrCat(
              "the trial's last metrics report was not delivered to the operator at ", address_,
              " (", absl::StatusCodeToString(s.code()), ": ", s.message(), ")")),
          kExitRetryable);
    }
    return absl::Status(s.code(), absl::StrCat("the trial's last metrics report to ", address_,
                                               " was refused: ", s.message()));
  }

  absl::Status Drain(std::chrono::milliseconds at_most) override { return queue_->Flush(at_most); }

  const std::string& address() const override { return address_; }
  std::chrono::milliseconds deadline() const override { return deadline_; }

 private:
  const std::string address_;
  const std::chrono::milliseconds deadline_;
  LockedLog log_;
  std::unique_ptr<metrics::QueuedMetricsReporter> queue_;  // last: stops first
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrialReporter>> TrialReporter::FromEnvironment(std::ostream& log) {
  if (GetEnv(kMetricsAddrEnv).empty()) return nullptr;
  if (GetEnv("KUBETRAIN_TRIAL_ID").empty()) {
    log << "kubetrain-runtime: " << kMetricsAddrEnv
        << " is set but KUBETRAIN_TRIAL_ID is not: not a tuning trial, metrics are not "
           "reported to the operator"
        << std::endl;
    return nullptr;
  }
  absl::StatusOr<std::chrono::milliseconds> deadline = DeadlineFromEnvironment();
  if (!deadline.ok()) return deadline.status();
  absl::StatusOr<metrics::MetricsReporter::Identity> identity =
      metrics::MetricsReporter::Identity::FromEnvironment();
  if (!identity.ok()) return WithExitCode(identity.status(), kExitUsage);
  absl::StatusOr<std::unique_ptr<metrics::MetricsReporter>> reporter =
      metrics::MetricsReporter::FromEnvironment(*std::move(identity));
  if (!reporter.ok()) return WithExitCode(reporter.status(), kExitUsage);
  return std::make_unique<GrpcTrialReporter>(*std::move(reporter), *deadline, log);
}

}  // namespace kubetrain::runtime::cmd
