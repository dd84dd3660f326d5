#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace kubetrain::testing {

// A kubetrain-operator child process. Its stderr goes to `log_path`.
// Killed with SIGKILL (if still running) when destroyed.
class OperatorProcess {
 public:
  OperatorProcess(std::string binary, std::vector<std::string> args, std::string log_path);
  ~OperatorProcess();
  OperatorProcess(const OperatorProcess&) = delete;
  OperatorProcess& operator=(const OperatorProcess&) = delete;

  bool Start();
  void Kill(int signal);  // sends `signal` and reaps the process
  // Sends SIGTERM and waits; the exit status (-1 when killed by a signal).
  int Terminate();
  // Waits for the process to exit by itself; its exit status (-1 when killed
  // by a signal or not running).
  int Wait();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  std::string Log() const;  // what it wrote to stderr so far

 private:
  std::string binary_;
  std::vector<std::string> args_;
  std::string log_path_;
  pid_t pid_ = -1;
};

}  // namespace kubetrain::testing
