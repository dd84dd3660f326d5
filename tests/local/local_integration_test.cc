// The local backend end to end: the real `kubetrain` CLI, its background
// controller, supervisors and (fake) trainer processes, in a private
// KUBETRAIN_HOME.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/testing/runtime_output.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kubetrain/v1/graph.pb.h"
#include "operator/local/controller.h"
#include "operator/local/job_store.h"
#include "operator/local/process_launcher.h"
#include "tests/lost_chief_runs.h"

namespace kubetrain::local {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using test_support::LatestCheckpointStep;
using test_support::ReadFile;

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};

class LocalBackendTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // No controller outlives the test.
    int pid = ControllerPid();
    if (pid > 0) kill(pid, SIGKILL);
  }

  RunResult Kubetrain(const std::vector<std::string>& args, const std::string& env = "") {
    std::string command =
        absl::StrCat("KUBETRAIN_HOME=", Quote(home_.path()), " ", env, " ", Quote(KUBETRAIN_CLI));
    for (const std::string& a : args) absl::StrAppend(&command, " ", Quote(a));
    const std::string out = home_.path() + "/cmd.out";
    const std::string err = home_.path() + "/cmd.err";
    absl::StrAppend(&command, " >", Quote(out), " 2>", Quote(err), " </dev/null");
    int status = std::system(command.c_str());
    RunResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadFile(out);
    r.err = ReadFile(err);
    return r;
  }

  std::string WriteConfig(const std::string& name, const std::string& yaml) {
    const std::string path = work_.path() + "/" + name;
    std::ofstream(path) << yaml;
    return path;
  }

  // A config running the fake trainer as every replica.
  std::string FakeTrainerConfig(const std::string& extra_input, const std::string& args,
                                const std::string& run_policy = "") {
    return absl::StrCat("trainingInput:\n", extra_input, "  masterConfig: {containerCommand: [",
                        FAKE_TRAINER, "]}\n", "  workerConfig: {containerCommand: [", FAKE_TRAINER,
                        "]}\n", "  parameterServerConfig: {containerCommand: [", FAKE_TRAINER,
                        "]}\n", "  args: [", args, ", --record_dir=", work_.path(), "]\n",
                        run_policy);
  }

  // SIGKILLs the controller, then runs a new one, as `kubetrain local serve`
  // in another shell, until every job has ended.
  void KillTheControllerAndServeAgain() {
    const int controller = ControllerPid();
    ASSERT_GT(controller, 0);
    ASSERT_EQ(kill(controller, SIGKILL), 0);
    ASSERT_TRUE(
        test_support::WaitUntil([&] { return !ProcessAlive(controller, 0); }, absl::Seconds(120)));
    RunResult serve = Kubetrain({"local", "serve", "--exit-when-idle"});
    EXPECT_EQ(serve.code, 0) << serve.err;
  }

  v1::TrainingJob Job(const std::string& name) {
    auto store = JobStore::Open(home_.path() + "/jobs.db");
    EXPECT_TRUE(store.ok()) << store.status();
    auto job = (*store)->GetJob(name);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::TrainingJob();
  }

  bool Finished(const std::string& name) {
    v1::State s = Job(name).status().state();
    return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
  }

  int ControllerPid() {
    int pid = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(home_.path() + "/controller.lock")),
                          &pid))
      return 0;
    return pid;
  }

  // Lines of the fake trainer's run record: trial, task, pid[, child pid].
  std::vector<std::vector<std::string>> Runs() {
    std::vector<std::vector<std::string>> runs;
    for (absl::string_view line :
         absl::StrSplit(ReadFile(work_.path() + "/runs"), '\n', absl::SkipEmpty())) {
      runs.push_back(absl::StrSplit(line, ' '));
    }
    return runs;
  }

  // `n` rows "x,y,label" of two classes a model separates in a few steps,
  // in work_/train.csv; returns its path.
  std::string WriteSeparableData(int n) {
    const std::string path = work_.path() + "/train.csv";
    std::ofstream out(path);
    for (int i = 0; i < n; ++i) {
      const int label = i % 2;
      out << (label ? 1.0 : -1.0) + 0.001 * (i % 97) << "," << 0.002 * (i % 89) << "," << label
          << "\n";
    }
    return path;
  }

  test_support::TempDir home_;
  test_support::TempDir work_;
};

TEST_F(LocalBackendTest, CorruptConfigIsRejectedWithPositionsAndCreatesNothing) {
  const std::string config = WriteConfig("bad.yaml",
                                         "trainingInput:\n"
                                         "  scaleTier: STANDARD_1\n"
                                         "  hyperparameters:\n"
                                         "    maxTrials: 2\n"
                                         "    params:\n"
                                         "      - parameterName: lr\n"
                                         "        type: DOUBLE\n"
                                         "        minValue: 0\n"
                                         "        maxValue: 0.5\n"
                                         "        scaleType: UNIT_LOG_SCALE\n");
  RunResult r = Kubetrain({"jobs", "submit", "training", "bad_job", "--local", "--config", config});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad.yaml"));
  EXPECT_THAT(r.err, HasSubstr("minValue"));
  EXPECT_THAT(r.err, HasSubstr("nothing was submitted"));
  const std::string broken = WriteConfig("broken.yaml", "trainingInput: {scaleTier: [unclosed\n");
  RunResult syntax =
      Kubetrain({"jobs", "submit", "training", "bad_job", "--local", "--config", broken});
  EXPECT_EQ(syntax.code, 2);
  EXPECT_THAT(syntax.err, HasSubstr("broken.yaml"));
  RunResult list = Kubetrain({"jobs", "list", "--local"});
  EXPECT_EQ(list.code, 0);
  EXPECT_EQ(list.out, "");
  EXPECT_EQ(ControllerPid(), 0);  // no controller was started either
  RunResult describe = Kubetrain({"jobs", "describe", "bad_job", "--local"});
  EXPECT_EQ(describe.code, 1);
  EXPECT_THAT(describe.err, HasSubstr("bad_job"));
  RunResult unknown = Kubetrain({"jobs", "list", "--local", "--colour"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--colour"));
}

TEST_F(LocalBackendTest, ReplicaFailingOnceUnderOnFailureIsRestartedAndTheJobSucceeds) {
  const std::string config =
      WriteConfig("onfailure.yaml",
                  FakeTrainerConfig("", absl::StrCat("--fail_once=", work_.path(), "/failed-once"),
                                    "runPolicy: {restartPolicy: OnFailure, backoffLimit: 2}\n"));
  // A manifest's runPolicy is outside trainingInput: use the manifest form.
  const std::string manifest =
      WriteConfig("onfailure-job.yaml",
                  absl::StrCat("apiVersion: kubetrain.io/v1\nkind: TrainingJob\nmetadata: {name: "
                               "restart_job}\nspec:\n  ",
                               absl::StrJoin(absl::StrSplit(ReadFile(config), '\n'), "\n  ")));
  RunResult r = Kubetrain({"jobs", "submit", "training", "restart_job", "--local", "--config",
                           manifest, "--stream-logs"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Job [restart_job] submitted successfully."));
  EXPECT_THAT(r.out, HasSubstr("failing on purpose"));
  v1::TrainingJob job = Job("restart_job");
  EXPECT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  EXPECT_GE(job.status().restart_count(), 1);
  EXPECT_EQ(Runs().size(), 2u);  // the failed attempt and the restart
}

// A GPU job on a machine without a GPU runs, on the CPU, and says so: the
// NoGpu condition, one Warning event, and a warning in `jobs describe`.
TEST_F(LocalBackendTest, AGpuJobWithoutAGpuRunsWithAWarning) {
  if (MachineGpuCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  const std::string config = WriteConfig(
      "gpu.yaml", absl::StrCat("trainingInput:\n  scaleTier: BASIC_GPU\n"
                               "  masterConfig: {containerCommand: [",
                               FAKE_TRAINER, "]}\n  args: [--record_dir=", work_.path(), "]\n"));
  RunResult r = Kubetrain(
      {"jobs", "submit", "training", "gpu_job", "--local", "--config", config, "--stream-logs"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  v1::TrainingJob job = Job("gpu_job");
  EXPECT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  const std::string warning =
      "master asks for 1 GPU; this machine has none: the replicas run on the CPU, without the "
      "GPUs asked for";
  bool condition = false;
  for (const v1::Condition& c : job.status().conditions()) {
    condition =
        condition || (c.type() == "NoGpu" && c.status() == "True" && c.message() == warning);
  }
  EXPECT_TRUE(condition) << job.status().DebugString();
  RunResult describe = Kubetrain({"jobs", "describe", "gpu_job", "--local"});
  ASSERT_EQ(describe.code, 0) << describe.err;
  EXPECT_THAT(describe.out, HasSubstr("warning: 'master asks for 1 GPU; this machine has none:"))
      << describe.out;
  auto store = JobStore::Open(home_.path() + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto events = (*store)->Events("gpu_job");
  ASSERT_TRUE(events.ok()) << events.status();
  int warnings = 0;
  for (const StoredEvent& e : *events) warnings += e.type == "Warning" && e.reason == "NoGpu";
  EXPECT_EQ(warnings, 1);
}

TEST_F(LocalBackendTest, CancelEndsCancelledWithNoChildProcessLeft) {
  const std::string config = WriteConfig(
      "long.yaml",
      FakeTrainerConfig("  scaleTier: CUSTOM\n  masterType: standard\n  workerType: standard\n"
                        "  workerCount: 2\n",
                        "--sleep_ms=600000, --spawn_child"));
  RunResult r =
      Kubetrain({"jobs", "submit", "training", "long_job", "--local", "--config", config});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(test_support::WaitUntil([&] { return Runs().size() == 3; }, absl::Seconds(120)))
      << ReadFile(home_.path() + "/controller.log");
  std::vector<int> pids;
  for (const auto& run : Runs()) {
    ASSERT_EQ(run.size(), 4u);
    for (size_t i = 2; i < 4; ++i) {
      int pid = 0;
      ASSERT_TRUE(absl::SimpleAtoi(run[i], &pid));
      pids.push_back(pid);
      EXPECT_TRUE(ProcessAlive(pid, 0));
    }
  }
  RunResult cancel = Kubetrain({"jobs", "cancel", "long_job", "--local"});
  EXPECT_EQ(cancel.code, 0) << cancel.err;
  EXPECT_THAT(cancel.out, HasSubstr("Cancelled job [long_job]"));
  ASSERT_TRUE(test_support::WaitUntil([&] { return Finished("long_job"); }, absl::Seconds(120)));
  EXPECT_EQ(Job("long_job").status().state(), v1::CANCELLED);
  // CANCELLED comes only once no replica is left: every process is gone now.
  for (int pid : pids)
    EXPECT_FALSE(ProcessAlive(pid, 0)) << "pid " << pid << " outlived the cancelled job";
  RunResult again = Kubetrain({"jobs", "cancel", "long_job", "--local"});
  EXPECT_EQ(again.code, 1);
  EXPECT_THAT(again.err, HasSubstr("already ended CANCELLED"));
}

TEST_F(LocalBackendTest, KilledControllerRestartsAndTheSweepRunsEachTrialOnce) {
  const std::string config = WriteConfig(
      "sweep.yaml",
      FakeTrainerConfig(
          "  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 6\n    maxParallelTrials: 2\n"
          "    algorithm: RANDOM_SEARCH\n"
          "    params:\n      - {parameterName: x, type: DOUBLE, minValue: 0, maxValue: 1,"
          " scaleType: UNIT_LINEAR_SCALE}\n",
          "--sleep_ms=700"));
  RunResult r =
      Kubetrain({"jobs", "submit", "training", "sweep_job", "--local", "--config", config});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(test_support::WaitUntil(
      [&] { return Job("sweep_job").status().training_output().trials_size() >= 3; },
      absl::Seconds(120)));
  KillTheControllerAndServeAgain();
  v1::TrainingJob job = Job("sweep_job");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  const v1::TrainingOutput& out = job.status().training_output();
  EXPECT_EQ(out.trials_size(), 6);
  EXPECT_EQ(out.completed_trial_count(), 6) << job.status().DebugString();
  std::set<std::string> ids;
  for (const auto& t : out.trials()) ids.insert(t.trial_id());
  EXPECT_EQ(ids, (std::set<std::string>{"1", "2", "3", "4", "5", "6"}));
  std::map<std::string, int> starts;
  for (const auto& run : Runs()) ++starts[run[0]];
  EXPECT_EQ(starts.size(), 6u);
  for (const auto& [trial, count] : starts)
    EXPECT_EQ(count, 1) << "trial " << trial << " ran " << count << " times";
}

TEST_F(LocalBackendTest, ThreeSweepsSubmittedTogetherShareTheProcessSlotsAndListShowsTheQueue) {
  const std::string config = WriteConfig(
      "sweep.yaml",
      FakeTrainerConfig(
          "  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 4\n    maxParallelTrials: 4\n"
          "    algorithm: RANDOM_SEARCH\n"
          "    params:\n      - {parameterName: x, type: DOUBLE, minValue: 0, maxValue: 1,"
          " scaleType: UNIT_LINEAR_SCALE}\n",
          "--sleep_ms=1500"));
  // The controller `jobs submit` starts takes its slots from the environment.
  for (const char* name : {"sweep_a", "sweep_b", "sweep_c"}) {
    RunResult r = Kubetrain({"jobs", "submit", "training", name, "--local", "--config", config},
                            "KUBETRAIN_LOCAL_SLOTS=2");
    ASSERT_EQ(r.code, 0) << r.err;
  }
  // Two slots, twelve processes wanted: the last sweep submitted waits its
  // turn, with its place in the queue.
  ASSERT_TRUE(test_support::WaitUntil([&] { return Job("sweep_c").status().queue_position() > 0; },
                                      absl::Seconds(60)))
      << Job("sweep_c").status().DebugString();
  RunResult list = Kubetrain({"jobs", "list", "--local"});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_THAT(list.out, ::testing::ContainsRegex("JOB_ID +STATUS +CREATED +QUEUE\n"));
  // (Its place counts the earlier sweeps' trials still to start.)
  EXPECT_THAT(list.out, ::testing::ContainsRegex("\nsweep_c +QUEUED +[0-9T:Z-]+ +[1-9]\n"));
  RunResult describe = Kubetrain({"jobs", "describe", "sweep_c", "--local", "--summarize"});
  EXPECT_THAT(describe.out,
              ::testing::ContainsRegex("QUEUED, position [1-9]: WaitingForCapacity: needs 1 "
                                       "process slot; 0 of this machine's 2 are free now; [1-8] "
                                       "jobs? ahead of it"));
  for (const char* name : {"sweep_a", "sweep_b", "sweep_c"}) {
    ASSERT_TRUE(test_support::WaitUntil([&] { return Finished(name); }, absl::Seconds(180)))
        << ReadFile(home_.path() + "/controller.log");
    const v1::TrainingJob job = Job(name);
    EXPECT_EQ(job.status().state(), v1::SUCCEEDED) << name << ": " << job.status().error_message();
    EXPECT_EQ(job.status().training_output().completed_trial_count(), 4) << name;
  }
  EXPECT_EQ(Runs().size(), 12u);  // each trial once
  list = Kubetrain({"jobs", "list", "--local"});
  EXPECT_THAT(list.out, ::testing::StartsWith("JOB_ID"));
  EXPECT_THAT(list.out, Not(HasSubstr("QUEUE\n")));
}

TEST_F(LocalBackendTest, CommandsThatShowAnUnfinishedJobRestartADeadController) {
  const std::string config = WriteConfig("short.yaml", FakeTrainerConfig("", "--sleep_ms=1500"));
  auto submit_and_kill_the_controller = [&](const std::string& name) {
    // gcloud's spelling of the tier.
    RunResult r = Kubetrain({"jobs", "submit", "training", name, "--local", "--config", config,
                             "--scale-tier", "basic"});
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_TRUE(test_support::WaitUntil([&] { return Job(name).status().state() == v1::RUNNING; },
                                        absl::Seconds(120)));
    const int controller = ControllerPid();
    ASSERT_GT(controller, 0);
    ASSERT_EQ(kill(controller, SIGKILL), 0);
    ASSERT_TRUE(
        test_support::WaitUntil([&] { return !ProcessAlive(controller, 0); }, absl::Seconds(120)));
  };
  // stream-logs follows the job to its end instead of polling a job that
  // nothing moves on (bounded here, so a regression fails instead of hanging).
  submit_and_kill_the_controller("orphan_1");
  EXPECT_EQ(Job("orphan_1").spec().training_input().scale_tier(), v1::TrainingInput::BASIC);
  RunResult logs = Kubetrain({"jobs", "stream-logs", "orphan_1", "--local"}, "timeout 120");
  EXPECT_EQ(logs.code, 0) << logs.err;
  EXPECT_EQ(Job("orphan_1").status().state(), v1::SUCCEEDED);
  // describe (and list) show the job as it is and start a controller, so the
  // next look shows it moved on.
  submit_and_kill_the_controller("orphan_2");
  RunResult describe = Kubetrain({"jobs", "describe", "orphan_2", "--local"});
  EXPECT_EQ(describe.code, 0) << describe.err;
  EXPECT_THAT(describe.out, HasSubstr("state: RUNNING"));
  ASSERT_TRUE(test_support::WaitUntil([&] { return Finished("orphan_2"); }, absl::Seconds(120)))
      << ReadFile(home_.path() + "/controller.log");
  EXPECT_EQ(Job("orphan_2").status().state(), v1::SUCCEEDED);
}

TEST_F(LocalBackendTest, TuningFindsTheOptimumOfAKnownFunction) {
  const std::string config = WriteConfig(
      "study.yaml",
      FakeTrainerConfig(
          "  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 12\n    maxParallelTrials: 2\n"
          "    params:\n      - {parameterName: x, type: DOUBLE, minValue: 0, maxValue: 1,"
          " scaleType: UNIT_LINEAR_SCALE}\n",
          "--sleep_ms=0"));
  RunResult r = Kubetrain(
      {"jobs", "submit", "training", "study_job", "--local", "--config", config, "--wait"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("trials: 12/12 completed"));
  RunResult describe = Kubetrain({"jobs", "describe", "study_job", "--local"});
  ASSERT_EQ(describe.code, 0);
  EXPECT_THAT(describe.out, HasSubstr("state: SUCCEEDED"));
  EXPECT_THAT(describe.out, HasSubstr("completedTrialCount: '12'"));
  v1::TrainingJob job = Job("study_job");
  const v1::TrainingOutput& out = job.status().training_output();
  ASSERT_EQ(out.trials_size(), 12);
  for (int i = 1; i < out.trials_size(); ++i) {
    EXPECT_GE(out.trials(i - 1).final_metric().objective_value(),
              out.trials(i).final_metric().objective_value());
  }
  // The optimum is x = 0.3 (objective 0); the best trial is near it.
  EXPECT_GT(out.trials(0).final_metric().objective_value(), -0.01);
  double x = 0;
  ASSERT_TRUE(absl::SimpleAtod(out.trials(0).hyperparameters().at("x"), &x));
  EXPECT_NEAR(x, 0.3, 0.1);
}

// The cloudml-hypertune file carries each trial's curve (the fake trainer
// reports 8 points, 0.5 s apart). Grid order over x: 0.25, 0.3, 0.9, 1.0.
// Trials 1 and 2 run to their end (the second is better than the first at
// every step) and are not marked; trials 3 and 4 are far below the median
// from their first report, so they are stopped there: fewer points, their
// processes gone.
TEST_F(LocalBackendTest, EarlyStoppingStopsBadCurvesAndOnlyThem) {
  const std::string config = WriteConfig(
      "curves.yaml", FakeTrainerConfig("  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 4\n"
                                       "    maxParallelTrials: 1\n    algorithm: GRID_SEARCH\n"
                                       "    enableTrialEarlyStopping: true\n"
                                       "    params:\n      - {parameterName: x, type: DISCRETE,"
                                       " discreteValues: [0.25, 0.3, 0.9, 1.0]}\n",
                                       "--curve_steps=8, --curve_interval_ms=500"));
  RunResult r =
      Kubetrain({"jobs", "submit", "training", "curves", "--local", "--config", config, "--wait"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  v1::TrainingJob job = Job("curves");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  // Keyed by x in hundredths.
  std::map<int, const v1::HyperparameterOutput*> by_x;
  for (const auto& t : job.status().training_output().trials()) {
    double x = 0;
    ASSERT_TRUE(absl::SimpleAtod(t.hyperparameters().at("x"), &x)) << t.hyperparameters().at("x");
    by_x[static_cast<int>(std::lround(x * 100))] = &t;
  }
  ASSERT_EQ(by_x.size(), 4u);
  for (int x : {25, 30}) {
    ASSERT_EQ(by_x.count(x), 1u) << x;
    const v1::HyperparameterOutput& t = *by_x.at(x);
    EXPECT_EQ(t.state(), v1::SUCCEEDED) << x;
    EXPECT_FALSE(t.is_trial_stopped_early()) << "x=" << x << " ran to its end";
    EXPECT_EQ(t.all_metrics_size(), 8) << x;
    EXPECT_EQ(t.final_metric().training_step(), 8) << x;
  }
  for (int x : {90, 100}) {
    ASSERT_EQ(by_x.count(x), 1u) << x;
    const v1::HyperparameterOutput& t = *by_x.at(x);
    EXPECT_EQ(t.state(), v1::SUCCEEDED) << x;
    EXPECT_TRUE(t.is_trial_stopped_early()) << x;
    EXPECT_LT(t.final_metric().training_step(), 8) << x;
    EXPECT_LT(t.all_metrics_size(), 8) << x;
    // Its objective is its last report before the stop.
    EXPECT_EQ(t.final_metric().objective_value(),
              t.all_metrics(t.all_metrics_size() - 1).objective_value());
  }
  // Every process of the stopped trials is gone (a stop is a SIGTERM: the
  // last one may take a moment after the job has ended).
  for (const auto& run : Runs()) {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(run[2], &pid));
    EXPECT_TRUE(test_support::WaitUntil([&] { return !ProcessAlive(pid, 0); }, absl::Seconds(120)))
        << "trial " << run[0] << " pid " << pid;
  }
  EXPECT_EQ(job.status().trial_progress(), "4/4");
}

// Successive halving (reduction factor 2: rungs at reports 1, 2, 4, 8) over
// the grid x = 0.25, 0.3, 0.9, 1.0, one trial at a time. The controller is
// killed while trial 2 runs, after its first rung, and a new one takes over:
// the rungs already recorded stay as they were, those the trial reached
// meanwhile are judged in order from the reports it wrote, and no trial runs
// twice. Trials 1 and 2 (each the best at every rung it reached) run to
// their end; 3 and 4 stop at rung 0.
TEST_F(LocalBackendTest, HalvingKeepsEveryRungRecordThroughAControllerRestart) {
  const std::string config = WriteConfig(
      "halving.yaml",
      FakeTrainerConfig("  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 4\n"
                        "    maxParallelTrials: 1\n    algorithm: GRID_SEARCH\n"
                        "    earlyStopping: {algorithm: SUCCESSIVE_HALVING, reductionFactor: 2}\n"
                        "    params:\n      - {parameterName: x, type: DISCRETE,"
                        " discreteValues: [0.25, 0.3, 0.9, 1.0]}\n",
                        "--curve_steps=8, --curve_interval_ms=400"));
  RunResult r = Kubetrain({"jobs", "submit", "training", "halving", "--local", "--config", config});
  ASSERT_EQ(r.code, 0) << r.err;
  auto trial = [&](const v1::TrainingJob& job, const std::string& id) {
    for (const auto& t : job.status().training_output().trials()) {
      if (t.trial_id() == id) return t;
    }
    return v1::HyperparameterOutput();
  };
  ASSERT_TRUE(test_support::WaitUntil(
      [&] { return trial(Job("halving"), "2").rung_metrics_size() >= 1; }, absl::Seconds(120)));
  const v1::TrainingJob before = Job("halving");
  KillTheControllerAndServeAgain();

  const v1::TrainingJob job = Job("halving");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  ASSERT_EQ(job.status().training_output().trials_size(), 4);
  for (const std::string id : {"1", "2", "3", "4"}) {
    SCOPED_TRACE("trial " + id);
    const v1::HyperparameterOutput t = trial(job, id);
    // Each rung's record is the report that reached it: reports 1, 2, 4, 8.
    ASSERT_GE(t.rung_metrics_size(), 1);
    for (int k = 0; k < t.rung_metrics_size(); ++k) {
      const int report = 1 << k;
      ASSERT_GE(t.all_metrics_size(), report);
      EXPECT_EQ(t.rung_metrics(k).training_step(), t.all_metrics(report - 1).training_step());
      EXPECT_EQ(t.rung_metrics(k).objective_value(), t.all_metrics(report - 1).objective_value());
    }
    // What was recorded before the restart is still there, unchanged.
    const v1::HyperparameterOutput earlier = trial(before, id);
    ASSERT_LE(earlier.rung_metrics_size(), t.rung_metrics_size());
    for (int k = 0; k < earlier.rung_metrics_size(); ++k) {
      EXPECT_EQ(earlier.rung_metrics(k).objective_value(), t.rung_metrics(k).objective_value());
    }
    if (id == "1" || id == "2") {
      EXPECT_FALSE(t.is_trial_stopped_early());
      EXPECT_EQ(t.all_metrics_size(), 8);
      EXPECT_EQ(t.rung_metrics_size(), 4);
    } else {
      EXPECT_TRUE(t.is_trial_stopped_early());
      EXPECT_EQ(t.rung_metrics_size(), 1);
      EXPECT_LT(t.all_metrics_size(), 8);
    }
  }
  std::map<std::string, int> starts;
  for (const auto& run : Runs()) ++starts[run[0]];
  EXPECT_EQ(starts.size(), 4u);
  for (const auto& [id, count] : starts) {
    EXPECT_EQ(count, 1) << "trial " << id << " ran " << count << " times";
  }
  RunResult describe = Kubetrain({"jobs", "describe", "halving", "--local", "--summarize"});
  EXPECT_THAT(describe.out, HasSubstr("Stopped at each rung: rung 0 (report 1): 2"));
}

// A job resubmitted with the same jobDir as an earlier one (the same name
// even, once the earlier record is gone from the store, or another name):
// every trial of the second job trains from step 0 in its own folder, its
// checkpoints are its own, and the first job's stay as they were. Real
// kubetrain-runtime trials on a small CSV data set.
TEST_F(LocalBackendTest, ASecondJobInTheSameJobDirNeverRestoresTheFirstOnesCheckpoints) {
  {
    std::ofstream data(work_.path() + "/data.csv");
    for (int i = 0; i < 200; ++i) {
      const int label = i % 2;
      data << (label ? 1.0 : -1.0) + 0.3 * ((i * 7) % 5 - 2) << "," << 0.1 * (i % 3) << "," << label
           << "\n";
    }
  }
  const std::string job_dir = work_.path() + "/out";
  auto config = [&](const std::string& params, const std::string& extra_args) {
    return absl::StrCat(
        "trainingInput:\n  scaleTier: BASIC\n  jobDir: ", job_dir,
        "\n  args: [--train_data_paths=", work_.path(),
        "/data.csv, --eval_data_paths=", work_.path(),
        "/data.csv, --max_steps=30, --batch_size=20, --hidden2=4, --threads=1,"
        " --save_checkpoints_steps=10, --eval_every_steps=10",
        extra_args,
        "]\n"
        "  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 2\n    maxParallelTrials: 2\n"
        "    algorithm: GRID_SEARCH\n    params:\n",
        params);
  };
  const std::string widths_a =
      "      - {parameterName: hidden1, type: DISCRETE, discreteValues: [4, 6]}\n";
  const std::string widths_b =
      "      - {parameterName: hidden1, type: DISCRETE, discreteValues: [9, 12]}\n";
  const std::string rates =
      "      - {parameterName: learning_rate, type: DISCRETE, discreteValues: [0.003, 0.03]}\n";
  struct Case {
    std::string job;
    std::string params;
    std::string extra_args;
  };
  // The first job, then one with other layer widths (a restore would fail
  // on the shapes), then one that tunes only the learning rate: its trial 1
  // has the shapes of the first job's trial 1 (a restore would succeed
  // silently).
  for (const Case& c : {Case{"first", widths_a, ""}, Case{"widths", widths_b, ""},
                        Case{"rates", rates, ", --hidden1=4"}}) {
    RunResult r =
        Kubetrain({"jobs", "submit", "training", c.job, "--local", "--config",
                   WriteConfig(c.job + ".yaml", config(c.params, c.extra_args)), "--wait"});
    ASSERT_EQ(r.code, 0) << c.job << "\n" << r.out << r.err;
    v1::TrainingJob job = Job(c.job);
    ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << c.job << ": " << job.status().error_message();
    for (const auto& t : job.status().training_output().trials()) {
      EXPECT_EQ(t.state(), v1::SUCCEEDED) << c.job << " trial " << t.trial_id();
      // From step 0: an evaluation at step 10, 20 and 30.
      ASSERT_EQ(t.all_metrics_size(), 3) << c.job << " trial " << t.trial_id();
      EXPECT_EQ(t.all_metrics(0).training_step(), 10);
      EXPECT_EQ(t.final_metric().training_step(), 30);
      const std::string log =
          ReadFile(LogPath(home_.path(), c.job, t.trial_id(), "master-replica-0"));
      EXPECT_THAT(log, ::testing::Not(HasSubstr("Restored checkpoint"))) << log;
      // Its checkpoints: the trial folder for the first job, its own
      // subfolder for the others, every one of them the job's own.
      std::string folder = job_dir + "/" + t.trial_id();
      if (c.job != "first") {
        folder += "/" + c.job + "-" + job.metadata().uid().substr(0, 8);
        EXPECT_THAT(log, HasSubstr("This run writes to " + folder)) << log;
      }
      int checkpoints = 0;
      for (const auto& e : std::filesystem::directory_iterator(folder)) {
        if (e.path().filename().string().rfind("model.ckpt-", 0) != 0) continue;
        v1::Checkpoint checkpoint;
        ASSERT_TRUE(checkpoint.ParseFromString(ReadFile(e.path().string()))) << e.path();
        EXPECT_EQ(checkpoint.owner().job_uid(), job.metadata().uid()) << e.path();
        EXPECT_EQ(checkpoint.owner().trial_id(), t.trial_id()) << e.path();
        ++checkpoints;
      }
      EXPECT_EQ(checkpoints, 3) << folder;
    }
  }
  // What users read is what the trainer computed: 200 eval examples make an
  // accuracy of k/200, printed with at most three decimals, no float noise.
  RunResult describe = Kubetrain({"jobs", "describe", "first", "--local"});
  ASSERT_EQ(describe.code, 0) << describe.err;
  std::vector<std::string> objectives;
  for (absl::string_view line : absl::StrSplit(describe.out, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&line, "objectiveValue: ")) objectives.emplace_back(line);
  }
  ASSERT_FALSE(objectives.empty()) << describe.out;
  for (const std::string& value : objectives) {
    EXPECT_TRUE(std::regex_match(value, std::regex(R"(0(\.\d{1,3})?|1(\.0)?)"))) << value;
  }

  // The first job's folders hold only its own checkpoints still.
  const std::string first_uid = Job("first").metadata().uid();
  for (const char* trial : {"1", "2"}) {
    for (const auto& e : std::filesystem::directory_iterator(job_dir + "/" + trial)) {
      if (e.path().filename().string().rfind("model.ckpt-", 0) != 0) continue;
      v1::Checkpoint checkpoint;
      ASSERT_TRUE(checkpoint.ParseFromString(ReadFile(e.path().string())));
      EXPECT_EQ(checkpoint.owner().job_uid(), first_uid) << e.path();
    }
  }
}

TEST_F(LocalBackendTest, SubmitNamesTheLocalFollowUpCommands) {
  const std::string config = WriteConfig("quick.yaml", FakeTrainerConfig("", "--sleep_ms=0"));
  RunResult r =
      Kubetrain({"jobs", "submit", "training", "follow_up", "--local", "--config", config});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  $ kubetrain jobs describe follow_up --local\n"));
  EXPECT_THAT(r.out, HasSubstr("  $ kubetrain jobs stream-logs follow_up --local\n"));
  ASSERT_TRUE(test_support::WaitUntil([&] { return Finished("follow_up"); }, absl::Seconds(120)));
}

TEST_F(LocalBackendTest, CloudMlConfigOfTheReferenceIsAccepted) {
  // REFERENCE.md §4, unchanged.
  const std::string config =
      WriteConfig("config.yaml",
                  "trainingInput:\n"
                  "  scaleTier: STANDARD_1        # many workers and a few parameter servers\n"
                  "  hyperparameters:\n"
                  "    goal: MAXIMIZE\n"
                  "    maxTrials: 10\n"
                  "    maxParallelTrials: 2\n"
                  "    params:\n"
                  "      - parameterName: hidden1\n"
                  "        type: INTEGER\n"
                  "        minValue: 40\n"
                  "        maxValue: 400\n"
                  "        scaleType: UNIT_LINEAR_SCALE\n"
                  "      - parameterName: learning_rate\n"
                  "        type: DOUBLE\n"
                  "        minValue: 0.0001\n"
                  "        maxValue: 0.5\n"
                  "        scaleType: UNIT_LOG_SCALE\n");
  // Every replica runs the fake trainer in place of kubetrain-runtime.
  RunResult r =
      Kubetrain({"jobs", "submit", "training", "cloudml_job", "--local", "--config", config,
                 "--stream-logs", "--", absl::StrCat("--record_dir=", work_.path())},
                absl::StrCat("KUBETRAIN_RUNTIME=", Quote(FAKE_TRAINER)));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  v1::TrainingJob job = Job("cloudml_job");
  EXPECT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  EXPECT_EQ(job.status().training_output().completed_trial_count(), 10);
  // STANDARD_1: 1 master, 4 workers, 3 ps per trial.
  std::map<std::string, int> tasks;
  for (const auto& run : Runs()) ++tasks[run[1]];
  EXPECT_EQ(tasks["master"], 10);
  EXPECT_EQ(tasks["worker"], 40);
  EXPECT_EQ(tasks["ps"], 30);
  EXPECT_THAT(r.out, HasSubstr("master-replica-0"));
  EXPECT_THAT(r.out, HasSubstr("Job [cloudml_job] ended SUCCEEDED"));
}

// The pids whose parent is `parent` (from /proc).
std::vector<int> ChildrenOf(int parent) {
  std::vector<int> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces; ppid follows the last ')'.
    const std::string stat = ReadFile(entry.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    int ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) && ppid == parent) {
      children.push_back(pid);
    }
  }
  return children;
}

// The first of `n` consecutive TCP ports free on 127.0.0.1 now (each bound
// and released: another process may still take one before the test does,
// but not a fixed port every run of this test shares); 0 when none is found.
int FreePorts(int n) {
  std::mt19937 rng(static_cast<uint32_t>(getpid()));
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int base = 20000 + static_cast<int>(rng() % 30000);
    bool free = true;
    for (int i = 0; i < n && free; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(base + i));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      free = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
      if (fd >= 0) close(fd);
    }
    if (free) return base;
  }
  return 0;
}

// `local train --distributed`: every replica ends by itself once the
// master has (none is sent SIGTERM: 143), and every line says whose it is.
TEST_F(LocalBackendTest, LocalDistributedTrainingEndsEveryReplicaCleanly) {
#ifndef KUBETRAIN_RUNTIME_BINARY
  GTEST_SKIP() << "this build has no kubetrain-runtime";
#else
  const std::string data = WriteSeparableData(400);
  const std::string runtime = absl::StrCat("KUBETRAIN_RUNTIME=", Quote(KUBETRAIN_RUNTIME_BINARY));
  for (const char* sync : {"false", "true"}) {
    SCOPED_TRACE(absl::StrCat("--sync_replicas=", sync));
    const int start_port = FreePorts(4);
    ASSERT_GT(start_port, 0) << "no 4 free consecutive ports";
    RunResult r = Kubetrain(
        {"local", "train", "--distributed", "--worker-count", "2", "--parameter-server-count", "1",
         "--start-port", std::to_string(start_port), "--", "--train_data_paths=" + data,
         "--max_steps=300", "--batch_size=20", "--hidden1=8", "--hidden2=4", "--threads=1",
         "--eval_every_secs=0", absl::StrCat("--sync_replicas=", sync),
         "--output_path=" + work_.path() + "/out-" + sync},
        runtime);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    for (const char* task :
         {"master-replica-0", "worker-replica-0", "worker-replica-1", "ps-replica-0"}) {
      EXPECT_THAT(r.out,
                  HasSubstr(absl::StrCat("kubetrain local train: ", task, " exited with code 0\n")))
          << r.out;
    }
    EXPECT_THAT(r.out, Not(HasSubstr("exited with code 143"))) << r.out;
    // The replicas' own lines, as `jobs stream-logs` prints them: severity,
    // time, task, trial, message.
    bool worker_done = false, master_final = false;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits('\t', 4));
      if (fields.size() != 5) continue;
      worker_done = worker_done ||
                    (fields[2] == "worker-replica-1" && absl::StartsWith(fields[4], "Done after "));
      master_final = master_final || (fields[2] == "master-replica-0" &&
                                      absl::StartsWith(fields[4], "Final metrics after "));
    }
    EXPECT_TRUE(worker_done) << r.out;
    EXPECT_TRUE(master_final) << r.out;
  }
#endif
}

// The real kubetrain-runtime under the ExitCode policy: the master is killed
// mid-training (SIGKILL, exit 137: retryable), the controller recreates it,
// and the new process restores the last checkpoint from jobDir and trains on
// from there to the end.
TEST_F(LocalBackendTest, ReplicaRecreatedMidTrainingResumesAtTheLastCheckpoint) {
#ifndef KUBETRAIN_RUNTIME_BINARY
  GTEST_SKIP() << "this build has no kubetrain-runtime";
#else
  const std::string data = WriteSeparableData(1024);
  const std::string job_dir = work_.path() + "/out";
  constexpr int64_t kMaxSteps = 2000;
  // Steps big enough (2x256x256 per example, 256 a batch) that training
  // takes seconds, not milliseconds: there is time to kill it in the middle.
  const std::string manifest = WriteConfig(
      "resume.yaml",
      absl::StrCat("apiVersion: kubetrain.io/v1\nkind: TrainingJob\nmetadata: {name: resume_job}\n"
                   "spec:\n  trainingInput:\n    scaleTier: BASIC\n    jobDir: ",
                   job_dir, "\n    args: [--train_data_paths=", data, ", --max_steps=", kMaxSteps,
                   ", --save_checkpoints_steps=100, --batch_size=256, --hidden1=256, "
                   "--hidden2=256, --threads=1, --seed=5, --eval_every_secs=0]\n"
                   "  runPolicy: {restartPolicy: ExitCode, backoffLimit: 2}\n"));
  const std::string runtime = absl::StrCat("KUBETRAIN_RUNTIME=", Quote(KUBETRAIN_RUNTIME_BINARY));
  RunResult r = Kubetrain(
      {"jobs", "submit", "training", "resume_job", "--local", "--config", manifest}, runtime);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  ASSERT_TRUE(test_support::WaitUntil([&] { return LatestCheckpointStep(job_dir) >= 200; },
                                      absl::Seconds(120)))
      << ReadFile(home_.path() + "/controller.log");

  // The master's process: the child of its supervisor.
  auto store = JobStore::Open(home_.path() + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto replicas = (*store)->ListReplicas("resume_job");
  ASSERT_TRUE(replicas.ok()) << replicas.status();
  ASSERT_EQ(replicas->size(), 1u);
  const std::vector<int> trainer = ChildrenOf((*replicas)[0].pid);
  ASSERT_EQ(trainer.size(), 1u);
  ASSERT_EQ(kill(trainer[0], SIGKILL), 0);
  ASSERT_TRUE(
      test_support::WaitUntil([&] { return !ProcessAlive(trainer[0], 0); }, absl::Seconds(120)));
  // Nothing writes there now: this is the checkpoint to resume from.
  const int64_t last = LatestCheckpointStep(job_dir);
  ASSERT_GE(last, 200);
  ASSERT_LT(last, kMaxSteps) << "training ended before it was killed";
  RecordProperty("resumed_from_step", static_cast<int>(last));

  ASSERT_TRUE(test_support::WaitUntil([&] { return Finished("resume_job"); }, absl::Seconds(120)))
      << ReadFile(home_.path() + "/controller.log");
  v1::TrainingJob job = Job("resume_job");
  EXPECT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  EXPECT_EQ(job.status().restart_count(), 1);
  EXPECT_EQ(job.status().output_location().path(), job_dir);
  RunResult logs = Kubetrain({"jobs", "stream-logs", "resume_job", "--local"}, "timeout 120");
  EXPECT_EQ(logs.code, 0) << logs.err;
  EXPECT_THAT(logs.out,
              HasSubstr(absl::StrCat("Restored checkpoint at step ", last, " from ", job_dir)));
  EXPECT_THAT(logs.out, HasSubstr(absl::StrCat("Final metrics after ", kMaxSteps, " steps")));
  EXPECT_EQ(LatestCheckpointStep(job_dir), kMaxSteps);
  RunResult describe = Kubetrain({"jobs", "describe", "resume_job", "--local"});
  EXPECT_THAT(describe.out, HasSubstr(absl::StrCat("outputLocation:\n  path: ", job_dir)));
#endif
}

// ---- A chief lost at the end (docs/reconciler.md) ---------------------------

// Jobs of the real kubetrain-runtime on Fashion-MNIST: skipped where either
// is missing.
class RealTrainerTest : public LocalBackendTest {
 protected:
  void SetUp() override {
#ifndef KUBETRAIN_RUNTIME_BINARY
    GTEST_SKIP() << "this build has no kubetrain-runtime";
#endif
    if (!lost_chief::FashionMnistInstalled()) {
      GTEST_SKIP() << "Fashion-MNIST is not installed (Debian's dataset-fashion-mnist)";
    }
  }

  static std::string Runtime() {
#ifdef KUBETRAIN_RUNTIME_BINARY
    return absl::StrCat("KUBETRAIN_RUNTIME=", Quote(KUBETRAIN_RUNTIME_BINARY));
#else
    return "";
#endif
  }
};

// Successive halving with pauses (earlyStopping.pauseAtRungs) over four
// learning rates, two trials at a time, rungs at reports 1, 2 and 4 of 6.
// Paused trials are real kubetrain-runtime processes that get SIGTERM,
// checkpoint the step they reached and exit; a resumed one restores exactly
// that step, so no step is trained or reported twice. The leader trains to
// the end; the others end stopped early at their rungs.
TEST_F(RealTrainerTest, PausedTrialsResumeFromTheStepTheyStoppedAtAndTrainNoStepTwice) {
  constexpr int64_t kEvalEvery = 250, kMaxSteps = 1500;
  const std::string job_dir = work_.path() + "/pausing";
  const std::string config = WriteConfig(
      "pausing.yaml",
      absl::StrCat(
          "trainingInput:\n  scaleTier: BASIC\n  jobDir: ", job_dir, "\n  args: [",
          absl::StrJoin(
              {absl::StrCat("--train_data_paths=", lost_chief::kData,
                            "/train-images-idx3-ubyte.gz"),
               absl::StrCat("--eval_data_paths=", lost_chief::kData, "/t10k-images-idx3-ubyte.gz"),
               absl::StrCat("--max_steps=", kMaxSteps),
               absl::StrCat("--eval_every_steps=", kEvalEvery),
               // No periodic checkpoint: a resumed trial can only restore the
               // one its stop wrote.
               std::string("--save_checkpoints_steps=1000000"), std::string("--batch_size=64"),
               std::string("--hidden1=128"), std::string("--hidden2=32"),
               std::string("--threads=1"), std::string("--seed=5")},
              ", "),
          "]\n  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 4\n"
          "    maxParallelTrials: 2\n    algorithm: GRID_SEARCH\n"
          "    earlyStopping: {algorithm: SUCCESSIVE_HALVING, reductionFactor: 2, "
          "pauseAtRungs: true}\n"
          "    params:\n      - {parameterName: learning_rate, type: DISCRETE,"
          " discreteValues: [0.0002, 0.0005, 0.05, 0.1]}\n"));
  RunResult r =
      Kubetrain({"jobs", "submit", "training", "pausing", "--local", "--config", config, "--wait"},
                Runtime());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const v1::TrainingJob job = Job("pausing");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED)
      << job.status().error_message() << ReadFile(home_.path() + "/controller.log");
  ASSERT_EQ(job.status().training_output().trials_size(), 4);

  int resumed_trials = 0, stopped_trials = 0, full_trials = 0;
  for (const v1::HyperparameterOutput& t : job.status().training_output().trials()) {
    SCOPED_TRACE("trial " + t.trial_id());
    EXPECT_EQ(t.state(), v1::SUCCEEDED);
    EXPECT_FALSE(t.paused());
    // Every report once, in step order, on the evaluation schedule.
    int64_t previous = 0;
    for (const v1::HyperparameterMetric& m : t.all_metrics()) {
      EXPECT_GT(m.training_step(), previous);
      EXPECT_EQ(m.training_step() % kEvalEvery, 0) << m.training_step();
      previous = m.training_step();
    }
    const std::string log =
        ReadFile(LogPath(home_.path(), "pausing", t.trial_id(), "master-replica-0"));
    // Each segment after the first restored the step the one before it
    // stopped at, and nothing else.
    const std::regex stop(R"(Stopped at step (\d+) on SIGTERM: checkpoint written)");
    const std::regex restore(R"(Restored checkpoint at step (\d+))");
    std::vector<std::string> stops, restores;
    for (std::sregex_iterator it(log.begin(), log.end(), stop), end; it != end; ++it) {
      stops.push_back((*it)[1]);
    }
    for (std::sregex_iterator it(log.begin(), log.end(), restore), end; it != end; ++it) {
      restores.push_back((*it)[1]);
    }
    // Every evaluation any segment made is in status once, those made on
    // the way out of a pause included.
    const std::regex eval(R"(Eval, step (\d+):)");
    std::vector<int64_t> evaluated, reported;
    for (std::sregex_iterator it(log.begin(), log.end(), eval), end; it != end; ++it) {
      evaluated.push_back(std::stoll((*it)[1]));
    }
    for (const v1::HyperparameterMetric& m : t.all_metrics()) reported.push_back(m.training_step());
    EXPECT_EQ(reported, evaluated) << log;
    ASSERT_LE(restores.size(), stops.size()) << log;
    for (size_t i = 0; i < restores.size(); ++i) EXPECT_EQ(restores[i], stops[i]) << log;
    if (!restores.empty()) ++resumed_trials;
    if (t.is_trial_stopped_early()) {
      ++stopped_trials;
      EXPECT_LT(t.final_metric().training_step(), kMaxSteps);
      EXPECT_EQ(stops.size(), restores.size() + 1) << log;  // its last segment was paused
    } else {
      ++full_trials;
      EXPECT_EQ(t.final_metric().training_step(), kMaxSteps);
      EXPECT_EQ(t.all_metrics_size(), kMaxSteps / kEvalEvery);
      EXPECT_EQ(stops.size(), restores.size()) << log;
    }
  }
  // The first trial at rung 0 was alone there and paused; two of four earn
  // rung 1, and the leader trains to the end.
  EXPECT_GE(resumed_trials, 1);
  EXPECT_GE(full_trials, 1);
  EXPECT_GE(stopped_trials, 2);
  RunResult describe = Kubetrain({"jobs", "describe", "pausing", "--local", "--summarize"});
  EXPECT_THAT(describe.out, HasSubstr("trials pause at rungs"));
  EXPECT_THAT(describe.out, HasSubstr("Stopped at each rung: "));
}

// One master + 2 workers + 1 ps job of the real kubetrain-runtime on
// Fashion-MNIST under OnFailure, run undisturbed and with its chief lost
// three ways. Each disturbed run ends SUCCEEDED at --max_steps, its restarted
// chief resuming from the last checkpoint the killed one wrote, with an
// accuracy close to the undisturbed run's.
class LostChiefTest : public RealTrainerTest {
 protected:
  static constexpr int64_t kMaxSteps = lost_chief::kMaxSteps;
  using Outcome = lost_chief::Outcome;

  std::string JobDir(const std::string& name) { return work_.path() + "/" + name; }

  // Submits the job; `sync` picks the synchronous parameter server.
  void Submit(const std::string& name, bool sync) {
    const std::string manifest = WriteConfig(
        name + ".yaml",
        absl::StrCat(
            "apiVersion: kubetrain.io/v1\nkind: TrainingJob\nmetadata: {name: ", name,
            "}\nspec:\n  trainingInput:\n    scaleTier: CUSTOM\n    masterType: standard\n"
            "    workerType: standard\n    workerCount: 2\n    parameterServerType: standard\n"
            "    parameterServerCount: 1\n    jobDir: ",
            JobDir(name), "\n    args: [", absl::StrJoin(lost_chief::TrainerArgs(sync), ", "),
            "]\n  runPolicy: {restartPolicy: OnFailure, backoffLimit: 12}\n"));
    RunResult r =
        Kubetrain({"jobs", "submit", "training", name, "--local", "--config", manifest}, Runtime());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }

  // The record of the job's replica of `role` and `index`, once there is one.
  std::optional<ReplicaRecord> Replica(const std::string& job, api::Role role, int index = 0) {
    auto store = JobStore::Open(home_.path() + "/jobs.db");
    if (!store.ok()) return std::nullopt;
    auto replicas = (*store)->ListReplicas(job);
    for (const ReplicaRecord& r : replicas.ok() ? *replicas : std::vector<ReplicaRecord>{}) {
      if (r.key.role == role && r.key.index == index) return r;
    }
    return std::nullopt;
  }

  // The trainer process of that replica now (its supervisor's child).
  int Trainer(const std::string& job, api::Role role) {
    int pid = 0;
    EXPECT_TRUE(test_support::WaitUntil(
        [&] {
          const std::optional<ReplicaRecord> replica = Replica(job, role);
          const std::vector<int> children =
              replica && replica->pid > 0 ? ChildrenOf(replica->pid) : std::vector<int>{};
          pid = children.size() == 1 ? children[0] : 0;
          return pid > 0;
        },
        absl::Seconds(60)))
        << "no trainer process for " << api::RoleName(role) << " 0 of " << job;
    return pid;
  }

  void WaitForCheckpoint(const std::string& job, int64_t step) {
    ASSERT_TRUE(test_support::WaitUntil([&] { return LatestCheckpointStep(JobDir(job)) >= step; },
                                        absl::Seconds(300)))
        << ReadFile(home_.path() + "/controller.log");
  }

  // Kills `pid` and waits until it is gone; returns the job's last
  // checkpoint then (nothing writes one while the chief is dead).
  int64_t KillChief(const std::string& job, const std::vector<int>& pids) {
    for (int pid : pids) EXPECT_EQ(kill(pid, SIGKILL), 0) << pid;
    for (int pid : pids) {
      EXPECT_TRUE(
          test_support::WaitUntil([&] { return !ProcessAlive(pid, 0); }, absl::Seconds(60)));
    }
    const int64_t last = LatestCheckpointStep(JobDir(job));
    EXPECT_LT(last, kMaxSteps) << "training ended before the chief was killed";
    return last;
  }

  // The job once it ended, with its replicas' logs as stream-logs prints them.
  Outcome WaitForEnd(const std::string& job) {
    EXPECT_TRUE(test_support::WaitUntil([&] { return Finished(job); }, absl::Seconds(300)))
        << ReadFile(home_.path() + "/controller.log");
    RunResult logs = Kubetrain({"jobs", "stream-logs", job, "--local"}, "timeout 120");
    EXPECT_EQ(logs.code, 0) << logs.err;
    return lost_chief::OutcomeOf(v1::State_Name(Job(job).status().state()), logs.out);
  }

  Outcome RunUndisturbed(const std::string& job, bool sync) {
    Submit(job, sync);
    const Outcome run = WaitForEnd(job);
    lost_chief::ExpectUndisturbed(job, run);
    return run;
  }

  void ExpectFinishedLikeTheUndisturbedRun(const std::string& job, const Outcome& run,
                                           const Outcome& undisturbed, int64_t resumed_from,
                                           bool sync = true) {
    lost_chief::ExpectFinishedLikeTheUndisturbedRun(
        job, JobDir(job), run, undisturbed, resumed_from, sync, Job(job).status().error_message());
  }
};

TEST_F(LostChiefTest, AChiefKilledMidTrainingAfterTheWorkersFinishedOrWithThePsStillFinishes) {
  const Outcome undisturbed = RunUndisturbed("undisturbed", /*sync=*/true);
  const Outcome undisturbed_async = RunUndisturbed("undisturbed_async", /*sync=*/false);

  // (a) Mid-training: the master's process is killed; it runs again in
  // place, and so do the ps and workers, which lost it.
  Submit("mid_training", true);
  WaitForCheckpoint("mid_training", 400);
  const int64_t a = KillChief("mid_training", {Trainer("mid_training", api::Role::kMaster)});
  ExpectFinishedLikeTheUndisturbedRun("mid_training", WaitForEnd("mid_training"), undisturbed, a);

  // (b) After the workers finished: the master stalls (asynchronous ps: the
  // workers train on without it) until both workers have completed, then it
  // is killed. It runs again from its last checkpoint, and the workers, gone,
  // rejoin it.
  //
  // Asynchronous steps are quick: on a busy machine the whole run can end
  // before this test stalls the master, and then there is nothing to show;
  // such a run is let finish and the job is submitted again, at most thrice.
  std::string after_workers_job;
  int stalled = 0;
  for (int attempt = 1; attempt <= 3 && stalled == 0; ++attempt) {
    after_workers_job = attempt == 1 ? "after_workers" : absl::StrCat("after_workers_", attempt);
    Submit(after_workers_job, false);
    const int master = Trainer(after_workers_job, api::Role::kMaster);
    WaitForCheckpoint(after_workers_job, 100);
    ASSERT_EQ(kill(master, SIGSTOP), 0);
    // Only the chief writes checkpoints: this one is the last until it is
    // killed.
    if (LatestCheckpointStep(JobDir(after_workers_job)) < kMaxSteps) {
      stalled = master;
    } else {
      std::cout << after_workers_job << ": training ended before the master was stalled"
                << std::endl;
      ASSERT_EQ(kill(master, SIGCONT), 0);
      WaitForEnd(after_workers_job);
    }
  }
  ASSERT_NE(stalled, 0) << "the master was never stalled before training ended";
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(test_support::WaitUntil(
        [&] {
          const std::optional<ReplicaRecord> worker =
              Replica(after_workers_job, api::Role::kWorker, i);
          return worker && absl::StripAsciiWhitespace(ReadFile(worker->exit_path)) == "0";
        },
        absl::Seconds(120)))
        << "worker " << i << " did not complete while the master stalled";
  }
  const int64_t b = KillChief(after_workers_job, {stalled});
  const Outcome after_workers = WaitForEnd(after_workers_job);
  ExpectFinishedLikeTheUndisturbedRun(after_workers_job, after_workers, undisturbed_async, b,
                                      /*sync=*/false);
  // Both workers were brought back for the master.
  auto store = JobStore::Open(home_.path() + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto events = (*store)->Events(after_workers_job);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<std::string> rejoined;
  for (const StoredEvent& e : *events) {
    if (e.reason == "ReplicaRejoining") rejoined.push_back(e.message.substr(0, 8));
  }
  EXPECT_THAT(rejoined, ::testing::UnorderedElementsAre("worker-0", "worker-1"));

  // (c) With the ps: the master and the ps are killed together.
  Submit("with_ps", true);
  WaitForCheckpoint("with_ps", 400);
  const int64_t c = KillChief("with_ps", {Trainer("with_ps", api::Role::kMaster),
                                          Trainer("with_ps", api::Role::kParameterServer)});
  ExpectFinishedLikeTheUndisturbedRun("with_ps", WaitForEnd("with_ps"), undisturbed, c);
}

}  // namespace
}  // namespace kubetrain::local
