#include "operator/local/controller.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/hypertune/hypertune.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/local/fake_process_launcher.h"
#include "operator/tuner/recording_tuner.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::local {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

std::string EnvOf(const LaunchRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.env) {
    if (k == name) return v;
  }
  return "";
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = JobStore::Open(dir_.path() + "/jobs.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    NewController();
  }

  // A new controller on the same store and processes: what a restart sees.
  void NewController() {
    ControllerOptions options;
    options.home = dir_.path();
    options.runtime_binary = "/opt/kubetrain-runtime";
    options.clock = [this] { return now_; };
    options.allocate_port = [this]() -> absl::StatusOr<int> {
      return 30000 + port_draws_++ / port_repeats_;
    };
    options.tuner_factory = [this](const v1::HyperparameterSpec& spec,
                                   uint64_t seed) -> absl::StatusOr<std::unique_ptr<tuner::Tuner>> {
      absl::StatusOr<std::unique_ptr<tuner::Tuner>> inner = tuner::Tuner::Create(spec, seed);
      if (!inner.ok()) return inner.status();
      return std::make_unique<tuner::RecordingTuner>(*std::move(inner), &last_history_);
    };
    options.stop_rule = tuner::ShouldStopEarly;
    options.slots = slots_;
    options.podman = podman_;
    controller_ = std::make_unique<Controller>(store_.get(), &launcher_, options);
  }

  void SyncAll() {
    now_ += absl::Seconds(1);
    absl::StatusOr<int> active = controller_->SyncAll();
    ASSERT_TRUE(active.ok()) << active.status();
  }

  void Submit(v1::TrainingJob job) {
    job.mutable_metadata()->set_uid("uid-" + job.metadata().name());
    ASSERT_TRUE(store_->CreateJob(job).ok());
  }

  v1::TrainingJob Get(const std::string& name) {
    auto job = store_->GetJob(name);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  void Sync(const std::string& name) {
    now_ += absl::Seconds(1);
    absl::StatusOr<bool> more = controller_->SyncJob(name);
    ASSERT_TRUE(more.ok()) << more.status();
  }

  static v1::TrainingJob BasicJob(const std::string& name) {
    v1::TrainingJob job;
    job.set_api_version("kubetrain.io/v1");
    job.set_kind("TrainingJob");
    job.mutable_metadata()->set_name(name);
    job.mutable_spec()->mutable_training_input()->add_args("--epochs=1");
    return job;
  }

  // A master, 2 workers and a ps.
  static v1::TrainingJob DistributedJob(const std::string& name) {
    v1::TrainingJob job = BasicJob(name);
    v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
    input->set_scale_tier(v1::TrainingInput::CUSTOM);
    input->set_master_type("standard");
    input->set_worker_type("standard");
    input->set_worker_count(2);
    input->set_parameter_server_type("standard");
    input->set_parameter_server_count(1);
    return job;
  }

  static v1::TrainingJob StudyJob(const std::string& name, int max_trials, int parallel) {
    v1::TrainingJob job = BasicJob(name);
    v1::HyperparameterSpec* hp =
        job.mutable_spec()->mutable_training_input()->mutable_hyperparameters();
    hp->set_goal(v1::HyperparameterSpec::MAXIMIZE);
    hp->set_max_trials(max_trials);
    hp->set_max_parallel_trials(parallel);
    hp->set_algorithm(v1::HyperparameterSpec::RANDOM_SEARCH);
    v1::ParameterSpec* p = hp->add_params();
    p->set_parameter_name("x");
    p->set_type(v1::ParameterSpec::DOUBLE);
    p->set_min_value(0);
    p->set_max_value(1);
    p->set_scale_type(v1::ParameterSpec::UNIT_LINEAR_SCALE);
    return job;
  }

  // Writes a hypertune report into the metric file the replica was given.
  static void Report(const LaunchRequest& r, double value, int64_t step) {
    hypertune::HypertuneWriter::Options options;
    options.metric_path = EnvOf(r, "CLOUD_ML_HP_METRIC_FILE");
    options.trial_id = EnvOf(r, "CLOUD_ML_TRIAL_ID");
    // Append to what is there, as the library keeps earlier reports.
    std::string existing;
    {
      std::ifstream in(options.metric_path);
      std::stringstream s;
      s << in.rdbuf();
      existing = s.str();
    }
    std::ofstream(options.metric_path)
        << existing
        << hypertune::FormatHypertuneLine("", value, step, options.trial_id, 1.7e9 + step);
  }

  test_support::TempDir dir_;
  std::unique_ptr<JobStore> store_;
  FakeProcessLauncher launcher_;
  std::unique_ptr<Controller> controller_;
  absl::Time now_ = absl::FromUnixSeconds(1800000000);
  // The fake allocator hands out 30000, 30001, ..., each port_repeats_ times
  // in a row (as the kernel may give a just-probed port again).
  int port_draws_ = 0;
  int port_repeats_ = 1;
  int slots_ = 0;                                 // ControllerOptions::slots
  std::string podman_;                            // ControllerOptions::podman
  std::vector<tuner::TrialRecord> last_history_;  // what the tuner saw last
};

TEST_F(ControllerTest, SingleReplicaJobRunsTheRuntimeAndSucceeds) {
  Submit(BasicJob("basic_job"));
  Sync("basic_job");
  ASSERT_EQ(launcher_.launched.size(), 1u);
  const LaunchRequest& r = launcher_.launched[0];
  EXPECT_EQ(r.name, "basic-job-master-0");
  EXPECT_EQ(r.argv, (std::vector<std::string>{"/opt/kubetrain-runtime", "train", "--epochs=1"}));
  EXPECT_THAT(EnvOf(r, "TF_CONFIG"), HasSubstr("\"127.0.0.1:30000\""));
  EXPECT_EQ(EnvOf(r, "CLOUD_ML_JOB_ID"), "basic_job");
  EXPECT_EQ(r.log_path, dir_.path() + "/jobs/basic_job/logs/master-replica-0.log");
  EXPECT_FALSE(EnvOf(r, "CLOUD_ML_HP_METRIC_FILE").empty());

  Sync("basic_job");
  Sync("basic_job");
  EXPECT_EQ(launcher_.launched.size(), 1u);  // idempotent: nothing started twice
  EXPECT_EQ(Get("basic_job").status().state(), v1::RUNNING);

  launcher_.Exit("basic-job-master-0", 0);
  Sync("basic_job");
  EXPECT_EQ(Get("basic_job").status().state(), v1::SUCCEEDED);
  auto more = controller_->SyncJob("basic_job");
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
  EXPECT_EQ(launcher_.launched.size(), 1u);
}

TEST_F(ControllerTest, DistributedClusterGetsOnePortPerReplicaInEveryTfConfig) {
  Submit(DistributedJob("dist"));
  Sync("dist");
  ASSERT_EQ(launcher_.launched.size(), 4u);
  std::set<std::string> logs;
  const std::string tf_config = EnvOf(launcher_.launched[0], "TF_CONFIG");
  for (const LaunchRequest& r : launcher_.launched) {
    logs.insert(std::filesystem::path(r.log_path).filename().string());
    // Every task sees the same cluster.
    const std::string cluster =
        EnvOf(r, "TF_CONFIG").substr(0, EnvOf(r, "TF_CONFIG").find("\"task\""));
    EXPECT_EQ(cluster, tf_config.substr(0, tf_config.find("\"task\"")));
  }
  EXPECT_EQ(logs, (std::set<std::string>{"master-replica-0.log", "worker-replica-0.log",
                                         "worker-replica-1.log", "ps-replica-0.log"}));
  for (int port = 30000; port < 30004; ++port) {
    EXPECT_THAT(tf_config, HasSubstr(absl::StrCat("127.0.0.1:", port)));
  }
  // A restarted controller gives the same addresses (ports kept in the store).
  NewController();
  launcher_.Exit("dist-worker-1", 2);  // restartPolicy Never: the job fails
  Sync("dist");
  v1::TrainingJob failed = Get("dist");
  EXPECT_EQ(failed.status().state(), v1::FAILED);
  EXPECT_THAT(failed.status().error_message(), HasSubstr("worker"));
  // cleanPodPolicy Running: what still ran is killed.
  EXPECT_THAT(launcher_.Running(), IsEmpty());
  EXPECT_EQ(launcher_.launched.size(), 4u);
}

TEST_F(ControllerTest, APortDrawnAgainIsNeverGivenToASecondReplica) {
  port_repeats_ = 2;
  NewController();
  Submit(DistributedJob("dist"));
  Sync("dist");
  ASSERT_EQ(launcher_.launched.size(), 4u);
  auto ports = store_->Ports("dist");
  ASSERT_TRUE(ports.ok()) << ports.status();
  std::set<int> distinct;
  for (const auto& [replica, port] : *ports) distinct.insert(port);
  EXPECT_EQ(distinct, (std::set<int>{30000, 30001, 30002, 30003}));
}

TEST_F(ControllerTest, StudyRunsMaxTrialsWithMetricsAcrossAControllerRestart) {
  Submit(StudyJob("study", 4, 2));
  std::map<std::string, double> objective_of;  // trial -> value reported
  int finished = 0;
  for (int round = 0; round < 40 && !core::IsTerminal(Get("study").status().state()); ++round) {
    Sync("study");
    // Every running master reports x as its objective, then exits 0.
    for (const LaunchRequest& r : launcher_.launched) {
      FakeProcessLauncher::Process* p = launcher_.Find(r.name);
      if (p == nullptr || p->status.state != ProcessStatus::State::kRunning) continue;
      const std::string trial = EnvOf(r, "CLOUD_ML_TRIAL_ID");
      ASSERT_FALSE(trial.empty());
      double x = 0;
      for (const std::string& arg : r.argv) {
        if (arg.rfind("--x=", 0) == 0) x = std::stod(arg.substr(4));
      }
      Report(r, x / 2, 5);
      Report(r, x, 10);
      objective_of[trial] = x;
      launcher_.Exit(r.name, 0);
      ++finished;
      if (finished == 2) {
        // The controller dies between the exit and its next look.
        NewController();
      }
    }
  }
  v1::TrainingJob job = Get("study");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  const v1::TrainingOutput& out = job.status().training_output();
  EXPECT_EQ(out.completed_trial_count(), 4);
  ASSERT_EQ(out.trials_size(), 4);
  std::set<std::string> ids;
  for (int i = 0; i < out.trials_size(); ++i) {
    const v1::HyperparameterOutput& t = out.trials(i);
    ids.insert(t.trial_id());
    EXPECT_DOUBLE_EQ(t.final_metric().objective_value(), objective_of.at(t.trial_id()));
    EXPECT_EQ(t.final_metric().training_step(), 10);
    EXPECT_EQ(t.all_metrics_size(), 2);  // nothing counted twice after the restart
    if (i > 0) {
      EXPECT_GE(out.trials(i - 1).final_metric().objective_value(),
                t.final_metric().objective_value());
    }
  }
  EXPECT_EQ(ids, (std::set<std::string>{"1", "2", "3", "4"}));
  EXPECT_EQ(launcher_.launched.size(), 4u);  // one master per trial, none twice
}

TEST_F(ControllerTest, ThreeSweepsSubmittedAtOnceRunTheirTrialsWithinTheProcessSlots) {
  slots_ = 2;
  NewController();
  // Each sweep would run 4 one-process trials at once: 12 processes.
  for (const char* name : {"sweep_a", "sweep_b", "sweep_c"}) Submit(StudyJob(name, 4, 4));
  SyncAll();
  // A sweep is admitted with its first trial (a gang of its own): the first
  // two sweeps take the slots; the third waits its turn, and says so.
  EXPECT_EQ(launcher_.Running().size(), 2u);
  v1::TrainingJob c = Get("sweep_c");
  EXPECT_EQ(c.status().state(), v1::QUEUED);
  EXPECT_EQ(c.status().queue_position(), 1);
  bool said = false;
  for (const v1::Condition& cond : c.status().conditions()) {
    if (cond.type() != "Admitted") continue;
    said = true;
    EXPECT_EQ(cond.reason(), "WaitingForCapacity");
    EXPECT_EQ(cond.message(),
              "needs 1 process slot; 0 of this machine's 2 are free now; no job ahead of it");
  }
  EXPECT_TRUE(said);

  size_t most = 0;
  for (int round = 0; round < 60; ++round) {
    SyncAll();
    most = std::max(most, launcher_.Running().size());
    for (const std::string& name : launcher_.Running()) {
      FakeProcessLauncher::Process* p = launcher_.Find(name);
      Report(p->request, 0.5, 10);
      launcher_.Exit(name, 0);
    }
  }
  EXPECT_EQ(most, 2u);  // never more processes than slots
  for (const char* name : {"sweep_a", "sweep_b", "sweep_c"}) {
    v1::TrainingJob job = Get(name);
    EXPECT_EQ(job.status().state(), v1::SUCCEEDED) << name << job.status().error_message();
    EXPECT_EQ(job.status().training_output().completed_trial_count(), 4) << name;
    EXPECT_EQ(job.status().queue_position(), 0) << name;
  }
  EXPECT_EQ(launcher_.launched.size(), 12u);
}

TEST_F(ControllerTest, AJobWithMoreProcessesThanSlotsRunsAlone) {
  slots_ = 2;
  NewController();
  Submit(DistributedJob("big"));  // 4 processes
  Submit(BasicJob("small"));
  SyncAll();
  EXPECT_EQ(launcher_.Running().size(), 4u);  // the whole gang, past the slots
  EXPECT_EQ(Get("small").status().state(), v1::QUEUED);
  const v1::TrainingJob big = Get("big");
  for (const v1::Condition& cond : big.status().conditions()) {
    if (cond.type() == "Admitted") {
      EXPECT_EQ(cond.message(),
                "its 4 processes have process slots now (more than the 2 slots: it "
                "runs alone)");
    }
  }
  SyncAll();
  EXPECT_EQ(Get("small").status().state(), v1::QUEUED);
  for (const std::string& name : launcher_.Running()) launcher_.Exit(name, 0);
  SyncAll();
  SyncAll();
  EXPECT_EQ(Get("big").status().state(), v1::SUCCEEDED);
  EXPECT_THAT(launcher_.Running(), ElementsAre("small-master-0"));
}

TEST_F(ControllerTest, ResumedStudySeedsTheTunerWithTheEarlierJobsTrials) {
  Submit(StudyJob("first", 3, 3));
  std::map<std::string, std::string> first_x;  // trial -> x
  for (int round = 0; round < 20 && !core::IsTerminal(Get("first").status().state()); ++round) {
    Sync("first");
    for (const LaunchRequest& r : launcher_.launched) {
      FakeProcessLauncher::Process* p = launcher_.Find(r.name);
      if (p == nullptr || p->status.state != ProcessStatus::State::kRunning) continue;
      for (const std::string& arg : r.argv) {
        if (arg.rfind("--x=", 0) == 0) first_x[EnvOf(r, "CLOUD_ML_TRIAL_ID")] = arg.substr(4);
      }
      Report(r, std::stod(first_x[EnvOf(r, "CLOUD_ML_TRIAL_ID")]), 10);
      launcher_.Exit(r.name, 0);
    }
  }
  ASSERT_EQ(Get("first").status().state(), v1::SUCCEEDED) << Get("first").status().error_message();
  ASSERT_EQ(first_x.size(), 3u);
  // A trial that left the first job's status lives in the store only.
  v1::HyperparameterOutput archived;
  archived.set_trial_id("9");
  (*archived.mutable_hyperparameters())["x"] = "0.125";
  archived.set_state(v1::SUCCEEDED);
  archived.mutable_final_metric()->set_training_step(10);
  archived.mutable_final_metric()->set_objective_value(0.125);
  *archived.add_all_metrics() = archived.final_metric();
  ASSERT_TRUE(store_->ArchiveTrial("first", archived).ok());
  first_x["9"] = "0.125";

  v1::TrainingJob second = StudyJob("second", 2, 2);
  second.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_resume_previous_job_id("first");
  Submit(second);
  last_history_.clear();
  Sync("second");
  // The tuner saw the first study's four completed trials, and nothing else.
  std::map<std::string, std::string> seen;
  for (const tuner::TrialRecord& r : last_history_) {
    EXPECT_EQ(r.status, tuner::TrialRecord::Status::kCompleted) << r.trial_id;
    ASSERT_TRUE(r.objective.has_value());
    EXPECT_DOUBLE_EQ(*r.objective, std::stod(r.assignment.at("x")));
    seen[r.trial_id] = r.assignment.at("x");
  }
  std::map<std::string, std::string> expected;
  for (const auto& [id, x] : first_x) expected["first/" + id] = x;
  EXPECT_EQ(seen, expected);
  // Its own trials are numbered from 1, none repeats an earlier point, and
  // the earlier trials are not counted as its own.
  v1::TrainingJob job = Get("second");
  ASSERT_EQ(job.status().state(), v1::QUEUED) << job.status().error_message();
  const v1::TrainingOutput& out = job.status().training_output();
  ASSERT_EQ(out.trials_size(), 2);
  EXPECT_EQ(out.trials(0).trial_id(), "1");
  EXPECT_EQ(out.trials(1).trial_id(), "2");
  EXPECT_EQ(out.total_trial_count(), 2);
  EXPECT_EQ(out.completed_trial_count(), 0);
  std::set<std::string> earlier_points;
  for (const auto& [id, x] : first_x) earlier_points.insert(x);
  for (const auto& t : out.trials()) {
    EXPECT_EQ(earlier_points.count(t.hyperparameters().at("x")), 0u) << t.hyperparameters().at("x");
  }
  auto events = store_->Events("second");
  ASSERT_TRUE(events.ok());
  bool resumed_event = false;
  for (const StoredEvent& e : *events) {
    if (e.reason == "StudyResumed") {
      resumed_event = true;
      EXPECT_THAT(e.message, HasSubstr("4 completed trials"));
    }
  }
  EXPECT_TRUE(resumed_event);
}

TEST_F(ControllerTest, ResumingAMissingStudyFailsTheJob) {
  v1::TrainingJob job = StudyJob("orphan", 2, 1);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_resume_previous_job_id("nowhere");
  Submit(job);
  Sync("orphan");
  v1::TrainingJob got = Get("orphan");
  EXPECT_EQ(got.status().state(), v1::FAILED);
  EXPECT_THAT(
      got.status().error_message(),
      HasSubstr("spec.trainingInput.hyperparameters.resumePreviousJobId: no job 'nowhere'"));
  EXPECT_TRUE(launcher_.launched.empty());
}

TEST_F(ControllerTest, CancelKillsEveryReplica) {
  v1::TrainingJob job = BasicJob("to_cancel");
  job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::STANDARD_1);
  Submit(job);
  Sync("to_cancel");
  ASSERT_FALSE(launcher_.Running().empty());
  ASSERT_TRUE(store_->RequestCancel("to_cancel").ok());
  for (int i = 0; i < 5 && Get("to_cancel").status().state() != v1::CANCELLED; ++i)
    Sync("to_cancel");
  EXPECT_EQ(Get("to_cancel").status().state(), v1::CANCELLED);
  EXPECT_THAT(launcher_.Running(), IsEmpty());
  EXPECT_THAT(*store_->ListReplicas("to_cancel"), IsEmpty());
}

// With real processes: cancelling a replica that ignores SIGTERM does not
// hold the sync (and so every other job's) for its grace period; a sync past
// the grace period SIGKILLs it, and one after that drops its record.
TEST(ControllerProcessTest, CancelDoesNotWaitForAReplicaThatIgnoresTerm) {
  test_support::TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  RealProcessLauncher launcher;
  absl::Time now = absl::FromUnixSeconds(1800000000);
  ControllerOptions options;
  options.home = dir.path();
  options.clock = [&now] { return now; };
  Controller controller(store->get(), &launcher, options);
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("stubborn");
  job.mutable_metadata()->set_uid("uid-stubborn");
  auto* command = job.mutable_spec()
                      ->mutable_training_input()
                      ->mutable_master_config()
                      ->mutable_container_command();
  for (const char* arg : {"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"}) {
    command->Add(arg);
  }
  ASSERT_TRUE((*store)->CreateJob(job).ok());
  ASSERT_TRUE(controller.SyncJob("stubborn").ok());
  auto records = (*store)->ListReplicas("stubborn");
  ASSERT_TRUE(records.ok() && records->size() == 1u);
  const ProcessId id{(*records)[0].pid, (*records)[0].start_ticks};
  absl::Cleanup kill_leftovers = [&] { launcher.Kill(id).IgnoreError(); };
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        std::ifstream in((*records)[0].log_path);
        std::stringstream log;
        log << in.rdbuf();
        return log.str().find("ready") != std::string::npos;
      },
      absl::Seconds(20)));

  ASSERT_TRUE((*store)->RequestCancel("stubborn").ok());
  now += absl::Seconds(1);
  ASSERT_TRUE(controller.SyncJob("stubborn").ok());
  EXPECT_TRUE(ProcessAlive(id.pid, id.start_ticks));            // asked to stop, not waited for
  EXPECT_EQ((*(*store)->ListReplicas("stubborn")).size(), 1u);  // terminating

  now += kKillGracePeriod;
  ASSERT_TRUE(controller.SyncJob("stubborn").ok());
  ASSERT_TRUE(test_support::WaitUntil([&] { return !launcher.Alive(id); }, absl::Seconds(20)));
  now += absl::Seconds(1);
  ASSERT_TRUE(controller.SyncJob("stubborn").ok());
  EXPECT_THAT(*(*store)->ListReplicas("stubborn"), IsEmpty());
  EXPECT_EQ((*(*store)->GetJob("stubborn")).status().state(), v1::CANCELLED);
}

// The fake's view of the same: SIGTERM first, SIGKILL only past the grace
// period, the record kept (and observed as terminating) in between.
TEST_F(ControllerTest, CancelSendsTermThenKillPastTheGracePeriod) {
  Submit(BasicJob("slow_stop"));
  Sync("slow_stop");
  launcher_.ignore_term.insert("slow-stop-master-0");
  ASSERT_TRUE(store_->RequestCancel("slow_stop").ok());
  Sync("slow_stop");
  EXPECT_THAT(launcher_.terminated_names, ElementsAre("slow-stop-master-0"));
  EXPECT_THAT(launcher_.force_killed_names, IsEmpty());
  EXPECT_THAT(launcher_.Running(), ElementsAre("slow-stop-master-0"));
  Sync("slow_stop");  // within the grace period: nothing sent again
  EXPECT_EQ(launcher_.terminated_names.size(), 1u);
  EXPECT_THAT(launcher_.force_killed_names, IsEmpty());
  EXPECT_EQ(store_->ListReplicas("slow_stop")->size(), 1u);
  now_ += kKillGracePeriod;
  Sync("slow_stop");
  EXPECT_THAT(launcher_.force_killed_names, ElementsAre("slow-stop-master-0"));
  EXPECT_THAT(launcher_.Running(), IsEmpty());
  Sync("slow_stop");
  EXPECT_THAT(*store_->ListReplicas("slow_stop"), IsEmpty());
  EXPECT_EQ(Get("slow_stop").status().state(), v1::CANCELLED);
}

TEST_F(ControllerTest, ReplicaThatCannotStartFailsWithTheReason) {
  Submit(BasicJob("cannot_start"));
  launcher_.fail_launches = true;
  Sync("cannot_start");
  Sync("cannot_start");
  v1::TrainingJob job = Get("cannot_start");
  EXPECT_EQ(job.status().state(), v1::FAILED);
  EXPECT_THAT(job.status().error_message(), HasSubstr("127"));
  EXPECT_THAT(job.status().error_message(), HasSubstr("fake launch failure"));
}

TEST_F(ControllerTest, ContainerCommandAndPythonModuleAreRunAsGiven) {
  v1::TrainingJob custom = BasicJob("custom");
  custom.mutable_spec()->mutable_training_input()->mutable_master_config()->add_container_command(
      "/bin/true");
  Submit(custom);
  v1::TrainingJob python = BasicJob("python");
  python.mutable_spec()->mutable_training_input()->set_python_module("trainer.task");
  python.mutable_spec()->mutable_training_input()->add_package_uris("/src/pkg");
  Submit(python);
  Sync("custom");
  Sync("python");
  ASSERT_EQ(launcher_.launched.size(), 2u);
  EXPECT_EQ(launcher_.launched[0].argv[0], "/bin/true");
  EXPECT_EQ(launcher_.launched[1].argv,
            (std::vector<std::string>{"python3", "-m", "trainer.task", "--epochs=1"}));
  EXPECT_THAT(EnvOf(launcher_.launched[1], "PYTHONPATH"), HasSubstr("/src/pkg"));
}

// A replica that runs its image's entrypoint runs in a podman container on
// this machine's network: the environment by name only, the metrics folder
// and the jobDir mounted at their paths, the args after the image. Once its
// group is gone (cancelled here), the container is removed too.
TEST_F(ControllerTest, AnImagesEntrypointRunsInAPodmanContainerRemovedWithTheReplica) {
  // A stand-in podman that records each call.
  const std::string calls = dir_.path() + "/podman-calls";
  podman_ = dir_.path() + "/podman";
  std::ofstream(podman_) << "#!/bin/sh\necho \"$*\" >> " << calls << "\n";
  std::filesystem::permissions(podman_, std::filesystem::perms::owner_all);
  NewController();
  v1::TrainingJob job = BasicJob("entry");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->mutable_master_config()->set_image_uri("registry.example.com/trainer:1");
  input->set_job_dir(dir_.path() + "/out");
  Submit(job);
  Sync("entry");
  ASSERT_EQ(launcher_.launched.size(), 1u);
  const LaunchRequest& r = launcher_.launched[0];
  const std::string metrics = dir_.path() + "/jobs/entry/metrics";
  EXPECT_EQ(EnvOf(r, "CLOUD_ML_HP_METRIC_FILE"), metrics + "/master-replica-0.metrics");
  std::vector<std::string> expected = {podman_,     "run",
                                       "--rm",      "--replace",
                                       "--name",    ContainerName(dir_.path(), "entry-master-0"),
                                       "--network", "host"};
  if (getuid() != 0) expected.push_back("--userns=keep-id");
  expected.push_back("--user");
  expected.push_back(absl::StrCat(getuid(), ":", getgid()));
  for (const auto& [name, value] : r.env) {
    expected.push_back("--env");
    expected.push_back(name);
  }
  for (const std::string& folder : {metrics, dir_.path() + "/out"}) {
    expected.push_back("--volume");
    expected.push_back(folder + ":" + folder);
  }
  for (const char* arg : {"registry.example.com/trainer:1", "--epochs=1", "--job-dir", "<out>"}) {
    expected.push_back(std::string(arg) == "<out>" ? dir_.path() + "/out" : arg);
  }
  EXPECT_EQ(r.argv, expected);
  EXPECT_TRUE(std::filesystem::is_directory(dir_.path() + "/out"));
  // No value is on the command line, TF_CONFIG's included.
  EXPECT_THAT(EnvOf(r, "TF_CONFIG"), HasSubstr("127.0.0.1:30000"));
  for (const std::string& arg : r.argv) EXPECT_THAT(arg, Not(HasSubstr("127.0.0.1"))) << arg;

  ASSERT_TRUE(store_->RequestCancel("entry").ok());
  for (int i = 0; i < 5 && !store_->ListReplicas("entry")->empty(); ++i) Sync("entry");
  EXPECT_THAT(*store_->ListReplicas("entry"), IsEmpty());
  EXPECT_EQ(test_support::ReadFile(calls),
            absl::StrCat("rm --force --ignore --time 0 ",
                         ContainerName(dir_.path(), "entry-master-0"), "\n"));
}

// Without podman such a replica cannot start: it fails as a container whose
// image cannot run, saying why.
TEST_F(ControllerTest, WithoutPodmanAnImagesEntrypointFailsWithTheReason) {
  v1::TrainingJob job = BasicJob("entry");
  job.mutable_spec()->mutable_training_input()->mutable_master_config()->set_image_uri(
      "registry.example.com/trainer:1");
  Submit(job);
  Sync("entry");
  Sync("entry");
  EXPECT_TRUE(launcher_.launched.empty());
  v1::TrainingJob ended = Get("entry");
  EXPECT_EQ(ended.status().state(), v1::FAILED);
  EXPECT_THAT(ended.status().error_message(), HasSubstr("127"));
  EXPECT_THAT(ended.status().error_message(),
              HasSubstr("replica entry-master-0 runs the entrypoint of image "
                        "registry.example.com/trainer:1, and the local backend runs images with "
                        "podman, which is not on PATH (nor named by KUBETRAIN_PODMAN)"));
}

// No GPU reaches a container here: a replica that asks for one fails to
// start, saying why, rather than train without it.
TEST_F(ControllerTest, AnImagesEntrypointThatAsksForAGpuFailsWithTheReason) {
  podman_ = "/usr/bin/podman";
  NewController();
  v1::TrainingJob job = BasicJob("entry_gpu");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_scale_tier(v1::TrainingInput::BASIC_GPU);
  input->mutable_master_config()->set_image_uri("registry.example.com/trainer:1");
  Submit(job);
  Sync("entry_gpu");
  Sync("entry_gpu");
  EXPECT_TRUE(launcher_.launched.empty());
  v1::TrainingJob ended = Get("entry_gpu");
  EXPECT_EQ(ended.status().state(), v1::FAILED);
  EXPECT_THAT(ended.status().error_message(),
              HasSubstr("replica entry-gpu-master-0 asks for 1 GPU(s) and runs the entrypoint of "
                        "image registry.example.com/trainer:1: the local backend passes no GPU "
                        "into a container"));
}

// Package files and URLs are installed as on Kubernetes: by exec, into an
// environment made from the controller's Python.
TEST_F(ControllerTest, PythonModulePackageFilesAreInstalledByExec) {
  const std::string sdist = dir_.path() + "/trainer-0.1.tar.gz";
  std::ofstream(sdist) << "an sdist";
  v1::TrainingJob job = BasicJob("sdist");
  job.mutable_spec()->mutable_training_input()->set_python_module("trainer.task");
  job.mutable_spec()->mutable_training_input()->add_package_uris(sdist);
  job.mutable_spec()->mutable_training_input()->add_package_uris(
      "https://pkgs.example.com/u-1.0.tar.gz");
  Submit(job);
  Sync("sdist");
  ASSERT_EQ(launcher_.launched.size(), 1u);
  EXPECT_EQ(launcher_.launched[0].argv,
            (std::vector<std::string>{"/opt/kubetrain-runtime", "exec", "--python", "python3",
                                      "--package", sdist, "--package",
                                      "https://pkgs.example.com/u-1.0.tar.gz", "--", "python3",
                                      "-m", "trainer.task", "--epochs=1"}));
}

TEST_F(ControllerTest, ReplicaRecordedAsStartingIsAdoptedOrReplacedNeverDoubled) {
  v1::TrainingJob job = BasicJob("starting");
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  Submit(job);
  Sync("starting");
  ASSERT_EQ(launcher_.launched.size(), 1u);
  // The controller died between recording and launching: the record says
  // "starting", and the supervisor wrote its pid.
  ReplicaRecord record = (*store_->ListReplicas("starting"))[0];
  const int pid = record.pid;
  record.pid = kPidStarting;
  ASSERT_TRUE(store_->PutReplica(record).ok());
  std::filesystem::create_directories(std::filesystem::path(record.pid_path).parent_path());
  std::ofstream(record.pid_path) << pid << "\n";
  NewController();
  Sync("starting");
  EXPECT_EQ(launcher_.launched.size(), 1u);  // adopted, not started again
  EXPECT_EQ((*store_->ListReplicas("starting"))[0].pid, pid);

  // Died before the launch: no pid ever shows up. Pending for a while, then
  // started once.
  record.pid = kPidStarting;
  record.created = now_;
  ASSERT_TRUE(store_->PutReplica(record).ok());
  std::filesystem::remove(record.pid_path);
  NewController();
  Sync("starting");
  EXPECT_EQ(launcher_.launched.size(), 1u);
  now_ += absl::Seconds(60);
  for (int i = 0; i < 20 && launcher_.launched.size() == 1; ++i) {
    now_ += absl::Seconds(20);
    Sync("starting");
  }
  EXPECT_EQ(launcher_.launched.size(), 2u);
  launcher_.Exit("starting-master-0", 0);
  Sync("starting");
  EXPECT_EQ(Get("starting").status().state(), v1::SUCCEEDED);
}

TEST_F(ControllerTest, TrialStartingWhenTheControllerIsKilledRunsOnceAfterTheRestart) {
  // restartPolicy Never: a trial whose master is lost fails.
  Submit(StudyJob("sweep", 3, 1));
  // Killed as it launches trial 2's master: its record says "starting" and
  // no process of it exists, nor ever will.
  launcher_.kill_controller_at_launch = [](const LaunchRequest& r) {
    return EnvOf(r, "CLOUD_ML_TRIAL_ID") == "2";
  };
  bool killed = false;
  for (int round = 0; round < 200 && !core::IsTerminal(Get("sweep").status().state()); ++round) {
    try {
      Sync("sweep");
    } catch (const FakeProcessLauncher::ControllerKilled&) {
      killed = true;
      NewController();  // `kubetrain local serve` started again
    }
    for (const LaunchRequest& r : launcher_.launched) {
      FakeProcessLauncher::Process* p = launcher_.Find(r.name);
      if (p == nullptr || p->status.state != ProcessStatus::State::kRunning) continue;
      Report(r, 1, 10);
      launcher_.Exit(r.name, 0);
    }
  }
  ASSERT_TRUE(killed);
  v1::TrainingJob job = Get("sweep");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  const v1::TrainingOutput& out = job.status().training_output();
  EXPECT_EQ(out.completed_trial_count(), 3);
  for (const v1::HyperparameterOutput& t : out.trials()) {
    EXPECT_EQ(t.state(), v1::SUCCEEDED) << "trial " << t.trial_id() << ": " << t.error_message();
  }
  std::map<std::string, int> starts;  // trial -> masters launched
  for (const LaunchRequest& r : launcher_.launched) ++starts[EnvOf(r, "CLOUD_ML_TRIAL_ID")];
  EXPECT_THAT(starts, ElementsAre(Pair("1", 1), Pair("2", 1), Pair("3", 1)));
}

}  // namespace
}  // namespace kubetrain::local
