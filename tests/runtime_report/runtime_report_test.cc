// kubetrain-runtime `train` and `exec` reporting a trial's metrics to a real
// Metrics service in this process, as the operator runs them: the
// environment MakeReplica gives a trial replica, real child processes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/hypertune/hypertune.h"
#include "common/testing/child_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/metrics/metrics_service.h"
#include "operator/metrics/metrics_test_server.h"
#include "trainer-runtime/cmd/runtime_cli_test_util.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime {
namespace {

namespace fs = std::filesystem;
using cli_test::RunBinary;
using cli_test::Slurp;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

constexpr char kJob[] = "team-a/fmnist";
constexpr char kTrial[] = "4";

// Keeps accepted reports, and marks each one with a file "got-<step>" in
// `dir`, so that a child process can wait for its report to have arrived.
class MarkingSink : public metrics::ReportSink {
 public:
  explicit MarkingSink(fs::path dir) : dir_(std::move(dir)) {}
  absl::Status Accept(const metrics::MetricsReport& report) override {
    absl::MutexLock lock(&mu_);
    reports_.push_back(report);
    std::ofstream(dir_ / absl::StrCat("got-", report.step));
    return absl::OkStatus();
  }
  std::vector<metrics::MetricsReport> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  const fs::path dir_;
  absl::Mutex mu_;
  std::vector<metrics::MetricsReport> reports_ ABSL_GUARDED_BY(mu_);
};

class RuntimeReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = cli_test::FreshTempDir("runtime-report");
    log_ = (dir_ / "log").string();
    sink_ = std::make_unique<MarkingSink>(dir_);
    token_ = metrics::NewTrialToken();
    tokens_.Register(kJob, kTrial, token_);
    service_ = std::make_unique<metrics::MetricsServiceImpl>(&tokens_, sink_.get());
    server_ = metrics::LoopbackServer::Start(service_.get());
    ASSERT_NE(server_, nullptr);
    address_ = server_->address();
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  // What the operator puts in a trial replica's environment.
  std::map<std::string, std::string> TrialEnvironment(const std::string& token) const {
    return {{"KUBETRAIN_METRICS_ADDR", address_},
            {"KUBETRAIN_METRICS_TOKEN", token},
            {"KUBETRAIN_NAMESPACE", "team-a"},
            {"KUBETRAIN_JOB_NAME", "fmnist"},
            {"KUBETRAIN_TRIAL_ID", kTrial},
            {"CLOUD_ML_TRIAL_ID", kTrial},
            {"KUBETRAIN_TASK_TYPE", "master"},
            {"KUBETRAIN_TASK_INDEX", "0"},
            {"KUBETRAIN_METRIC_TAG", hypertune::kDefaultMetricTag}};
  }
  static std::string Env(const std::map<std::string, std::string>& vars) {
    // Nothing of the test's own environment about metrics leaks in.
    std::string env = "env -u KUBETRAIN_METRICS_ADDR -u CLOUD_ML_HP_METRIC_FILE";
    for (const auto& [name, value] : vars) absl::StrAppend(&env, " ", name, "='", value, "'");
    return env;
  }
  std::string Train(const std::string& out, int max_steps) const {
    cli_test::WriteTinyDataset(dir_ / "train.csv");
    return cli_test::TinyTrainArgs(dir_ / "train.csv", dir_ / out, max_steps);
  }
  // A shell script in the test's directory.
  std::string Script(const std::string& name, const std::string& body) const {
    const fs::path path = dir_ / name;
    std::ofstream(path) << body;
    return path.string();
  }

  fs::path dir_;
  std::string log_;
  metrics::TokenRegistry tokens_;
  std::unique_ptr<MarkingSink> sink_;
  std::string token_;
  std::unique_ptr<metrics::MetricsServiceImpl> service_;
  std::unique_ptr<metrics::LoopbackServer> server_;
  std::string address_;
};

TEST_F(RuntimeReportTest, TrainReportsEachEvaluationOfTheMaster) {
  std::map<std::string, std::string> env = TrialEnvironment(token_);
  env["CLOUD_ML_HP_METRIC_FILE"] = (dir_ / "hypertune" / "output.metrics").string();
  ASSERT_EQ(RunBinary(Train("out", 20), log_, Env(env)), kExitOk) << Slurp(log_);
  std::vector<metrics::MetricsReport> reports = sink_->reports();
  ASSERT_FALSE(reports.empty()) << Slurp(log_);
  for (const metrics::MetricsReport& r : reports) {
    EXPECT_EQ(r.job, kJob);
    EXPECT_EQ(r.trial, kTrial);
    EXPECT_EQ(r.task, "master-0");
  }
  EXPECT_THAT(Slurp(log_), HasSubstr("Final metrics after 20 steps"));
  // The final evaluation, every tag in one report; the default tag carries
  // the evaluation accuracy. The hypertune file has the same values.
  const metrics::MetricsReport& last = reports.back();
  EXPECT_EQ(last.step, 20);
  std::vector<std::string> tags;
  for (const auto& [tag, value] : last.values) tags.push_back(tag);
  EXPECT_THAT(tags, ElementsAre("accuracy", "loss", hypertune::kDefaultMetricTag));
  EXPECT_EQ(last.values.at(hypertune::kDefaultMetricTag), last.values.at("accuracy"));
  // Only the last one is marked final, over gRPC and in the file.
  EXPECT_TRUE(last.final);
  for (size_t i = 0; i + 1 < reports.size(); ++i) EXPECT_FALSE(reports[i].final) << i;
  std::vector<hypertune::HypertuneReport> file =
      hypertune::ParseHypertuneFile(Slurp(env["CLOUD_ML_HP_METRIC_FILE"]));
  ASSERT_GE(file.size(), 3u);
  for (size_t i = file.size() - 3; i < file.size(); ++i) {
    EXPECT_EQ(file[i].global_step, 20);
    ASSERT_EQ(file[i].metrics.size(), 1u);
    const auto& [tag, value] = *file[i].metrics.begin();
    ASSERT_EQ(last.values.count(tag), 1u) << tag;
    EXPECT_EQ(value, last.values.at(tag)) << tag;
    EXPECT_TRUE(file[i].final) << tag;
  }
  for (size_t i = 0; i + 3 < file.size(); ++i) EXPECT_FALSE(file[i].final) << i;
}

// A trial stopped by SIGTERM (paused at a rung, or its pod deleted) still
// delivers the evaluations it made before the stop: the trial's curve keeps
// them. One evaluation a step, so the last one is queued just before the
// stop.
TEST_F(RuntimeReportTest, TrainStoppedBySigtermDeliversTheEvaluationsItMadeFirst) {
  cli_test::WriteTinyDataset(dir_ / "train.csv");
  const std::string args =
      cli_test::TinyTrainArgs(dir_ / "train.csv", dir_ / "out", 1'000'000'000) +
      " --eval_every_steps=1 --log_every_steps=1000000 --save_checkpoints_steps=2000000000";
  test_support::ChildProcess trainer(
      {.argv = {"/bin/sh", "-c",
                absl::StrCat("exec ", Env(TrialEnvironment(token_)), " ", KUBETRAIN_RUNTIME_BINARY,
                             " ", args, " 2>", log_)},
       .pipe_stdio = true});
  ASSERT_TRUE(trainer.Start().ok());
  // Once the service has its first report, the next ones are on their way.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (sink_->reports().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_FALSE(sink_->reports().empty()) << Slurp(log_);
  const int code = trainer.SignalAndWait(SIGTERM);
  ASSERT_FALSE(trainer.killed_by_signal()) << Slurp(log_);
  EXPECT_EQ(code, kExitStoppedBySigterm) << Slurp(log_);
  std::string out;
  for (absl::StatusOr<std::string> line; (line = trainer.ReadLine(deadline)).ok();) {
    out += *line + "\n";
  }
  const size_t last_eval = out.rfind("Eval, step ");
  ASSERT_NE(last_eval, std::string::npos) << out;
  int64_t step = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      out.substr(last_eval + 11, out.find(':', last_eval) - last_eval - 11), &step))
      << out;
  std::vector<metrics::MetricsReport> reports = sink_->reports();
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().step, step) << Slurp(log_);
  EXPECT_FALSE(reports.back().final);
}

TEST_F(RuntimeReportTest, TrainWithAWrongTokenFailsNamingTheTokenVariable) {
  const int code = RunBinary(Train("out", 5), log_, Env(TrialEnvironment("not-the-token")));
  EXPECT_NE(code, kExitOk) << Slurp(log_);
  EXPECT_FALSE(IsRetryableExitCode(code)) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), HasSubstr("KUBETRAIN_METRICS_TOKEN"));
  EXPECT_THAT(Slurp(log_), HasSubstr(address_));
  EXPECT_TRUE(sink_->reports().empty());
}

TEST_F(RuntimeReportTest, TrainExitsRetryableWhenTheLastReportCannotBeDelivered) {
  server_.reset();  // connections to address_ are refused from now on
  std::map<std::string, std::string> env = TrialEnvironment(token_);
  env["KUBETRAIN_METRICS_DEADLINE"] = "1s";
  EXPECT_EQ(RunBinary(Train("out", 5), log_, Env(env)), kExitRetryable) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), HasSubstr("not delivered to the operator at " + address_));
}

TEST_F(RuntimeReportTest, TrainOutsideATrialDoesNotReport) {
  std::map<std::string, std::string> env = TrialEnvironment(token_);
  env.erase("KUBETRAIN_TRIAL_ID");
  env.erase("CLOUD_ML_TRIAL_ID");
  ASSERT_EQ(RunBinary(Train("out", 5), log_, Env(env)), kExitOk) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), HasSubstr("not a tuning trial"));
  EXPECT_TRUE(sink_->reports().empty());
}

// A trainer that reports as cloudml-hypertune does: the whole file rewritten
// on each report. It writes the next report only once the service has the
// previous one, so each is forwarded while the trainer still runs.
constexpr char kHypertuneTrainer[] = R"(
dir="$1"
echo "$CLOUD_ML_HP_METRIC_FILE" > "$dir/metric_file"
env > "$dir/child_env"
lines=""
for i in 1 2 3; do
  lines="${lines}{\"accuracy\": \"0.${i}\", \"global_step\": \"${i}00\", \"timestamp\": 1700000000.${i}, \"trial\": \"4\"}
"
  printf '%s' "$lines" > "$CLOUD_ML_HP_METRIC_FILE"
  n=0
  while [ ! -e "$dir/got-${i}00" ]; do
    n=$((n + 1))
    if [ $n -gt 6000 ]; then exit 99; fi
    sleep 0.01
  done
done
exit 7
)";

TEST_F(RuntimeReportTest, ExecForwardsEachHypertuneReportOnceInOrder) {
  const std::string script = Script("trainer.sh", kHypertuneTrainer);
  EXPECT_EQ(RunBinary("exec --poll-interval 20ms -- sh " + script + " " + dir_.string(), log_,
                      Env(TrialEnvironment(token_))),
            7)
      << Slurp(log_);
  std::vector<metrics::MetricsReport> reports = sink_->reports();
  ASSERT_EQ(reports.size(), 3u) << Slurp(log_);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(reports[i].step, (i + 1) * 100);
    EXPECT_THAT(reports[i].values, ElementsAre(Pair("accuracy", (i + 1) / 10.0)));
    EXPECT_EQ(reports[i].job, kJob);
    EXPECT_EQ(reports[i].trial, kTrial);
    EXPECT_EQ(reports[i].task, "master-0");
  }
  // The child's metric file was private, and is gone; the token was not
  // handed to the child.
  std::string metric_file = Slurp((dir_ / "metric_file").string());
  ASSERT_FALSE(metric_file.empty());
  metric_file.pop_back();  // newline
  EXPECT_FALSE(fs::exists(fs::path(metric_file).parent_path())) << metric_file;
  EXPECT_THAT(Slurp((dir_ / "child_env").string()), Not(HasSubstr(token_)));
}

TEST_F(RuntimeReportTest, ExecWithAWrongTokenFailsNamingTheTokenVariable) {
  const std::string script =
      Script("once.sh",
             "printf '{\"accuracy\": \"0.5\", \"global_step\": \"1\", \"timestamp\": 1.0}\\n' "
             "> \"$CLOUD_ML_HP_METRIC_FILE\"\n");
  const int code = RunBinary("exec -- sh " + script, log_, Env(TrialEnvironment("not-the-token")));
  EXPECT_NE(code, kExitOk) << Slurp(log_);
  EXPECT_FALSE(IsRetryableExitCode(code)) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), HasSubstr("KUBETRAIN_METRICS_TOKEN"));
}

// `kubetrain-runtime exec -- sh SCRIPT` as a child process of the test,
// with SCRIPT's stdout on a pipe to the test, so that the test can wait for
// a line the script prints before it signals exec. Should an assertion fail,
// nothing is left running.
class ExecProcess {
 public:
  ExecProcess(const std::string& env, const std::string& script, const std::string& log)
      : process_({.argv = {"/bin/sh", "-c",
                           absl::StrCat("exec ", env, " ", KUBETRAIN_RUNTIME_BINARY, " exec -- sh ",
                                        script, " 2>", log)},
                  .pipe_stdio = true}) {
    started_ = process_.Start().ok();
  }
  bool started() const { return started_; }
  // The script's next line of output, or "" at its end.
  std::string ReadOutput() {
    absl::StatusOr<std::string> line = process_.ReadLine(absl::Now() + absl::Seconds(120));
    return line.ok() ? *line + "\n" : std::string();
  }
  // Sends SIGTERM to exec and waits for it: its exit code, or -1 when it
  // did not exit by itself (it was killed, or could not be signalled).
  int Terminate() {
    if (!process_.running()) return -1;
    const int code = process_.SignalAndWait(SIGTERM);
    return process_.killed_by_signal() ? -1 : code;
  }

 private:
  test_support::ChildProcess process_;  // killed, should an assertion fail
  bool started_ = false;
};

TEST_F(RuntimeReportTest, ExecForwardsSigtermToTheChild) {
  // The child says it is ready, then becomes a process that only SIGTERM ends.
  ExecProcess exec(Env(TrialEnvironment(token_)),
                   Script("wait.sh", "echo ready\nexec sleep 1000\n"), log_);
  ASSERT_TRUE(exec.started());
  ASSERT_EQ(exec.ReadOutput(), "ready\n");
  EXPECT_EQ(exec.Terminate(), 128 + SIGTERM) << Slurp(log_);
}

// An operator that cannot be reached, and a report deadline no test would
// wait out: exec may only end early because it was told to stop.
class UnreachableOperatorTest : public RuntimeReportTest {
 protected:
  std::string UnreachableEnv() {
    server_.reset();  // nothing listens on its port any more
    std::map<std::string, std::string> env = TrialEnvironment(token_);
    env["KUBETRAIN_METRICS_DEADLINE"] = "1h";
    return Env(env);
  }
  const std::string report_ =
      "printf '{\"accuracy\": \"0.5\", \"global_step\": \"1\"}\\n' "
      "> \"$CLOUD_ML_HP_METRIC_FILE\"\n";
};

TEST_F(UnreachableOperatorTest, ASigtermedTrialDoesNotWaitOutTheReportDeadline) {
  ExecProcess exec(UnreachableEnv(), Script("stop.sh", report_ + "echo ready\nexec sleep 1000\n"),
                   log_);
  ASSERT_TRUE(exec.started());
  ASSERT_EQ(exec.ReadOutput(), "ready\n");
  EXPECT_EQ(exec.Terminate(), 128 + SIGTERM) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), HasSubstr("stopped by signal 15 before the trial's last metrics "
                                     "report reached"));
}

TEST_F(UnreachableOperatorTest, ASigtermEndsTheWaitForTheLastReport) {
  // The child succeeds at once; exec is then waiting to deliver its report
  // (or, if the signal comes first, forwards it to a child that is ending).
  // Either way the report is not delivered, so exec may not exit 0: a
  // restarted replica must report it again.
  ExecProcess exec(UnreachableEnv(), Script("done.sh", report_ + "echo done\n"), log_);
  ASSERT_TRUE(exec.started());
  ASSERT_EQ(exec.ReadOutput(), "done\n");
  EXPECT_EQ(exec.Terminate(), 128 + SIGTERM) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), HasSubstr("stopped by signal 15"));
}

// `kubetrain-runtime collect --file FILE` as a sidecar runs: a child of the
// test, its stdout on a pipe, told to stop with SIGTERM.
class CollectProcess {
 public:
  CollectProcess(const std::string& env, const std::string& file, const std::string& log,
                 const std::string& flags = "")
      : process_({.argv = {"/bin/sh", "-c",
                           absl::StrCat("exec ", env, " ", KUBETRAIN_RUNTIME_BINARY,
                                        " collect --poll-interval 20ms --file ", file, " ", flags,
                                        " 2>", log)},
                  .pipe_stdio = true}) {
    started_ = process_.Start().ok();
  }
  // Its first line: it has caught the signals, and follows the file.
  bool Ready() {
    absl::StatusOr<std::string> line = process_.ReadLine(absl::Now() + absl::Seconds(60));
    return started_ && line.ok() && absl::StrContains(*line, "kubetrain-runtime collect: ");
  }
  int Terminate() {
    if (!process_.running()) return -1;
    const int code = process_.SignalAndWait(SIGTERM);
    return process_.killed_by_signal() ? -1 : code;
  }

 private:
  test_support::ChildProcess process_;
  bool started_ = false;
};

// The sidecar of a trial whose trainer runs its image's entrypoint: each
// report the trainer writes reaches the operator once, in order, the last
// one written just before the trainer ended included.
TEST_F(RuntimeReportTest, CollectForwardsATrainersReportsUntilItIsStopped) {
  const std::string file = (dir_ / "shared" / "output.metrics").string();
  fs::create_directories(dir_ / "shared");
  CollectProcess collect(Env(TrialEnvironment(token_)), file, log_);
  ASSERT_TRUE(collect.Ready()) << Slurp(log_);
  auto writer = hypertune::HypertuneWriter::Create({.metric_path = file, .trial_id = kTrial});
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (int step : {100, 200}) {
    ASSERT_TRUE((*writer)->Report("accuracy", step / 1000.0, step).ok());
    const fs::path got = dir_ / absl::StrCat("got-", step);
    for (int i = 0; i < 3000 && !fs::exists(got); ++i) absl::SleepFor(absl::Milliseconds(10));
    ASSERT_TRUE(fs::exists(got)) << Slurp(log_);
  }
  // The trainer's last report, then the kubelet stops the sidecar at once.
  ASSERT_TRUE((*writer)->Report("accuracy", 0.3, 300).ok());
  EXPECT_EQ(collect.Terminate(), kExitOk) << Slurp(log_);
  const std::vector<metrics::MetricsReport> reports = sink_->reports();
  ASSERT_EQ(reports.size(), 3u) << Slurp(log_);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(reports[i].step, (i + 1) * 100);
    EXPECT_THAT(reports[i].values, ElementsAre(Pair("accuracy", (i + 1) / 10.0)));
    EXPECT_EQ(reports[i].trial, kTrial);
    EXPECT_EQ(reports[i].task, "master-0");
  }
}

TEST_F(RuntimeReportTest, CollectWithoutAMetricsServiceWaitsToBeStopped) {
  CollectProcess collect(Env({}), (dir_ / "output.metrics").string(), log_);
  ASSERT_TRUE(collect.Ready()) << Slurp(log_);
  EXPECT_EQ(collect.Terminate(), kExitOk) << Slurp(log_);
  EXPECT_EQ(RunBinary("collect", log_, Env({})), kExitUsage);
  EXPECT_THAT(Slurp(log_), HasSubstr("--file is required"));
}

TEST_F(UnreachableOperatorTest, CollectStoppedWithAReportOnTheWayExitsRetryableWithinItsGrace) {
  const std::string file = (dir_ / "output.metrics").string();
  CollectProcess collect(UnreachableEnv(), file, log_, "--grace 1s");
  ASSERT_TRUE(collect.Ready()) << Slurp(log_);
  auto writer = hypertune::HypertuneWriter::Create({.metric_path = file, .trial_id = kTrial});
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Report("accuracy", 0.5, 1).ok());
  const absl::Time start = absl::Now();
  EXPECT_EQ(collect.Terminate(), kExitRetryable) << Slurp(log_);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // not the 1h report deadline
  EXPECT_THAT(Slurp(log_), HasSubstr("the trial's last metrics report did not reach"));
}

TEST_F(RuntimeReportTest, ExecExitsWithTheChildsCode) {
  const std::string out = (dir_ / "seen").string();
  EXPECT_EQ(RunBinary("exec -- sh -c 'echo \"$CLOUD_ML_HP_METRIC_FILE\" > " + out + "; exit 5'",
                      log_, Env({{"CLOUD_ML_HP_METRIC_FILE", "/data/trial-4/output.metrics"}})),
            5)
      << Slurp(log_);
  EXPECT_EQ(Slurp(out), "/data/trial-4/output.metrics\n");
  // A child killed by a signal: 128 + the signal, as a shell reports it.
  EXPECT_EQ(RunBinary("exec -- sh -c 'kill -TERM $$'", log_, Env(TrialEnvironment(token_))),
            128 + SIGTERM)
      << Slurp(log_);
}

TEST_F(RuntimeReportTest, ExecOnATaskOtherThanTheChiefRunsTheCommandUnchanged) {
  std::map<std::string, std::string> env = TrialEnvironment(token_);
  env["KUBETRAIN_TASK_TYPE"] = "worker";
  env["TF_CONFIG"] =
      R"({"cluster":{"master":["h0:2222"],"worker":["h1:2222"]},"task":{"type":"worker","index":0}})";
  env["CLOUD_ML_HP_METRIC_FILE"] = (dir_ / "worker.metrics").string();
  const std::string script = Script("worker.sh",
                                    "echo \"$CLOUD_ML_HP_METRIC_FILE\" > \"$1/seen\"\n"
                                    "printf '{\"accuracy\": \"0.5\", \"global_step\": \"1\"}\\n' "
                                    "> \"$CLOUD_ML_HP_METRIC_FILE\"\n");
  EXPECT_EQ(RunBinary("exec -- sh " + script + " " + dir_.string(), log_, Env(env)), kExitOk)
      << Slurp(log_);
  EXPECT_EQ(Slurp((dir_ / "seen").string()), env["CLOUD_ML_HP_METRIC_FILE"] + "\n");
  EXPECT_TRUE(sink_->reports().empty());
}

TEST_F(RuntimeReportTest, ExecUsageErrors) {
  EXPECT_EQ(RunBinary("exec --", log_, Env({})), kExitUsage);
  EXPECT_THAT(Slurp(log_), HasSubstr("no command"));
  EXPECT_EQ(RunBinary("exec --frobnicate -- true", log_, Env({})), kExitUsage);
  EXPECT_THAT(Slurp(log_), HasSubstr("--frobnicate"));
  EXPECT_EQ(RunBinary("exec --poll-interval=soon -- true", log_, Env({})), kExitUsage);
  EXPECT_THAT(Slurp(log_), HasSubstr("--poll-interval"));
  EXPECT_EQ(RunBinary("exec -- no-such-command-kubetrain", log_, Env({})), 127);
  EXPECT_THAT(Slurp(log_), HasSubstr("no-such-command-kubetrain: command not found"));
  EXPECT_EQ(RunBinary("exec -- no-such-command-kubetrain", log_, Env(TrialEnvironment(token_))),
            127);
  EXPECT_THAT(Slurp(log_), HasSubstr("no-such-command-kubetrain: command not found"));
  // --help after the command is the command's.
  EXPECT_EQ(RunBinary("exec sh -c 'exit 9' --help", log_, Env({})), 9) << Slurp(log_);
  EXPECT_EQ(RunBinary("exec --help", log_), kExitOk);
  EXPECT_THAT(Slurp(log_), HasSubstr("--poll-interval"));
  EXPECT_EQ(RunBinary("--help", log_), kExitOk);
  EXPECT_THAT(Slurp(log_), HasSubstr("exec"));
}

// --package: folders on PYTHONPATH (before what it was), in place on a
// task that does not report, as the child of a reporting one.
TEST_F(RuntimeReportTest, ExecPutsPackageFoldersOnThePythonPath) {
  fs::create_directories(dir_ / "pkg1");
  fs::create_directories(dir_ / "pkg2");
  const std::string script = Script("path.sh", "echo \"$PYTHONPATH\" > \"$1/seen\"\n");
  const std::string packages =
      "--package " + (dir_ / "pkg1").string() + " --package=" + (dir_ / "pkg2").string();
  EXPECT_EQ(RunBinary("exec " + packages + " -- sh " + script + " " + dir_.string(), log_,
                      Env({{"PYTHONPATH", "/before"}})),
            kExitOk)
      << Slurp(log_);
  EXPECT_EQ(Slurp((dir_ / "seen").string()),
            (dir_ / "pkg1").string() + ":" + (dir_ / "pkg2").string() + ":/before\n");
  std::map<std::string, std::string> trial = TrialEnvironment(token_);
  trial["PYTHONPATH"] = "";
  EXPECT_EQ(
      RunBinary("exec " + packages + " -- sh " + script + " " + dir_.string(), log_, Env(trial)),
      kExitOk)
      << Slurp(log_);
  EXPECT_EQ(Slurp((dir_ / "seen").string()),
            (dir_ / "pkg1").string() + ":" + (dir_ / "pkg2").string() + "\n");
}

TEST_F(RuntimeReportTest, ExecRefusesPackagesItCannotInstallBeforeRunningAnything) {
  const std::string marker = (dir_ / "ran").string();
  const std::string command = " -- sh -c 'touch " + marker + "'";
  // Schemes: usage errors, naming the package.
  EXPECT_EQ(RunBinary("exec --package gs://b/trainer-0.1.tar.gz" + command, log_, Env({})),
            kExitUsage);
  EXPECT_THAT(Slurp(log_),
              HasSubstr("--package: \"gs://b/trainer-0.1.tar.gz\" names object "
                        "storage (gs://), which kubetrain cannot fetch packages from"));
  EXPECT_EQ(RunBinary("exec --package configmap://j-package/t-0.1.tar.gz" + command, log_, Env({})),
            kExitUsage);
  EXPECT_THAT(Slurp(log_), HasSubstr("a package stored in a ConfigMap is a file in the pods"));
  // A missing file, and one pip cannot install: bad input, with pip's words.
  EXPECT_EQ(
      RunBinary("exec --package " + (dir_ / "missing.tar.gz").string() + command, log_, Env({})),
      kExitBadInput);
  EXPECT_THAT(Slurp(log_), HasSubstr("missing.tar.gz: no such file or folder"));
  std::ofstream(dir_ / "broken-0.1.tar.gz") << "not a tarball";
  EXPECT_EQ(RunBinary("exec --python /usr/bin/python3 --package " +
                          (dir_ / "broken-0.1.tar.gz").string() + command,
                      log_, Env(TrialEnvironment(token_))),
            kExitBadInput);
  EXPECT_THAT(Slurp(log_), HasSubstr("pip could not install " +
                                     (dir_ / "broken-0.1.tar.gz").string() + ": it exited with "));
  EXPECT_FALSE(fs::exists(marker)) << Slurp(log_);
  EXPECT_TRUE(sink_->reports().empty());
  // A Python that is not there.
  std::ofstream(dir_ / "t-0.1.tar.gz") << "x";
  EXPECT_EQ(RunBinary("exec --python no-such-python-kubetrain --package " +
                          (dir_ / "t-0.1.tar.gz").string() + command,
                      log_, Env({})),
            kExitBadInput);
  EXPECT_THAT(Slurp(log_), HasSubstr("no-such-python-kubetrain: command not found"));
  EXPECT_EQ(RunBinary("exec --package", log_, Env({})), kExitUsage);
  EXPECT_THAT(Slurp(log_), HasSubstr("--package needs a value"));
}

}  // namespace
}  // namespace kubetrain::runtime
