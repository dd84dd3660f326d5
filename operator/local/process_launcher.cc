#include "operator/local/process_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

extern char** environ;

namespace kubetrain::local {
namespace {

// ---- The supervisor. It runs in a child forked from a possibly
// multi-threaded controller, so from the fork on it only makes
// async-signal-safe calls on data prepared before the fork: no allocation,
// no stdio, no locks.

struct SupervisorPlan {
  const char* executable;
  char* const* argv;
  char* const* envp;
  const char* working_dir;  // nullptr: keep
  const char* log_path;
  const char* exit_path;
  const char* exit_tmp_path;
  const char* state_path;
  const char* state_tmp_path;
  const char* pid_path;  // nullptr: none
  const char* pid_tmp_path;
  bool restart_on_failure;
};

constexpr int kInitialBackoffMs = 1000;
constexpr int kMaxBackoffMs = 30000;

size_t FormatInt(char* out, long long value) {
  char digits[24];
  size_t n = 0;
  const bool negative = value < 0;
  unsigned long long v = negative ? 0ULL - static_cast<unsigned long long>(value) : value;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  size_t len = 0;
  if (negative) out[len++] = '-';
  while (n > 0) out[len++] = digits[--n];
  return len;
}

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Writes `text` to `tmp`, then renames it over `path`. False when `path`
// was not written.
bool WriteFileAtomically(const char* tmp, const char* path, const char* text, size_t size) {
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  WriteAll(fd, text, size);
  fsync(fd);
  close(fd);
  return rename(tmp, path) == 0;
}

void SleepMs(int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// The supervisor's stop request: SIGTERM or SIGINT, set by its handler. The
// supervisor outlives the signal so that it can log the replica's shutdown
// output and record how it ended; it passes the signal on to its process
// group once (the replica and whatever the replica started).
volatile sig_atomic_t g_stop_signal = 0;
bool g_stop_forwarded = false;

void OnStopSignal(int signal_number) { g_stop_signal = signal_number; }

void ForwardStopSignal() {
  if (g_stop_signal == 0 || g_stop_forwarded) return;
  g_stop_forwarded = true;
  // The group includes the supervisor itself: its handler only notes it again.
  kill(0, g_stop_signal);
}

// Like SleepMs, but returns early once a stop is requested.
void SleepUnlessStopped(int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  while (g_stop_signal == 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void SetStopSignalMask(int how) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(how, &stop_signals, nullptr);
}

// Buffers one stream and writes whole lines to the log with their prefix.
struct LineBuffer {
  char stream;  // 'O' or 'E'
  char data[8192];
  size_t size = 0;
};

void EmitLine(int log_fd, char stream, const char* line, size_t size) {
  char prefix[64];
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  size_t n = FormatInt(prefix, now.tv_sec);
  prefix[n++] = '.';
  long micros = now.tv_nsec / 1000;
  for (long div = 100000; div > 0; div /= 10)
    prefix[n++] = static_cast<char>('0' + (micros / div) % 10);
  prefix[n++] = ' ';
  prefix[n++] = stream;
  prefix[n++] = ' ';
  char record[8192 + 80];
  std::memcpy(record, prefix, n);
  std::memcpy(record + n, line, size);
  n += size;
  record[n++] = '\n';
  WriteAll(log_fd, record, n);  // one write per line: lines never interleave
}

void Consume(int log_fd, LineBuffer& buffer, const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      EmitLine(log_fd, buffer.stream, buffer.data, buffer.size);
      buffer.size = 0;
    } else {
      if (buffer.size == sizeof(buffer.data)) {
        EmitLine(log_fd, buffer.stream, buffer.data, buffer.size);
        buffer.size = 0;
      }
      buffer.data[buffer.size++] = data[i];
    }
  }
}

// Copies the replica's output to the log until the replica has exited and
// its pipes are drained (or held open only by processes it left behind).
// Returns the replica's wait status.
int PumpAndWait(pid_t child, int out_fd, int err_fd, int log_fd) {
  LineBuffer buffers[2];
  buffers[0].stream = 'O';
  buffers[1].stream = 'E';
  int fds[2] = {out_fd, err_fd};
  bool open_fds[2] = {true, true};
  int wait_status = 0;
  bool exited = false;
  char chunk[4096];
  while (open_fds[0] || open_fds[1]) {
    ForwardStopSignal();
    pollfd pfds[2];
    int count = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (!open_fds[i]) continue;
      pfds[count] = {fds[i], POLLIN, 0};
      which[count++] = i;
    }
    int ready = poll(pfds, count, exited ? 0 : 200);
    if (ready < 0 && errno != EINTR) break;
    bool read_any = false;
    for (int k = 0; k < count && ready > 0; ++k) {
      if ((pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t n = read(pfds[k].fd, chunk, sizeof(chunk));
      if (n > 0) {
        Consume(log_fd, buffers[which[k]], chunk, static_cast<size_t>(n));
        read_any = true;
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        open_fds[which[k]] = false;
      }
    }
    if (!exited) {
      pid_t r = waitpid(child, &wait_status, WNOHANG);
      if (r == child) exited = true;
    } else if (!read_any) {
      break;  // exited, and nothing more is buffered right now
    }
  }
  for (LineBuffer& buffer : buffers) {
    if (buffer.size > 0) EmitLine(log_fd, buffer.stream, buffer.data, buffer.size);
  }
  if (!exited) {
    while (waitpid(child, &wait_status, 0) < 0 && errno == EINTR) ForwardStopSignal();
  }
  return wait_status;
}

// Ends a supervisor without starting its replica, as a replica that cannot
// be executed ends: `what` and `path` as its last stderr line, exit code 127.
[[noreturn]] void EndUnstarted(const SupervisorPlan& plan, const char* what, const char* path) {
  int log_fd = open(plan.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd >= 0) {
    char line[4096];
    size_t size = 0;
    for (const char* part : {what, path}) {
      const size_t n = std::min(std::strlen(part), sizeof(line) - size);
      std::memcpy(line + size, part, n);
      size += n;
    }
    EmitLine(log_fd, 'E', line, size);
  }
  WriteFileAtomically(plan.exit_tmp_path, plan.exit_path, "127\n", 4);
  _exit(0);
}

// `started_fd` receives the supervisor's pid once it leads its own process
// group: only then may the launcher hand the pid out, since a Kill of the
// group before setsid() would find no group and leave the replica running.
// Closes every descriptor from `lowest` up.
void CloseFrom(unsigned lowest) {
  if (syscall(SYS_close_range, lowest, ~0U, 0U) != 0) {
    for (int fd = static_cast<int>(lowest); fd < 4096; ++fd) close(fd);
  }
}

[[noreturn]] void RunSupervisor(const SupervisorPlan& plan, int started_fd) {
  // First of all, let go of the controller's descriptors: its lock above
  // all, which a controller started after this one was killed must be able
  // to take at once, not after this supervisor has written its pid file.
  if (started_fd != 3) {
    dup2(started_fd, 3);
    started_fd = 3;
  }
  CloseFrom(4);
  setsid();
  // Before the pid is handed out (a Kill may follow at once), and replacing
  // any handler inherited from the controller. No SA_RESTART: a stop request
  // interrupts poll, waitpid and the backoff sleep.
  struct sigaction stop_action {};
  stop_action.sa_handler = OnStopSignal;
  sigemptyset(&stop_action.sa_mask);
  sigaction(SIGTERM, &stop_action, nullptr);
  sigaction(SIGINT, &stop_action, nullptr);
  SetStopSignalMask(SIG_UNBLOCK);
  // The controller may be gone by now, killed while it launched us, and with
  // it the only reader of `started_fd`: that write must fail with EPIPE, not
  // end the supervisor with the controller's inherited SIGPIPE, or the
  // replica would never start and a restarted controller would wait for a
  // pid file that never comes. That file is what such a controller goes by,
  // so it comes first, and without it the replica does not start: no pid
  // file means that no replica ran.
  signal(SIGPIPE, SIG_IGN);
  const int self = getpid();
  bool pid_recorded = true;
  if (plan.pid_path != nullptr) {
    char text[32];
    size_t n = FormatInt(text, self);
    text[n++] = '\n';
    pid_recorded = WriteFileAtomically(plan.pid_tmp_path, plan.pid_path, text, n);
  }
  WriteAll(started_fd, reinterpret_cast<const char*>(&self), sizeof(self));
  close(started_fd);
  if (!pid_recorded) {
    EndUnstarted(plan, "kubetrain: cannot record the supervisor's pid in ", plan.pid_path);
  }
  // Back to the default before the replica is forked: an ignored signal
  // stays ignored across exec.
  signal(SIGPIPE, SIG_DFL);
  // Nothing of the controller (its database, its sockets) reaches the replica.
  CloseFrom(3);
  int log_fd = open(plan.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int backoff_ms = kInitialBackoffMs;
  int restarts = 0;
  // What .exit records if a stop request comes before any run has ended.
  int exit_code = 128 + SIGTERM;
  for (;;) {
    if (g_stop_signal != 0) {
      if (restarts == 0) exit_code = 128 + g_stop_signal;
      break;  // stopped before (re)starting the replica
    }
    int out_pipe[2];
    int err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) _exit(1);
    // Blocked across the fork, so that a stop request meets the child either
    // as the supervisor's (then forwarded to it) or with the default action,
    // never with the supervisor's handler in a child about to exec.
    SetStopSignalMask(SIG_BLOCK);
    pid_t child = fork();
    if (child == 0) {
      signal(SIGTERM, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      SetStopSignalMask(SIG_UNBLOCK);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
      if (plan.working_dir != nullptr && chdir(plan.working_dir) != 0) {
        const char message[] = "kubetrain: cannot enter the working directory\n";
        WriteAll(2, message, sizeof(message) - 1);
        _exit(127);
      }
      execve(plan.executable, plan.argv, plan.envp);
      const char message[] = "kubetrain: cannot execute ";
      WriteAll(2, message, sizeof(message) - 1);
      WriteAll(2, plan.executable, std::strlen(plan.executable));
      WriteAll(2, "\n", 1);
      _exit(127);
    }
    SetStopSignalMask(SIG_UNBLOCK);
    close(out_pipe[1]);
    close(err_pipe[1]);
    exit_code = 1;
    if (child > 0) {
      int status = PumpAndWait(child, out_pipe[0], err_pipe[0], log_fd);
      exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                    : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
    }
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (exit_code != 0 && plan.restart_on_failure && g_stop_signal == 0) {
      ++restarts;
      char state[64];
      size_t n = FormatInt(state, restarts);
      state[n++] = ' ';
      n += FormatInt(state + n, exit_code);
      state[n++] = '\n';
      WriteFileAtomically(plan.state_tmp_path, plan.state_path, state, n);
      SleepUnlessStopped(backoff_ms);
      backoff_ms = backoff_ms * 2 > kMaxBackoffMs ? kMaxBackoffMs : backoff_ms * 2;
      continue;
    }
    break;
  }
  char text[32];
  size_t n = FormatInt(text, exit_code);
  text[n++] = '\n';
  WriteFileAtomically(plan.exit_tmp_path, plan.exit_path, text, n);
  _exit(0);
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

std::optional<int> ReadSupervisorPid(const std::string& pid_path) {
  std::optional<std::string> text = ReadSmallFile(pid_path);
  int pid = 0;
  if (!text || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) || pid <= 0) {
    return std::nullopt;
  }
  return pid;
}

LogLine ParseLogLine(std::string_view line) {
  LogLine parsed;
  size_t space = line.find(' ');
  double time = 0;
  if (space != std::string_view::npos && line.size() >= space + 3 && line[space + 2] == ' ' &&
      (line[space + 1] == 'O' || line[space + 1] == 'E') &&
      absl::SimpleAtod(std::string(line.substr(0, space)), &time)) {
    parsed.time = time;
    parsed.stderr = line[space + 1] == 'E';
    parsed.message = std::string(line.substr(space + 3));
    return parsed;
  }
  parsed.message = std::string(line);
  return parsed;
}

absl::StatusOr<ProcessId> RealProcessLauncher::Launch(const LaunchRequest& request) {
  if (request.argv.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("replica ", request.name, ": empty command"));
  }
  std::optional<std::string> executable = FindExecutable(request.argv[0]);
  if (!executable.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("replica ", request.name, ": executable \"", request.argv[0],
                     "\" not found (not a path to an executable, nor on PATH)"));
  }
  std::error_code ec;
  for (const std::string& file : {request.log_path, request.exit_path, request.state_path}) {
    std::filesystem::create_directories(std::filesystem::path(file).parent_path(), ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat(
          "replica ", request.name, ": cannot create the folder of ", file, ": ", ec.message()));
    }
  }
  // A replica started again under the same name begins with no exit.
  std::filesystem::remove(request.exit_path, ec);
  std::filesystem::remove(request.state_path, ec);

  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  for (const auto& [name, value] : request.env) env[name] = value;
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<std::string> argv = request.argv;
  std::vector<char*> argv_ptrs = CStrings(argv);
  std::vector<char*> env_ptrs = CStrings(env_strings);
  const std::string exit_tmp = request.exit_path + ".tmp";
  const std::string state_tmp = request.state_path + ".tmp";
  const std::string pid_tmp = request.pid_path + ".tmp";
  if (!request.pid_path.empty()) std::filesystem::remove(request.pid_path, ec);
  SupervisorPlan plan{
      executable->c_str(),      argv_ptrs.data(),
      env_ptrs.data(),          request.working_dir.empty() ? nullptr : request.working_dir.c_str(),
      request.log_path.c_str(), request.exit_path.c_str(),
      exit_tmp.c_str(),         request.state_path.c_str(),
      state_tmp.c_str(),        request.pid_path.empty() ? nullptr : request.pid_path.c_str(),
      pid_tmp.c_str(),          request.restart_on_failure};

  int pid_pipe[2];
  if (pipe2(pid_pipe, O_CLOEXEC) != 0) {
    return absl::UnavailableError(
        absl::StrCat("replica ", request.name, ": pipe: ", std::strerror(errno)));
  }
  if (before_fork_for_test) before_fork_for_test(pid_pipe[0]);
  pid_t helper = fork();
  if (helper < 0) {
    close(pid_pipe[0]);
    close(pid_pipe[1]);
    return absl::UnavailableError(
        absl::StrCat("replica ", request.name, ": fork: ", std::strerror(errno)));
  }
  if (helper == 0) {
    close(pid_pipe[0]);
    pid_t supervisor = fork();
    if (supervisor == 0) RunSupervisor(plan, pid_pipe[1]);
    // The supervisor writes its own pid after setsid(); if it could not be
    // forked, the pipe closes empty and Launch reports that.
    _exit(supervisor > 0 ? 0 : 1);
  }
  close(pid_pipe[1]);
  int supervisor = -1;
  ssize_t n;
  while ((n = read(pid_pipe[0], &supervisor, sizeof(supervisor))) < 0 && errno == EINTR) {
  }
  close(pid_pipe[0]);
  int helper_status = 0;
  while (waitpid(helper, &helper_status, 0) < 0 && errno == EINTR) {
  }
  if (n != sizeof(supervisor) || supervisor <= 0) {
    return absl::UnavailableError(
        absl::StrCat("replica ", request.name, ": could not start its supervisor"));
  }
  return ProcessId{supervisor, ProcessStartTicks(supervisor).value_or(0)};
}

namespace {
// When `path` was last written (the supervisor writes each record once,
// atomically); InfinitePast when it cannot be read.
absl::Time WrittenAt(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::InfinitePast();
  return absl::TimeFromTimespec(st.st_mtim);
}
}  // namespace

ProcessStatus RealProcessLauncher::Probe(const ProcessId& id, const std::string& exit_path,
                                         const std::string& state_path) {
  ProcessStatus status;
  if (std::optional<std::string> state = ReadSmallFile(state_path)) {
    std::vector<std::string> parts = absl::StrSplit(absl::StripAsciiWhitespace(*state), ' ');
    int value = 0;
    if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &value)) {
      status.restarts = value;
      if (absl::SimpleAtoi(parts[1], &value)) status.last_exit_code = value;
      status.run_since = WrittenAt(state_path);
    }
  }
  auto read_exit = [&]() -> bool {
    std::optional<std::string> text = ReadSmallFile(exit_path);
    int code = 0;
    if (text.has_value() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &code)) {
      status.state = ProcessStatus::State::kExited;
      status.exit_code = code;
      status.finished = WrittenAt(exit_path);
      return true;
    }
    return false;
  };
  if (read_exit()) return status;
  if (ProcessAlive(id.pid, id.start_ticks)) {
    status.state = ProcessStatus::State::kRunning;
    return status;
  }
  // The supervisor may have written the file between the two looks.
  if (read_exit()) return status;
  status.state = ProcessStatus::State::kGone;
  return status;
}

bool RealProcessLauncher::Alive(const ProcessId& id) {
  if (id.pid <= 1) return false;
  if (ProcessAlive(id.pid, id.start_ticks)) return true;
  // With the leader gone, its pid cannot be reused as a group id while the
  // group still has members, so a group of that id is what it left behind.
  return !ProcessStartTicks(id.pid).has_value() && GroupAlive(id.pid);
}

absl::Status RealProcessLauncher::Terminate(const ProcessId& id) {
  if (id.pid <= 1) return absl::OkStatus();
  // A live supervisor passes SIGTERM on to its group itself and stays to log
  // the replica's last output and record its exit; signalling the group here
  // as well would give the replica a second SIGTERM during its shutdown.
  if (ProcessAlive(id.pid, id.start_ticks)) {
    kill(id.pid, SIGTERM);
  } else if (Alive(id)) {
    kill(-id.pid, SIGTERM);
  }
  return absl::OkStatus();
}

absl::Status RealProcessLauncher::ForceKill(const ProcessId& id) {
  if (Alive(id)) kill(-id.pid, SIGKILL);
  return absl::OkStatus();
}

absl::Status ProcessLauncher::Kill(const ProcessId& id) { return Kill(id, kKillGracePeriod); }

absl::Status ProcessLauncher::Kill(const ProcessId& id, absl::Duration grace) {
  auto wait_gone = [&](absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (Alive(id)) {
      if (absl::Now() > deadline) return false;
      SleepMs(20);
    }
    return true;
  };
  if (!Alive(id)) return absl::OkStatus();
  if (absl::Status s = Terminate(id); !s.ok()) return s;
  if (wait_gone(grace)) return absl::OkStatus();
  if (absl::Status s = ForceKill(id); !s.ok()) return s;
  if (wait_gone(absl::Seconds(5))) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("process group ", id.pid, " still has processes after SIGKILL"));
}

}  // namespace kubetrain::local
