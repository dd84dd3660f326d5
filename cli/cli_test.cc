#include "cli/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kubetrain::cli {
namespace {

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result RunKubetrain(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

const std::string kExamples = std::string(KUBETRAIN_SOURCE_DIR) + "/examples/";

TEST(ValidateCommandTest, AcceptsTheCloudMlConfigAndEveryExample) {
  std::vector<std::string> args = {"validate"};
  for (const auto& entry : std::filesystem::directory_iterator(kExamples)) {
    if (entry.path().extension() == ".yaml") args.push_back(entry.path().string());
  }
  Result r = RunKubetrain(args);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr(kExamples + "cloudml-config.yaml: ok\n"));
}

TEST(ValidateCommandTest, PrintsEveryErrorWithFileAndExitsTwo) {
  const std::string path = ::testing::TempDir() + "/bad.yaml";
  std::ofstream(path) << "trainingInput:\n  scaleTier: CUSTOM\n  workerCount: -1\n";
  Result r = RunKubetrain({"validate", path});
  EXPECT_EQ(r.code, 2);
  // A missing field points at its enclosing block.
  EXPECT_EQ(r.out, path + ":1:1: trainingInput.masterType: required when scaleTier is CUSTOM\n" +
                       path + ":3:3: trainingInput.workerCount: must be >= 0, got -1\n");
}

TEST(ValidateCommandTest, MissingFileIsNamed) {
  Result r = RunKubetrain({"validate", "/nonexistent/job.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "/nonexistent/job.yaml: cannot open: No such file or directory\n");
}

TEST(CliTest, UnknownCommandAndFlagAreUsageErrors) {
  Result r = RunKubetrain({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("unknown command \"frobnicate\""));
  r = RunKubetrain({"validate", "--strict", "x.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "kubetrain validate: unknown flag --strict\n");
}

TEST(CliTest, VersionNamesTheApi) {
  Result r = RunKubetrain({"version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, ::testing::MatchesRegex("kubetrain [0-9.]+ \\(API kubetrain.io/v1\\)\n"));
}

}  // namespace
}  // namespace kubetrain::cli
