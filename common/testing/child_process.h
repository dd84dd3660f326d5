#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kubetrain::test_support {

struct ChildOptions {
  // argv[0] is the program's path (no PATH search).
  std::vector<std::string> argv{};
  // Where stdout and stderr go (stderr alone with pipe_stdio), truncated
  // unless append_output; "" leaves them the test's.
  std::string output_path{};
  bool append_output = false;
  // stdin and stdout are pipes to the test: WriteLine and ReadLine.
  bool pipe_stdio = false;
  // "NAME=value" each; unset: the test's environment.
  std::optional<std::vector<std::string>> env{};
  // The working directory; "" : the test's.
  std::string cwd{};
  // How long Stop() (and so the destructor) waits after SIGTERM before it
  // sends SIGKILL; zero: SIGKILL at once.
  absl::Duration stop_grace = absl::ZeroDuration();
};

// A program the test runs as a child process. It inherits no file
// descriptor of the test beyond stdin/stdout/stderr (listening sockets of
// servers in the test would otherwise be its too). Stopped (Stop()) and
// reaped when destroyed. Not thread-safe.
class ChildProcess {
 public:
  explicit ChildProcess(ChildOptions options);
  // argv with stdout and stderr in `output_path`; SIGTERM, then SIGKILL
  // after 30 s, when stopped.
  ChildProcess(std::vector<std::string> argv, std::string output_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Constructs and starts one.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(ChildOptions options);

  // Returns once the child has exec'd; an error is process::Spawn's, naming
  // the program and what failed (the output file, the working directory,
  // exec).
  absl::Status Start();

  // Sends `signal` (nothing once it has been reaped).
  void Signal(int signal);
  // SIGKILL, without waiting.
  void Kill();
  // Sends `signal` and waits for the process to end: its exit code.
  int SignalAndWait(int signal);
  // SIGTERM, SIGKILL once stop_grace has passed; its exit code (-1 when it
  // was not running).
  int Stop();

  // True once the process has ended (it is then reaped); does not block.
  bool Exited();
  // Waits for the end (with pipe_stdio, for end-of-file on stdout first,
  // keeping what it printed for ReadLine): the exit code;
  // DeadlineExceeded while it still runs at `deadline`.
  absl::StatusOr<int> Wait(absl::Time deadline);
  // Once ended: its exit code, 128 + N when signal N ended it.
  std::optional<int> exit_code() const { return exit_code_; }
  // Once ended: whether a signal ended it (exit_code() is then 128 + N).
  bool killed_by_signal() const { return killed_by_signal_; }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // With pipe_stdio: the next line of stdout, without the newline;
  // DeadlineExceeded, or OutOfRange once stdout is closed.
  absl::StatusOr<std::string> ReadLine(absl::Time deadline);
  absl::Status WriteLine(std::string_view line);

  // What it wrote to output_path so far.
  std::string Log() const;

 private:
  void Reaped(int status);
  // Reads what stdout has within `timeout`; false at its end.
  bool ReadSome(absl::Duration timeout);

  ChildOptions options_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
  std::optional<int> exit_code_;
  bool killed_by_signal_ = false;
};

// The IPv4 TCP port `pid` listens on, found through /proc (for servers
// started on port 0 that do not print the port they got); nullopt while it
// listens on none.
std::optional<int> ListeningPort(pid_t pid);

}  // namespace kubetrain::test_support
