// PyTorch on the local backend, end to end: the real `kubetrain` CLI and its
// background controller run a torch.distributed trainer (Debian's
// python3-torch, gloo on CPU) as master + 2 workers, from a Kubeflow
// PyTorchJob manifest and from a tuning TrainingJob. The trainer is
// examples/pytorch/ddp_fmnist.py: it reads only the rendezvous environment.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/local/job_store.h"

namespace kubetrain::local {
namespace {

using ::testing::HasSubstr;

// The single-process run and the 3-rank run add the same float32 numbers in
// another order (gloo's all-reduce, per-rank means): their step losses agree
// to about 1e-7; a rank training on the wrong slice, or a gradient not
// averaged, is off by more than 1e-2.
constexpr double kLossTolerance = 1e-5;

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

class PyTorchLocalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // CI installs python3-torch (scripts/install-deps.sh): its absence is a
    // broken setup, not a reason to skip.
    ASSERT_EQ(std::system(PYTHON " -c 'import torch.distributed' 2>/dev/null"), 0)
        << PYTHON " cannot import torch: scripts/install-deps.sh installs python3-torch";
  }

  void TearDown() override {
    int pid = 0;
    std::istringstream(ReadFile(home_.path() + "/controller.lock")) >> pid;
    if (pid > 0) kill(pid, SIGKILL);  // no controller outlives the test
  }

  RunResult Run(const std::string& command_line) {
    const std::string out = work_.path() + "/cmd.out";
    const std::string err = work_.path() + "/cmd.err";
    const std::string command =
        absl::StrCat("KUBETRAIN_HOME=", Quote(home_.path()), " ", command_line, " >", Quote(out),
                     " 2>", Quote(err), " </dev/null");
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out), ReadFile(err)};
  }

  RunResult Kubetrain(const std::vector<std::string>& args) {
    std::string command = Quote(KUBETRAIN_CLI);
    for (const std::string& a : args) absl::StrAppend(&command, " ", Quote(a));
    return Run(command);
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = work_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  v1::TrainingJob Job(const std::string& name) {
    auto store = JobStore::Open(home_.path() + "/jobs.db");
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return {};
    auto job = (*store)->GetJob(name);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::TrainingJob();
  }

  nlohmann::json Curve(const std::string& dir) {
    return nlohmann::json::parse(ReadFile(dir + "/curve.json"), nullptr, false);
  }

  // Every rank ends with the same parameters, bit for bit: DDP starts them
  // equal (rank 0's broadcast) and applies the same averaged gradients.
  void ExpectRanksIdentical(const std::string& dir, int ranks) {
    const std::string rank0 = ReadFile(dir + "/weights-rank0.bin");
    // 784*64 + 64 + 64*10 + 10 float32 parameters.
    ASSERT_EQ(rank0.size(), 4u * (784 * 64 + 64 + 64 * 10 + 10)) << dir;
    for (int r = 1; r < ranks; ++r) {
      EXPECT_TRUE(ReadFile(absl::StrCat(dir, "/weights-rank", r, ".bin")) == rank0)
          << "rank " << r << " ended with other weights than rank 0 in " << dir;
    }
  }

  test_support::TempDir home_;
  test_support::TempDir work_;
};

TEST_F(PyTorchLocalTest, KubeflowPyTorchJobTrainsAsMasterAndTwoWorkersLikeOneProcess) {
  const std::string out = work_.path() + "/ddp";
  const std::string reference = work_.path() + "/reference";
  RunResult single = Run(
      absl::StrCat(PYTHON, " ", Quote(DDP_SCRIPT), " --single --output_path=", Quote(reference)));
  ASSERT_EQ(single.code, 0) << single.out << single.err;

  // Kubeflow's shape: a Master and 2 Workers with the default restart policy.
  const std::string container = absl::StrCat(
      "          containers:\n"
      "            - name: pytorch\n"
      "              image: example.com/fmnist-ddp:1.0\n"
      "              command: [",
      PYTHON, ", ", DDP_SCRIPT, "]\n              args: [--output_path=", out, "]\n");
  const std::string manifest =
      Write("pytorchjob.yaml", absl::StrCat("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n"
                                            "metadata:\n  name: fmnist-ddp\nspec:\n"
                                            "  pytorchReplicaSpecs:\n"
                                            "    Master:\n      replicas: 1\n      template:\n"
                                            "        spec:\n",
                                            container,
                                            "    Worker:\n      replicas: 2\n      template:\n"
                                            "        spec:\n",
                                            container));
  RunResult r = Kubetrain(
      {"jobs", "submit", "training", "fmnist_ddp", "--local", "--config", manifest, "--wait"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("a kubeflow.org/v1 PyTorchJob, run as a TrainingJob:\n"));
  EXPECT_THAT(r.out, HasSubstr("Job [fmnist_ddp] ended SUCCEEDED"));
  v1::TrainingJob job = Job("fmnist_ddp");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  EXPECT_EQ(job.spec().training_input().framework(), v1::TrainingInput::PYTORCH);

  // Each rank saw the loopback rendezvous; rank 0 is the master.
  RunResult logs = Kubetrain({"jobs", "stream-logs", "fmnist_ddp", "--local"});
  EXPECT_EQ(logs.code, 0) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("rank 0 of 3: MASTER_ADDR=127.0.0.1"));
  EXPECT_THAT(logs.out, HasSubstr("rank 2 of 3: MASTER_ADDR=127.0.0.1"));

  ExpectRanksIdentical(out, 3);
  const nlohmann::json ddp = Curve(out);
  const nlohmann::json one = Curve(reference);
  ASSERT_TRUE(ddp.is_object() && one.is_object());
  EXPECT_EQ(ddp["world_size"], 3);
  const std::vector<double> ddp_loss = ddp["loss"].get<std::vector<double>>();
  const std::vector<double> one_loss = one["loss"].get<std::vector<double>>();
  ASSERT_EQ(ddp_loss.size(), 300u);
  ASSERT_EQ(one_loss.size(), 300u);
  double max_difference = 0;
  for (size_t i = 0; i < ddp_loss.size(); ++i) {
    max_difference = std::max(max_difference, std::fabs(ddp_loss[i] - one_loss[i]));
  }
  EXPECT_LT(max_difference, kLossTolerance);
  std::cout << "3 ranks vs 1 process, 300 steps of global batch 96: max |loss difference| "
            << max_difference << "; test accuracy " << ddp["accuracy"] << " vs " << one["accuracy"]
            << "\n";
  // And it learned: from ln(10) ~ 2.3 to a fraction of it, and most of the
  // test set right.
  EXPECT_GT(ddp_loss.front(), 2.0);
  double last = 0;
  for (size_t i = ddp_loss.size() - 20; i < ddp_loss.size(); ++i) last += ddp_loss[i] / 20;
  EXPECT_LT(last, 1.0);
  EXPECT_GT(ddp["accuracy"].get<double>(), 0.7);
  EXPECT_NEAR(ddp["accuracy"].get<double>(), one["accuracy"].get<double>(), 1e-3);
}

TEST_F(PyTorchLocalTest, TuningTheSameScriptEndsSucceededWithAnObjectivePerTrial) {
  const std::string out = work_.path() + "/study";
  const std::string command = absl::StrCat("{containerCommand: [", PYTHON, ", ", DDP_SCRIPT, "]}");
  const std::string job_file =
      Write("study.yaml",
            absl::StrCat(
                "apiVersion: kubetrain.io/v1\nkind: TrainingJob\nmetadata: {name: fmnist_study}\n"
                "spec:\n  trainingInput:\n    framework: PYTORCH\n    scaleTier: CUSTOM\n"
                "    masterType: standard\n    workerType: standard\n    workerCount: 2\n"
                "    masterConfig: ",
                command, "\n    workerConfig: ", command, "\n    args: [--output_path=", out,
                ", --steps=100]\n",
                "    hyperparameters:\n      goal: MAXIMIZE\n      maxTrials: 2\n"
                "      maxParallelTrials: 2\n      hyperparameterMetricTag: accuracy\n"
                "      params:\n        - {parameterName: learning_rate, type: DOUBLE, "
                "minValue: 0.01, maxValue: 0.5, scaleType: UNIT_LOG_SCALE}\n"));
  RunResult r = Kubetrain(
      {"jobs", "submit", "training", "fmnist_study", "--local", "--config", job_file, "--wait"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  v1::TrainingJob job = Job("fmnist_study");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  const v1::TrainingOutput& output = job.status().training_output();
  EXPECT_EQ(output.completed_trial_count(), 2);
  ASSERT_EQ(output.trials_size(), 2);
  for (const v1::HyperparameterOutput& trial : output.trials()) {
    EXPECT_EQ(trial.state(), v1::SUCCEEDED) << trial.trial_id() << ": " << trial.error_message();
    ASSERT_TRUE(trial.has_final_metric()) << "trial " << trial.trial_id();
    EXPECT_EQ(trial.final_metric().training_step(), 100);
    // Test accuracy, from the trial's own rank 0 (its output folder).
    const nlohmann::json curve = Curve(out + "/" + trial.trial_id());
    ASSERT_TRUE(curve.is_object()) << "trial " << trial.trial_id();
    EXPECT_NEAR(trial.final_metric().objective_value(), curve["accuracy"].get<double>(), 1e-6);
    EXPECT_GT(trial.final_metric().objective_value(), 0.1);  // better than chance
    EXPECT_EQ(curve["world_size"], 3);
    ExpectRanksIdentical(out + "/" + trial.trial_id(), 3);
    std::cout << "trial " << trial.trial_id() << ": learning_rate "
              << trial.hyperparameters().at("learning_rate") << ", objective (accuracy) "
              << trial.final_metric().objective_value() << "\n";
  }
  // Best first.
  EXPECT_GE(output.trials(0).final_metric().objective_value(),
            output.trials(1).final_metric().objective_value());
}

// An elastic PyTorchJob as Kubeflow's examples write it (workers only,
// elasticPolicy with the c10d backend, restartPolicy OnFailure): three
// torchrun nodes of examples/pytorch/elastic_fmnist.py, min 2, max 3. A node
// is killed whole, as a lost pod is (its supervisor, torchrun and the
// trainer), twice. The first time the controller recreates it (backoffLimit
// 1) and it joins again; the second time the budget is spent, and the other
// two train on without it. Each time training resumes from the last
// checkpoint, and the job ends SUCCEEDED at the last step.
TEST_F(PyTorchLocalTest, AnElasticJobTrainsOnWhenAWorkerIsKilledAndEndsSucceeded) {
  const std::string checkpoints = work_.path() + "/elastic";
  constexpr int kSteps = 3000;
  // Debian 12's torchrun (torch 1.13 on Python 3.11) cannot read its own
  // default "0" for --redirects and --tee, so the command gives both.
  const std::string manifest = Write(
      "elastic.yaml",
      absl::StrCat("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n"
                   "  name: fmnist-elastic\nspec:\n"
                   "  runPolicy: {backoffLimit: 1}\n"
                   "  elasticPolicy:\n    rdzvBackend: c10d\n    minReplicas: 2\n"
                   "    maxReplicas: 3\n    maxRestarts: 3\n"
                   "    rdzvConf: [{key: last_call_timeout, value: \"3\"}]\n"
                   "  pytorchReplicaSpecs:\n    Worker:\n      replicas: 3\n"
                   "      restartPolicy: OnFailure\n      template:\n        spec:\n"
                   "          containers:\n            - name: pytorch\n"
                   "              image: example.com/fmnist-elastic:1.0\n"
                   "              command: [/usr/bin/torchrun, --redirects, \"1\", --tee, \"1\", "
                   "--monitor_interval, \"1\", ",
                   ELASTIC_SCRIPT, "]\n              args: [--checkpoint_dir=", checkpoints,
                   ", --steps=", kSteps, "]\n"));
  RunResult r =
      Kubetrain({"jobs", "submit", "training", "fmnist_elastic", "--local", "--config", manifest});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("spec.elasticPolicy.minReplicas -> spec.elasticPolicy.minReplicas: 2"));

  // What rank 0 recorded, in order: each start (the step it resumed from and
  // the group's size), each checkpoint, the end.
  struct Progress {
    std::vector<std::pair<int, int>> starts;  // step, nodes
    int checkpoint = 0;
    int end = 0;
    double accuracy = 0;
  };
  auto progress = [&] {
    Progress p;
    std::istringstream lines(ReadFile(checkpoints + "/progress.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
      if (!record.is_object()) continue;  // a line being written
      if (record["event"] == "start") {
        p.starts.emplace_back(record["step"].get<int>(), record["world_size"].get<int>());
      } else if (record["event"] == "checkpoint") {
        p.checkpoint = record["step"].get<int>();
      } else if (record["event"] == "end") {
        p.end = record["step"].get<int>();
        p.accuracy = record["accuracy"].get<double>();
      }
    }
    return p;
  };
  auto store = JobStore::Open(home_.path() + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  // Worker 0 became the master; the node killed is worker-1, the third.
  auto kill_worker_1 = [&] {
    auto replicas = (*store)->ListReplicas("fmnist_elastic");
    int pid = 0;
    for (const ReplicaRecord& replica : replicas.ok() ? *replicas : std::vector<ReplicaRecord>{}) {
      if (replica.key.role == api::Role::kWorker && replica.key.index == 1) pid = replica.pid;
    }
    EXPECT_GT(pid, 1) << (replicas.ok() ? "no worker-1" : replicas.status().ToString());
    return pid > 1 && kill(-pid, SIGKILL) == 0;
  };

  // Three nodes train; the first kill.
  ASSERT_TRUE(
      test_support::WaitUntil([&] { return progress().checkpoint >= 200; }, absl::Seconds(180)))
      << ReadFile(home_.path() + "/controller.log");
  ASSERT_TRUE(kill_worker_1());
  const int first_kill = progress().checkpoint;
  // Recreated, it joins: three nodes again, 200 steps further on.
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        const Progress p = progress();
        return p.starts.size() >= 2 && p.starts.back().second == 3 &&
               p.checkpoint >= p.starts.back().first + 200;
      },
      absl::Seconds(180)))
      << ReadFile(home_.path() + "/controller.log");
  ASSERT_TRUE(kill_worker_1());
  const Progress before = progress();
  const int second_kill = before.checkpoint;
  ASSERT_LT(second_kill, kSteps) << "training ended before the second kill";

  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        const v1::State state = Job("fmnist_elastic").status().state();
        return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
      },
      absl::Seconds(300)))
      << ReadFile(home_.path() + "/controller.log");
  v1::TrainingJob job = Job("fmnist_elastic");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  EXPECT_EQ(job.status().restart_count(), 1);

  const Progress p = progress();
  ASSERT_GT(p.starts.size(), before.starts.size()) << "no rendezvous after the second kill";
  EXPECT_EQ(p.starts.front(), std::make_pair(0, 3));
  std::string history;
  for (size_t i = 1; i < p.starts.size(); ++i) {
    EXPECT_GT(p.starts[i].first, 0) << "start " << i << " went back to step 0";
    EXPECT_GE(p.starts[i].first, p.starts[i - 1].first) << "start " << i << " went back";
    EXPECT_GE(p.starts[i].second, 2) << "a group smaller than minReplicas trained";
    absl::StrAppend(&history, " step ", p.starts[i].first, " with ", p.starts[i].second, " nodes;");
  }
  // Resumed from the checkpoint each kill left (one may have been written
  // as the kill landed), and the last stretch with the two left.
  EXPECT_GE(p.starts[1].first, first_kill);
  EXPECT_LE(p.starts[1].first, first_kill + 50);
  EXPECT_GE(p.starts.back().first, second_kill);
  EXPECT_EQ(p.starts.back().second, 2);
  EXPECT_EQ(p.end, kSteps);
  EXPECT_GT(p.accuracy, 0.75);
  std::cout << "killed worker-1 after steps " << first_kill << " and " << second_kill
            << "; rendezvous again at" << history << " ended at step " << p.end
            << ", test accuracy " << p.accuracy << "\n";

  // The controller said why it went on, each time.
  auto events = (*store)->Events("fmnist_elastic");
  ASSERT_TRUE(events.ok()) << events.status();
  std::string said;
  for (const StoredEvent& event : *events) {
    if (event.reason == "Restarting" || event.reason == "ElasticNodeLost") {
      absl::StrAppend(&said, event.reason, ": ", event.message, "\n");
    }
  }
  EXPECT_THAT(said, HasSubstr("Restarting: worker-1 "));
  EXPECT_THAT(said, HasSubstr("; restarting (restart 1 of 1); meanwhile the elastic group goes "
                              "on with 2 of 3 nodes (elasticPolicy.minReplicas 2)"));
  EXPECT_THAT(said, HasSubstr("ElasticNodeLost: worker-1 "));
  EXPECT_THAT(said, HasSubstr("; backoffLimit 1 reached: not recreated; the elastic group goes on "
                              "with 2 of 3 nodes (elasticPolicy.minReplicas 2)"));
}

}  // namespace
}  // namespace kubetrain::local
