// Runs the kubetrain-runtime binary as a replica would: exit codes, and a
// restart that resumes from the latest checkpoint and ends with the same
// weights as an uninterrupted run.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cpu_budget/cpu_budget.h"
#include "common/testing/child_process.h"
#include "common/testing/held_port.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/cmd/device_factory.h"
#include "trainer-runtime/cmd/runtime_cli_test_util.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime {
namespace {

namespace fs = std::filesystem;
using cli_test::RunBinary;
using cli_test::Slurp;
using ::testing::HasSubstr;
using ::testing::Not;

class RuntimeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = cli_test::FreshTempDir("runtime-cli");
    cli_test::WriteTinyDataset(dir_ / "train.csv");
  }
  std::string Flags(const std::string& out, int max_steps) const {
    return cli_test::TinyTrainArgs(dir_ / "train.csv", dir_ / out, max_steps);
  }
  fs::path dir_;
};

TEST_F(RuntimeCliTest, ExitCodes) {
  std::string log = (dir_ / "log").string();
  EXPECT_EQ(RunBinary("", log), kExitUsage);
  EXPECT_EQ(RunBinary("frobnicate", log), kExitUsage);
  EXPECT_EQ(RunBinary("train --no_such_flag=1", log), kExitUsage);
  EXPECT_NE(Slurp(log).find("--no_such_flag"), std::string::npos) << Slurp(log);
  EXPECT_EQ(RunBinary("train --train_data_paths=" + (dir_ / "missing.csv").string(), log),
            kExitBadInput);
  EXPECT_NE(Slurp(log).find("missing.csv"), std::string::npos) << Slurp(log);
  EXPECT_EQ(RunBinary(Flags("nan", 40) + " --optimizer=sgd --learning_rate=1e30", log),
            kExitNonFiniteLoss)
      << Slurp(log);
  EXPECT_EQ(RunBinary(Flags("ok", 5), log), kExitOk) << Slurp(log);
  EXPECT_NE(Slurp(log).find("Final metrics after 5 steps, loss: "), std::string::npos)
      << Slurp(log);
}

TEST_F(RuntimeCliTest, HelpIsGeneratedFromTheFlagsAndTheirDefaults) {
  std::string log = (dir_ / "log").string();
  ASSERT_EQ(RunBinary("train --help", log), kExitOk) << Slurp(log);
  const std::string train = Slurp(log);
  EXPECT_NE(train.find("usage: kubetrain-runtime train [flags]"), std::string::npos) << train;
  EXPECT_NE(train.find("--batch_size N"), std::string::npos) << train;
  EXPECT_NE(train.find("examples per step (default 128)"), std::string::npos) << train;
  EXPECT_NE(train.find("--allreduce_bucket_kib N"), std::string::npos) << train;
  EXPECT_NE(train.find("(default 4096)"), std::string::npos) << train;
  EXPECT_NE(train.find("--metrics_address HOST:PORT"), std::string::npos) << train;
  EXPECT_NE(train.find("CLOUD_ML_HP_METRIC_FILE"), std::string::npos) << train;
  ASSERT_EQ(RunBinary("exec --help", log), kExitOk) << Slurp(log);
  const std::string exec = Slurp(log);
  EXPECT_NE(exec.find("--poll-interval DURATION"), std::string::npos) << exec;
  EXPECT_NE(exec.find("(default 1s)"), std::string::npos) << exec;
  EXPECT_NE(exec.find("(default python3)"), std::string::npos) << exec;
}

TEST_F(RuntimeCliTest, ExecPassesTheCommandsOwnFlagsThrough) {
  std::string log = (dir_ / "log").string();
  // After `--`, and from the first argument that is not a flag, everything is the command's.
  EXPECT_EQ(RunBinary("exec --poll-interval=50ms -- sh -c 'echo \"$0 $1\"' --python --x", log),
            kExitOk)
      << Slurp(log);
  EXPECT_NE(Slurp(log).find("--python --x"), std::string::npos) << Slurp(log);
  EXPECT_EQ(RunBinary("exec sh -c 'exit 7' --package", log), 7) << Slurp(log);
  EXPECT_EQ(RunBinary("exec --bogus sh", log), kExitUsage);
  EXPECT_NE(Slurp(log).find("unknown flag --bogus"), std::string::npos) << Slurp(log);
  EXPECT_EQ(RunBinary("exec --poll-interval", log), kExitUsage);
  EXPECT_NE(Slurp(log).find("--poll-interval needs a value, a duration"), std::string::npos)
      << Slurp(log);
  EXPECT_EQ(RunBinary("exec --poll-interval=50ms", log), kExitUsage);
  EXPECT_NE(Slurp(log).find("no command"), std::string::npos) << Slurp(log);
}

TEST_F(RuntimeCliTest, TrainingWithoutAnOutputFolderSaysNothingIsKept) {
  std::string log = (dir_ / "log").string();
  const std::string no_output =
      "train --train_data_paths=" + (dir_ / "train.csv").string() +
      " --max_steps=3 --batch_size=20 --hidden1=8 --hidden2=4 --threads=1";
  ASSERT_EQ(RunBinary(no_output, log), kExitOk) << Slurp(log);
  EXPECT_NE(Slurp(log).find("Warning: no --job-dir or --output_path"), std::string::npos)
      << Slurp(log);
  ASSERT_EQ(RunBinary(Flags("kept", 3), log), kExitOk) << Slurp(log);
  EXPECT_EQ(Slurp(log).find("Warning: no --job-dir"), std::string::npos) << Slurp(log);
}

TEST_F(RuntimeCliTest, DeviceFlag) {
  std::string log = (dir_ / "log").string();
  EXPECT_EQ(RunBinary(Flags("cpu", 3) + " --device=cpu", log), kExitOk) << Slurp(log);
  EXPECT_NE(Slurp(log).find("Device: /device:CPU:0 (--device=cpu)"), std::string::npos)
      << Slurp(log);
  EXPECT_EQ(RunBinary(Flags("tpu", 3) + " --device=tpu", log), kExitUsage) << Slurp(log);
  EXPECT_NE(Slurp(log).find("--device"), std::string::npos) << Slurp(log);
  if (cmd::BuiltWithCuda() && cmd::VisibleGpuCount() > 0) {
    GTEST_SKIP() << "a GPU is visible: --device=gpu is valid here";
  }
  EXPECT_EQ(RunBinary(Flags("gpu", 3) + " --device=gpu", log), kExitUsage) << Slurp(log);
  EXPECT_NE(Slurp(log).find("--device=gpu"), std::string::npos) << Slurp(log);
  EXPECT_EQ(Slurp(log).find("Final metrics"), std::string::npos) << Slurp(log);
}

TEST_F(RuntimeCliTest, AnObjectStoreJobDirExitsTwoAndCreatesNoLocalFolder) {
  const fs::path work = dir_ / "cwd";
  fs::create_directories(work);
  std::string log = (dir_ / "log").string();
  const std::string data = (dir_ / "train.csv").string();
  struct Case {
    std::string flags;
    std::string named;  // what the error must name
  };
  const Case cases[] = {
      {"--job-dir gs://my-bucket/run1", "flag '--job-dir': \"gs://my-bucket/run1\""},
      {"--output_path=s3://bucket/out", "flag '--output_path': \"s3://bucket/out\""},
      {"--output_path=out --eval_data_paths=gs://my-bucket/eval.csv",
       "flag '--eval_data_paths': \"gs://my-bucket/eval.csv\""},
  };
  for (const Case& c : cases) {
    // Run from `work`, where a URI taken as a relative path would land.
    const std::string command =
        "train --train_data_paths=" + data + " " + c.flags +
        " --max_steps=3 --batch_size=20 --hidden1=8 --hidden2=4 --threads=1";
    EXPECT_EQ(RunBinary(command, log, "cd " + work.string() + " &&"), kExitUsage) << Slurp(log);
    EXPECT_NE(Slurp(log).find(c.named), std::string::npos) << Slurp(log);
    EXPECT_EQ(Slurp(log).find("Final metrics"), std::string::npos) << Slurp(log);
  }
  // Nothing at all was written where the process ran: no "gs:" or "s3:".
  EXPECT_TRUE(fs::is_empty(work)) << fs::directory_iterator(work)->path();
  EXPECT_FALSE(fs::exists(dir_ / "gs:"));
}

TEST_F(RuntimeCliTest, RestartResumesFromLatestCheckpoint) {
  std::string log = (dir_ / "log").string();
  ASSERT_EQ(RunBinary(Flags("straight", 60), log), kExitOk) << Slurp(log);
  // The first process stops at step 25 (as if killed right after its
  // checkpoint), the restarted one resumes there.
  ASSERT_EQ(RunBinary(Flags("restarted", 25), log), kExitOk) << Slurp(log);
  ASSERT_EQ(RunBinary(Flags("restarted", 60), log), kExitOk) << Slurp(log);
  EXPECT_NE(Slurp(log).find("Restored checkpoint at step 25"), std::string::npos) << Slurp(log);
  auto a = engine::ReadCheckpoint((dir_ / "straight" / "model.ckpt-60").string());
  auto b = engine::ReadCheckpoint((dir_ / "restarted" / "model.ckpt-60").string());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->variables_size(), b->variables_size());
  for (int i = 0; i < a->variables_size(); ++i) {
    EXPECT_EQ(a->variables(i).value().data(), b->variables(i).value().data())
        << a->variables(i).name();
  }
}

// The number after `prefix` in `line` (up to the next non-digit); -1 when
// `line` does not hold `prefix`.
int64_t NumberAfter(const std::string& line, const std::string& prefix) {
  const size_t at = line.find(prefix);
  if (at == std::string::npos) return -1;
  const size_t start = at + prefix.size();
  const size_t end = line.find_first_not_of("0123456789", start);
  int64_t number = -1;
  if (!absl::SimpleAtoi(line.substr(start, end - start), &number)) return -1;
  return number;
}

// SIGTERM (a pod being deleted) or SIGINT stops `train` after the step in
// progress: it checkpoints that step, exits 128+N without the final
// evaluation or export, and a run on the same folder resumes from that step.
// Without the handler the signal would kill it: no checkpoint, no line.
TEST_F(RuntimeCliTest, ASignalStopsTrainingWithACheckpointThatARestartResumesFrom) {
  struct Case {
    int signal;
    const char* name;
    int exit_code;
  };
  for (const Case& c : {Case{SIGTERM, "SIGTERM", kExitStoppedBySigterm},
                        Case{SIGINT, "SIGINT", kExitStoppedBySigint}}) {
    SCOPED_TRACE(c.name);
    const std::string folder = absl::StrCat("stopped-", c.name);
    const fs::path out = dir_ / folder;
    // Steps for hours, and no periodic checkpoint: only the stop writes one.
    constexpr int kMaxSteps = 1'000'000'000;
    const std::string args =
        Flags(folder, kMaxSteps) + " --log_every_steps=100 --save_checkpoints_steps=2000000000";
    std::vector<std::string> argv = {KUBETRAIN_RUNTIME_BINARY};
    for (absl::string_view arg : absl::StrSplit(args, ' ', absl::SkipEmpty())) {
      argv.emplace_back(arg);
    }
    const std::string stderr_log = (dir_ / (folder + ".stderr")).string();
    absl::StatusOr<std::unique_ptr<test_support::ChildProcess>> child =
        test_support::ChildProcess::Spawn(
            {.argv = argv, .output_path = stderr_log, .pipe_stdio = true});
    ASSERT_TRUE(child.ok()) << child.status();
    test_support::ChildProcess& trainer = **child;

    // Once it has trained some steps.
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    std::string log;
    int64_t logged_step = -1;
    while (logged_step < 0) {
      absl::StatusOr<std::string> line = trainer.ReadLine(deadline);
      ASSERT_TRUE(line.ok()) << line.status() << "\n" << log << Slurp(stderr_log);
      log += *line + "\n";
      logged_step = NumberAfter(*line, "Train [master/0], step ");
    }
    trainer.Signal(c.signal);
    absl::StatusOr<int> code = trainer.Wait(absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status() << ": still training after " << c.name;
    for (absl::StatusOr<std::string> line; (line = trainer.ReadLine(deadline)).ok();) {
      log += *line + "\n";
    }
    log += Slurp(stderr_log);
    EXPECT_FALSE(trainer.killed_by_signal()) << c.name << " killed it\n" << log;
    EXPECT_EQ(*code, c.exit_code) << log;

    const int64_t stopped = NumberAfter(log, "Stopped at step ");
    ASSERT_GE(stopped, logged_step) << log;
    ASSERT_LT(stopped, kMaxSteps) << log;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("Stopped at step ", stopped, " on ", c.name,
                                            ": checkpoint written to ", out.string())));
    EXPECT_THAT(log,
                HasSubstr(absl::StrCat("kubetrain-runtime train: stopped at step ", stopped, " on ",
                                       c.name, " (exit code ", c.exit_code, ", retryable)")));
    EXPECT_THAT(log, Not(HasSubstr("ERROR")));
    EXPECT_THAT(log, Not(HasSubstr("Eval, step")));
    EXPECT_THAT(log, Not(HasSubstr("Final metrics")));
    absl::StatusOr<std::optional<std::string>> latest = engine::LatestCheckpoint(out.string());
    ASSERT_TRUE(latest.ok()) << latest.status();
    ASSERT_TRUE(latest->has_value()) << log;
    EXPECT_EQ(fs::path(**latest).filename(), absl::StrCat("model.ckpt-", stopped));
    EXPECT_FALSE(fs::exists(out / "export"));

    // The restart (a paused trial resumed) trains on from there to its end.
    const std::string restart_log = (dir_ / (folder + ".restart")).string();
    ASSERT_EQ(RunBinary(Flags(folder, static_cast<int>(stopped) + 20), restart_log), kExitOk)
        << Slurp(restart_log);
    EXPECT_THAT(Slurp(restart_log),
                HasSubstr(absl::StrCat("Restored checkpoint at step ", stopped, " from ")));
    EXPECT_THAT(Slurp(restart_log),
                HasSubstr(absl::StrCat("Final metrics after ", stopped + 20, " steps")));
    EXPECT_TRUE(fs::exists(out / "export" / "model.pb"));
  }
}

// A TF_CONFIG of one task per role on held loopback ports, as task `self`
// 0. Nothing listens at the others' addresses, and no test running beside
// this one can serve there; `self`'s own port is let go for it to serve on.
class HeldCluster {
 public:
  HeldCluster(const std::vector<std::string>& roles, const std::string& self) {
    std::vector<std::string> entries;
    for (const std::string& role : roles) {
      absl::StatusOr<test_support::HeldPort> port = test_support::HeldPort::Take();
      EXPECT_TRUE(port.ok()) << port.status();
      if (!port.ok()) continue;
      entries.push_back(absl::StrCat("\"", role, "\":[\"", port->address(), "\"]"));
      if (role == self) port->Release();
      ports_.push_back(std::move(*port));
    }
    env_ = absl::StrCat("TF_CONFIG='{\"cluster\":{", absl::StrJoin(entries, ","),
                        "},\"task\":{\"type\":\"", self, "\",\"index\":0}}'");
  }
  // The environment assignment a RunBinary prefix takes.
  const std::string& Env() const { return env_; }

 private:
  std::vector<test_support::HeldPort> ports_;
  std::string env_;
};

// A chief recreated after its job trained to the end (its checkpoints kept
// on shared storage, its peers finished and gone) evaluates and exports
// alone; one with steps left still needs its peers.
TEST_F(RuntimeCliTest, AChiefWhoseCheckpointIsAtMaxStepsFinishesWithoutItsPeers) {
  const std::string log = (dir_ / "log").string();
  ASSERT_EQ(RunBinary(Flags("out", 5), log), kExitOk) << Slurp(log);
  ASSERT_TRUE(fs::exists(dir_ / "out" / "model.ckpt-5")) << Slurp(log);
  fs::remove_all(dir_ / "out" / "export");
  // Its ps is nowhere: nothing listens at its address.
  HeldCluster cluster({"master", "ps"}, "master");
  const std::string chief_of_a_ps_cluster = cluster.Env();
  ASSERT_EQ(RunBinary(Flags("out", 5) + " --connect_timeout_secs=3", log, chief_of_a_ps_cluster),
            kExitOk)
      << Slurp(log);
  EXPECT_THAT(Slurp(log), HasSubstr("The latest checkpoint is at step 5 (--max_steps=5): "
                                    "training is done; evaluating and exporting without the "
                                    "other tasks"));
  EXPECT_THAT(Slurp(log), HasSubstr("Restored checkpoint at step 5"));
  EXPECT_THAT(Slurp(log), HasSubstr("Final metrics after 5 steps"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "export")) << Slurp(log);
  // Steps left: the peers are needed, and a chief that cannot reach them
  // says so, retryably.
  EXPECT_EQ(RunBinary(Flags("out", 8) + " --connect_timeout_secs=3", log, chief_of_a_ps_cluster),
            kExitRetryable)
      << Slurp(log);
  EXPECT_THAT(Slurp(log), Not(HasSubstr("training is done")));
}

// A worker or ps started again beside such a chief (the operator brings
// completed peers back for a restarted chief) ends at once, without waiting
// for anyone; with steps left it waits for its peers.
TEST_F(RuntimeCliTest, AWorkerOrPsOfAJobTrainedToTheEndEndsAtOnce) {
  const std::string log = (dir_ / "log").string();
  ASSERT_EQ(RunBinary(Flags("out", 5), log), kExitOk) << Slurp(log);
  for (const char* task : {"worker", "ps"}) {
    SCOPED_TRACE(task);
    // No peer listens anywhere: waiting for one would fail after 3 s.
    HeldCluster cluster({"master", "worker", "ps"}, task);
    const std::string tf_config = cluster.Env();
    ASSERT_EQ(RunBinary(Flags("out", 5) + " --connect_timeout_secs=3", log, tf_config), kExitOk)
        << Slurp(log);
    EXPECT_THAT(Slurp(log), HasSubstr(absl::StrCat(
                                "The latest checkpoint is at step 5 (--max_steps=5): training is "
                                "done; nothing left for ",
                                task, " 0 to do")));
    EXPECT_EQ(RunBinary(Flags("out", 8) + " --connect_timeout_secs=3", log, tf_config),
              kExitRetryable)
        << Slurp(log);
    EXPECT_THAT(Slurp(log), Not(HasSubstr("training is done")));
  }
}

// ---- Threads that fit the container (engine/cpu_budget.h) -----------------

// Training flags without --threads, on the CPU.
std::string UnpinnedTrainArgs(const fs::path& data) {
  return "train --train_data_paths=" + data.string() +
         " --max_steps=3 --batch_size=20 --hidden1=8 --hidden2=4 --seed=5 --eval_every_secs=0 "
         "--device=cpu";
}

// The CPUs this process may run on.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// The start-up line a run with `budget` prints.
std::string ThreadsLine(const cpu_budget::CpuBudget& budget) {
  return absl::StrCat(budget.threads,
                      budget.threads == 1 ? " compute thread (" : " compute threads (",
                      budget.source, ")");
}

TEST_F(RuntimeCliTest, ThreadsFollowTheFlagTheRequestAndTheAffinity) {
  const std::string log = (dir_ / "log").string();
  const std::string args = UnpinnedTrainArgs(dir_ / "train.csv");
  // This test's own cgroup may limit it already; its children inherit that.
  const std::optional<double> limit = cpu_budget::ReadCgroupCpuLimit();
  const int cpus = static_cast<int>(AllowedCpus().size());

  // No request unless the test gives one (this test may run in a pod).
  const std::string no_request = std::string("env -u ") + cpu_budget::kCpuRequestEnv;
  ASSERT_EQ(RunBinary(args + " --threads=3", log), kExitOk) << Slurp(log);
  EXPECT_THAT(Slurp(log), HasSubstr("), 3 compute threads (--threads)"));

  ASSERT_EQ(RunBinary(args, log, no_request), kExitOk) << Slurp(log);
  EXPECT_THAT(Slurp(log),
              HasSubstr(ThreadsLine(cpu_budget::ChooseCpuBudget(limit, std::nullopt, cpus))));

  // One CPU of affinity: one thread, whatever the machine has.
  const std::string pinned = no_request + " taskset -c " + std::to_string(AllowedCpus().front());
  ASSERT_EQ(RunBinary(args, log, pinned), kExitOk) << Slurp(log);
  EXPECT_THAT(Slurp(log),
              HasSubstr(ThreadsLine(cpu_budget::ChooseCpuBudget(limit, std::nullopt, 1))));
  EXPECT_THAT(Slurp(log), HasSubstr(", 1 compute thread ("));

  // The request the operator passes (downward API, millicores).
  ASSERT_EQ(RunBinary(args, log, std::string(cpu_budget::kCpuRequestEnv) + "=1000"), kExitOk)
      << Slurp(log);
  EXPECT_THAT(Slurp(log), HasSubstr(ThreadsLine(cpu_budget::ChooseCpuBudget(limit, 1.0, cpus))));
}

// A child cgroup of this process's own with a CPU limit, where the machine
// lets a test make one (root, a writable cpu controller: cgroup v1's
// cfs quota, or v2's cpu.max); removed with the object.
class CpuLimitedCgroup {
 public:
  static std::unique_ptr<CpuLimitedCgroup> Make(double cpus, std::string* why) {
    std::ifstream membership("/proc/self/cgroup");
    std::string line, v1_path, v2_path;
    bool v1_cpu = false;
    while (std::getline(membership, line)) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (parts.size() != 3) continue;
      if (parts[0] == "0" && parts[1].empty()) v2_path = parts[2];
      for (absl::string_view c : absl::StrSplit(parts[1], ',')) {
        if (c == "cpu") {
          v1_cpu = true;
          v1_path = parts[2];
        }
      }
    }
    static int made = 0;
    const std::string name = absl::StrCat("kubetrain-cpu-test-", ::getpid(), "-", ++made);
    const long quota = std::lround(cpus * 100000);
    std::error_code error;
    if (v1_cpu) {
      for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
        if (!fs::is_directory(mount, error)) continue;
        auto group = std::unique_ptr<CpuLimitedCgroup>(
            new CpuLimitedCgroup(fs::path(std::string(mount) + v1_path) / name));
        if (!fs::create_directory(group->dir_, error)) {
          *why = "cannot make " + group->dir_.string() + ": " + error.message();
          group->dir_.clear();
          return nullptr;
        }
        if (!group->Write("cpu.cfs_period_us", "100000") ||
            !group->Write("cpu.cfs_quota_us", std::to_string(quota))) {
          *why = "cannot set the CFS quota of " + group->dir_.string();
          return nullptr;
        }
        return group;
      }
    }
    const fs::path parent = fs::path("/sys/fs/cgroup" + v2_path);
    if (!fs::exists(parent / "cgroup.subtree_control", error)) {
      *why = "no cgroup v1 cpu controller and no cgroup v2 hierarchy at /sys/fs/cgroup";
      return nullptr;
    }
    auto group = std::unique_ptr<CpuLimitedCgroup>(new CpuLimitedCgroup(parent / name));
    if (!fs::create_directory(group->dir_, error)) {
      *why = "cannot make " + group->dir_.string() + ": " + error.message();
      group->dir_.clear();
      return nullptr;
    }
    if (!group->Write("cpu.max", std::to_string(quota) + " 100000")) {
      *why = "the cpu controller is not enabled for " + group->dir_.string() +
             " (its parent's cgroup.subtree_control lacks cpu)";
      return nullptr;
    }
    return group;
  }
  ~CpuLimitedCgroup() {
    std::error_code error;
    if (!dir_.empty()) fs::remove(dir_, error);  // rmdir: empty once its process exited
  }
  // What to put before a command so that it runs in this cgroup.
  std::string Prefix() const {
    return "sh -c 'echo $$ > " + (dir_ / "cgroup.procs").string() + " && exec \"$0\" \"$@\"'";
  }

 private:
  explicit CpuLimitedCgroup(fs::path dir) : dir_(std::move(dir)) {}
  bool Write(const std::string& file, const std::string& value) const {
    std::ofstream out(dir_ / file);
    out << value << std::flush;
    return static_cast<bool>(out);
  }
  fs::path dir_;
};

TEST_F(RuntimeCliTest, ThreadsFitTheCgroupCpuLimit) {
  std::string why;
  std::unique_ptr<CpuLimitedCgroup> one_cpu = CpuLimitedCgroup::Make(1.0, &why);
  if (one_cpu == nullptr) GTEST_SKIP() << "no cgroup with a CPU limit can be made here: " << why;
  const std::string log = (dir_ / "log").string();
  const std::string args = UnpinnedTrainArgs(dir_ / "train.csv");
  ASSERT_EQ(RunBinary(args, log, one_cpu->Prefix()), kExitOk) << Slurp(log);
  EXPECT_THAT(Slurp(log), HasSubstr(", 1 compute thread (cgroup CPU limit ")) << Slurp(log);
  if (cpu_budget::ReadCgroupCpuLimit()) GTEST_SKIP() << "this test's own cgroup has a CPU limit";
  EXPECT_THAT(Slurp(log), HasSubstr(", 1 compute thread (cgroup CPU limit 1 CPU)"));

  std::unique_ptr<CpuLimitedCgroup> one_and_a_half = CpuLimitedCgroup::Make(1.5, &why);
  ASSERT_NE(one_and_a_half, nullptr) << why;
  ASSERT_EQ(RunBinary(args, log, one_and_a_half->Prefix()), kExitOk) << Slurp(log);
  const int cpus = static_cast<int>(AllowedCpus().size());
  EXPECT_THAT(Slurp(log),
              HasSubstr(ThreadsLine(cpu_budget::ChooseCpuBudget(1.5, std::nullopt, cpus))));
}

}  // namespace
}  // namespace kubetrain::runtime
