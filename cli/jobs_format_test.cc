#include "cli/jobs_format.h"

#include "api/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::TrainingJob StudyWithTrials(v1::HyperparameterSpec::GoalType goal) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("study_job");
  (*job.mutable_metadata()->mutable_labels())["team"] = "vision";
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_scale_tier(v1::TrainingInput::CUSTOM);
  input->set_worker_count(2);
  input->mutable_hyperparameters()->set_goal(goal);
  input->mutable_hyperparameters()->set_max_trials(5);
  input->mutable_hyperparameters()->add_params()->set_parameter_name("lr");
  v1::TrainingJobStatus* status = job.mutable_status();
  status->set_state(v1::RUNNING);
  status->mutable_create_time()->set_seconds(1800000000);
  v1::TrainingOutput* out = status->mutable_training_output();
  out->set_completed_trial_count(3);
  const double objectives[] = {0.5, 0.9, 0.7};
  for (int i = 0; i < 3; ++i) {
    v1::HyperparameterOutput* t = out->add_trials();
    t->set_trial_id(std::to_string(i + 1));
    (*t->mutable_hyperparameters())["lr"] = "0.0" + std::to_string(i + 1);
    t->mutable_final_metric()->set_objective_value(objectives[i]);
    t->mutable_final_metric()->set_training_step(100 + i);
    t->set_state(v1::SUCCEEDED);
  }
  v1::HyperparameterOutput* running = out->add_trials();
  running->set_trial_id("4");
  running->set_state(v1::RUNNING);
  return job;
}

std::vector<std::string> TrialIds(const nlohmann::json& resource) {
  std::vector<std::string> ids;
  for (const auto& t : resource["trainingOutput"]["trials"]) ids.push_back(t["trialId"]);
  return ids;
}

TEST(JobResourceTest, GcloudShapeWithTrialsBestFirst) {
  v1::HyperparameterOutput archived;
  archived.set_trial_id("5");
  archived.mutable_final_metric()->set_objective_value(0.8);
  nlohmann::json r = JobResource(StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE), {archived});
  EXPECT_EQ(r["jobId"], "study_job");
  EXPECT_EQ(r["state"], "RUNNING");
  EXPECT_EQ(r["createTime"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(r["labels"]["team"], "vision");
  EXPECT_EQ(r["trainingInput"]["workerCount"], "2");  // int64 as a string
  EXPECT_EQ(r["trainingOutput"]["completedTrialCount"], "3");
  EXPECT_EQ(r["trainingOutput"]["trials"][0]["finalMetric"]["trainingStep"], "101");
  EXPECT_EQ(r["trainingOutput"]["trials"][0]["hyperparameters"]["lr"], "0.02");
  EXPECT_EQ(TrialIds(r), (std::vector<std::string>{"2", "5", "3", "1", "4"}));

  nlohmann::json min = JobResource(StudyWithTrials(v1::HyperparameterSpec::MINIMIZE));
  EXPECT_EQ(TrialIds(min), (std::vector<std::string>{"1", "3", "2", "4"}));

  const std::string yaml = api::EncodeYaml(r);
  EXPECT_LT(yaml.find("createTime"), yaml.find("jobId"));  // keys sorted
  EXPECT_LT(yaml.find("jobId"), yaml.find("state"));
}

TEST(JobResourceTest, SaysWhyReplicasWaitWhileTheyDo) {
  v1::TrainingJob job = StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE);
  job.mutable_status()->set_state(v1::PREPARING);
  v1::Condition* c = job.mutable_status()->add_conditions();
  c->set_type("ReplicasWaiting");
  c->set_status("True");
  c->set_reason("Unschedulable");
  c->set_message("master-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu.");
  c->mutable_last_transition_time()->set_seconds(1800000060);
  nlohmann::json r = JobResource(job);
  EXPECT_EQ(r["waiting"],
            nlohmann::json({{"reason", "Unschedulable"},
                            {"message",
                             "master-0 cannot be scheduled: 0/1 nodes are available: 1 "
                             "Insufficient cpu."},
                            {"since", "2027-01-15T08:01:00Z"}}));
  EXPECT_THAT(SummarizeJob(r), HasSubstr("WAITING: Unschedulable: master-0 cannot be scheduled"));
  c->set_status("False");
  EXPECT_FALSE(JobResource(job).contains("waiting"));
}

TEST(JobResourceTest, SaysWhyAQueuedJobIsNotAdmittedYet) {
  v1::TrainingJob job = StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE);
  job.mutable_status()->set_state(v1::QUEUED);
  v1::Condition* c = job.mutable_status()->add_conditions();
  c->set_type("Admitted");
  c->set_status("False");
  c->set_reason("WaitingForCapacity");
  c->set_message(
      "needs 4 pods of cpu 4, memory 15Gi; the cluster can place 2 of them now; 1 job "
      "ahead of it");
  c->mutable_last_transition_time()->set_seconds(1800000060);
  nlohmann::json r = JobResource(job);
  EXPECT_EQ(r["queued"]["reason"], "WaitingForCapacity");
  EXPECT_EQ(r["queued"]["since"], "2027-01-15T08:01:00Z");
  EXPECT_FALSE(r["queued"].contains("position"));
  EXPECT_FALSE(r.contains("waiting"));
  EXPECT_THAT(SummarizeJob(r),
              HasSubstr("QUEUED: WaitingForCapacity: needs 4 pods of cpu 4, memory 15Gi; the "
                        "cluster can place 2 of them now; 1 job ahead of it\n"));
  job.mutable_status()->set_queue_position(2);
  r = JobResource(job);
  EXPECT_EQ(r["queued"]["position"], 2);
  EXPECT_THAT(SummarizeJob(r), HasSubstr("QUEUED, position 2: WaitingForCapacity: needs 4"));
  c->set_status("True");
  c->set_reason("Admitted");
  EXPECT_FALSE(JobResource(job).contains("queued"));
}

TEST(JobResourceTest, WarnsOfReplicasRunningWithoutTheirGpus) {
  v1::TrainingJob job = StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE);
  EXPECT_FALSE(JobResource(job).contains("warning"));
  v1::Condition* c = job.mutable_status()->add_conditions();
  c->set_type("NoGpu");
  c->set_status("True");
  c->set_reason("NotEnoughGpus");
  c->set_message("master asks for 1 GPU; this machine has none: the replicas run on the CPU");
  EXPECT_EQ(JobResource(job)["warning"],
            "master asks for 1 GPU; this machine has none: the replicas run on the CPU");
  EXPECT_THAT(SummarizeJob(JobResource(job)),
              HasSubstr("WARNING: master asks for 1 GPU; this machine has none: the replicas run "
                        "on the CPU\n"));
  c->set_status("False");
  EXPECT_FALSE(JobResource(job).contains("warning"));
}

TEST(JobResourceTest, SummaryHasTheTrialsTable) {
  const std::string summary =
      SummarizeJob(JobResource(StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE)));
  EXPECT_THAT(summary, HasSubstr("TRIAL_ID"));
  EXPECT_THAT(summary, HasSubstr("lr=0.02"));
  EXPECT_LT(summary.find("lr=0.02"), summary.find("lr=0.01"));
  EXPECT_THAT(summary, HasSubstr("study_job"));
}

TEST(JobResourceTest, SummarySaysATrialWaitsToBeAdmittedAgain) {
  v1::TrainingJob job = StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE);
  EXPECT_THAT(SummarizeJob(JobResource(job)), Not(HasSubstr("gang released")));
  v1::HyperparameterOutput& trial =
      (*job.mutable_status()->mutable_training_output()->mutable_trials())[0];
  trial.set_state(v1::QUEUED);
  trial.set_awaiting_admission(true);
  EXPECT_THAT(
      SummarizeJob(JobResource(job)),
      HasSubstr("gang released (a replica could not be placed): waits to be admitted again"));
}

TEST(JobResourceTest, SummarySaysWhereSuccessiveHalvingStoppedEachTrial) {
  v1::TrainingJob job = StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE);
  v1::EarlyStoppingSpec* stopping = job.mutable_spec()
                                        ->mutable_training_input()
                                        ->mutable_hyperparameters()
                                        ->mutable_early_stopping();
  stopping->set_algorithm(v1::EarlyStoppingSpec::SUCCESSIVE_HALVING);
  stopping->set_reduction_factor(2);
  auto* trials = job.mutable_status()->mutable_training_output()->mutable_trials();
  // Trial 1 stopped at its first rung, trial 3 at its second; trial 2 ran on.
  const int rungs_reached[] = {1, 3, 2};
  const bool stopped[] = {true, false, true};
  for (int i = 0; i < 3; ++i) {
    (*trials)[i].set_is_trial_stopped_early(stopped[i]);
    for (int k = 0; k < rungs_reached[i]; ++k) {
      (*trials)[i].add_rung_metrics()->set_objective_value(0.5);
    }
  }
  const std::string summary = SummarizeJob(JobResource(job));
  EXPECT_THAT(summary, HasSubstr("Early stopping: successive halving (reduction factor 2; rungs "
                                 "at report 1, report 2, report 4, ...)"));
  EXPECT_THAT(summary, HasSubstr("stopped early at rung 0 (report 1)"));
  EXPECT_THAT(summary, HasSubstr("stopped early at rung 1 (report 2)"));
  EXPECT_THAT(summary,
              HasSubstr("Stopped at each rung: rung 0 (report 1): 1, rung 1 (report 2): 1"));

  // With pauseAtRungs, trial 3 waits at its last rung instead.
  stopping->set_pause_at_rungs(true);
  (*trials)[2].set_is_trial_stopped_early(false);
  (*trials)[2].set_state(v1::QUEUED);
  (*trials)[2].set_paused(true);
  const std::string pausing = SummarizeJob(JobResource(job));
  EXPECT_THAT(pausing, HasSubstr("report 4, ...; trials pause at rungs)"));
  EXPECT_THAT(pausing, HasSubstr("paused at rung 1 (report 2): resumes if it earns rung 2"));
  EXPECT_THAT(pausing, HasSubstr("Stopped at each rung: rung 0 (report 1): 1\n"));
  // Resumed under gang admission, it waits to be admitted again.
  (*trials)[2].set_paused(false);
  (*trials)[2].set_awaiting_admission(true);
  EXPECT_THAT(SummarizeJob(JobResource(job)),
              HasSubstr("waits to be admitted again (its gang was released, or it resumes from a "
                        "pause)"));

  job.mutable_spec()->mutable_training_input()->mutable_hyperparameters()->clear_early_stopping();
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_enable_trial_early_stopping(true);
  const std::string median = SummarizeJob(JobResource(job));
  EXPECT_THAT(median, HasSubstr("Early stopping: median rule"));
  EXPECT_THAT(median, Not(HasSubstr("Stopped at each rung")));
}

TEST(JobResourceTest, OutputLocationAndEachTrialsFolder) {
  v1::TrainingJob job = StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE);
  v1::OutputLocation* location = job.mutable_status()->mutable_output_location();
  location->set_path("/outputs");
  location->set_claim_name("study-job-output");
  location->set_sub_path("runs");
  for (v1::HyperparameterOutput& t :
       *job.mutable_status()->mutable_training_output()->mutable_trials()) {
    t.set_output_path("/outputs/" + t.trial_id());
  }
  nlohmann::json r = JobResource(job);
  EXPECT_EQ(r["outputLocation"]["path"], "/outputs");
  EXPECT_EQ(r["outputLocation"]["claimName"], "study-job-output");
  EXPECT_EQ(r["trainingOutput"]["trials"][0]["outputPath"], "/outputs/2");
  const std::string summary = SummarizeJob(r);
  EXPECT_THAT(summary, HasSubstr("OUTPUTS: /outputs on claim study-job-output (subPath runs)\n"));
  EXPECT_THAT(summary, HasSubstr("OUTPUT "));
  EXPECT_THAT(summary, HasSubstr("/outputs/4"));

  location->Clear();
  location->set_path("/tmp/out");
  location->set_ephemeral(true);
  EXPECT_THAT(SummarizeJob(JobResource(job)),
              HasSubstr("OUTPUTS: /tmp/out: inside each replica, lost with the pods (no "
                        "spec.outputStorage)\n"));
  location->set_volume_name("scratch");
  EXPECT_THAT(SummarizeJob(JobResource(job)),
              HasSubstr("OUTPUTS: /tmp/out on volume scratch, an emptyDir, lost with the pods"));
  job.mutable_status()->clear_output_location();
  EXPECT_FALSE(JobResource(job).contains("outputLocation"));
}

TEST(JobFilterTest, StateJobIdAndLabels) {
  v1::TrainingJob job = StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE);
  auto matches = [&](const std::string& filter) {
    auto p = ParseJobFilter(filter);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() && (*p)(job);
  };
  EXPECT_TRUE(matches("state=running"));
  EXPECT_FALSE(matches("state=SUCCEEDED"));
  EXPECT_TRUE(matches("jobId:study"));
  EXPECT_FALSE(matches("jobId=study"));
  EXPECT_TRUE(matches("labels.team=vision state=RUNNING"));
  EXPECT_FALSE(matches("labels.team=vision AND labels.x=y"));
  EXPECT_TRUE(matches(""));
  auto bad = ParseJobFilter("color=red");
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("color"));
  EXPECT_FALSE(ParseJobFilter("state").ok());
}

TEST(LogFormatTest, EntryAndSeverity) {
  EXPECT_EQ(FormatLogEntry("INFO", 1800000000.5, "master-replica-0", "3", "step 10"),
            "INFO\t2027-01-15 08:00:00 +0000\tmaster-replica-0\t3\tstep 10");
  EXPECT_EQ(LogSeverity(true, "ERROR: data file missing"), "ERROR");
  EXPECT_EQ(LogSeverity(true, "Warning: slow"), "WARNING");
  EXPECT_EQ(LogSeverity(true, "Train [master/0], step 1: loss: 2.3"), "INFO");
  EXPECT_EQ(LogSeverity(true,
                        "/usr/bin/python3: Error while finding module specification for "
                        "'trainer.task'"),
            "ERROR");
  EXPECT_EQ(LogSeverity(true, "ModuleNotFoundError: No module named 'trainer'"), "ERROR");
  EXPECT_EQ(LogSeverity(true, "sh: error: bad substitution"), "ERROR");
  // The same words on stdout are the program's business.
  EXPECT_EQ(LogSeverity(false, "ModuleNotFoundError: No module named 'trainer'"), "INFO");
  EXPECT_EQ(LogSeverity(true, "Eval, step 20: loss: 0.6"), "INFO");
}

TEST(LogFormatTest, EventTrial) {
  EXPECT_EQ(EventTrial("trial 12: objective 0.9 at step 20"), "12");
  EXPECT_EQ(EventTrial("trial 3 failed: exited with code 1"), "3");
  EXPECT_EQ(EventTrial("the job was cancelled"), "");
  EXPECT_EQ(EventTrial("trial x: odd"), "");
  EXPECT_EQ(EventTrial("trial "), "");
}

TEST(ProgressLineTest, CountsAndBest) {
  EXPECT_EQ(ProgressLine(StudyWithTrials(v1::HyperparameterSpec::MAXIMIZE)),
            "trials: 3/5 completed, 1 running, 0 failed; best objective 0.9000 (trial 2)");
  v1::TrainingJob plain;
  EXPECT_EQ(ProgressLine(plain), "");
}

TEST(EventsTest, AgesAsKubectlPrintsThem) {
  EXPECT_EQ(HumanDuration(absl::Seconds(45)), "45s");
  EXPECT_EQ(HumanDuration(absl::Seconds(303)), "5m3s");
  EXPECT_EQ(HumanDuration(absl::Minutes(42)), "42m");
  EXPECT_EQ(HumanDuration(absl::Minutes(190)), "3h10m");
  EXPECT_EQ(HumanDuration(absl::Hours(30)), "30h");
  EXPECT_EQ(HumanDuration(absl::Hours(75)), "3d3h");
  EXPECT_EQ(HumanDuration(absl::Hours(24 * 12)), "12d");
  EXPECT_EQ(HumanDuration(absl::Seconds(-1)), "0s");
  EXPECT_EQ(HumanDuration(absl::Seconds(-9)), "<invalid>");
}

TEST(EventsTest, TableAsKubectlDescribeEnds) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  EXPECT_EQ(FormatEvents({}, now, "# "), "# Events: <none>\n");
  JobEvent created{"Normal",
                   "ReplicasCreated",
                   "trainingjob/mnist",
                   "kubetrain-operator",
                   "1 replicas created",
                   1,
                   now - absl::Minutes(5),
                   now - absl::Minutes(5)};
  JobEvent scheduling{"Warning",
                      "FailedScheduling",
                      "pod/mnist-master-0",
                      "default-scheduler",
                      "0/1 nodes are available:\n1 Insufficient cpu.",
                      3,
                      now - absl::Minutes(4),
                      now - absl::Seconds(10)};
  EXPECT_EQ(FormatEvents({created, scheduling}, now, "# "),
            "# Events:\n"
            "#   TYPE     REASON            AGE               FROM                OBJECT          "
            "    MESSAGE\n"
            "#   Normal   ReplicasCreated   5m                kubetrain-operator  "
            "trainingjob/mnist   1 replicas created\n"
            "#   Warning  FailedScheduling  10s (x3 over 4m)  default-scheduler   "
            "pod/mnist-master-0  0/1 nodes are available: 1 Insufficient cpu.\n");
  const nlohmann::json json = EventsJson({scheduling});
  EXPECT_EQ(json[0]["count"], 3);
  EXPECT_EQ(json[0]["lastTimestamp"], "2027-01-15T07:59:50Z");
  EXPECT_EQ(json[0]["firstTimestamp"], "2027-01-15T07:56:00Z");
}

}  // namespace
}  // namespace kubetrain::cli
