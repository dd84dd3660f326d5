#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace kubetrain::deploy_testing {

// A child process (a server the test talks to) with stdout and stderr in a
// log file. It inherits no other file descriptor of the test. Stopped with
// SIGTERM (then SIGKILL after 30 s) when destroyed. Not thread-safe.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, std::string log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool Start();
  void Stop();
  // True once the process has exited (it is then reaped).
  bool Exited();
  // Once Exited() said so: its exit code, or 128 + N when signal N ended it.
  std::optional<int> exit_code() const { return exit_code_; }
  pid_t pid() const { return pid_; }
  std::string Log() const;

 private:
  std::vector<std::string> argv_;
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// The IPv4 TCP port `pid` listens on, found through /proc (for servers
// started on port 0 that do not print the port they got); nullopt while it
// listens on none.
std::optional<int> ListeningPort(pid_t pid);

}  // namespace kubetrain::deploy_testing
