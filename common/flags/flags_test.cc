#include "common/flags/flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::flags {
namespace {

using ::testing::HasSubstr;

// Parses `args` (without the program name) and returns Describe's words for
// the error, or "" when the parse succeeded.
std::string Parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& error) {
    return Describe(app, error);
  }
  return "";
}

struct Example {
  CLI::App app{"usage: example [flags]"};
  int workers = 4;
  std::string dir;
  Example() {
    Configure(app);
    app.add_option("--workers", workers, "concurrent reconciles")
        ->type_name("N")
        ->capture_default_str()
        ->check(CLI::Validator(
            [](std::string& v) -> std::string {
              if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos) return "";
              return "not a non-negative integer: " + v;
            },
            ""));
    app.add_option_function<std::string>(
           "--level",
           [](const std::string& v) {
             if (v != "low" && v != "high") Reject("--level must be low or high, not " + v);
           },
           "how loud")
        ->type_name("LEVEL")
        ->default_str("low");
    app.add_option_function<std::string>(
           "--elect", [](const std::string&) {}, "elect a leader")
        ->type_name("=BOOL")
        ->expected(0)
        ->default_str("true");
    app.add_option("--job-dir,--job_dir", dir, "where the job writes")->type_name("DIR");
  }
};

TEST(FlagsTest, HelpShowsEachFlagWithItsDefault) {
  Example e;
  EXPECT_EQ(e.app.help(),
            "usage: example [flags]\n"
            "  --workers N                  concurrent reconciles (default 4)\n"
            "  --level LEVEL                how loud (default low)\n"
            "  --elect=BOOL                 elect a leader (default true)\n"
            "  --job-dir,--job_dir DIR      where the job writes\n");
}

TEST(FlagsTest, AnAliasSetsTheSameFlag) {
  Example e;
  EXPECT_EQ(Parse(e.app, {"--job_dir", "/tmp/a"}), "");
  EXPECT_EQ(e.dir, "/tmp/a");
  Example f;
  EXPECT_EQ(Parse(f.app, {"--job-dir=/tmp/b"}), "");
  EXPECT_EQ(f.dir, "/tmp/b");
}

TEST(FlagsTest, TheLastOfARepeatedFlagWins) {
  Example e;
  EXPECT_EQ(Parse(e.app, {"--workers=2", "--workers", "7"}), "");
  EXPECT_EQ(e.workers, 7);
}

TEST(FlagsTest, ErrorsAreWordedAsUsersKnowThem) {
  Example a;
  EXPECT_EQ(Parse(a.app, {"--workers=2", "--bogus=1"}), "unknown flag --bogus");
  Example b;
  EXPECT_EQ(Parse(b.app, {"stray"}), "unexpected argument stray");
  Example c;
  EXPECT_EQ(Parse(c.app, {"--workers"}), "--workers needs a value");
  Example d;
  EXPECT_EQ(Parse(d.app, {"--workers=x"}), "--workers: not a non-negative integer: x");
  Example e;
  EXPECT_EQ(Parse(e.app, {"--level=loud"}), "--level must be low or high, not loud");
  Example f;
  EXPECT_EQ(Parse(f.app, {"--elect", "true"}), "unexpected argument true");
}

TEST(FlagsTest, HelpIsAskedForWithHelpOrH) {
  for (const char* flag : {"--help", "-h"}) {
    Example e;
    EXPECT_THROW(e.app.parse(std::vector<std::string>{flag}), CLI::CallForHelp) << flag;
  }
}

}  // namespace
}  // namespace kubetrain::flags
