#include "tests/operator/operator_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace kubetrain::testing {

OperatorProcess::OperatorProcess(std::string binary, std::vector<std::string> args,
                                 std::string log_path)
    : binary_(std::move(binary)), args_(std::move(args)), log_path_(std::move(log_path)) {}

OperatorProcess::~OperatorProcess() {
  if (pid_ > 0) Kill(SIGKILL);
}

bool OperatorProcess::Start() {
  std::vector<char*> argv;
  argv.push_back(binary_.data());
  for (std::string& a : args_) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return false;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return false;
  }
  if (pid == 0) {
    ::dup2(log_fd, STDERR_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::execv(binary_.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  pid_ = pid;
  return true;
}

void OperatorProcess::Kill(int signal) {
  if (pid_ <= 0) return;
  ::kill(pid_, signal);
  int status;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

int OperatorProcess::Terminate() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int OperatorProcess::Wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string OperatorProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace kubetrain::testing
