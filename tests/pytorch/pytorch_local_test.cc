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

}  // namespace
}  // namespace kubetrain::local
