#pragma once

// Reporting a tuning trial's metrics to the operator's Metrics service
// (proto/kubetrain/v1/metrics.proto), shared by `train` and `exec`.
//
// The operator gives every replica of a trial KUBETRAIN_METRICS_ADDR,
// KUBETRAIN_METRICS_TOKEN and its identity (KUBETRAIN_NAMESPACE,
// KUBETRAIN_JOB_NAME, KUBETRAIN_TRIAL_ID, KUBETRAIN_TASK_TYPE,
// KUBETRAIN_TASK_INDEX). Reports go out from a thread of their own, so a slow
// or failing-over operator never stalls training; at the end, Finish waits
// for the last one, at most the report deadline (KUBETRAIN_METRICS_DEADLINE,
// default 60s).
//
// Exit codes (trainer-runtime/exit_codes.h) of a trial whose last report
// could not be delivered:
//   138 (retryable)  the operator could not be reached or did not answer in
//                    time (UNAVAILABLE, DEADLINE_EXCEEDED): the replica is
//                    restarted, resumes from its last checkpoint and reports
//                    again, rather than ending without an objective.
//   1                the operator refused the trial's token (PERMISSION_DENIED).
//   others           as ExitCodeFor maps the service's answer.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kubetrain::runtime::cmd {

inline constexpr char kMetricsAddrEnv[] = "KUBETRAIN_METRICS_ADDR";
inline constexpr char kMetricsDeadlineEnv[] = "KUBETRAIN_METRICS_DEADLINE";

// Sends a trial's reports to the operator. Report is thread-safe; Finish is
// called once, at the end.
class TrialReporter {
 public:
  // Null when KUBETRAIN_METRICS_ADDR is unset or empty (no operator to
  // report to: the local backend reads the hypertune file), or when
  // KUBETRAIN_TRIAL_ID is (a job that is not a tuning study: the service
  // takes reports of trials only; a note goes to `log`). Errors, with their
  // exit code attached: a missing token or identity variable, a bad
  // KUBETRAIN_METRICS_DEADLINE (usage), a build without the Metrics client.
  // Warnings about reports that are lost on the way go to `log`, which must
  // outlive the reporter.
  static absl::StatusOr<std::unique_ptr<TrialReporter>> FromEnvironment(std::ostream& log);

  virtual ~TrialReporter() = default;

  // Queues one evaluation's values (every tag of it in one report); never
  // waits for the network. Non-finite values are left out with a warning
  // (the service refuses them); nothing is sent when none is left. `final`:
  // the trainer's last evaluation (metrics.proto).
  virtual void Report(int64_t step, const std::map<std::string, double>& values, bool final) = 0;

  // PERMISSION_DENIED, with exit code 1 attached, once the operator has
  // refused the trial's token; OK before. Nothing more is sent after that,
  // so a caller can stop early instead of training for nothing.
  virtual absl::Status permanent_error() const = 0;

  // Waits for every report queued so far, at most deadline(). OK when the
  // last one was delivered (or there was none); otherwise an error naming
  // the address and the gRPC error, with the exit code above attached.
  virtual absl::Status Finish() = 0;

  // Waits for every report queued so far, at most `at_most`, for a trainer
  // that stops early (SIGTERM): the evaluations it made before the stop
  // reach the operator within the pod's grace period. OK when the newest
  // one was delivered (or there was none); otherwise why not.
  virtual absl::Status Drain(std::chrono::milliseconds at_most) = 0;

  virtual const std::string& address() const = 0;
  virtual std::chrono::milliseconds deadline() const = 0;
};

}  // namespace kubetrain::runtime::cmd
