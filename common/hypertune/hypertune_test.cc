#include "common/hypertune/hypertune.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::hypertune {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Expected strings below were printed by CPython 3.11's repr() and
// json.dumps(..., sort_keys=True) on the dict cloudml-hypertune builds.
TEST(PythonFloatReprTest, MatchesCPython) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.987, "0.987"},
      {1.0, "1.0"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1e-05, "1e-05"},
      {0.0001, "0.0001"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789.123, "123456789.123"},
      {1525851440.123456, "1525851440.123456"},
      {0.1 + 0.2, "0.30000000000000004"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {100.0, "100.0"},
      {1.5e-07, "1.5e-07"},
      {12345678901234567890.0, "1.2345678901234567e+19"},
      {-2.5e-10, "-2.5e-10"},
      {std::numeric_limits<double>::quiet_NaN(), "nan"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(PythonFloatRepr(value), expected);
}

TEST(FormatHypertuneLineTest, MatchesTheLibrary) {
  EXPECT_EQ(FormatHypertuneLine("accuracy", 0.987, 1000, "0", 1525851440.123456),
            "{\"accuracy\": \"0.987\", \"global_step\": \"1000\", \"timestamp\": "
            "1525851440.123456, \"trial\": \"0\"}\n");
  EXPECT_EQ(FormatHypertuneLine("", 1e-05, std::nullopt, "7", 1700000000.5),
            "{\"global_step\": \"0\", \"timestamp\": 1700000000.5, \"training/hptuning/metric\": "
            "\"1e-05\", \"trial\": \"7\"}\n");
  EXPECT_EQ(FormatHypertuneLine("caf\xc3\xa9/\xe2\x82\xac/\xf0\x9d\x84\x9e",
                                std::numeric_limits<double>::quiet_NaN(), 3, "t\"1", 1700000001.25),
            "{\"caf\\u00e9/\\u20ac/\\ud834\\udd1e\": \"nan\", \"global_step\": \"3\", "
            "\"timestamp\": 1700000001.25, \"trial\": \"t\\\"1\"}\n");
  EXPECT_EQ(
      FormatHypertuneLine("loss\n", -std::numeric_limits<double>::infinity(), 12, "", 1.0),
      "{\"global_step\": \"12\", \"loss\\n\": \"-inf\", \"timestamp\": 1.0, \"trial\": \"\"}\n");
  // A tag named like a fixed key replaces that key's value, as in the library's dict.
  EXPECT_EQ(FormatHypertuneLine("timestamp", 2.0, 5, "1", 1700000002.0),
            "{\"global_step\": \"5\", \"timestamp\": \"2.0\", \"trial\": \"1\"}\n");
}

TEST(ParseHypertuneFileTest, ParsesWhatTheWriterFormats) {
  const std::string content = FormatHypertuneLine("accuracy", 0.987, 1000, "3", 1525851440.5) +
                              FormatHypertuneLine("", 0.25, std::nullopt, "3", 1525851441.0);
  const auto reports = ParseHypertuneFile(content);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].timestamp, 1525851440.5);
  EXPECT_EQ(reports[0].trial, "3");
  EXPECT_EQ(reports[0].global_step, 1000);
  EXPECT_THAT(reports[0].metrics, ElementsAre(Pair("accuracy", 0.987)));
  EXPECT_THAT(reports[1].metrics, ElementsAre(Pair("training/hptuning/metric", 0.25)));
  EXPECT_EQ(reports[1].global_step, 0);
  EXPECT_NE(reports[0].key, reports[1].key);
}

// kubetrain-runtime's last evaluation carries "final": "true"; the library's
// own lines never do, and a metric named "final" stays a metric.
TEST(ParseHypertuneFileTest, TheFinalMarkIsReadAndNeverAMetric) {
  EXPECT_EQ(FormatHypertuneLine("accuracy", 0.8804, 785, "3", 1700000000.5, /*final=*/true),
            "{\"accuracy\": \"0.8804\", \"final\": \"true\", \"global_step\": \"785\", "
            "\"timestamp\": 1700000000.5, \"trial\": \"3\"}\n");
  const std::string content =
      FormatHypertuneLine("accuracy", 0.8, 628, "3", 1700000000.0) +
      FormatHypertuneLine("accuracy", 0.8804, 785, "3", 1700000000.5, /*final=*/true) +
      FormatHypertuneLine("final", 0.5, 1, "3", 1700000001.0);
  const auto reports = ParseHypertuneFile(content);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_FALSE(reports[0].final);
  EXPECT_TRUE(reports[1].final);
  EXPECT_THAT(reports[1].metrics, ElementsAre(Pair("accuracy", 0.8804)));
  EXPECT_FALSE(reports[2].final);
  EXPECT_THAT(reports[2].metrics, ElementsAre(Pair("final", 0.5)));
}

TEST(ParseHypertuneFileTest, SkipsTruncatedLastLineAndGarbage) {
  const std::string a = FormatHypertuneLine("m", 1.0, 1, "0", 100.0);
  const std::string b = FormatHypertuneLine("m", 2.0, 2, "0", 101.0);
  const std::string c = FormatHypertuneLine("m", 3.0, 3, "0", 102.0);
  size_t skipped = 0;
  // Every cut through the last line: that line is dropped until it is whole.
  for (size_t cut = 0; cut < c.size() - 1; ++cut) {
    const auto reports = ParseHypertuneFile(a + b + c.substr(0, cut), &skipped);
    ASSERT_EQ(reports.size(), 2u) << "cut " << cut;
    EXPECT_EQ(reports[1].metrics.at("m"), 2.0);
    EXPECT_EQ(skipped, cut == 0 ? 0u : 1u) << "cut " << cut;
  }
  // The whole object without its newline is complete.
  EXPECT_EQ(ParseHypertuneFile(a + b + c.substr(0, c.size() - 1)).size(), 3u);
  // Lines broken by a racing rewrite, and non-objects, are skipped.
  const auto reports =
      ParseHypertuneFile(a + "{\"m\": \"4\", \"timest" + b + "[1, 2]\n\n  \n\"x\"\n" + c, &skipped);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].metrics.at("m"), 1.0);
  EXPECT_EQ(reports[1].metrics.at("m"), 3.0);
  EXPECT_EQ(skipped, 3u);
}

TEST(ParseHypertuneFileTest, ToleratesOtherWritersTypes) {
  const auto reports = ParseHypertuneFile(
      "{\"timestamp\": \"12.5\", \"trial\": 4, \"global_step\": 7, \"loss\": 0.5, \"note\": "
      "\"hello\", \"acc\": \"nan\"}\n");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].timestamp, 12.5);
  EXPECT_EQ(reports[0].trial, "4");
  EXPECT_EQ(reports[0].global_step, 7);
  ASSERT_EQ(reports[0].metrics.size(), 2u);
  EXPECT_EQ(reports[0].metrics.at("loss"), 0.5);
  EXPECT_TRUE(std::isnan(reports[0].metrics.at("acc")));
}

std::vector<double> Values(const std::vector<HypertuneReport>& reports) {
  std::vector<double> out;
  for (const auto& r : reports) out.push_back(r.metrics.at("m"));
  return out;
}

TEST(HypertuneFileFollowerTest, ReturnsEachReportOnceThroughRewritesAndTruncation) {
  std::vector<std::string> lines;
  for (int i = 0; i < 6; ++i) lines.push_back(FormatHypertuneLine("m", i, i, "0", 1000.0 + i));
  const auto file = [&](int from, int to) {
    std::string s;
    for (int i = from; i < to; ++i) s += lines[i];
    return s;
  };
  HypertuneFileFollower follower;
  EXPECT_THAT(Values(follower.Poll(file(0, 2))), ElementsAre(0, 1));
  EXPECT_THAT(Values(follower.Poll(file(0, 2))), ElementsAre());  // unchanged
  EXPECT_THAT(Values(follower.Poll("")), ElementsAre());          // truncated by open('w')
  // Half-rewritten: old lines again plus part of the new one.
  EXPECT_THAT(Values(follower.Poll(file(0, 2) + lines[2].substr(0, 20))), ElementsAre());
  EXPECT_THAT(Values(follower.Poll(file(0, 3))), ElementsAre(2));
  // Two reports landed between polls.
  EXPECT_THAT(Values(follower.Poll(file(0, 5))), ElementsAre(3, 4));
  // The window slid (oldest reports dropped): only the new one is returned.
  EXPECT_THAT(Values(follower.Poll(file(3, 6))), ElementsAre(5));
}

TEST(HypertuneFileFollowerTest, SameValueAtANewTimeIsANewReport) {
  HypertuneFileFollower follower;
  const std::string a = FormatHypertuneLine("m", 1.0, 10, "0", 5.0);
  const std::string b = FormatHypertuneLine("m", 1.0, 10, "0", 6.0);
  EXPECT_EQ(follower.Poll(a).size(), 1u);
  EXPECT_EQ(follower.Poll(a + b).size(), 1u);
}

TEST(HypertuneFileFollowerTest, BoundedMemoryStillDeduplicatesTheFileWindow) {
  // Remembers only kMaxReportsKept keys, the most the file ever holds.
  HypertuneFileFollower follower(/*remembered=*/1);
  std::vector<std::string> window;
  size_t returned = 0;
  for (int i = 0; i < 350; ++i) {
    window.push_back(FormatHypertuneLine("m", i, i, "0", 1e9 + i));
    if (window.size() > kMaxReportsKept) window.erase(window.begin());
    std::string content;
    for (const auto& l : window) content += l;
    const auto fresh = follower.Poll(content);
    ASSERT_EQ(fresh.size(), 1u) << "report " << i;
    EXPECT_EQ(fresh[0].metrics.at("m"), i);
    returned += fresh.size();
  }
  EXPECT_EQ(returned, 350u);
}

TEST(HypertuneWriterTest, RewritesTheFileKeepingTheLast100) {
  test_support::TempDir tmp;
  const std::string path = tmp.path() + "/sub/dir/output.metrics";
  auto writer = HypertuneWriter::Create({.metric_path = path, .trial_id = "12"});
  ASSERT_TRUE(writer.ok()) << writer.status();
  HypertuneFileFollower follower;
  std::vector<double> seen;
  for (int i = 0; i < 130; ++i) {
    ASSERT_TRUE((*writer)->Report("acc", i / 10.0, i, 1700000000.0 + i).ok());
    EXPECT_EQ(ReadAll(path), (*writer)->Content());
    auto fresh = follower.PollFile(path);
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    for (const auto& r : *fresh) seen.push_back(r.global_step);
  }
  const auto reports = ParseHypertuneFile(ReadAll(path));
  ASSERT_EQ(reports.size(), kMaxReportsKept);
  EXPECT_EQ(reports.front().global_step, 30);
  EXPECT_EQ(reports.back().global_step, 129);
  EXPECT_EQ(reports.back().trial, "12");
  ASSERT_EQ(seen.size(), 130u);
  for (int i = 0; i < 130; ++i) EXPECT_EQ(seen[i], i);
}

TEST(HypertuneWriterTest, OptionsComeFromTheEnvironment) {
  ::unsetenv(kMetricFileEnv);
  ::unsetenv(kTrialIdEnv);
  HypertuneWriter::Options defaults = HypertuneWriter::OptionsFromEnvironment();
  EXPECT_EQ(defaults.metric_path, "/tmp/hypertune/output.metrics");
  EXPECT_EQ(defaults.trial_id, "0");
  ::setenv(kMetricFileEnv, "/x/y.metrics", 1);
  ::setenv(kTrialIdEnv, "42", 1);
  HypertuneWriter::Options set = HypertuneWriter::OptionsFromEnvironment();
  EXPECT_EQ(set.metric_path, "/x/y.metrics");
  EXPECT_EQ(set.trial_id, "42");
  ::unsetenv(kMetricFileEnv);
  ::unsetenv(kTrialIdEnv);
}

TEST(ReadHypertuneFileTest, MissingFileIsEmpty) {
  test_support::TempDir tmp;
  auto content = ReadHypertuneFile(tmp.path() + "/not-yet.metrics");
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, "");
}

}  // namespace
}  // namespace kubetrain::hypertune
