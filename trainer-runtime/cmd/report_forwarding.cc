#include "trainer-runtime/cmd/report_forwarding.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kubetrain::runtime::cmd {
namespace {

// The write end of the pipe the signal handler writes to.
int signal_pipe = -1;

void OnSignal(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  // Non-blocking: when the pipe is full, the loop has signals to read anyway.
  [[maybe_unused]] ssize_t ignored = write(signal_pipe, &byte, 1);
  errno = saved_errno;
}

}  // namespace

void ForwardNewReports(hypertune::HypertuneFileFollower& follower, const std::string& path,
                       TrialReporter& reporter, std::string_view who) {
  absl::StatusOr<std::vector<hypertune::HypertuneReport>> fresh = follower.PollFile(path);
  if (!fresh.ok()) {
    std::cerr << who << ": warning: " << fresh.status().message() << std::endl;
    return;
  }
  for (const hypertune::HypertuneReport& report : *fresh) {
    reporter.Report(report.global_step, report.metrics, report.final);
  }
}

absl::StatusOr<int> CatchSignalsInAPipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  signal_pipe = fds[1];
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int sig : {SIGTERM, SIGINT, SIGCHLD}) sigaction(sig, &action, nullptr);
  return fds[0];
}

int ReadTerminationSignal(int signals, pid_t child) {
  int termination = 0;
  unsigned char caught[64];
  for (ssize_t n; (n = read(signals, caught, sizeof(caught))) > 0;) {
    for (ssize_t i = 0; i < n; ++i) {
      if (caught[i] != SIGTERM && caught[i] != SIGINT) continue;
      termination = caught[i];
      if (child > 0) kill(child, caught[i]);
    }
  }
  return termination;
}

}  // namespace kubetrain::runtime::cmd
