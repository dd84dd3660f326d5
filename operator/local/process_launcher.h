#pragma once

// How the local backend runs replicas: the side-effect edge of the local
// controller, behind an interface so the controller is tested with a fake.
//
// The real launcher starts every replica under a small supervisor process:
//
//   controller ──fork──► helper ──fork──► supervisor (setsid: its own process
//                         exits           group)  ──fork/exec──► replica
//
// The helper exits at once, so the supervisor belongs to no controller and
// survives a controller that is killed; a restarted controller finds it again
// by pid and the kernel's start time of that pid (a reused pid is never taken
// for the replica). The supervisor
//   - sends the replica's stdout and stderr, line by line and time-stamped, to
//     the log file ("<unix seconds> O|E <line>"), appending across restarts;
//   - when the replica fails and `restart_on_failure` is set (the kubelet's
//     in-place restart for OnFailure/Always), runs it again after a short
//     doubling backoff and records the restart count in `state_path`;
//   - when the replica ends for good, writes its exit code (128+signal when
//     killed) to `exit_path` atomically (write, then rename), so the exit is
//     known even when no controller was watching.
//   - on SIGTERM (or SIGINT) passes the signal on to its process group once
//     and goes on logging until the replica has ended, then records its exit
//     as above (no restart after a stop request), so a replica's shutdown
//     output and exit code are kept, as for a pod deleted with a grace period.
// Kill sends SIGTERM to the supervisor (to the group directly when only what
// the replica left behind remains), then SIGKILL to the whole group after the
// grace period: nothing the replica started outlives it (unless it left the
// group on purpose).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/local/process_table.h"

namespace kubetrain::local {

struct LaunchRequest {
  std::string name;  // for error messages
  // argv[0] is a path or a name looked up on PATH.
  std::vector<std::string> argv;
  // Added to (and overriding) the launcher's own environment.
  std::vector<std::pair<std::string, std::string>> env;
  std::string working_dir;  // "" keeps the launcher's
  std::string log_path;     // created with its folder
  std::string exit_path;
  std::string state_path;
  // When set, the supervisor writes its pid here (atomically) before anything
  // else, so a controller that died while launching can find what it started;
  // a supervisor that cannot write it ends without starting the replica (exit
  // code 127), so no pid file means that no replica ran.
  std::string pid_path;
  bool restart_on_failure = false;
};

// The supervisor's pid that a LaunchRequest's pid_path holds; nullopt while
// there is none (not written yet, or the supervisor never got that far).
std::optional<int> ReadSupervisorPid(const std::string& pid_path);

struct ProcessId {
  int pid = 0;               // the supervisor, leader of the replica's group
  uint64_t start_ticks = 0;  // 0 when unknown
};

struct ProcessStatus {
  enum class State {
    kRunning,  // the supervisor runs (the replica may be between restarts)
    kExited,   // ended for good: exit_code is set
    kGone,     // neither running nor an exit file: killed from outside
  };
  State state = State::kGone;
  std::optional<int> exit_code;       // kExited: the final exit code
  int restarts = 0;                   // in-place restarts so far
  std::optional<int> last_exit_code;  // of the last run that ended
  // After an in-place restart: when the last run ended (the next one began
  // then, or begins after its backoff); else InfinitePast.
  absl::Time run_since = absl::InfinitePast();
  // kExited: when the replica ended for good (its exit record's time).
  absl::Time finished = absl::InfinitePast();
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the replica; errors name it (executable not found, fork failed).
  virtual absl::StatusOr<ProcessId> Launch(const LaunchRequest& request) = 0;
  // What became of a launched replica (from the files and the process table).
  virtual ProcessStatus Probe(const ProcessId& id, const std::string& exit_path,
                              const std::string& state_path) = 0;
  // Asks the replica to stop (SIGTERM, see above) and returns at once. A
  // process that is already gone is success.
  virtual absl::Status Terminate(const ProcessId& id) = 0;
  // SIGKILL to the replica's whole process group; returns at once. A process
  // that is already gone is success.
  virtual absl::Status ForceKill(const ProcessId& id) = 0;
  // True while any process of the replica's group is left: its supervisor,
  // or what the replica started after the supervisor has ended.
  virtual bool Alive(const ProcessId& id) = 0;

  // Terminate, then ForceKill after `grace` (kKillGracePeriod by default),
  // waiting until none of the group is left. A replica that ends within the
  // grace period has its output and exit on record. Blocks up to `grace` +
  // 5 s; the controller does the same steps across syncs instead.
  absl::Status Kill(const ProcessId& id);
  absl::Status Kill(const ProcessId& id, absl::Duration grace);
};

// How long a replica has between SIGTERM and SIGKILL.
inline constexpr absl::Duration kKillGracePeriod = absl::Seconds(3);

// Processes on this machine, as described above.
class RealProcessLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<ProcessId> Launch(const LaunchRequest& request) override;
  ProcessStatus Probe(const ProcessId& id, const std::string& exit_path,
                      const std::string& state_path) override;
  absl::Status Terminate(const ProcessId& id) override;
  absl::Status ForceKill(const ProcessId& id) override;
  bool Alive(const ProcessId& id) override;

  // Test seam: called by Launch with the controller's (read) end of the pipe
  // on which the supervisor reports its pid, once the pipe is made and before
  // anything is forked. Replacing that end there (dup2 of /dev/null over it)
  // is, to the supervisor, a controller killed before it has reported.
  std::function<void(int report_fd)> before_fork_for_test;
};

// One line of a replica log as the supervisor writes it.
struct LogLine {
  double time = 0;      // unix seconds
  bool stderr = false;  // 'E' stream
  std::string message;
};
// Parses "<seconds> O|E <message>"; a line without the prefix (a program that
// wrote the file itself) is taken whole as an stdout message at time 0.
LogLine ParseLogLine(std::string_view line);

}  // namespace kubetrain::local
