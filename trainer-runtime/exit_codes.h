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
//   138   transient: a peer was lost, a connection broke,   yes
//         a deadline passed (absl UNAVAILABLE, ABORTED,
//         DEADLINE_EXCEEDED)
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
inline constexpr int kExitRetryable = 138;

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
