#include "operator/core/previous_study.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::core {
namespace {

using testing::ElementsAre;
using testing::IsEmpty;

v1::TrainingJob Resuming(const std::string& previous) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("second");
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_resume_previous_job_id(previous);
  return job;
}

v1::TrainingJob Study(const std::string& name) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name(name);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->add_params()
      ->set_parameter_name("x");
  job.mutable_status()->set_state(v1::SUCCEEDED);
  return job;
}

// A store of jobs by name, each with its archived trials; it writes down
// what it was asked.
struct FakeStore {
  std::map<std::string, v1::TrainingJob> jobs;
  std::map<std::string, std::vector<std::string>> archived;  // job -> trial ids
  std::vector<std::string> asked;
  absl::Status fail_find, fail_archive;

  PreviousStudySource Source() {
    return {.find_job =
                [this](const std::string& name) -> absl::StatusOr<std::optional<v1::TrainingJob>> {
              asked.push_back("job " + name);
              if (!fail_find.ok()) return fail_find;
              auto it = jobs.find(name);
              if (it == jobs.end()) return std::nullopt;
              return it->second;
            },
            .archived_trials = [this](const v1::TrainingJob& job)
                -> absl::StatusOr<std::vector<v1::HyperparameterOutput>> {
              asked.push_back("archive " + job.metadata().name());
              if (!fail_archive.ok()) return fail_archive;
              std::vector<v1::HyperparameterOutput> out;
              for (const std::string& id : archived[job.metadata().name()]) {
                out.emplace_back().set_trial_id(id);
              }
              return out;
            }};
  }
};

TEST(FindPreviousStudyTest, AFinishedStudyIsFoundWithItsArchivedTrials) {
  FakeStore store;
  store.jobs["first"] = Study("first");
  store.archived["first"] = {"7", "9"};
  absl::StatusOr<PreviousStudy> previous = FindPreviousStudy(Resuming("first"), store.Source());
  ASSERT_TRUE(previous.ok()) << previous.status();
  EXPECT_TRUE(previous->found);
  EXPECT_EQ(previous->job.metadata().name(), "first");
  ASSERT_EQ(previous->archived_trials.size(), 2u);
  EXPECT_EQ(previous->archived_trials[1].trial_id(), "9");
  EXPECT_THAT(store.asked, ElementsAre("job first", "archive first"));
}

TEST(FindPreviousStudyTest, NothingIsReadWithoutAResumeOrOnceTheJobHasFinished) {
  FakeStore store;
  store.jobs["first"] = Study("first");
  v1::TrainingJob plain = Resuming("");
  EXPECT_FALSE(FindPreviousStudy(plain, store.Source())->found);
  v1::TrainingJob finished = Resuming("first");
  for (v1::State state : {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    finished.mutable_status()->set_state(state);
    EXPECT_FALSE(FindPreviousStudy(finished, store.Source())->found);
  }
  EXPECT_THAT(store.asked, IsEmpty());
}

// A missing job is the reconciler's to judge (it fails the job before its
// first trial); a job that is no study has no archive to read.
TEST(FindPreviousStudyTest, AMissingJobIsNotFoundAndAJobThatIsNoStudyHasNoArchive) {
  FakeStore store;
  absl::StatusOr<PreviousStudy> missing = FindPreviousStudy(Resuming("nowhere"), store.Source());
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->found);

  v1::TrainingJob plain;
  plain.mutable_metadata()->set_name("plain");
  store.jobs["plain"] = plain;
  absl::StatusOr<PreviousStudy> found = FindPreviousStudy(Resuming("plain"), store.Source());
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->found);
  EXPECT_THAT(found->archived_trials, IsEmpty());
  EXPECT_THAT(store.asked, ElementsAre("job nowhere", "job plain"));
}

TEST(FindPreviousStudyTest, AStoreThatCannotBeReadEndsTheSync) {
  FakeStore store;
  store.jobs["first"] = Study("first");
  store.fail_find = absl::UnavailableError("store down");
  EXPECT_EQ(FindPreviousStudy(Resuming("first"), store.Source()).status().message(), "store down");
  store.fail_find = absl::OkStatus();
  store.fail_archive = absl::UnavailableError("archive down");
  EXPECT_EQ(FindPreviousStudy(Resuming("first"), store.Source()).status().message(),
            "archive down");
}

}  // namespace
}  // namespace kubetrain::core
