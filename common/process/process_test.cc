#include "common/process/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::process {
namespace {

using ::testing::HasSubstr;

using test_support::ReadFile;

SpawnOptions Shell(const std::string& script) { return {.argv = {"/bin/sh", "-c", script}}; }

TEST(SpawnTest, TrueExitsWithZero) {
  absl::StatusOr<ExitStatus> status = RunToExit({.argv = {"/bin/true"}});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->exited());
  EXPECT_EQ(status->exit_code, 0);
  EXPECT_EQ(status->code(), 0);
}

TEST(SpawnTest, TheExitCodeIsDecoded) {
  absl::StatusOr<ExitStatus> status = RunToExit(Shell("exit 7"));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->exited());
  EXPECT_EQ(status->exit_code, 7);
  EXPECT_EQ(status->code(), 7);
}

TEST(SpawnTest, ASignalEndingItIsDecodedAs128PlusItsNumber) {
  absl::StatusOr<ExitStatus> status = RunToExit(Shell("kill -TERM $$"));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_FALSE(status->exited());
  EXPECT_EQ(status->signal, SIGTERM);
  EXPECT_EQ(status->code(), 128 + SIGTERM);
}

TEST(SpawnTest, StdoutAndStderrGoToOneFileAndStdinIsEmpty) {
  test_support::TempDir dir;
  const std::string log = dir.Path("out.log");
  SpawnOptions options = Shell("echo out; echo err >&2; cat; echo end");
  options.in = Stream::DevNull();
  options.out = Stream::File(log);
  options.err = Stream::SameAsStdout();
  absl::StatusOr<ExitStatus> status = RunToExit(options);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->code(), 0);
  EXPECT_EQ(ReadFile(log), "out\nerr\nend\n");
}

TEST(SpawnTest, AFileIsTruncatedUnlessAppendedTo) {
  test_support::TempDir dir;
  const std::string log = dir.Path("out.log");
  std::ofstream(log) << "earlier text that is longer\n";
  SpawnOptions options = Shell("echo one");
  options.out = Stream::File(log);
  ASSERT_TRUE(RunToExit(options).ok());
  EXPECT_EQ(ReadFile(log), "one\n");
  options = Shell("echo two >&2");
  options.err = Stream::File(log, /*append=*/true);
  ASSERT_TRUE(RunToExit(options).ok());
  EXPECT_EQ(ReadFile(log), "one\ntwo\n");
}

TEST(SpawnTest, ADescriptorOfOursCarriesAStream) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  SpawnOptions options = Shell("echo through the pipe");
  options.out = Stream::Fd(fds[1]);
  absl::StatusOr<ExitStatus> status = RunToExit(options);
  close(fds[1]);
  ASSERT_TRUE(status.ok()) << status.status();
  char buffer[64] = {};
  const ssize_t n = read(fds[0], buffer, sizeof(buffer) - 1);
  close(fds[0]);
  EXPECT_EQ(std::string(buffer, n > 0 ? n : 0), "through the pipe\n");
}

TEST(SpawnTest, RunsWithTheGivenEnvironmentAndWorkingFolder) {
  test_support::TempDir dir;
  const std::string log = dir.Path("out.log");
  SpawnOptions options = Shell("echo \"$GREETING\" \"$HOME\"; pwd");
  options.env = std::vector<std::string>{"GREETING=hello"};
  options.cwd = dir.path();
  options.out = Stream::File(log);
  ASSERT_TRUE(RunToExit(options).ok());
  char real[PATH_MAX];
  ASSERT_NE(realpath(dir.path().c_str(), real), nullptr);
  EXPECT_EQ(ReadFile(log), "hello \n" + std::string(real) + "\n");
}

TEST(SpawnTest, SearchesThePathOfTheChildsEnvironment) {
  test_support::TempDir dir;
  const std::string script = dir.Path("only-here");
  std::ofstream(script) << "#!/bin/sh\necho found \"$0\"\n";
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  const std::string log = dir.Path("out.log");
  SpawnOptions options{.argv = {"only-here"}, .search_path = true};
  options.env = std::vector<std::string>{"PATH=/nonexistent:" + dir.path() + ":/bin"};
  options.out = Stream::File(log);
  absl::StatusOr<ExitStatus> status = RunToExit(options);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->code(), 0);
  EXPECT_EQ(ReadFile(log), "found " + script + "\n");

  // Not on our PATH, and not searched for without search_path.
  options.env.reset();
  status = RunToExit(options);
  EXPECT_TRUE(absl::IsNotFound(status.status())) << status.status();
  options.search_path = false;
  options.env = std::vector<std::string>{"PATH=" + dir.path()};
  status = RunToExit(options);
  EXPECT_TRUE(absl::IsNotFound(status.status())) << status.status();
}

TEST(SpawnTest, AMissingProgramIsAnErrorNamingIt) {
  for (bool search : {false, true}) {
    SpawnOptions options{.argv = {"kubetrain-no-such-program"}, .search_path = search};
    absl::StatusOr<pid_t> pid = Spawn(options);
    EXPECT_TRUE(absl::IsNotFound(pid.status())) << pid.status();
    EXPECT_EQ(pid.status().message(), "kubetrain-no-such-program: command not found");
  }
  absl::StatusOr<pid_t> pid = Spawn({.argv = {"/no/such/folder/program"}});
  EXPECT_EQ(pid.status().message(), "/no/such/folder/program: command not found");
}

TEST(SpawnTest, AFileThatIsNotExecutableIsPermissionDenied) {
  test_support::TempDir dir;
  const std::string script = dir.Path("not-executable");
  std::ofstream(script) << "#!/bin/sh\n";
  for (bool search : {false, true}) {
    SpawnOptions options{.argv = {search ? "not-executable" : script}, .search_path = search};
    options.env = std::vector<std::string>{"PATH=" + dir.path()};
    absl::StatusOr<pid_t> pid = Spawn(options);
    EXPECT_TRUE(absl::IsPermissionDenied(pid.status())) << pid.status();
    EXPECT_THAT(pid.status().message(), HasSubstr("Permission denied"));
    EXPECT_THAT(pid.status().message(), HasSubstr("not-executable: "));
  }
}

TEST(SpawnTest, AWorkingFolderThatDoesNotExistIsAnErrorNamingIt) {
  SpawnOptions options{.argv = {"/bin/true"}, .cwd = "/no/such/folder"};
  absl::StatusOr<pid_t> pid = Spawn(options);
  EXPECT_TRUE(absl::IsFailedPrecondition(pid.status())) << pid.status();
  EXPECT_EQ(pid.status().message(),
            "/bin/true: cannot enter /no/such/folder: No such file or directory");
}

TEST(SpawnTest, AnOutputFileThatCannotBeOpenedIsAnErrorNamingIt) {
  SpawnOptions options{.argv = {"/bin/true"}};
  options.out = Stream::File("/no/such/folder/out.log");
  absl::StatusOr<pid_t> pid = Spawn(options);
  EXPECT_EQ(pid.status().message(),
            "/bin/true: cannot open /no/such/folder/out.log: No such file or directory");
}

TEST(SpawnTest, AnEmptyArgvIsInvalid) { EXPECT_TRUE(absl::IsInvalidArgument(Spawn({}).status())); }

TEST(SpawnTest, ClosesOtherDescriptorsWhenAsked) {
  const int inherited = open("/dev/null", O_RDONLY);  // no close-on-exec
  ASSERT_GE(inherited, 3);
  const std::string check = "test -e /proc/self/fd/" + std::to_string(inherited);
  EXPECT_EQ(RunToExit(Shell(check))->code(), 0);
  SpawnOptions options = Shell(check);
  options.close_other_fds = true;
  EXPECT_EQ(RunToExit(options)->code(), 1);
  close(inherited);
}

TEST(SpawnDetachedTest, TheDaemonRunsInASessionOfItsOwnAndIsNotOurChild) {
  test_support::TempDir dir;
  const std::string log = dir.Path("daemon.log");
  const std::string done = dir.Path("done");
  SpawnOptions options = Shell("echo $$ $PPID $(cut -d' ' -f6 /proc/$$/stat); touch " + done);
  options.in = Stream::DevNull();
  options.out = Stream::File(log, /*append=*/true);
  options.err = Stream::SameAsStdout();
  ASSERT_TRUE(SpawnDetached(options).ok());
  ASSERT_TRUE(test_support::WaitUntil([&] { return access(done.c_str(), F_OK) == 0; }))
      << ReadFile(log);
  std::istringstream words(ReadFile(log));
  pid_t pid = 0, ppid = 0, sid = 0;
  words >> pid >> ppid >> sid;
  EXPECT_NE(ppid, getpid());
  EXPECT_NE(sid, getsid(0));
  EXPECT_NE(sid, pid);  // a session member, not its leader
}

TEST(SpawnDetachedTest, AMissingProgramIsAnError) {
  absl::Status status = SpawnDetached({.argv = {"/no/such/program"}});
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_EQ(status.message(), "/no/such/program: command not found");
}

TEST(WaitForExitTest, ANonChildIsAnErrorNamingTheProgram) {
  absl::StatusOr<ExitStatus> status = WaitForExit(1, "init");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.status().message(), HasSubstr("waiting for init (pid 1)"));
}

}  // namespace
}  // namespace kubetrain::process
