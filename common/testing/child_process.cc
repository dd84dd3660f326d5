#include "common/testing/child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/process/process.h"

namespace kubetrain::test_support {
namespace {

void CloseIfOpen(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

ChildProcess::ChildProcess(ChildOptions options) : options_(std::move(options)) {}

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string output_path)
    : options_{.argv = std::move(argv),
               .output_path = std::move(output_path),
               .stop_grace = absl::Seconds(30)} {}

ChildProcess::~ChildProcess() {
  Stop();
  CloseIfOpen(stdin_fd_);
  CloseIfOpen(stdout_fd_);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(ChildOptions options) {
  auto child = std::make_unique<ChildProcess>(std::move(options));
  if (absl::Status started = child->Start(); !started.ok()) return started;
  return child;
}

absl::Status ChildProcess::Start() {
  if (pid_ > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(absl::StrJoin(options_.argv, " "), " is running"));
  }
  // Nothing of the test's beyond stdin/stdout/stderr: listening sockets of
  // servers in the test process, inherited without close-on-exec, would
  // otherwise be the child's too.
  process::SpawnOptions spawn{
      .argv = options_.argv, .env = options_.env, .cwd = options_.cwd, .close_other_fds = true};
  if (!options_.output_path.empty()) {
    const process::Stream file =
        process::Stream::File(options_.output_path, options_.append_output);
    spawn.out = file;
    spawn.err = options_.pipe_stdio ? file : process::Stream::SameAsStdout();
  }
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if (options_.pipe_stdio) {
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      const int error = errno;
      for (int& fd : in) CloseIfOpen(fd);
      return absl::InternalError(absl::StrCat("pipe: ", std::strerror(error)));
    }
    spawn.in = process::Stream::Fd(in[0]);
    spawn.out = process::Stream::Fd(out[1]);
  }
  absl::StatusOr<pid_t> pid = process::Spawn(spawn);
  // The child has its copies (or never started): the test keeps its ends.
  CloseIfOpen(in[0]);
  CloseIfOpen(out[1]);
  if (!pid.ok()) {
    CloseIfOpen(in[1]);
    CloseIfOpen(out[0]);
    return pid.status();
  }
  pid_ = *pid;
  stdin_fd_ = in[1];
  stdout_fd_ = out[0];
  buffer_.clear();
  exit_code_.reset();
  killed_by_signal_ = false;
  return absl::OkStatus();
}

void ChildProcess::Reaped(int wait_status) {
  const process::ExitStatus status = process::DecodeWaitStatus(wait_status);
  pid_ = -1;
  killed_by_signal_ = !status.exited();
  exit_code_ = status.code();
}

void ChildProcess::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

void ChildProcess::Kill() { Signal(SIGKILL); }

int ChildProcess::SignalAndWait(int signal) {
  if (pid_ <= 0) return exit_code_.value_or(-1);
  kill(pid_, signal);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  Reaped(status);
  return *exit_code_;
}

int ChildProcess::Stop() {
  if (pid_ <= 0) return exit_code_.value_or(-1);
  if (options_.stop_grace <= absl::ZeroDuration()) return SignalAndWait(SIGKILL);
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + options_.stop_grace;
  while (!Exited()) {
    if (absl::Now() > deadline) return SignalAndWait(SIGKILL);
    absl::SleepFor(absl::Milliseconds(20));
  }
  return *exit_code_;
}

bool ChildProcess::Exited() {
  if (pid_ <= 0) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  Reaped(status);
  return true;
}

bool ChildProcess::ReadSome(absl::Duration timeout) {
  const int64_t ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, 1000);
  pollfd p{stdout_fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(ms)) <= 0) return true;
  char chunk[4096];
  const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
  if (n <= 0) return false;
  buffer_.append(chunk, n);
  return true;
}

absl::StatusOr<int> ChildProcess::Wait(absl::Time deadline) {
  // With a pipe on stdout, its end-of-file comes when the child exits (or
  // hands it on to a process of its own): wait for that, keeping what it
  // printed.
  if (stdout_fd_ >= 0 && pid_ > 0) {
    while (ReadSome(deadline - absl::Now())) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " still running"));
      }
    }
  }
  while (!Exited()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " still running"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!exit_code_) return absl::FailedPreconditionError("the child process never started");
  return *exit_code_;
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Time deadline) {
  if (stdout_fd_ < 0) return absl::FailedPreconditionError("stdout is not a pipe (pipe_stdio)");
  for (;;) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("no line from pid ", pid_));
    }
    if (!ReadSome(left)) {
      return absl::OutOfRangeError(absl::StrCat("stdout of pid ", pid_, " closed"));
    }
  }
}

absl::Status ChildProcess::WriteLine(std::string_view line) {
  if (stdin_fd_ < 0) return absl::FailedPreconditionError("stdin is not a pipe (pipe_stdio)");
  const std::string text = std::string(line) + "\n";
  if (write(stdin_fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return absl::InternalError(absl::StrCat("write to pid ", pid_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string ChildProcess::Log() const {
  std::ifstream in(options_.output_path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<int> ListeningPort(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = opendir(fd_dir.c_str());
  if (d == nullptr) return std::nullopt;
  while (dirent* entry = readdir(d)) {
    char target[256];
    ssize_t n = readlink((fd_dir + "/" + entry->d_name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    std::string link(target);
    if (absl::StartsWith(link, "socket:[")) inodes.insert(link.substr(8, link.size() - 9));
  }
  closedir(d);
  std::ifstream tcp(absl::StrCat("/proc/", pid, "/net/tcp"));
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    // sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
    if (f.size() < 10 || f[3] != "0A" || inodes.count(f[9]) == 0) continue;
    int port = 0;
    if (absl::SimpleHexAtoi(f[1].substr(f[1].find(':') + 1), &port)) return port;
  }
  return std::nullopt;
}

}  // namespace kubetrain::test_support
