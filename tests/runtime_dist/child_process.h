#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kubetrain::dist::testing {

// A child process with pipes on stdin and stdout; stderr is collected in a
// file. The destructor kills (SIGKILL) and reaps a child still running.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const std::string& stderr_path);
  ~ChildProcess();

  pid_t pid() const { return pid_; }

  // The next line of stdout, without the newline; DeadlineExceeded or
  // OutOfRange (stdout closed) otherwise.
  absl::StatusOr<std::string> ReadLine(absl::Time deadline);
  absl::Status WriteLine(const std::string& line);

  void Kill();
  // The exit code (128 + signal for a killed child); DeadlineExceeded when it
  // is still running at the deadline.
  absl::StatusOr<int> Wait(absl::Time deadline);
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
  std::string stderr_path_;
  std::optional<int> exit_code_;
};

}  // namespace kubetrain::dist::testing
