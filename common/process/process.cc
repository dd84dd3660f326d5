#include "common/process/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace kubetrain::process {
namespace {

// What the child reports on the close-on-exec pipe when it cannot run the
// program; the pipe closing without a report means it exec'd.
struct ChildFailure {
  int stage;
  int error;  // errno
};
constexpr int kStageChdir = 1;
constexpr int kStageExec = 2;
constexpr int kStageFork = 3;  // SpawnDetached's second fork

// PATH where the child's environment has none (glibc's execvp default).
constexpr char kDefaultPath[] = "/bin:/usr/bin";

void CloseIfOpen(int fd) {
  if (fd >= 0) close(fd);
}

// Everything the child needs, made before the fork: after it the child
// touches only this (no allocation, no locks).
class Prepared {
 public:
  Prepared() = default;
  Prepared(const Prepared&) = delete;
  Prepared& operator=(const Prepared&) = delete;
  ~Prepared() {
    for (int fd : opened_) CloseIfOpen(fd);
    CloseIfOpen(report_[0]);
    CloseIfOpen(report_[1]);
  }

  absl::Status Prepare(const SpawnOptions& options) {
    options_ = &options;
    if (options.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
    program_ = options.argv[0];
    args_ = options.argv;
    for (std::string& a : args_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    std::string path_var;
    if (options.env) {
      env_ = *options.env;
      for (std::string& e : env_) envp_.push_back(e.data());
      envp_.push_back(nullptr);
      for (const std::string& e : env_) {
        if (absl::StartsWith(e, "PATH=")) path_var = e.substr(5);
      }
    } else if (const char* path = std::getenv("PATH"); path != nullptr) {
      path_var = path;
    }
    if (options.search_path && program_.find('/') == std::string::npos && !program_.empty()) {
      for (absl::string_view folder :
           absl::StrSplit(path_var.empty() ? kDefaultPath : path_var, ':')) {
        candidates_.push_back(absl::StrCat(folder.empty() ? "." : folder, "/", program_));
      }
    } else {
      candidates_.push_back(program_);
    }
    if (absl::Status s = Source(options.in, STDIN_FILENO, O_RDONLY); !s.ok()) return s;
    if (absl::Status s = Source(options.out, STDOUT_FILENO, O_WRONLY); !s.ok()) return s;
    if (absl::Status s = Source(options.err, STDERR_FILENO, O_WRONLY); !s.ok()) return s;
    if (pipe2(report_, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat(program_, ": pipe: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  // In the child: redirects, enters the folder and execs; reports what
  // failed and exits otherwise.
  [[noreturn]] void RunChild(pid_t parent, const sigset_t& old_mask) {
    // Handlers of ours must not run in the child (they would act on our
    // descriptors); exec resets them anyway, this covers the time before.
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction action;
      if (sigaction(sig, nullptr, &action) != 0) continue;
      if (action.sa_handler == SIG_IGN || action.sa_handler == SIG_DFL) continue;
      action = {};
      action.sa_handler = SIG_DFL;
      sigemptyset(&action.sa_mask);
      sigaction(sig, &action, nullptr);
    }
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    if (options_->parent_death_signal != 0) {
      prctl(PR_SET_PDEATHSIG, options_->parent_death_signal);
      if (getppid() != parent) _exit(1);
    }
    for (int target = 0; target < 3; ++target) {
      const int source = sources_[target];
      if (source == kKeep) continue;
      const int from = source == kStdoutSource ? STDOUT_FILENO : source;
      if (from == target) {
        fcntl(target, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
      } else {
        dup2(from, target);
      }
    }
    int report = report_[1];
    if (options_->close_other_fds) {
      if (report != 3) {
        dup2(report, 3);  // dup2 clears close-on-exec: set it again
        fcntl(3, F_SETFD, FD_CLOEXEC);
        report = 3;
      }
      close_range(4, ~0U, 0);
    }
    ChildFailure failure{kStageChdir, 0};
    if (options_->cwd.empty() || chdir(options_->cwd.c_str()) == 0) {
      failure.stage = kStageExec;
      char** envp = options_->env ? envp_.data() : environ;
      // As execvp: on to the next folder past one that lacks the program;
      // EACCES from any of them is what is reported when none runs.
      bool denied = false;
      for (std::string& candidate : candidates_) {
        execve(candidate.c_str(), argv_.data(), envp);
        failure.error = errno;
        if (failure.error == EACCES) {
          denied = true;
        } else if (failure.error != ENOENT && failure.error != ENOTDIR && failure.error != ESTALE &&
                   failure.error != ENODEV && failure.error != ETIMEDOUT) {
          break;
        }
      }
      if (denied && (failure.error == ENOENT || failure.error == ENOTDIR)) failure.error = EACCES;
    } else {
      failure.error = errno;
    }
    Report(report, failure);
    _exit(127);
  }

  static void Report(int fd, ChildFailure failure) { (void)!write(fd, &failure, sizeof(failure)); }

  // In the parent after the fork: closes the child's ends and waits for the
  // exec (end of file) or a failure report.
  std::optional<ChildFailure> AwaitExec() {
    for (int& fd : opened_) {
      CloseIfOpen(fd);
      fd = -1;
    }
    CloseIfOpen(report_[1]);
    report_[1] = -1;
    ChildFailure failure{0, 0};
    ssize_t n;
    do {
      n = read(report_[0], &failure, sizeof(failure));
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof(failure))) return failure;
    return std::nullopt;
  }

  absl::Status Failed(ChildFailure failure) const {
    const char* why = std::strerror(failure.error);
    switch (failure.stage) {
      case kStageChdir:
        return absl::FailedPreconditionError(
            absl::StrCat(program_, ": cannot enter ", options_->cwd, ": ", why));
      case kStageFork:
        return absl::UnavailableError(absl::StrCat(program_, ": fork: ", why));
      default:
        if (failure.error == ENOENT) {
          return absl::NotFoundError(absl::StrCat(program_, ": command not found"));
        }
        if (failure.error == EACCES) {
          return absl::PermissionDeniedError(absl::StrCat(program_, ": ", why));
        }
        return absl::FailedPreconditionError(absl::StrCat(program_, ": ", why));
    }
  }

  int report_write_end() const { return report_[1]; }
  const std::string& program() const { return program_; }

 private:
  static constexpr int kKeep = -1;
  static constexpr int kStdoutSource = -2;

  absl::Status Source(const Stream& stream, int target, int flags) {
    switch (stream.kind) {
      case Stream::Kind::kInherit:
        sources_[target] = kKeep;
        return absl::OkStatus();
      case Stream::Kind::kFd:
        sources_[target] = stream.fd;
        return absl::OkStatus();
      case Stream::Kind::kStdout:
        if (target != STDERR_FILENO) {
          return absl::InvalidArgumentError(
              absl::StrCat(program_, ": only stderr can go where stdout goes"));
        }
        sources_[target] = kStdoutSource;
        return absl::OkStatus();
      case Stream::Kind::kDevNull:
      case Stream::Kind::kFile: {
        const bool file = stream.kind == Stream::Kind::kFile;
        const std::string path = file ? stream.path : "/dev/null";
        if (file && flags != O_RDONLY) flags |= O_CREAT | (stream.append ? O_APPEND : O_TRUNC);
        const int fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
        if (fd < 0) {
          return absl::FailedPreconditionError(
              absl::StrCat(program_, ": cannot open ", path, ": ", std::strerror(errno)));
        }
        opened_.push_back(fd);
        sources_[target] = fd;
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(program_, ": unknown stream kind"));
  }

  const SpawnOptions* options_ = nullptr;
  std::string program_;
  std::vector<std::string> args_, env_, candidates_;
  std::vector<char*> argv_, envp_;
  int sources_[3] = {kKeep, kKeep, kKeep};
  std::vector<int> opened_;
  int report_[2] = {-1, -1};
};

// Blocks every signal of this thread until destroyed: a handler must not run
// in the child before it has reset the handlers.
class BlockSignals {
 public:
  BlockSignals() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~BlockSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  const sigset_t& old() const { return old_; }

 private:
  sigset_t old_;
};

void Reap(pid_t pid) {
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  Prepared prepared;
  if (absl::Status s = prepared.Prepare(options); !s.ok()) return s;
  const pid_t parent = getpid();
  pid_t pid;
  int fork_error;
  {
    BlockSignals blocked;
    pid = fork();
    if (pid == 0) prepared.RunChild(parent, blocked.old());
    fork_error = errno;
  }
  if (pid < 0) {
    return absl::UnavailableError(
        absl::StrCat(prepared.program(), ": fork: ", std::strerror(fork_error)));
  }
  if (std::optional<ChildFailure> failure = prepared.AwaitExec()) {
    Reap(pid);  // it has exited with 127
    return prepared.Failed(*failure);
  }
  return pid;
}

absl::Status SpawnDetached(const SpawnOptions& options) {
  SpawnOptions detached = options;
  detached.parent_death_signal = 0;
  Prepared prepared;
  if (absl::Status s = prepared.Prepare(detached); !s.ok()) return s;
  pid_t intermediate;
  int fork_error;
  {
    BlockSignals blocked;
    intermediate = fork();
    if (intermediate == 0) {
      setsid();
      const pid_t daemon = fork();
      if (daemon == 0) prepared.RunChild(getppid(), blocked.old());
      if (daemon < 0) Prepared::Report(prepared.report_write_end(), {kStageFork, errno});
      _exit(0);
    }
    fork_error = errno;
  }
  if (intermediate < 0) {
    return absl::UnavailableError(
        absl::StrCat(prepared.program(), ": fork: ", std::strerror(fork_error)));
  }
  Reap(intermediate);
  if (std::optional<ChildFailure> failure = prepared.AwaitExec()) return prepared.Failed(*failure);
  return absl::OkStatus();
}

ExitStatus DecodeWaitStatus(int wait_status) {
  if (WIFSIGNALED(wait_status)) return {.exit_code = 0, .signal = WTERMSIG(wait_status)};
  return {.exit_code = WEXITSTATUS(wait_status), .signal = 0};
}

absl::StatusOr<ExitStatus> WaitForExit(pid_t pid, std::string_view program) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("waiting for ", std::string(program), " (pid ", pid,
                                              "): ", std::strerror(errno)));
    }
  }
  return DecodeWaitStatus(status);
}

absl::StatusOr<ExitStatus> RunToExit(const SpawnOptions& options) {
  absl::StatusOr<pid_t> pid = Spawn(options);
  if (!pid.ok()) return pid.status();
  return WaitForExit(*pid, options.argv[0]);
}

}  // namespace kubetrain::process
