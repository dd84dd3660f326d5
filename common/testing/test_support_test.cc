#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/child_process.h"
#include "common/testing/held_port.h"
#include "common/testing/runtime_output.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::test_support {
namespace {

namespace fs = std::filesystem;

TEST(TempDirTest, IsAFreshFolderRemovedWithItsContentAtScopeExit) {
  std::string path;
  {
    TempDir dir("kubetrain-tempdir-test");
    path = dir.path();
    ASSERT_TRUE(fs::is_directory(path));
    EXPECT_TRUE(fs::is_empty(path));
    EXPECT_NE(fs::path(path).filename().string().find("kubetrain-tempdir-test-"), std::string::npos)
        << path;
    fs::create_directories(dir.Path("a/b"));
    std::ofstream(dir.Path("a/b/file")) << "x";
    EXPECT_EQ(dir.Path("a/b/file"), path + "/a/b/file");
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(TempDirTest, TwoAreDistinct) {
  TempDir a, b;
  EXPECT_NE(a.path(), b.path());
}

TEST(TempDirTest, AMovedFolderIsRemovedOnceByItsLastOwner) {
  std::string path;
  {
    TempDir outer("kubetrain-tempdir-move");
    {
      TempDir inner("kubetrain-tempdir-move");
      path = inner.path();
      outer = std::move(inner);  // the first folder of `outer` goes now
      EXPECT_TRUE(inner.path().empty());
    }
    EXPECT_EQ(outer.path(), path);
    EXPECT_TRUE(fs::is_directory(path));
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(WaitUntilTest, ReturnsOnceTheConditionHolds) {
  int calls = 0;
  EXPECT_TRUE(WaitUntil([&] { return ++calls == 3; }, absl::Seconds(60), absl::Milliseconds(1)));
  EXPECT_EQ(calls, 3);
}

TEST(WaitUntilTest, IsFalseWhenTheConditionNeverHoldsAndAsksOnceMoreAtTheDeadline) {
  const absl::Time start = absl::Now();
  int calls = 0;
  EXPECT_FALSE(WaitUntil(
      [&] {
        ++calls;
        return false;
      },
      absl::Milliseconds(50), absl::Milliseconds(10)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_GE(calls, 2);
}

absl::Time Soon() { return absl::Now() + absl::Seconds(60); }

TEST(RuntimeOutputTest, TheLatestCheckpointIsTheIndexsFirstPath) {
  TempDir dir;
  EXPECT_EQ(LatestCheckpointStep(dir.path()), -1);
  std::ofstream(dir.path() + "/checkpoint") << "model_checkpoint_path: \"model.ckpt-1200\"\n"
                                            << "all_model_checkpoint_paths: \"model.ckpt-1100\"\n"
                                            << "all_model_checkpoint_paths: \"model.ckpt-1200\"\n";
  EXPECT_EQ(LatestCheckpointStep(dir.path()), 1200);
}

TEST(RuntimeOutputTest, TheLastFinalMetricsLineCounts) {
  EXPECT_FALSE(LastFinalMetrics("Done after 1200 steps (the chief evaluates)\n").has_value());
  const std::optional<FinalMetrics> last = LastFinalMetrics(
      "Final metrics after 800 steps, loss: 0.612, accuracy: 0.790\n"
      "Restored checkpoint at step 800 from /out\n"
      "Final metrics after 1201 steps, loss: 0.500, accuracy: 0.820\n");
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->step, 1201);
  EXPECT_DOUBLE_EQ(last->loss, 0.5);
  EXPECT_DOUBLE_EQ(last->accuracy, 0.82);
}

// errno of a TCP dial to 127.0.0.1:port, 0 when it connects.
int DialError(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int error = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
  close(fd);
  return error;
}

// errno of a server binding 0.0.0.0:port as gRPC does (SO_REUSEADDR and
// SO_REUSEPORT), 0 when it binds and listens.
int ServeError(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int error =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(fd, 1) == 0 ? 0
                                                                                            : errno;
  close(fd);
  return error;
}

TEST(HeldPortTest, RefusesDialsAndServersUntilReleased) {
  absl::StatusOr<HeldPort> held = HeldPort::Take();
  ASSERT_TRUE(held.ok()) << held.status();
  const int port = held->port();
  EXPECT_GT(port, 0);
  EXPECT_EQ(held->address(), absl::StrCat("127.0.0.1:", port));
  EXPECT_EQ(DialError(port), ECONNREFUSED);
  EXPECT_EQ(ServeError(port), EADDRINUSE);
  EXPECT_EQ(held->Release(), port);
  EXPECT_EQ(ServeError(port), 0);
}

TEST(HeldPortTest, TwoAreDistinctAndAMovedOneIsHeldOnce) {
  absl::StatusOr<HeldPort> a = HeldPort::Take();
  absl::StatusOr<HeldPort> b = HeldPort::Take();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->port(), b->port());
  HeldPort moved = std::move(*a);
  EXPECT_EQ(ServeError(moved.port()), EADDRINUSE);
  const int port = moved.port();
  { HeldPort gone = std::move(moved); }
  EXPECT_EQ(ServeError(port), 0);
}

TEST(ChildProcessTest, OutputGoesToTheFileAndTheExitCodeIsReported) {
  TempDir dir;
  ChildProcess child({"/bin/sh", "-c", "echo out; echo err >&2; exit 7"}, dir.Path("log"));
  ASSERT_TRUE(child.Start().ok());
  absl::StatusOr<int> code = child.Wait(Soon());
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 7);
  EXPECT_EQ(child.exit_code(), 7);
  EXPECT_FALSE(child.killed_by_signal());
  EXPECT_FALSE(child.running());
  EXPECT_EQ(child.Log(), "out\nerr\n");
}

TEST(ChildProcessTest, ASignalEndingItIs128PlusItsNumber) {
  auto child = ChildProcess::Spawn({.argv = {"/bin/sleep", "600"}});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_FALSE((*child)->Exited());
  EXPECT_EQ((*child)->SignalAndWait(SIGTERM), 128 + SIGTERM);
  EXPECT_TRUE((*child)->killed_by_signal());
}

TEST(ChildProcessTest, StopWaitsTheGraceForSigtermThenKills) {
  TempDir dir;
  ChildProcess child(
      {.argv = {"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"},
       .output_path = dir.Path("log"),
       .pipe_stdio = true,
       .stop_grace = absl::Milliseconds(300)});
  ASSERT_TRUE(child.Start().ok());
  ASSERT_EQ(child.ReadLine(Soon()).value_or(""), "ready");
  const absl::Time start = absl::Now();
  EXPECT_EQ(child.Stop(), 128 + SIGKILL);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
}

TEST(ChildProcessTest, PipesCarryLinesBothWays) {
  auto child =
      ChildProcess::Spawn({.argv = {"/bin/sh", "-c", "read line; echo \"got $line\"; echo second"},
                           .pipe_stdio = true});
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE((*child)->WriteLine("hello").ok());
  EXPECT_EQ((*child)->ReadLine(Soon()).value_or(""), "got hello");
  absl::StatusOr<int> code = (*child)->Wait(Soon());
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  // What it printed before it ended is kept for ReadLine.
  EXPECT_EQ((*child)->ReadLine(Soon()).value_or(""), "second");
  EXPECT_EQ((*child)->ReadLine(Soon()).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ChildProcessTest, WaitIsDeadlineExceededWhileItRuns) {
  auto child = ChildProcess::Spawn({.argv = {"/bin/sleep", "600"}});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ((*child)->Wait(absl::Now() + absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*child)->running());
}

TEST(ChildProcessTest, RunsWithTheGivenEnvironmentAndWorkingDirectory) {
  TempDir dir;
  ChildProcess child({.argv = {"/bin/sh", "-c", "echo \"$ONLY $HOME\"; pwd"},
                      .output_path = dir.Path("log"),
                      .env = std::vector<std::string>{"ONLY=this"},
                      .cwd = dir.path()});
  ASSERT_TRUE(child.Start().ok());
  ASSERT_EQ(child.Wait(Soon()).value_or(-1), 0);
  EXPECT_EQ(child.Log(), "this \n" + fs::canonical(dir.path()).string() + "\n");
}

TEST(ChildProcessTest, InheritsNoOtherDescriptorOfTheTest) {
  TempDir dir;
  const int inheritable = open(dir.Path("held").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(inheritable, 3);
  ChildProcess child({"/bin/sh", "-c", "ls /proc/self/fd"}, dir.Path("log"));
  ASSERT_TRUE(child.Start().ok());
  ASSERT_EQ(child.Wait(Soon()).value_or(-1), 0);
  close(inheritable);
  // 0, 1, 2 and the descriptor ls opens to read the folder.
  EXPECT_EQ(child.Log(), "0\n1\n2\n3\n");
}

TEST(ChildProcessTest, AProgramThatCannotRunIsAnErrorNamingIt) {
  TempDir dir;
  ChildProcess missing({dir.Path("no-such-program")}, dir.Path("log"));
  absl::Status started = missing.Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(started.message()), ::testing::HasSubstr("no-such-program"));
  EXPECT_THAT(std::string(started.message()), ::testing::HasSubstr("command not found"));
  EXPECT_FALSE(missing.running());

  ChildProcess elsewhere({.argv = {"/bin/true"}, .cwd = dir.Path("no-such-folder")});
  started = elsewhere.Start();
  EXPECT_THAT(std::string(started.message()), ::testing::HasSubstr("cannot enter"));
  EXPECT_THAT(std::string(started.message()), ::testing::HasSubstr("no-such-folder"));
}

}  // namespace
}  // namespace kubetrain::test_support
