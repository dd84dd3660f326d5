#include "cli/ui/ui_api.h"

#include "cli/jobs_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::cli::ui {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kT0 = 1800000000;  // 2027-01-15T08:00:00Z

v1::TrainingJob Job(const std::string& name, v1::State state, int64_t created) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name(name);
  job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::BASIC);
  job.mutable_status()->set_state(state);
  job.mutable_status()->mutable_create_time()->set_seconds(created);
  return job;
}

// A MAXIMIZE (or MINIMIZE) study with trials 1..3 done (0.5, 0.9, 0.7),
// trial 4 running, trial 5 failed, trial 2 stopped early.
v1::TrainingJob Study(v1::HyperparameterSpec::GoalType goal) {
  v1::TrainingJob job = Job("study", v1::RUNNING, kT0);
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_scale_tier(v1::TrainingInput::CUSTOM);
  input->set_master_type("standard");
  input->set_worker_type("standard");
  input->set_worker_count(2);
  v1::HyperparameterSpec* hp = input->mutable_hyperparameters();
  hp->set_goal(goal);
  hp->set_max_trials(10);
  v1::ParameterSpec* lr = hp->add_params();
  lr->set_parameter_name("lr");
  lr->set_type(v1::ParameterSpec::DOUBLE);
  lr->set_min_value(0.001);
  lr->set_max_value(0.1);
  lr->set_scale_type(v1::ParameterSpec::UNIT_LOG_SCALE);
  job.mutable_status()->mutable_start_time()->set_seconds(kT0 + 10);
  v1::TrainingOutput* out = job.mutable_status()->mutable_training_output();
  out->set_completed_trial_count(3);
  const double objectives[] = {0.5, 0.9, 0.7};
  for (int i = 0; i < 3; ++i) {
    v1::HyperparameterOutput* t = out->add_trials();
    t->set_trial_id(std::to_string(i + 1));
    (*t->mutable_hyperparameters())["lr"] = "0.0" + std::to_string(i + 1);
    t->mutable_final_metric()->set_objective_value(objectives[i]);
    t->mutable_final_metric()->set_training_step(100);
    v1::HyperparameterMetric* m = t->add_all_metrics();
    m->set_training_step(50);
    m->set_objective_value(objectives[i] / 2);
    *t->add_all_metrics() = t->final_metric();
    t->set_state(v1::SUCCEEDED);
  }
  out->mutable_trials(1)->set_is_trial_stopped_early(true);
  v1::HyperparameterOutput* running = out->add_trials();
  running->set_trial_id("4");
  running->set_state(v1::RUNNING);
  v1::HyperparameterOutput* failed = out->add_trials();
  failed->set_trial_id("5");
  failed->set_state(v1::FAILED);
  failed->set_error_message("replica master-0 exited with code 2: unknown optimizer '<script>'");
  return job;
}

TEST(ParseStateFilterTest, EmptyIsAllAndNamesAreCaseInsensitive) {
  auto all = ParseStateFilter("");
  ASSERT_TRUE(all.ok());
  EXPECT_FALSE(all->has_value());
  auto running = ParseStateFilter("running");
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(**running, v1::RUNNING);
  auto bad = ParseStateFilter("DONE");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("state: unknown job state \"DONE\""));
  EXPECT_EQ(ParseStateFilter("STATE_UNSPECIFIED").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JobListJsonTest, NewestFirstWithTrialsBestAndDuration) {
  v1::TrainingJob old_job = Job("old", v1::SUCCEEDED, kT0 - 100);
  old_job.mutable_status()->mutable_start_time()->set_seconds(kT0 - 90);
  old_job.mutable_status()->mutable_end_time()->set_seconds(kT0 - 30);
  const std::vector<v1::TrainingJob> jobs = {old_job, Study(v1::HyperparameterSpec::MAXIMIZE),
                                             Job("queued", v1::STATE_UNSPECIFIED, kT0 + 5)};
  const nlohmann::json list = JobListJson(jobs, std::nullopt, absl::FromUnixSeconds(kT0 + 70));
  ASSERT_EQ(list["jobs"].size(), 3u);
  EXPECT_EQ(list["jobs"][0]["jobId"], "queued");
  EXPECT_EQ(list["jobs"][0]["state"], "QUEUED");              // as `jobs list` shows an unset state
  EXPECT_FALSE(list["jobs"][0].contains("durationSeconds"));  // not started
  EXPECT_FALSE(list["jobs"][0].contains("trials"));           // not a study

  const nlohmann::json& study = list["jobs"][1];
  EXPECT_EQ(study["jobId"], "study");
  EXPECT_EQ(study["createTime"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(study["trials"]["completed"], 3);
  EXPECT_EQ(study["trials"]["max"], 10);
  EXPECT_EQ(study["goal"], "MAXIMIZE");
  EXPECT_EQ(study["bestTrialId"], "2");
  EXPECT_EQ(study["bestObjective"], 0.9);
  EXPECT_EQ(study["durationSeconds"], 60.0);  // running: start to now

  EXPECT_EQ(list["jobs"][2]["jobId"], "old");
  EXPECT_EQ(list["jobs"][2]["durationSeconds"], 60.0);  // start to end
}

TEST(JobListJsonTest, BestFollowsTheGoal) {
  const nlohmann::json list = JobListJson({Study(v1::HyperparameterSpec::MINIMIZE)}, std::nullopt,
                                          absl::FromUnixSeconds(kT0));
  EXPECT_EQ(list["jobs"][0]["bestTrialId"], "1");
  EXPECT_EQ(list["jobs"][0]["bestObjective"], 0.5);
}

TEST(JobListJsonTest, StateFilterKeepsOnlyThatState) {
  const std::vector<v1::TrainingJob> jobs = {
      Job("a", v1::SUCCEEDED, kT0), Job("b", v1::RUNNING, kT0), Job("c", v1::SUCCEEDED, kT0)};
  const nlohmann::json list = JobListJson(jobs, v1::SUCCEEDED, absl::FromUnixSeconds(kT0));
  std::vector<std::string> ids;
  for (const auto& job : list["jobs"]) ids.push_back(job["jobId"]);
  EXPECT_THAT(ids, ElementsAre("c", "a"));
  EXPECT_TRUE(JobListJson(jobs, v1::FAILED, absl::FromUnixSeconds(kT0))["jobs"].empty());
}

// earlyStopping.pauseAtRungs: a trial paused at a rung holds no slot, so it
// is counted as paused, not running.
TEST(JobPageJsonTest, APausedTrialIsCountedPausedNotRunning) {
  JobRecord record;
  record.job = Study(v1::HyperparameterSpec::MAXIMIZE);
  v1::HyperparameterOutput* paused =
      record.job.mutable_status()->mutable_training_output()->add_trials();
  paused->set_trial_id("6");
  paused->set_state(v1::QUEUED);
  paused->set_paused(true);
  const nlohmann::json page = JobPageJson(record, absl::FromUnixSeconds(kT0 + 20));
  EXPECT_EQ(page["study"]["running"], 1);
  EXPECT_EQ(page["study"]["paused"], 1);
}

TEST(JobPageJsonTest, TheJobIsWhatDescribePrintsWithArchivedTrials) {
  JobRecord record;
  record.job = Study(v1::HyperparameterSpec::MAXIMIZE);
  v1::HyperparameterOutput archived;
  archived.set_trial_id("6");
  archived.set_state(v1::SUCCEEDED);
  archived.mutable_final_metric()->set_objective_value(0.95);
  record.archived = {archived};
  const nlohmann::json page = JobPageJson(record, absl::FromUnixSeconds(kT0 + 20));
  EXPECT_EQ(page["job"], JobResource(record.job, record.archived));
  const nlohmann::json& trials = page["job"]["trainingOutput"]["trials"];
  ASSERT_EQ(trials.size(), 6u);
  EXPECT_EQ(trials[0]["trialId"], "6");  // best first, archived included
  EXPECT_EQ(trials[1]["allMetrics"].size(), 2u);
  EXPECT_EQ(page["study"]["best"]["trialId"], "6");
  EXPECT_EQ(page["study"]["best"]["objectiveValue"], 0.95);
  EXPECT_EQ(page["study"]["completed"], 3);
  EXPECT_EQ(page["study"]["max"], 10);
  EXPECT_EQ(page["study"]["running"], 1);
  EXPECT_EQ(page["study"]["paused"], 0);
  EXPECT_EQ(page["study"]["failed"], 1);
  EXPECT_EQ(page["study"]["stoppedEarly"], 1);
  EXPECT_EQ(page["durationSeconds"], 10.0);
}

TEST(JobPageJsonTest, TheStudySaysItsEarlyStoppingRuleAndWhereHalvingStoppedTrials) {
  JobRecord record;
  record.job = Study(v1::HyperparameterSpec::MAXIMIZE);
  nlohmann::json page = JobPageJson(record, absl::FromUnixSeconds(kT0));
  EXPECT_EQ(page["study"]["earlyStopping"], "");
  EXPECT_EQ(page["study"]["stoppedAtEachRung"], "");
  record.job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->mutable_early_stopping()
      ->set_algorithm(v1::EarlyStoppingSpec::SUCCESSIVE_HALVING);
  // Trial 2, stopped early, was stopped at rung 1.
  v1::HyperparameterOutput* stopped =
      record.job.mutable_status()->mutable_training_output()->mutable_trials(1);
  stopped->add_rung_metrics()->set_objective_value(0.3);
  stopped->add_rung_metrics()->set_objective_value(0.45);
  page = JobPageJson(record, absl::FromUnixSeconds(kT0));
  EXPECT_EQ(page["study"]["earlyStopping"],
            "successive halving (reduction factor 3; rungs at report 1, report 3, report 9, ...)");
  EXPECT_EQ(page["study"]["stoppedAtEachRung"], "rung 1 (report 3): 1");
}

TEST(JobPageJsonTest, ReplicasFromTheScaleTier) {
  JobRecord record;
  record.job = Study(v1::HyperparameterSpec::MAXIMIZE);
  const nlohmann::json page = JobPageJson(record, absl::FromUnixSeconds(kT0));
  ASSERT_TRUE(page["replicas"].is_array()) << page.dump();
  ASSERT_EQ(page["replicas"].size(), 2u);
  EXPECT_EQ(page["replicas"][0]["role"], "master");
  EXPECT_EQ(page["replicas"][0]["count"], 1);
  EXPECT_EQ(page["replicas"][1]["role"], "worker");
  EXPECT_EQ(page["replicas"][1]["count"], 2);
  EXPECT_EQ(page["replicas"][1]["machineType"], "standard");
  EXPECT_FALSE(page.contains("specErrors"));
}

// A resource written by hand on a cluster may not be valid: the page says
// why instead of guessing replicas.
TEST(JobPageJsonTest, InvalidSpecGivesErrorsNotReplicas) {
  JobRecord record;
  record.job = Study(v1::HyperparameterSpec::MAXIMIZE);
  record.job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->mutable_params(0)
      ->set_min_value(0);
  const nlohmann::json page = JobPageJson(record, absl::FromUnixSeconds(kT0));
  EXPECT_TRUE(page["replicas"].is_null());
  ASSERT_TRUE(page["specErrors"].is_array());
  EXPECT_THAT(page["specErrors"][0].get<std::string>(), HasSubstr("minValue"));
}

TEST(JobPageJsonTest, StatusConditionsAndEvents) {
  JobRecord record;
  record.job = Job("plain", v1::FAILED, kT0);
  v1::Condition* c = record.job.mutable_status()->add_conditions();
  c->set_type("Failed");
  c->set_status("True");
  c->set_reason("BackoffLimitExceeded");
  c->set_message("<img src=x onerror=alert(1)>");
  c->mutable_last_transition_time()->set_seconds(kT0 + 60);
  (*record.job.mutable_status()->mutable_replica_statuses())["master"].set_failed(1);
  record.job.mutable_status()->set_restart_count(3);
  JobEvent created{"Normal", "TrialCreated", "trainingjob/plain", "kubetrain-operator",
                   "trial 12 created"};
  created.first_seen = created.last_seen = absl::FromUnixSeconds(kT0 + 1);
  JobEvent failed{"Warning", "Failed", "pod/plain-master-0", "kubelet", "job failed", 3};
  failed.first_seen = absl::FromUnixSeconds(kT0 + 2);
  failed.last_seen = absl::FromUnixSeconds(kT0 + 30);
  record.events = {created, failed};
  record.events_error = "";
  const nlohmann::json page = JobPageJson(record, absl::FromUnixSeconds(kT0));
  EXPECT_EQ(page["status"]["conditions"][0]["reason"], "BackoffLimitExceeded");
  // Passed through as data; the page shows it as text.
  EXPECT_EQ(page["status"]["conditions"][0]["message"], "<img src=x onerror=alert(1)>");
  EXPECT_EQ(page["status"]["conditions"][0]["lastTransitionTime"], "2027-01-15T08:01:00Z");
  EXPECT_EQ(page["status"]["replicaStatuses"]["master"]["failed"], 1);
  EXPECT_EQ(page["status"]["restartCount"], 3);
  ASSERT_EQ(page["events"].size(), 2u);
  // As `jobs describe --format json` prints them, with the trial added.
  EXPECT_EQ(page["events"][0]["lastTimestamp"], "2027-01-15T08:00:01Z");
  EXPECT_EQ(page["events"][0]["object"], "trainingjob/plain");
  EXPECT_EQ(page["events"][0]["trial"], "12");
  EXPECT_EQ(page["events"][1]["trial"], "");
  EXPECT_EQ(page["events"][1]["type"], "Warning");
  EXPECT_EQ(page["events"][1]["count"], 3);
  EXPECT_EQ(page["events"][1]["firstTimestamp"], "2027-01-15T08:00:02Z");
  EXPECT_EQ(page["events"][1]["lastTimestamp"], "2027-01-15T08:00:30Z");
  EXPECT_EQ(page["events"][1]["source"], "kubelet");
  nlohmann::json without_trial = page["events"];
  for (nlohmann::json& e : without_trial) e.erase("trial");
  EXPECT_EQ(without_trial, EventsJson(record.events));
  EXPECT_FALSE(page.contains("study"));
  EXPECT_FALSE(page.contains("eventsError"));
  EXPECT_FALSE(page.contains("durationSeconds"));

  record.events_error = "events is forbidden";
  EXPECT_EQ(JobPageJson(record, absl::FromUnixSeconds(kT0))["eventsError"], "events is forbidden");
}

TEST(JobPageJsonTest, EmptyStatusStillHasItsLists) {
  JobRecord record;
  record.job = Job("new", v1::QUEUED, kT0);
  const nlohmann::json page = JobPageJson(record, absl::FromUnixSeconds(kT0));
  EXPECT_TRUE(page["status"]["conditions"].is_array());
  EXPECT_TRUE(page["status"]["replicaStatuses"].is_object());
  EXPECT_TRUE(page["events"].is_array());
}

TEST(LogJsonTest, StreamsAndChunks) {
  EXPECT_EQ(
      LogStreamsJson({{"1", "master-replica-0"}, {"", "worker-replica-0"}}).dump(),
      R"({"streams":[{"task":"master-replica-0","trial":"1"},{"task":"worker-replica-0","trial":""}]})");
  LogChunk chunk;
  chunk.lines = {{kT0 + 0.5, "INFO", "step 1"}, {0, "ERROR", "no time"}};
  chunk.next_offset = 42;
  chunk.truncated = true;
  const nlohmann::json json = LogChunkJson(chunk);
  EXPECT_EQ(json["lines"][0]["time"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(json["lines"][0]["severity"], "INFO");
  EXPECT_EQ(json["lines"][0]["message"], "step 1");
  EXPECT_EQ(json["lines"][1]["time"], "");
  EXPECT_EQ(json["nextOffset"], 42);
  EXPECT_EQ(json["truncated"], true);
}

}  // namespace
}  // namespace kubetrain::cli::ui
