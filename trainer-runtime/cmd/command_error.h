#pragma once

// How a subcommand ends on an error: one line on stderr that says the error
// and its exit code (trainer-runtime/exit_codes.h), and whether the operator
// will restart the replica for it.

#include <iostream>
#include <string_view>

#include "absl/status/status.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::cmd {

// Prints `prefix`, the status's message and its exit code; returns the code.
inline int FailWithExitCode(std::string_view prefix, const absl::Status& status) {
  const int code = ExitCodeFor(status);
  std::cerr << prefix << status.message() << " (exit code " << code
            << (IsRetryableExitCode(code) ? ", retryable" : "") << ")" << std::endl;
  return code;
}

}  // namespace kubetrain::runtime::cmd
