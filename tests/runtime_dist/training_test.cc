// Distributed training across real processes over loopback: the runtime's
// `train` (dist::TrainMain, in runtime_dist_trainer) started once per task
// with TF_CONFIG, as the operator's local backend does. Fashion-MNIST MLP.

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/child_process.h"
#include "common/testing/held_port.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::dist::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

struct TaskSpec {
  std::string type;
  int index;
};

// One cluster run: a process per task, TF_CONFIG on loopback ports.
class ClusterRun {
 public:
  ClusterRun(const std::filesystem::path& dir, const std::map<std::string, int>& shape,
             const std::vector<std::string>& flags, const std::string& tag) {
    // Every port stays held until all are drawn: a port bound and released
    // at once may be the kernel's next pick too, and a TF_CONFIG naming one
    // address twice is refused.
    std::vector<test_support::HeldPort> held;
    std::map<std::string, std::vector<std::string>> cluster;
    for (const auto& [type, n] : shape) {
      for (int i = 0; i < n; ++i) {
        absl::StatusOr<test_support::HeldPort> port = test_support::HeldPort::Take();
        EXPECT_TRUE(port.ok()) << port.status();
        if (!port.ok()) return;
        cluster[type].push_back(port->address());
        held.push_back(std::move(*port));
        tasks_.push_back({type, i});
      }
    }
    for (test_support::HeldPort& port : held) port.Release();
    std::string cluster_json;
    for (const auto& [type, addrs] : cluster) {
      absl::StrAppend(&cluster_json, cluster_json.empty() ? "" : ",", "\"", type, "\":[\"",
                      absl::StrJoin(addrs, "\",\""), "\"]");
    }
    for (const TaskSpec& t : tasks_) {
      std::string tf_config =
          absl::StrCat("{\"cluster\":{", cluster_json, "},\"task\":{\"type\":\"", t.type,
                       "\",\"index\":", t.index, "}}");
      setenv("TF_CONFIG", tf_config.c_str(), 1);
      std::vector<std::string> argv = {TRAINER_PATH};
      argv.insert(argv.end(), flags.begin(), flags.end());
      auto child = test_support::ChildProcess::Spawn(
          {.argv = argv,
           .output_path = (dir / absl::StrCat(tag, "_", t.type, t.index, ".stderr")).string(),
           .pipe_stdio = true});
      EXPECT_TRUE(child.ok()) << child.status();
      children_.push_back(std::move(*child));
    }
    unsetenv("TF_CONFIG");
  }

  test_support::ChildProcess& task(const std::string& type, int index) {
    for (size_t i = 0; i < tasks_.size(); ++i) {
      if (tasks_[i].type == type && tasks_[i].index == index) return *children_[i];
    }
    std::abort();
  }
  const std::vector<TaskSpec>& tasks() const { return tasks_; }

 private:
  std::vector<TaskSpec> tasks_;
  std::vector<std::unique_ptr<test_support::ChildProcess>> children_;
};

// Every stdout line until the process closes it.
std::vector<std::string> Lines(test_support::ChildProcess& c) {
  std::vector<std::string> lines;
  for (;;) {
    auto line = c.ReadLine(absl::Now() + absl::Seconds(300));
    if (!line.ok()) return lines;
    lines.push_back(*line);
  }
}

std::optional<double> FinalAccuracy(const std::vector<std::string>& lines) {
  static const std::regex re(
      R"(Final metrics after \d+ steps, loss: [0-9.]+, accuracy: ([0-9.]+))");
  for (const auto& l : lines) {
    std::smatch m;
    if (std::regex_search(l, m, re)) return std::stod(m[1]);
  }
  return std::nullopt;
}

// step -> mean training loss of the window ending there.
std::map<int, double> LossCurve(const std::vector<std::string>& lines) {
  static const std::regex re(R"(Train \[[a-z]+/\d+\], step (\d+): loss: ([0-9.]+))");
  std::map<int, double> curve;
  for (const auto& l : lines) {
    std::smatch m;
    if (std::regex_search(l, m, re)) curve[std::stoi(m[1])] = std::stod(m[2]);
  }
  return curve;
}

class DistributedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kData) + "/train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed";
    }
  }

  std::vector<std::string> Flags(int batch, int max_steps, std::vector<std::string> more) {
    std::vector<std::string> flags = {
        absl::StrCat("--train_data_paths=", kData, "/train-images-idx3-ubyte.gz"),
        absl::StrCat("--eval_data_paths=", kData, "/t10k-images-idx3-ubyte.gz"),
        absl::StrCat("--batch_size=", batch),
        absl::StrCat("--max_steps=", max_steps),
        "--threads=1",
        "--eval_every_secs=0",
        "--seed=7",
        "--connect_timeout_secs=60"};
    // CMake runs this suite once per CPU kernel path (the build's default,
    // then blas).
    if (const char* kernels = std::getenv("KUBETRAIN_TEST_CPU_KERNELS")) {
      flags.push_back(absl::StrCat("--cpu_kernels=", kernels));
    }
    flags.insert(flags.end(), more.begin(), more.end());
    return flags;
  }

  // Waits for the master, then gives every other task 10 s to exit on its
  // own. Returns the master's stdout.
  std::vector<std::string> ExpectAllExitZero(ClusterRun& run, const std::string& master) {
    test_support::ChildProcess& m = run.task(master, 0);
    std::vector<std::string> lines = Lines(m);
    auto code = m.Wait(absl::Now() + absl::Seconds(300));
    EXPECT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(code.value_or(-1), 0) << m.Log();
    const absl::Time limit = absl::Now() + absl::Seconds(10);
    for (const TaskSpec& t : run.tasks()) {
      if (t.type == master) continue;
      test_support::ChildProcess& c = run.task(t.type, t.index);
      auto other = c.Wait(limit);
      EXPECT_TRUE(other.ok()) << t.type << " " << t.index
                              << " did not exit within 10 s of the master";
      EXPECT_EQ(other.value_or(-1), 0) << t.type << " " << t.index << ": " << c.Log();
    }
    return lines;
  }

  test_support::TempDir folder_{"kubetrain-runtime-dist-training"};
  const std::filesystem::path dir_ = folder_.path();
};

class ParameterServerTrainingTest : public DistributedTrainingTest,
                                    public ::testing::WithParamInterface<bool> {};

TEST_P(ParameterServerTrainingTest, MasterTwoWorkersOnePsReach085) {
  const bool sync = GetParam();
  // Sync: a global step is one gradient from each of the 3 replicas. Async:
  // every push is a global step, so the same data takes 3x the steps; async
  // gets a third more on top, because its stale gradients leave the last
  // weights noisier (at 3x, runs ended at 0.839-0.849 about one time in six).
  std::vector<std::string> more = {absl::StrCat("--output_path=", (dir_ / "out").string()),
                                   "--log_every_steps=300", "--save_checkpoints_secs=600"};
  if (sync) more.push_back("--sync_replicas");
  ClusterRun run(dir_, {{"master", 1}, {"worker", 2}, {"ps", 1}},
                 Flags(128, sync ? 900 : 3600, more), sync ? "sync" : "async");
  std::vector<std::string> lines = ExpectAllExitZero(run, "master");
  std::optional<double> accuracy = FinalAccuracy(lines);
  ASSERT_TRUE(accuracy.has_value()) << absl::StrJoin(lines, "\n");
  std::cout << (sync ? "sync" : "async") << " ps: test accuracy " << *accuracy << std::endl;
  EXPECT_GE(*accuracy, 0.85) << absl::StrJoin(lines, "\n");
}

INSTANTIATE_TEST_SUITE_P(SyncAndAsync, ParameterServerTrainingTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "sync" : "async"; });

TEST_F(DistributedTrainingTest, ThreeAllReduceWorkersFollowTheSingleProcessCurve) {
  // Same global batch (3 x 64 = 192), same seed, same steps.
  const std::vector<std::string> common = {"--log_every_steps=50"};
  ClusterRun single(dir_, {{"master", 1}}, Flags(192, 300, common), "single");
  std::vector<std::string> single_lines = ExpectAllExitZero(single, "master");
  ClusterRun three(dir_, {{"worker", 3}}, Flags(64, 300, common), "allreduce");
  std::vector<std::string> three_lines;
  {
    test_support::ChildProcess& chief = three.task("worker", 0);
    three_lines = Lines(chief);
    for (int i = 0; i < 3; ++i) {
      auto code = three.task("worker", i).Wait(absl::Now() + absl::Seconds(300));
      EXPECT_EQ(code.value_or(-1), 0) << three.task("worker", i).Log();
    }
  }
  std::map<int, double> a = LossCurve(single_lines), b = LossCurve(three_lines);
  ASSERT_EQ(a.size(), 6u) << absl::StrJoin(single_lines, "\n");
  ASSERT_EQ(b.size(), 6u) << absl::StrJoin(three_lines, "\n");
  // The replicas see other examples than the single process (each its own
  // shard), so the curves agree only up to sampling noise of a 50-step mean.
  for (const auto& [step, loss] : a) {
    ASSERT_TRUE(b.count(step)) << "step " << step;
    EXPECT_NEAR(b[step], loss, 0.05) << "window ending at step " << step;
  }
  std::cout << "loss windows (single vs 3 replicas):";
  for (const auto& [step, loss] : a) std::cout << " " << step << ": " << loss << "/" << b[step];
  std::cout << std::endl;
  EXPECT_NEAR(*FinalAccuracy(three_lines), *FinalAccuracy(single_lines), 0.02);
}

TEST_F(DistributedTrainingTest, OverlappedAllReduceWritesTheSameCheckpointAsSequential) {
  // Over gRPC (the shared-memory transport is covered by the tests above,
  // which overlap by default), with 64 KiB buckets so the MLP's gradients
  // make several, some all-reduced while the backward pass runs. Three
  // replicas: with two, a+b is the same sum in any order.
  std::map<bool, std::string> checkpoint;
  for (bool overlap : {true, false}) {
    const std::string tag = overlap ? "overlap" : "sequential";
    const std::string out = (dir_ / tag).string();
    ClusterRun run(
        dir_, {{"worker", 3}},
        Flags(64, 60,
              {"--output_path=" + out, "--log_every_steps=30", "--save_checkpoints_secs=100000",
               "--transport=grpc", "--allreduce_bucket_kib=64",
               absl::StrCat("--allreduce_overlap=", overlap)}),
        tag);
    std::vector<std::string> lines = Lines(run.task("worker", 0));
    for (int i = 0; i < 3; ++i) {
      auto code = run.task("worker", i).Wait(absl::Now() + absl::Seconds(300));
      EXPECT_EQ(code.value_or(-1), 0) << run.task("worker", i).Log();
    }
    std::ifstream in(out + "/model.ckpt-60", std::ios::binary);
    ASSERT_TRUE(in) << tag << ": no final checkpoint\n" << absl::StrJoin(lines, "\n");
    checkpoint[overlap].assign(std::istreambuf_iterator<char>(in), {});
  }
  // Variables and Adam's slots, bit for bit.
  EXPECT_GT(checkpoint[true].size(), 1000000u);
  EXPECT_TRUE(checkpoint[true] == checkpoint[false]);
}

TEST_F(DistributedTrainingTest, KilledWorkerGivesRetryableExitAndTheRestartResumes) {
  const std::string out = (dir_ / "out").string();
  const std::vector<std::string> flags = Flags(
      64, 400, {"--output_path=" + out, "--log_every_steps=50", "--save_checkpoints_steps=50"});
  {
    ClusterRun run(dir_, {{"worker", 3}}, flags, "first");
    test_support::ChildProcess& chief = run.task("worker", 0);
    // Past two checkpoints, kill worker 2.
    for (;;) {
      auto line = chief.ReadLine(absl::Now() + absl::Seconds(300));
      ASSERT_TRUE(line.ok()) << line.status() << chief.Log();
      if (line->find("step 150:") != std::string::npos) break;
    }
    run.task("worker", 2).Kill();
    for (int i = 0; i < 2; ++i) {
      test_support::ChildProcess& c = run.task("worker", i);
      auto code = c.Wait(absl::Now() + absl::Seconds(30));
      ASSERT_TRUE(code.ok()) << "worker " << i << " hangs after its peer died";
      EXPECT_EQ(*code, 138) << c.Log();
      EXPECT_THAT(c.Log(), HasSubstr("retryable"));
    }
  }
  ClusterRun again(dir_, {{"worker", 3}}, flags, "restart");
  std::vector<std::string> lines = Lines(again.task("worker", 0));
  for (int i = 0; i < 3; ++i) {
    auto code = again.task("worker", i).Wait(absl::Now() + absl::Seconds(300));
    EXPECT_EQ(code.value_or(-1), 0) << again.task("worker", i).Log();
  }
  const std::string log = absl::StrJoin(lines, "\n");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(Restored checkpoint at step (\d+))"))) << log;
  EXPECT_GE(std::stoi(m[1]), 150);
  EXPECT_THAT(log, HasSubstr("Final metrics after 400 steps"));
}

TEST_F(DistributedTrainingTest, EvaluatorEvaluatesCheckpointsAndExitsWithTheMaster) {
  const std::string out = (dir_ / "out").string();
  ClusterRun run(
      dir_, {{"master", 1}, {"worker", 1}, {"evaluator", 1}},
      Flags(64, 200,
            {"--output_path=" + out, "--log_every_steps=100", "--save_checkpoints_steps=50"}),
      "eval");
  ExpectAllExitZero(run, "master");
  std::vector<std::string> lines = Lines(run.task("evaluator", 0));
  const std::string log = absl::StrJoin(lines, "\n");
  // The final checkpoint is always evaluated; earlier ones when it kept up.
  EXPECT_THAT(log, HasSubstr("Evaluator, step 200: loss:"));
  bool events = false;
  for (const auto& entry : std::filesystem::directory_iterator(out + "/eval_evaluator")) {
    events |= entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(events);
}

TEST_F(DistributedTrainingTest, KilledPsGivesRetryableExitNamingIt) {
  ClusterRun run(dir_, {{"master", 1}, {"worker", 1}, {"ps", 1}},
                 Flags(64, 100000, {"--log_every_steps=50"}), "pskill");
  test_support::ChildProcess& master = run.task("master", 0);
  for (;;) {
    auto line = master.ReadLine(absl::Now() + absl::Seconds(300));
    ASSERT_TRUE(line.ok()) << line.status() << master.Log();
    if (line->find("step") != std::string::npos) break;
  }
  run.task("ps", 0).Kill();
  for (const char* type : {"master", "worker"}) {
    test_support::ChildProcess& c = run.task(type, 0);
    auto code = c.Wait(absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << type << " hangs after the ps died";
    EXPECT_EQ(*code, 138) << c.Log();
    EXPECT_THAT(c.Log(), HasSubstr("/job:ps/task:0"));
  }
}

}  // namespace
}  // namespace kubetrain::dist::testing
