#include "tests/deploy/child_process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kubetrain::deploy_testing {

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string log_path)
    : argv_(std::move(argv)), log_path_(std::move(log_path)) {}

ChildProcess::~ChildProcess() { Stop(); }

bool ChildProcess::Start() {
  if (argv_.empty()) return false;
  std::vector<char*> args;
  for (std::string& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  // Start() returns once the child has exec'd (the close-on-exec pipe closes)
  // or failed to (it writes errno): until then the child still holds the
  // test's descriptors, and /proc would show them as its own.
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) return false;
  pid_ = fork();
  if (pid_ < 0) {
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    return false;
  }
  if (pid_ == 0) {
    close(exec_pipe[0]);
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    // Nothing else of ours: listening sockets of servers in the test process,
    // inherited without close-on-exec, would otherwise be the child's too.
    if (exec_pipe[1] != 3) {
      dup2(exec_pipe[1], 3);  // dup2 clears close-on-exec: set it again
      fcntl(3, F_SETFD, FD_CLOEXEC);
    }
    close_range(4, ~0U, 0);
    execv(args[0], args.data());
    int error = errno;
    (void)!write(3, &error, sizeof(error));
    _exit(127);
  }
  close(exec_pipe[1]);
  int error = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &error, sizeof(error));
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n > 0) {  // exec failed; the child has exited
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return false;
  }
  return true;
}

void ChildProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  int status;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  pid_ = -1;
}

bool ChildProcess::Exited() {
  if (pid_ <= 0) return true;
  int status;
  if (waitpid(pid_, &status, WNOHANG) == 0) return false;
  pid_ = -1;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

std::string ChildProcess::Log() const {
  std::ifstream in(log_path_);
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

}  // namespace kubetrain::deploy_testing
