#include "operator/local/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::local {
namespace {

using ::testing::HasSubstr;

using test_support::ReadFile;

LaunchRequest ShellRequest(const test_support::TempDir& dir, const std::string& script) {
  LaunchRequest r;
  r.name = "test-replica";
  r.argv = {"/bin/sh", "-c", script};
  r.env = {{"KT_DIR", dir.path()}};
  r.log_path = dir.path() + "/logs/task.log";
  r.exit_path = dir.path() + "/run/task.exit";
  r.state_path = dir.path() + "/run/task.state";
  return r;
}

TEST(ProcessLauncherTest, LogsLinesWithStreamAndRecordsExitCode) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  auto id =
      launcher.Launch(ShellRequest(dir, "echo out-line; echo err-line >&2; echo $KT_DIR; exit 3"));
  ASSERT_TRUE(id.ok()) << id.status();
  ProcessStatus status;
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        status = launcher.Probe(*id, dir.path() + "/run/task.exit", dir.path() + "/run/task.state");
        return status.state != ProcessStatus::State::kRunning;
      },
      absl::Seconds(20)));
  EXPECT_EQ(status.state, ProcessStatus::State::kExited);
  EXPECT_EQ(status.exit_code, 3);
  std::istringstream log(ReadFile(dir.path() + "/logs/task.log"));
  std::vector<LogLine> lines;
  for (std::string line; std::getline(log, line);) lines.push_back(ParseLogLine(line));
  ASSERT_EQ(lines.size(), 3u);
  std::map<std::string, bool> stderr_of;
  for (const LogLine& l : lines) {
    EXPECT_GT(l.time, 1.6e9);
    stderr_of[l.message] = l.stderr;
  }
  EXPECT_FALSE(stderr_of.at("out-line"));
  EXPECT_TRUE(stderr_of.at("err-line"));
  EXPECT_TRUE(stderr_of.count(dir.path()));  // env reached the replica
}

TEST(ProcessLauncherTest, RestartsInPlaceOnFailureWhenAsked) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  LaunchRequest request = ShellRequest(
      dir,
      "if [ -f \"$KT_DIR/once\" ]; then exit 0; fi; touch \"$KT_DIR/once\"; echo boom >&2; exit 1");
  request.restart_on_failure = true;
  const absl::Time launched = absl::Now();
  auto id = launcher.Launch(request);
  ASSERT_TRUE(id.ok()) << id.status();
  ProcessStatus status;
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        status = launcher.Probe(*id, request.exit_path, request.state_path);
        return status.state == ProcessStatus::State::kExited;
      },
      absl::Seconds(20)));
  const absl::Time probed = absl::Now();
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_EQ(status.restarts, 1);
  EXPECT_EQ(status.last_exit_code, 1);
  // The second run began after the first ended, and ended after that. (File
  // times come from the kernel's coarse clock: up to a tick behind.)
  EXPECT_GE(status.run_since, launched - absl::Milliseconds(20));
  EXPECT_GE(status.finished, status.run_since);
  EXPECT_LE(status.finished, probed);
}

TEST(ProcessLauncherTest, KillLeavesNoProcessOfTheGroup) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  // The replica starts a background child and reports its pid.
  LaunchRequest request = ShellRequest(dir,
                                       "sleep 300 & echo $! > \"$KT_DIR/child.tmp\"; mv "
                                       "\"$KT_DIR/child.tmp\" \"$KT_DIR/child\"; wait");
  auto id = launcher.Launch(request);
  ASSERT_TRUE(id.ok()) << id.status();
  int child = 0;
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(dir.path() + "/child")),
                                &child);
      },
      absl::Seconds(20)));
  ASSERT_TRUE(ProcessAlive(child, 0));
  EXPECT_EQ(launcher.Probe(*id, request.exit_path, request.state_path).state,
            ProcessStatus::State::kRunning);
  ASSERT_TRUE(launcher.Kill(*id).ok());
  EXPECT_FALSE(ProcessAlive(child, 0));
  EXPECT_FALSE(ProcessAlive(id->pid, id->start_ticks));
  EXPECT_TRUE(launcher.Kill(*id).ok());  // already gone: success
}

// Cancel: the replica gets one SIGTERM and its shutdown output and exit are
// on record, as for a pod whose container handles SIGTERM.
TEST(ProcessLauncherTest, KillLetsTheReplicaShutDownWithItsOutputAndExitOnRecord) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  LaunchRequest request =
      ShellRequest(dir,
                   "trap 'echo got TERM; echo bye >&2; exit 0' TERM; touch \"$KT_DIR/ready\"; "
                   "sleep 300 & wait $!; echo woke without a signal; exit 5");
  auto id = launcher.Launch(request);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(test_support::WaitUntil(
      [&] { return std::filesystem::exists(dir.path() + "/ready"); }, absl::Seconds(20)));
  ASSERT_TRUE(launcher.Kill(*id).ok());
  EXPECT_FALSE(ProcessAlive(id->pid, id->start_ticks));
  std::istringstream log(ReadFile(request.log_path));
  std::vector<std::string> messages;
  for (std::string line; std::getline(log, line);) messages.push_back(ParseLogLine(line).message);
  // The shell may also report its background job's end ("Terminated").
  EXPECT_THAT(messages, ::testing::IsSupersetOf({"got TERM", "bye"}));
  EXPECT_THAT(messages, ::testing::Not(::testing::Contains("woke without a signal")));
  ProcessStatus status = launcher.Probe(*id, request.exit_path, request.state_path);
  EXPECT_EQ(status.state, ProcessStatus::State::kExited);
  EXPECT_EQ(status.exit_code, 0);
}

// A replica that ignores SIGTERM is still ended, with all it started.
TEST(ProcessLauncherTest, KillEndsAReplicaThatIgnoresTerm) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  LaunchRequest request =
      ShellRequest(dir,
                   "trap '' TERM; sleep 300 & echo $! > \"$KT_DIR/child.tmp\"; "
                   "mv \"$KT_DIR/child.tmp\" \"$KT_DIR/child\"; while :; do wait; done");
  auto id = launcher.Launch(request);
  ASSERT_TRUE(id.ok()) << id.status();
  int child = 0;
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(dir.path() + "/child")),
                                &child);
      },
      absl::Seconds(20)));
  ASSERT_TRUE(launcher.Kill(*id).ok());
  EXPECT_FALSE(ProcessAlive(child, 0));
  EXPECT_FALSE(ProcessAlive(id->pid, id->start_ticks));
}

TEST(ProcessLauncherTest, SupervisorKilledFromOutsideIsGone) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  LaunchRequest request = ShellRequest(dir, "exec sleep 300");
  auto id = launcher.Launch(request);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(kill(-id->pid, SIGKILL), 0);
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        return launcher.Probe(*id, request.exit_path, request.state_path).state ==
               ProcessStatus::State::kGone;
      },
      absl::Seconds(20)));
}

TEST(ProcessLauncherTest, ReplicaStartsWhenItsControllerDiesBeforeTheSupervisorReports) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  // The controller's disposition of SIGPIPE, which its children inherit.
  struct sigaction default_pipe = {};
  struct sigaction previous_pipe = {};
  default_pipe.sa_handler = SIG_DFL;
  sigemptyset(&default_pipe.sa_mask);
  sigaction(SIGPIPE, &default_pipe, &previous_pipe);
  absl::Cleanup restore_pipe = [&] { sigaction(SIGPIPE, &previous_pipe, nullptr); };
  // Killed after forking, before the supervisor wrote its pid to the pipe:
  // to the supervisor, the pipe has no reader left.
  launcher.before_fork_for_test = [](int report_fd) {
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(null_fd, 0);
    ASSERT_EQ(dup2(null_fd, report_fd), report_fd);
    close(null_fd);
  };
  LaunchRequest request = ShellRequest(dir, "echo ran > \"$KT_DIR/ran\"");
  request.pid_path = dir.path() + "/run/task.pid";
  EXPECT_FALSE(launcher.Launch(request).ok());  // no pid reached the controller
  // What a restarted controller goes by: the pid file, then the exit file.
  int pid = 0;
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        return absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(request.pid_path)), &pid);
      },
      absl::Seconds(20)))
      << "the supervisor never recorded its pid";
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        return launcher.Probe({pid, 0}, request.exit_path, request.state_path).state ==
               ProcessStatus::State::kExited;
      },
      absl::Seconds(20)));
  EXPECT_EQ(launcher.Probe({pid, 0}, request.exit_path, request.state_path).exit_code, 0);
  EXPECT_EQ(ReadFile(dir.path() + "/ran"), "ran\n");
}

TEST(ProcessLauncherTest, SupervisorThatCannotRecordItsPidDoesNotStartTheReplica) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  LaunchRequest request = ShellRequest(dir, "echo ran > \"$KT_DIR/ran\"");
  // A folder in the way: the pid file cannot be written.
  request.pid_path = dir.path() + "/run/task.pid";
  std::filesystem::create_directories(request.pid_path + ".tmp");
  auto id = launcher.Launch(request);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        return launcher.Probe(*id, request.exit_path, request.state_path).state ==
               ProcessStatus::State::kExited;
      },
      absl::Seconds(20)));
  EXPECT_EQ(launcher.Probe(*id, request.exit_path, request.state_path).exit_code, 127);
  EXPECT_THAT(ReadFile(request.log_path),
              HasSubstr("cannot record the supervisor's pid in " + request.pid_path));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/ran"));
}

TEST(ProcessLauncherTest, MissingExecutableIsAnErrorNamingIt) {
  test_support::TempDir dir;
  RealProcessLauncher launcher;
  LaunchRequest request = ShellRequest(dir, "");
  request.argv = {"no-such-program-kubetrain"};
  auto id = launcher.Launch(request);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(id.status().message(), HasSubstr("no-such-program-kubetrain"));
  EXPECT_THAT(id.status().message(), HasSubstr("test-replica"));
}

TEST(ProcessLauncherTest, ParseLogLineKeepsUnprefixedLinesWhole) {
  LogLine l = ParseLogLine("1700000000.123456 E something failed");
  EXPECT_DOUBLE_EQ(l.time, 1700000000.123456);
  EXPECT_TRUE(l.stderr);
  EXPECT_EQ(l.message, "something failed");
  LogLine raw = ParseLogLine("plain text line");
  EXPECT_EQ(raw.time, 0);
  EXPECT_FALSE(raw.stderr);
  EXPECT_EQ(raw.message, "plain text line");
}

}  // namespace
}  // namespace kubetrain::local
