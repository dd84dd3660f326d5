#pragma once

// Starting programs as child processes: the one way production code spawns
// (the local backend's replica supervisor, which must stay async-signal-safe
// for its own reasons, excepted).
//
// Spawn forks and, in the child, only makes async-signal-safe calls on data
// prepared before the fork, so it may be called from a process with threads.
// It returns once the child has exec'd or failed to: a program that cannot
// be run (not found, not executable, a working folder that does not exist)
// is an error naming the program and what failed, never a child that exits
// with 127.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kubetrain::process {

// Where one of the child's standard streams goes.
struct Stream {
  enum class Kind {
    kInherit,  // ours
    kDevNull,  // /dev/null
    kFile,     // `path`, created (0644) if needed, truncated unless `append`
    kFd,       // `fd`, a descriptor of ours (a pipe end); we keep our copy
    kStdout,   // stderr only: wherever stdout goes (2>&1)
  };
  Kind kind = Kind::kInherit;
  std::string path{};
  bool append = false;
  int fd = -1;

  static Stream Inherit() { return {}; }
  static Stream DevNull() { return {.kind = Kind::kDevNull}; }
  // `path` relative to our working folder, not the child's.
  static Stream File(std::string path, bool append = false) {
    return {.kind = Kind::kFile, .path = std::move(path), .append = append};
  }
  static Stream Fd(int fd) { return {.kind = Kind::kFd, .fd = fd}; }
  static Stream SameAsStdout() { return {.kind = Kind::kStdout}; }
};

struct SpawnOptions {
  // argv[0] is the program: a path, or with search_path a name.
  std::vector<std::string> argv{};
  // "NAME=value" each; nullopt: our environment.
  std::optional<std::vector<std::string>> env{};
  // A program name without '/' is looked up, as execvp does, on the PATH of
  // the child's environment (/bin:/usr/bin when it has none): `env` may put
  // other folders first than ours.
  bool search_path = false;
  // The child's working folder; "": ours.
  std::string cwd{};
  Stream in{}, out{}, err{};
  // Close every descriptor above 2 in the child (otherwise those without
  // close-on-exec are inherited, as with posix_spawn).
  bool close_other_fds = false;
  // Sent to the child when the thread that spawned it ends (prctl
  // PR_SET_PDEATHSIG), so that it does not outlive a parent killed
  // outright; 0: none. A child whose parent has already gone by
  // the time it is set exits at once with code 1.
  int parent_death_signal = 0;
};

// Starts the program; its pid, which the caller reaps (WaitForExit).
// Errors name argv[0]: NotFound "<program>: command not found" when there is
// no such program; PermissionDenied or FailedPrecondition "<program>: <why>"
// when it cannot be executed; "<program>: cannot open <path>: <why>" and
// "<program>: cannot enter <cwd>: <why>" for the redirections and the working
// folder; InvalidArgument for an empty argv.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// Starts the program as a daemon: the grandchild of a child that has called
// setsid() (so it leads no session and belongs to no terminal) and exited,
// so that it is not ours to reap and outlives us. Returns once it has exec'd;
// errors as for Spawn. parent_death_signal does not apply.
absl::Status SpawnDetached(const SpawnOptions& options);

// How a child ended.
struct ExitStatus {
  int exit_code = 0;  // when it exited (signal == 0)
  int signal = 0;     // the signal that ended it; 0 when it exited
  bool exited() const { return signal == 0; }
  // The exit code, or 128 + N after signal N, as shells report it.
  int code() const { return signal == 0 ? exit_code : 128 + signal; }
};

// Decodes a waitpid() status of a process that has ended.
ExitStatus DecodeWaitStatus(int wait_status);

// Waits for child `pid` to end (retrying when a signal interrupts) and reaps
// it. An error (no such child) names `program`.
absl::StatusOr<ExitStatus> WaitForExit(pid_t pid, std::string_view program);

// Spawn, then WaitForExit.
absl::StatusOr<ExitStatus> RunToExit(const SpawnOptions& options);

}  // namespace kubetrain::process
