#include "cli/ui/local_job_source.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/local/controller.h"

namespace kubetrain::cli::ui {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Messages(const LogChunk& chunk) {
  std::vector<std::string> out;
  for (const LogLine& line : chunk.lines) out.push_back(line.message);
  return out;
}

void Append(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::app | std::ios::binary) << text;
}

TEST(ReadLogFileTest, TailThenFollowWholeLinesOnly) {
  test_support::TempDir dir;
  const std::string path = dir.path() + "/master.log";
  auto empty = ReadLogFile(path, -1, 10);  // nothing written yet
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->lines.empty());
  EXPECT_EQ(empty->next_offset, 0);

  Append(path, "1800000000.5 O step 1\n1800000001 E ValueError: bad\n1800000002 O step 3\npartial");
  auto tail = ReadLogFile(path, -1, 2);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_THAT(Messages(*tail), ElementsAre("ValueError: bad", "step 3"));
  EXPECT_TRUE(tail->truncated);
  EXPECT_EQ(tail->lines[0].severity, "ERROR");  // as stream-logs grades it
  EXPECT_EQ(tail->lines[0].time, 1800000001.0);
  EXPECT_EQ(tail->lines[1].severity, "INFO");

  // The partial line comes once it is whole.
  auto none = ReadLogFile(path, tail->next_offset, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->lines.empty());
  EXPECT_EQ(none->next_offset, tail->next_offset);
  Append(path, " done\n1800000003 O step 4\n");
  auto more = ReadLogFile(path, tail->next_offset, 10);
  ASSERT_TRUE(more.ok());
  EXPECT_THAT(Messages(*more), ElementsAre("partial done", "step 4"));
  EXPECT_FALSE(more->truncated);
  EXPECT_EQ(more->next_offset, static_cast<int64_t>(std::filesystem::file_size(path)));

  // Reading on in pieces of at most max_lines.
  auto first_two = ReadLogFile(path, 0, 2);
  ASSERT_TRUE(first_two.ok());
  EXPECT_THAT(Messages(*first_two), ElementsAre("step 1", "ValueError: bad"));
  auto next_two = ReadLogFile(path, first_two->next_offset, 2);
  ASSERT_TRUE(next_two.ok());
  EXPECT_THAT(Messages(*next_two), ElementsAre("step 3", "partial done"));

  // An offset past the end (another file of that name): a fresh tail.
  auto past = ReadLogFile(path, 1 << 20, 1);
  ASSERT_TRUE(past.ok());
  EXPECT_THAT(Messages(*past), ElementsAre("step 4"));
}

TEST(ReadLogFileTest, HugeLogIsReadInBoundedPieces) {
  test_support::TempDir dir;
  const std::string path = dir.path() + "/big.log";
  const std::string line = std::string(999, 'x') + "\n";  // 1000 bytes
  std::string text;
  for (int i = 0; i < 3000; ++i) text += line;
  Append(path, text);
  auto tail = ReadLogFile(path, -1, 5000);
  ASSERT_TRUE(tail.ok());
  // At most 1 MiB read: about 1048 lines, the first partial one dropped.
  EXPECT_LE(tail->lines.size(), 1049u);
  EXPECT_GE(tail->lines.size(), 1047u);
  EXPECT_TRUE(tail->truncated);
  EXPECT_EQ(tail->next_offset, 3000 * 1000);
  auto from_start = ReadLogFile(path, 0, 5000);
  ASSERT_TRUE(from_start.ok());
  EXPECT_EQ(from_start->lines.size(), 1048u);
  EXPECT_EQ(from_start->next_offset, 1048 * 1000);
}

class LocalJobSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto source = LocalJobSource::Open(home_.path());
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
    auto store = local::JobStore::Open(home_.path() + "/jobs.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  void AddJob(const std::string& name, v1::State state, int64_t created = 1800000000) {
    v1::TrainingJob job;
    job.mutable_metadata()->set_name(name);
    job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::BASIC);
    job.mutable_status()->set_state(state);
    job.mutable_status()->mutable_create_time()->set_seconds(created);
    ASSERT_TRUE(store_->CreateJob(job).ok());
  }

  test_support::TempDir home_;
  std::unique_ptr<LocalJobSource> source_;
  std::unique_ptr<local::JobStore> store_;
};

TEST_F(LocalJobSourceTest, JobsWithArchivedTrialsAndEvents) {
  AddJob("first", v1::SUCCEEDED);
  AddJob("second", v1::RUNNING);
  v1::HyperparameterOutput archived;
  archived.set_trial_id("1");
  ASSERT_TRUE(store_->ArchiveTrial("second", archived).ok());
  ASSERT_TRUE(
      store_->AddEvent("second", {absl::FromUnixSeconds(5), "Warning", "TrialFailed", "trial 1 x"})
          .ok());

  EXPECT_EQ(source_->backend(), "local");
  EXPECT_EQ(source_->location(), home_.path() + "/jobs.db");
  auto jobs = source_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  auto record = source_->GetJob("second");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->job.metadata().name(), "second");
  ASSERT_EQ(record->archived.size(), 1u);
  ASSERT_EQ(record->events.size(), 1u);
  EXPECT_EQ(record->events[0].reason, "TrialFailed");
  EXPECT_EQ(record->events[0].type, "Warning");
  EXPECT_EQ(record->events[0].message, "trial 1 x");
  EXPECT_EQ(record->events[0].first_seen, absl::FromUnixSeconds(5));
  EXPECT_EQ(record->events[0].last_seen, absl::FromUnixSeconds(5));
  EXPECT_EQ(record->events[0].count, 1);
  EXPECT_EQ(source_->GetJob("third").status().code(), absl::StatusCode::kNotFound);

  // Unfinished and no controller holds the lock: the page says so, once
  // the submit has had time to start one.
  const absl::Time created = absl::FromUnixSeconds(1800000000);
  EXPECT_EQ(source_->Warning(*jobs, created + absl::Seconds(5)), "");
  EXPECT_THAT(source_->Warning(*jobs, created + absl::Seconds(30)),
              HasSubstr("kubetrain local serve"));
  // With a controller holding the lock, nothing to say.
  {
    auto lock = local::ControllerLock::TryAcquire(home_.path());
    ASSERT_TRUE(lock.ok() && *lock != nullptr);
    EXPECT_EQ(source_->Warning(*jobs, created + absl::Seconds(30)), "");
  }
  jobs->pop_back();  // only the finished one
  EXPECT_EQ(source_->Warning(*jobs, created + absl::Seconds(30)), "");
}

TEST_F(LocalJobSourceTest, LogStreamsAreTheFilesOfTheJobOnly) {
  AddJob("study", v1::RUNNING);
  AddJob("other", v1::RUNNING);
  for (const auto& [trial, task] :
       std::vector<std::pair<std::string, std::string>>{{"10", "master-replica-0"},
                                                        {"2", "worker-replica-0"},
                                                        {"2", "master-replica-0"},
                                                        {"", "master-replica-0"}}) {
    Append(local::LogPath(home_.path(), "study", trial, task),
           absl::StrCat("1800000000 O trial ", trial, " ", task, "\n"));
  }
  Append(local::LogPath(home_.path(), "other", "1", "master-replica-0"), "1800000000 O secret\n");
  Append(local::JobDir(home_.path(), "study") + "/logs/notes.txt", "not a log\n");

  auto streams = source_->LogStreams("study");
  ASSERT_TRUE(streams.ok()) << streams.status();
  std::vector<std::string> names;
  for (const LogStream& s : *streams) names.push_back(s.trial + "/" + s.task);
  EXPECT_THAT(names, ElementsAre("/master-replica-0", "2/master-replica-0", "2/worker-replica-0",
                                 "10/master-replica-0"));

  auto chunk = source_->ReadLog("study", {"2", "worker-replica-0"}, -1, 10);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_THAT(Messages(*chunk), ElementsAre("trial 2 worker-replica-0"));

  // Only listed streams are read: nothing outside the job's own logs.
  for (const LogStream& outside :
       std::vector<LogStream>{{"1", "master-replica-0"},
                              {"../../other/logs/trial-1", "master-replica-0"},
                              {"2", "../../../../jobs.db"},
                              {"", "notes"}}) {
    auto refused = source_->ReadLog("study", outside, -1, 10);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound)
        << outside.trial << " " << outside.task;
  }
  EXPECT_EQ(source_->LogStreams("missing").status().code(), absl::StatusCode::kNotFound);
  auto none = source_->LogStreams("other");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size(), 1u);
}

}  // namespace
}  // namespace kubetrain::cli::ui
