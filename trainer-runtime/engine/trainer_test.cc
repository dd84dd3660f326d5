#include "trainer-runtime/engine/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "gtest/gtest.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/trainer_flags.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::engine {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Three Gaussian blobs in 4 dimensions, as CSV (label last).
std::string WriteBlobs(const std::string& dir, const std::string& name, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.5);
  std::string path = (fs::path(dir) / name).string();
  std::ofstream out(path);
  out << "a,b,c,d,label\n";
  for (int i = 0; i < n; ++i) {
    int label = i % 3;
    for (int j = 0; j < 4; ++j) out << (j == label ? 2.0 : 0.0) + noise(rng) << ",";
    out << label << "\n";
  }
  return path;
}

TrainerOptions SmallRun(const std::string& dir) {
  TrainerOptions o;
  o.train_data_paths = WriteBlobs(dir, "train.csv", 300, 1);
  o.eval_data_paths = WriteBlobs(dir, "eval.csv", 90, 2);
  o.batch_size = 16;
  o.learning_rate = 0.01;
  o.hidden1 = 16;
  o.hidden2 = 8;
  o.threads = 1;
  o.seed = 7;
  o.log_every_steps = 10;
  o.eval_every_secs = 0;
  return o;
}

class RecordingSink : public MetricsSink {
 public:
  absl::Status Report(int64_t step, const std::map<std::string, double>& metrics) override {
    reports.emplace_back(step, metrics);
    return absl::OkStatus();
  }
  std::vector<std::pair<int64_t, std::map<std::string, double>>> reports;
};

TEST(TrainerFlagsTest, ParsesCloudMlFlags) {
  auto o = ParseTrainerFlags({"--train_data_paths=/d/train", "--job-dir", "/out", "--batch_size=64",
                              "--learning_rate", "0.01", "--optimizer=sgd", "--max_steps=5",
                              "--hidden1=318"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->train_data_paths, "/d/train");
  EXPECT_EQ(o->output_path, "/out");
  EXPECT_EQ(o->batch_size, 64);
  EXPECT_DOUBLE_EQ(o->learning_rate, 0.01);
  EXPECT_EQ(o->optimizer, "sgd");
  EXPECT_EQ(o->max_steps, 5);
  EXPECT_EQ(o->hidden1, 318);
}

TEST(TrainerFlagsTest, UnknownOrBadFlagIsUsageError) {
  auto unknown = ParseTrainerFlags({"--frobnicate=1"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(ExitCodeFor(unknown.status()), kExitUsage);
  EXPECT_NE(unknown.status().message().find("--frobnicate"), std::string::npos);
  auto bad = ParseTrainerFlags({"--batch_size=lots"});
  EXPECT_EQ(ExitCodeFor(bad.status()), kExitUsage);
  auto missing = ParseTrainerFlags({"--seed"});
  EXPECT_EQ(ExitCodeFor(missing.status()), kExitUsage);
}

TEST(ExitCodesTest, RetryableIsAtLeast128) {
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("peer lost")), kExitRetryable);
  EXPECT_TRUE(IsRetryableExitCode(kExitRetryable));
  EXPECT_FALSE(IsRetryableExitCode(kExitBadInput));
  EXPECT_EQ(ExitCodeFor(WithExitCode(absl::InternalError("nan"), kExitNonFiniteLoss)),
            kExitNonFiniteLoss);
  EXPECT_EQ(ExitCodeFor(absl::DataLossError("corrupt")), kExitBadInput);
}

TEST(TrainerTest, TrainsLogsEvaluatesAndWritesOutputs) {
  std::string dir = TempDir("train");
  TrainerOptions o = SmallRun(dir);
  o.output_path = (fs::path(dir) / "out").string();
  o.num_epochs = 3;  // 19 batches per epoch -> 57 steps
  std::ostringstream log;
  RecordingSink sink;
  TrainerEnvironment env;
  env.log = &log;
  env.metrics_sinks = {&sink};
  absl::StatusOr<TrainResult> r = Train(o, std::move(env));
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << log.str();
  EXPECT_EQ(r->global_step, 57);
  EXPECT_GT(r->final_accuracy, 0.9) << log.str();
  std::string text = log.str();
  EXPECT_NE(text.find("Train [master/0], step 10: loss: "), std::string::npos) << text;
  EXPECT_NE(text.find(" global steps/s, "), std::string::npos);
  EXPECT_NE(text.find("Eval, step 57: loss: "), std::string::npos) << text;
  EXPECT_NE(text.find("Final metrics after 57 steps, loss: "), std::string::npos) << text;
  ASSERT_EQ(sink.reports.size(), 1u);
  EXPECT_EQ(sink.reports[0].first, 57);
  EXPECT_DOUBLE_EQ(sink.reports[0].second.at("training/hptuning/metric"), r->final_accuracy);
  EXPECT_TRUE(fs::exists(fs::path(o.output_path) / "checkpoint"));
  EXPECT_TRUE(fs::exists(fs::path(o.output_path) / "model.ckpt-57"));
  EXPECT_TRUE(fs::exists(fs::path(o.output_path) / "graph.pbtxt"));
  EXPECT_TRUE(fs::exists(fs::path(o.output_path) / "export" / "model.pb"));
  // The exported model alone (graph + weights) reproduces the final
  // accuracy on the eval data.
  {
    std::ifstream in(fs::path(o.output_path) / "export" / "model.pb", std::ios::binary);
    v1::ExportedModel exported;
    ASSERT_TRUE(exported.ParseFromIstream(&in));
    absl::StatusOr<Graph> graph = Graph::FromProto(exported.graph());
    ASSERT_TRUE(graph.ok()) << graph.status();
    VariableStore store;
    for (const auto& v : exported.variables())
      ASSERT_TRUE(store.Create(v.name(), *TensorFromProto(v.value())).ok());
    absl::StatusOr<data::Dataset> eval = data::LoadDataset(o.eval_data_paths);
    ASSERT_TRUE(eval.ok());
    CpuDevice device(1);
    Executor exec(*graph, device, store);
    Tensor x = *Tensor::FromVector({eval->num_examples, 4}, eval->features);
    std::vector<Tensor> out;
    ASSERT_TRUE(exec.Run({{{*graph->ParseOutputName(exported.input()), x}}},
                         {{*graph->ParseOutputName(exported.probabilities())}}, &out)
                    .ok());
    int correct = 0;
    for (int64_t i = 0; i < eval->num_examples; ++i) {
      const float* p = out[0].data() + i * 3;
      correct += (std::max_element(p, p + 3) - p) == eval->labels[i];
    }
    EXPECT_NEAR(static_cast<double>(correct) / eval->num_examples, r->final_accuracy, 1e-6);
  }
  bool events = false;
  for (const auto& e : fs::directory_iterator(o.output_path)) {
    events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(events);
}

// Kill after step 13 (checkpoints every 5 steps), restart: the run resumes
// from step 10 and ends with exactly the weights and optimizer state of an
// uninterrupted run.
TEST(TrainerTest, ResumeAfterCrashEqualsUninterruptedRun) {
  std::string dir = TempDir("resume");
  TrainerOptions o = SmallRun(dir);
  o.max_steps = 30;
  o.save_checkpoints_steps = 5;
  o.model = "mlp";
  std::ostringstream log;

  TrainerOptions straight = o;
  straight.output_path = (fs::path(dir) / "straight").string();
  TrainerEnvironment env1;
  env1.log = &log;
  ASSERT_TRUE(Train(straight, std::move(env1)).ok()) << log.str();

  TrainerOptions crashed = o;
  crashed.output_path = (fs::path(dir) / "crashed").string();
  TrainerEnvironment env2;
  env2.log = &log;
  env2.after_step = [](int64_t step) {
    return step == 13 ? absl::AbortedError("killed at step 13") : absl::OkStatus();
  };
  absl::StatusOr<TrainResult> first = Train(crashed, std::move(env2));
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(ExitCodeFor(first.status()), kExitRetryable);
  auto latest = LatestCheckpoint(crashed.output_path);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(fs::path(**latest).filename(), "model.ckpt-10");

  std::ostringstream resumed_log;
  TrainerEnvironment env3;
  env3.log = &resumed_log;
  absl::StatusOr<TrainResult> second = Train(crashed, std::move(env3));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(resumed_log.str().find("Restored checkpoint at step 10"), std::string::npos)
      << resumed_log.str();

  auto a = ReadCheckpoint((fs::path(straight.output_path) / "model.ckpt-30").string());
  auto b = ReadCheckpoint((fs::path(crashed.output_path) / "model.ckpt-30").string());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->variables_size(), b->variables_size());
  ASSERT_GT(a->variables_size(), 0);
  for (int i = 0; i < a->variables_size(); ++i) {
    EXPECT_EQ(a->variables(i).name(), b->variables(i).name());
    EXPECT_EQ(a->variables(i).value().data(), b->variables(i).value().data())
        << a->variables(i).name();
  }
  EXPECT_EQ(a->optimizer().iterations(), 30);
  EXPECT_EQ(b->optimizer().iterations(), 30);
  ASSERT_EQ(a->optimizer().slots_size(), b->optimizer().slots_size());
  for (int i = 0; i < a->optimizer().slots_size(); ++i) {
    EXPECT_EQ(a->optimizer().slots(i).value().data(), b->optimizer().slots(i).value().data());
  }
  // And training did change the weights.
  auto c10 = ReadCheckpoint((fs::path(crashed.output_path) / "model.ckpt-10").string());
  ASSERT_TRUE(c10.ok());
  EXPECT_NE(c10->variables(0).value().data(), a->variables(0).value().data());
}

TEST(TrainerTest, DivergingLossExitsWithCode4) {
  std::string dir = TempDir("nan");
  TrainerOptions o = SmallRun(dir);
  o.optimizer = "sgd";
  o.learning_rate = 1e30;
  o.max_steps = 50;
  std::ostringstream log;
  TrainerEnvironment env;
  env.log = &log;
  absl::StatusOr<TrainResult> r = Train(o, std::move(env));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ExitCodeFor(r.status()), kExitNonFiniteLoss) << r.status();
  EXPECT_NE(r.status().message().find("loss is"), std::string::npos);
}

TEST(TrainerTest, MissingDataAndBadModelFileAreBadInput) {
  std::string dir = TempDir("bad");
  TrainerOptions o = SmallRun(dir);
  o.train_data_paths = (fs::path(dir) / "nope-images-idx3-ubyte.gz").string();
  std::ostringstream log;
  TrainerEnvironment env;
  env.log = &log;
  absl::StatusOr<TrainResult> r = Train(o, std::move(env));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ExitCodeFor(r.status()), kExitBadInput) << r.status();

  TrainerOptions m = SmallRun(dir);
  m.model = (fs::path(dir) / "model.yaml").string();
  std::ofstream(m.model) << "layers:\n  - maxpool: 2\n";
  TrainerEnvironment env2;
  env2.log = &log;
  r = Train(m, std::move(env2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ExitCodeFor(r.status()), kExitBadInput);
  EXPECT_NE(r.status().message().find("model.yaml:2: maxpool needs an image input"),
            std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace kubetrain::runtime::engine
