// `kubetrain ui`'s command line: what it refuses before serving.
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include <sstream>

#include "cli/cli.h"
#include "common/observability/http_server.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::cli {
namespace {

using ::testing::HasSubstr;

struct Result {
  int code;
  std::string out, err;
};

Result Kubetrain(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

bool SigintBlocked() {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, SIGINT) == 1;
}

class UiCommandTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("KUBETRAIN_HOME", home_.path().c_str(), 1); }
  void TearDown() override { unsetenv("KUBETRAIN_HOME"); }
  test_support::TempDir home_;
};

TEST_F(UiCommandTest, ListedInHelp) {
  Result help = Kubetrain({"help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("  ui "));
  Result usage = Kubetrain({"ui", "--help"});
  EXPECT_EQ(usage.code, 0);
  EXPECT_THAT(usage.out,
              HasSubstr("Usage: kubetrain ui [--local | [--namespace NS] [--context CTX] "
                        "[--kubeconfig FILE]] [--address HOST:PORT]"));
}

TEST_F(UiCommandTest, BadFlagsAreUsageErrors) {
  Result extra = Kubetrain({"ui", "--local", "jobs"});
  EXPECT_EQ(extra.code, 2);
  EXPECT_THAT(extra.err, HasSubstr("kubetrain ui: takes no positional arguments (got \"jobs\")"));
  Result unknown = Kubetrain({"ui", "--port=80"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown flag --port"));
  Result both = Kubetrain({"ui", "--local", "--namespace", "ml"});
  EXPECT_EQ(both.code, 2);
  EXPECT_THAT(both.err, HasSubstr("--namespace is for a cluster"));
  Result context = Kubetrain({"ui", "--local", "--context", "prod"});
  EXPECT_EQ(context.code, 2);
  EXPECT_THAT(context.err, HasSubstr("--context is for a cluster"));
  // A kubeconfig named but missing is an error naming it, not a fallback.
  Result missing = Kubetrain({"ui", "--kubeconfig", home_.path() + "/no-such-config"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("no-such-config"));
}

TEST_F(UiCommandTest, AddressErrorsNameTheAddress) {
  Result malformed = Kubetrain({"ui", "--local", "--address", "nowhere"});
  EXPECT_EQ(malformed.code, 2);
  EXPECT_THAT(malformed.err, HasSubstr("kubetrain ui: ui address 'nowhere'"));
  // The signals it blocks to wait for Ctrl-C are given back on the way out.
  EXPECT_FALSE(SigintBlocked());

  auto taken = observability::HttpServer::Start(
      {}, [](const observability::HttpRequest&) { return observability::HttpReply(); });
  ASSERT_TRUE(taken.ok()) << taken.status();
  Result in_use =
      Kubetrain({"ui", "--local", "--address", "127.0.0.1:" + std::to_string((*taken)->port())});
  EXPECT_EQ(in_use.code, 1);
  EXPECT_THAT(in_use.err, HasSubstr("cannot listen"));
  EXPECT_FALSE(SigintBlocked());
}

}  // namespace
}  // namespace kubetrain::cli
