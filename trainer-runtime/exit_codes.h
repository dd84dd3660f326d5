#pragma once

// Exit codes of kubetrain-runtime, and how errors map to them.
//
// The operator's restartPolicy ExitCode (as Kubeflow's TFJob) treats an exit
// code >= 128 as retryable (the replica is restarted and resumes from the
// latest checkpoint) and 1-127 as permanent (the job fails). So:
//
//   code  meaning                                          retryable
//   0     success
//   1     internal error (a bug, or an unclassified error)  no
//   2     usage: unknown flag, bad flag value, no command   no
//   3     bad input: missing/corrupt data file, bad model   no
//         file, model that does not fit the data, bad
//         checkpoint
//   4     the loss became NaN or infinite                   no
//   130   train: stopped by SIGINT, after a checkpoint      yes
//   138   transient: a peer was lost, a connection broke,   yes
//         a deadline passed (absl UNAVAILABLE, ABORTED,
//         DEADLINE_EXCEEDED)
//   143   train: stopped by SIGTERM (the pod is being       yes
//         deleted), after a checkpoint
//
// 130 and 143 are 128+N for signal N, the code a process killed by the
// signal reports: an orderly stop reads, to the restart policy and to a
// shell, as the kill it replaces, and the restart resumes from the
// checkpoint the stop wrote.
//
// An absl::Status carries its exit code in a payload (WithExitCode); without
// one, ExitCodeFor derives it from the status code.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace kubetrain::runtime {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitBadInput = 3;
inline constexpr int kExitNonFiniteLoss = 4;
inline constexpr int kExitStoppedBySigint = 130;  // 128 + SIGINT
inline constexpr int kExitRetryable = 138;
inline constexpr int kExitStoppedBySigterm = 143;  // 128 + SIGTERM

inline constexpr char kExitCodePayloadUrl[] = "type.kubetrain.io/exit_code";

constexpr bool IsRetryableExitCode(int code) { return code >= 128; }

// `status` with `code` attached (a no-op for OK).
inline absl::Status WithExitCode(absl::Status status, int code) {
  if (!status.ok()) status.SetPayload(kExitCodePayloadUrl, absl::Cord(std::to_string(code)));
  return status;
}

inline int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  if (auto payload = status.GetPayload(kExitCodePayloadUrl)) {
    int code = 0;
    if (absl::SimpleAtoi(std::string(*payload), &code)) return code;
  }
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitRetryable;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
      return kExitBadInput;
    default:
      return kExitInternal;
  }
}

}  // namespace kubetrain::runtime
