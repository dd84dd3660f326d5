#include "trainer-runtime/engine/trainer.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>

#include "common/flags/flags.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/trainer_flags.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::engine {
namespace {

namespace fs = std::filesystem;

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
  absl::Status Report(int64_t step, const std::map<std::string, double>& metrics,
                      bool final) override {
    reports.emplace_back(step, metrics);
    finals.push_back(final);
    return absl::OkStatus();
  }
  std::vector<std::pair<int64_t, std::map<std::string, double>>> reports;
  std::vector<bool> finals;
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

TEST(TrainerFlagsTest, EveryFlagTakesDashesForUnderscores) {
  auto o = ParseTrainerFlags({"--batch-size=64", "--learning-rate", "0.5", "--eval-batch-size=9"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->batch_size, 64);
  EXPECT_EQ(o->learning_rate, 0.5);
  EXPECT_EQ(o->eval_batch_size, 9);
  auto unknown = ParseTrainerFlags({"--frob-nicate=1"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "unknown flag '--frob_nicate'");
  auto missing = ParseTrainerFlags({"--batch-size"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "flag '--batch_size' needs a value");
  auto bad = ParseTrainerFlags({"--batch_size=lots"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "flag '--batch_size': cannot parse 'lots'");
}

TEST(TrainerFlagsTest, TheLastOfTheOutputPathAliasesWinsAsTyped) {
  auto job_dir_last = ParseTrainerFlags({"--output_path=/a", "--job-dir=/b"});
  ASSERT_TRUE(job_dir_last.ok()) << job_dir_last.status();
  EXPECT_EQ(job_dir_last->output_path, "/b");
  auto output_path_last = ParseTrainerFlags({"--job_dir=/b", "--output_path=/a"});
  ASSERT_TRUE(output_path_last.ok()) << output_path_last.status();
  EXPECT_EQ(output_path_last->output_path, "/a");
}

TEST(TrainerFlagsTest, HelpShowsEachFlagOnceWithItsDefault) {
  TrainerOptions options;
  CLI::App app("usage: test");
  flags::Configure(app);
  AddTrainerFlags(app, &options);
  const std::string help = app.help();
  EXPECT_NE(help.find("  --batch_size N"), std::string::npos) << help;
  EXPECT_NE(help.find("examples per step (default 128)"), std::string::npos) << help;
  EXPECT_NE(help.find("(default adam)"), std::string::npos) << help;
  EXPECT_NE(help.find("(default 0.001)"), std::string::npos) << help;
  EXPECT_EQ(help.find("--batch-size"), std::string::npos) << help;
}

TEST(TrainerFlagsTest, AUriGivenAsAPathIsAUsageErrorNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string flag;  // as typed
    std::string uri;
  };
  const Case cases[] = {
      {{"--job-dir", "gs://my-bucket/run1"}, "--job-dir", "gs://my-bucket/run1"},
      {{"--job_dir=s3://b/run"}, "--job_dir", "s3://b/run"},
      {{"--output_path=hdfs://nn:8020/out"}, "--output_path", "hdfs://nn:8020/out"},
      {{"--train_data_paths=/local/a.csv,gs://b/train.csv"},
       "--train_data_paths",
       "gs://b/train.csv"},
      {{"--eval-data-paths", "gs://b/eval"}, "--eval-data-paths", "gs://b/eval"},
      {{"--model=gs://b/model.yaml"}, "--model", "gs://b/model.yaml"},
  };
  for (const Case& c : cases) {
    auto o = ParseTrainerFlags(c.args);
    ASSERT_FALSE(o.ok()) << c.flag;
    EXPECT_EQ(ExitCodeFor(o.status()), kExitUsage) << o.status();
    EXPECT_NE(
        o.status().message().find("flag '" + c.flag + "': \"" + c.uri + "\" names object storage"),
        std::string::npos)
        << o.status();
    EXPECT_NE(o.status().message().find("local folders only"), std::string::npos) << o.status();
  }
  auto file = ParseTrainerFlags({"--output_path=file:///tmp/out"});
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(),
            "flag '--output_path': \"file:///tmp/out\" is a file:// URI: give the path itself "
            "(/tmp/out)");
  // A colon inside a local path is not a scheme.
  auto local = ParseTrainerFlags({"--output_path=/out/run:1", "--train_data_paths=data/x"});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->output_path, "/out/run:1");
}

TEST(TrainerFlagsTest, ParsesDevicePlacement) {
  auto defaults = ParseTrainerFlags({});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->device, "auto");
  for (const char* placement : {"cpu", "gpu", "auto"}) {
    auto o = ParseTrainerFlags({std::string("--device=") + placement});
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->device, placement);
  }
  auto spaced = ParseTrainerFlags({"--device", "cpu"});
  ASSERT_TRUE(spaced.ok()) << spaced.status();
  EXPECT_EQ(spaced->device, "cpu");
  auto bad = ParseTrainerFlags({"--device=tpu"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(ExitCodeFor(bad.status()), kExitUsage);
  EXPECT_NE(bad.status().message().find("--device"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("tpu"), std::string::npos) << bad.status();
}

TEST(TrainerFlagsTest, ParsesCpuKernels) {
  auto defaults = ParseTrainerFlags({});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->cpu_kernels, OneDnnAvailable() ? CpuKernels::kOneDnn : CpuKernels::kBlas);
  auto blas = ParseTrainerFlags({"--cpu_kernels=blas"});
  ASSERT_TRUE(blas.ok()) << blas.status();
  EXPECT_EQ(blas->cpu_kernels, CpuKernels::kBlas);
  auto onednn = ParseTrainerFlags({"--cpu-kernels", "onednn"});
  if (OneDnnAvailable()) {
    ASSERT_TRUE(onednn.ok()) << onednn.status();
    EXPECT_EQ(onednn->cpu_kernels, CpuKernels::kOneDnn);
  } else {
    ASSERT_FALSE(onednn.ok());
    EXPECT_EQ(ExitCodeFor(onednn.status()), kExitUsage);
    EXPECT_NE(onednn.status().message().find("libdnnl-dev"), std::string::npos);
  }
  auto bad = ParseTrainerFlags({"--cpu_kernels=mkl"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(ExitCodeFor(bad.status()), kExitUsage);
  EXPECT_NE(bad.status().message().find("--cpu_kernels"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("'mkl'"), std::string::npos) << bad.status();
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
  test_support::TempDir dir_folder("kubetrain-train");
  std::string dir = dir_folder.path();
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
  test_support::TempDir dir_folder("kubetrain-resume");
  std::string dir = dir_folder.path();
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

// A learning curve on a step schedule: every 19 steps (one epoch of the
// 300 training examples in batches of 16), the last one marked final; the
// values are exact counts and float-precision losses, not float noise.
TEST(TrainerTest, EvaluatesOnAStepScheduleAndMarksTheLastReportFinal) {
  test_support::TempDir dir_folder("kubetrain-schedule");
  std::string dir = dir_folder.path();
  for (const bool by_epochs : {false, true}) {
    SCOPED_TRACE(by_epochs ? "--eval_every_epochs=1" : "--eval_every_steps=19");
    TrainerOptions o = SmallRun(dir);
    o.num_epochs = 3;  // 57 steps
    if (by_epochs) {
      o.eval_every_epochs = 1;
    } else {
      o.eval_every_steps = 19;
    }
    o.eval_every_secs = 1e-9;  // a step schedule replaces the time schedule
    std::ostringstream log;
    RecordingSink sink;
    TrainerEnvironment env;
    env.log = &log;
    env.metrics_sinks = {&sink};
    absl::StatusOr<TrainResult> r = Train(o, std::move(env));
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << log.str();
    std::vector<int64_t> steps;
    for (const auto& [step, metrics] : sink.reports) steps.push_back(step);
    EXPECT_EQ(steps, (std::vector<int64_t>{19, 38, 57})) << log.str();
    EXPECT_EQ(sink.finals, (std::vector<bool>{false, false, true}));
    for (const auto& [step, metrics] : sink.reports) {
      // 90 eval examples: the accuracy is k/90 exactly.
      const double correct = metrics.at("accuracy") * 90;
      EXPECT_EQ(metrics.at("accuracy"), std::round(correct) / 90) << step;
      // The loss is the double of the float's shortest digits (so it prints
      // as those digits).
      const double loss = metrics.at("loss");
      char text[64];
      const std::to_chars_result end =
          std::to_chars(text, text + sizeof(text) - 1, static_cast<float>(loss));
      *end.ptr = '\0';
      EXPECT_EQ(loss, std::strtod(text, nullptr)) << text;
    }
  }
  TrainerOptions both = SmallRun(dir);
  both.eval_every_steps = 10;
  both.eval_every_epochs = 1;
  std::ostringstream log;
  TrainerEnvironment env;
  env.log = &log;
  absl::StatusOr<TrainResult> refused = Train(both, std::move(env));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(ExitCodeFor(refused.status()), kExitUsage);
  EXPECT_NE(refused.status().message().find("--eval_every_steps and --eval_every_epochs"),
            std::string::npos);
}

// A task that is not the chief does not evaluate, not even at the end (its
// evaluation would repeat the chief's on the same variables).
// LocalStrategy's training, for a test strategy that changes one thing of it.
class LocalTrainingStrategy : public TrainingStrategy {
 public:
  absl::StatusOr<int64_t> Initialize(TrainingContext& ctx,
                                     const v1::Checkpoint* restored) override {
    return local_.Initialize(ctx, restored);
  }
  absl::StatusOr<StepResult> Step(TrainingContext& ctx, const data::Batch& batch,
                                  int64_t global_step) override {
    return local_.Step(ctx, batch, global_step);
  }

 private:
  LocalStrategy local_;
};

class NotChiefStrategy final : public LocalTrainingStrategy {
 public:
  bool IsChief() const override { return false; }
};

TEST(TrainerTest, OnlyTheChiefEvaluates) {
  test_support::TempDir dir_folder("kubetrain-not-chief");
  std::string dir = dir_folder.path();
  TrainerOptions o = SmallRun(dir);
  o.max_steps = 20;
  o.eval_every_steps = 5;
  std::ostringstream log;
  RecordingSink sink;
  TrainerEnvironment env;
  env.log = &log;
  env.metrics_sinks = {&sink};
  env.strategy = std::make_unique<NotChiefStrategy>();
  absl::StatusOr<TrainResult> r = Train(o, std::move(env));
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << log.str();
  EXPECT_EQ(r->global_step, 20);
  EXPECT_TRUE(sink.reports.empty());
  EXPECT_EQ(log.str().find("Eval, step"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("Done after 20 steps (the chief evaluates)"), std::string::npos)
      << log.str();
}

v1::CheckpointOwner JobOwner(const std::string& uid, const std::string& name,
                             const std::string& trial) {
  v1::CheckpointOwner owner;
  owner.set_job_uid(uid);
  owner.set_job_name(name);
  owner.set_trial_id(trial);
  return owner;
}

std::map<std::string, std::string> FileBytes(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    files[e.path().filename().string()] = bytes.str();
  }
  return files;
}

// A second job whose trial 1 writes to the folder where another job's trial
// 1 left its checkpoints (the same --job-dir, resubmitted with other
// hyperparameters): it never restores them, trains from step 0 in its own
// subfolder, leaves the first job's files as they were, and its own restart
// resumes from its own checkpoint.
TEST(TrainerTest, AnotherJobsCheckpointsAreNeverRestored) {
  test_support::TempDir dir_folder("kubetrain-foreign");
  std::string dir = dir_folder.path();
  const std::string trial_dir = (fs::path(dir) / "out" / "1").string();
  TrainerOptions first = SmallRun(dir);
  first.max_steps = 20;
  first.save_checkpoints_steps = 5;
  first.output_path = trial_dir;
  first.owner = JobOwner("aaaaaaaa-1111", "fmnist", "1");
  std::ostringstream first_log;
  TrainerEnvironment env1;
  env1.log = &first_log;
  ASSERT_TRUE(Train(first, std::move(env1)).ok()) << first_log.str();
  const std::map<std::string, std::string> before = FileBytes(trial_dir);

  TrainerOptions second = first;
  second.hidden1 = 24;  // another shape: restoring would fail
  second.owner = JobOwner("bbbbbbbb-2222", "fmnist_2", "1");
  std::ostringstream log;
  TrainerEnvironment env2;
  env2.log = &log;
  env2.after_step = [](int64_t step) {
    return step == 13 ? absl::AbortedError("killed at step 13") : absl::OkStatus();
  };
  ASSERT_FALSE(Train(second, std::move(env2)).ok());
  EXPECT_EQ(log.str().find("Restored checkpoint"), std::string::npos) << log.str();
  const std::string own = (fs::path(trial_dir) / "fmnist_2-bbbbbbbb").string();
  EXPECT_NE(log.str().find("This run writes to " + own), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("job 'fmnist' (uid aaaaaaaa-1111, trial 1)"), std::string::npos)
      << log.str();

  std::ostringstream resumed;
  TrainerEnvironment env3;
  env3.log = &resumed;
  ASSERT_TRUE(Train(second, std::move(env3)).ok()) << resumed.str();
  EXPECT_NE(resumed.str().find("Restored checkpoint at step 10 from " + own), std::string::npos)
      << resumed.str();
  // Every checkpoint in its folder is its own; the first job's are untouched.
  int own_checkpoints = 0;
  for (const auto& e : fs::directory_iterator(own)) {
    if (e.path().filename().string().rfind("model.ckpt-", 0) != 0) continue;
    auto c = ReadCheckpoint(e.path().string());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->owner().job_uid(), "bbbbbbbb-2222") << e.path();
    EXPECT_EQ(c->owner().trial_id(), "1");
    ++own_checkpoints;
  }
  EXPECT_GT(own_checkpoints, 0);
  EXPECT_TRUE(fs::exists(fs::path(own) / "export" / "model.pb"));
  EXPECT_EQ(FileBytes(trial_dir), before);
}

// Where only the learning rate differs the shapes match, so a restore would
// succeed silently: the second job's weights equal those of the same run in
// an empty folder, so nothing of the first job's was restored.
TEST(TrainerTest, SameShapesFromAnotherJobAreNotRestoredEither) {
  test_support::TempDir dir_folder("kubetrain-foreign-lr");
  std::string dir = dir_folder.path();
  TrainerOptions first = SmallRun(dir);
  first.max_steps = 20;
  first.save_checkpoints_steps = 5;
  first.output_path = (fs::path(dir) / "shared" / "2").string();
  first.owner = JobOwner("aaaaaaaa-1111", "lr_study", "2");
  std::ostringstream log;
  TrainerEnvironment env1;
  env1.log = &log;
  ASSERT_TRUE(Train(first, std::move(env1)).ok()) << log.str();

  TrainerOptions second = first;
  second.learning_rate = 0.003;
  second.owner = JobOwner("bbbbbbbb-2222", "lr_study_2", "2");
  TrainerEnvironment env2;
  env2.log = &log;
  absl::StatusOr<TrainResult> reused = Train(second, std::move(env2));
  ASSERT_TRUE(reused.ok()) << reused.status() << log.str();

  TrainerOptions alone = second;
  alone.output_path = (fs::path(dir) / "alone" / "2").string();
  TrainerEnvironment env3;
  env3.log = &log;
  ASSERT_TRUE(Train(alone, std::move(env3)).ok()) << log.str();

  auto a = ReadCheckpoint(
      (fs::path(second.output_path) / "lr_study_2-bbbbbbbb" / "model.ckpt-20").string());
  auto b = ReadCheckpoint((fs::path(alone.output_path) / "model.ckpt-20").string());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  ASSERT_EQ(a->variables_size(), b->variables_size());
  for (int i = 0; i < a->variables_size(); ++i) {
    EXPECT_EQ(a->variables(i).value().data(), b->variables(i).value().data())
        << a->variables(i).name();
  }
  EXPECT_EQ(a->optimizer().iterations(), 20);
}

// By hand (no job): resuming the same model is TensorFlow's habit; another
// model's checkpoint is a usage error naming the folder, not a crash.
TEST(TrainerTest, ByHandAnotherModelsCheckpointIsAUsageError) {
  test_support::TempDir dir_folder("kubetrain-by-hand");
  std::string dir = dir_folder.path();
  TrainerOptions o = SmallRun(dir);
  o.max_steps = 10;
  o.save_checkpoints_steps = 5;
  o.output_path = (fs::path(dir) / "out").string();
  std::ostringstream log;
  TrainerEnvironment env1;
  env1.log = &log;
  ASSERT_TRUE(Train(o, std::move(env1)).ok()) << log.str();

  TrainerOptions more = o;
  more.max_steps = 15;
  std::ostringstream resumed;
  TrainerEnvironment env2;
  env2.log = &resumed;
  ASSERT_TRUE(Train(more, std::move(env2)).ok()) << resumed.str();
  EXPECT_NE(resumed.str().find("Restored checkpoint at step 10"), std::string::npos)
      << resumed.str();

  TrainerOptions wider = o;
  wider.hidden1 = 50;
  TrainerEnvironment env3;
  env3.log = &log;
  absl::StatusOr<TrainResult> refused = Train(wider, std::move(env3));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(ExitCodeFor(refused.status()), kExitUsage);
  EXPECT_NE(refused.status().message().find("--output_path " + o.output_path), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("not of this model"), std::string::npos)
      << refused.status();
}

// A strategy whose variables cannot be brought up to date (its parameter
// servers deleted first).
class SyncFailsStrategy final : public LocalTrainingStrategy {
 public:
  absl::Status SyncVariables(TrainingContext&) override {
    return absl::UnavailableError("parameter server ps/0 failed: connection refused");
  }
};

// A stop asked for during step 13 (checkpoints every 5, evaluations every 5):
// the chief checkpoints step 13 and returns the stop's error, exit code
// kept, with no final evaluation, report or export; the run on the same
// folder resumes from 13 and ends with the weights of an uninterrupted run.
// Where no checkpoint can be written the log says why, and the error is
// still the stop's.
TEST(TrainerTest, AStopCheckpointsTheStepAndSkipsTheEndOfTraining) {
  test_support::TempDir dir_folder("kubetrain-stop");
  std::string dir = dir_folder.path();
  TrainerOptions o = SmallRun(dir);
  o.max_steps = 30;
  o.save_checkpoints_steps = 5;
  o.eval_every_steps = 5;
  const absl::Status stop = WithExitCode(absl::CancelledError("SIGTERM"), kExitStoppedBySigterm);
  // Asked during step 13: the loop sees it once that step is done.
  auto stop_in_step_13 = [stop](TrainerEnvironment& env) {
    auto steps = std::make_shared<int64_t>(0);
    env.after_step = [steps](int64_t step) {
      *steps = step;
      return absl::OkStatus();
    };
    env.pending_stop = [steps, stop] { return *steps >= 13 ? stop : absl::OkStatus(); };
  };
  std::ostringstream log;

  TrainerOptions straight = o;
  straight.output_path = (fs::path(dir) / "straight").string();
  TrainerEnvironment straight_env;
  straight_env.log = &log;
  ASSERT_TRUE(Train(straight, std::move(straight_env)).ok()) << log.str();

  TrainerOptions stopped = o;
  stopped.output_path = (fs::path(dir) / "stopped").string();
  std::ostringstream stopped_log;
  RecordingSink sink;
  TrainerEnvironment env;
  env.log = &stopped_log;
  env.metrics_sinks = {&sink};
  stop_in_step_13(env);
  absl::StatusOr<TrainResult> first = Train(stopped, std::move(env));
  ASSERT_FALSE(first.ok()) << stopped_log.str();
  EXPECT_EQ(first.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(first.status().message(), "stopped at step 13 on SIGTERM");
  EXPECT_EQ(ExitCodeFor(first.status()), kExitStoppedBySigterm);
  EXPECT_TRUE(IsRetryableExitCode(kExitStoppedBySigterm));
  EXPECT_NE(stopped_log.str().find("Stopped at step 13 on SIGTERM: checkpoint written to " +
                                   stopped.output_path),
            std::string::npos)
      << stopped_log.str();
  EXPECT_EQ(sink.finals, (std::vector<bool>{false, false}));  // steps 5 and 10
  EXPECT_EQ(stopped_log.str().find("Final metrics"), std::string::npos) << stopped_log.str();
  EXPECT_FALSE(fs::exists(fs::path(stopped.output_path) / "export"));
  auto latest = LatestCheckpoint(stopped.output_path);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(fs::path(**latest).filename(), "model.ckpt-13");

  std::ostringstream resumed_log;
  TrainerEnvironment resumed_env;
  resumed_env.log = &resumed_log;
  ASSERT_TRUE(Train(stopped, std::move(resumed_env)).ok()) << resumed_log.str();
  EXPECT_NE(resumed_log.str().find("Restored checkpoint at step 13"), std::string::npos)
      << resumed_log.str();
  auto a = ReadCheckpoint((fs::path(straight.output_path) / "model.ckpt-30").string());
  auto b = ReadCheckpoint((fs::path(stopped.output_path) / "model.ckpt-30").string());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->variables_size(), b->variables_size());
  for (int i = 0; i < a->variables_size(); ++i) {
    EXPECT_EQ(a->variables(i).value().data(), b->variables(i).value().data())
        << a->variables(i).name();
  }

  struct NoCheckpoint {
    const char* name;
    std::string output_path;
    std::function<std::unique_ptr<TrainingStrategy>()> strategy;
    std::string says;
  };
  const NoCheckpoint cases[] = {
      {"no output folder", "", [] { return std::make_unique<LocalStrategy>(); },
       "Stopped at step 13 on SIGTERM: no checkpoint written (no --job-dir or --output_path)"},
      {"not the chief", (fs::path(dir) / "worker").string(),
       [] { return std::make_unique<NotChiefStrategy>(); },
       "Stopped at step 13 on SIGTERM (the chief writes the checkpoints)"},
      {"sync fails", (fs::path(dir) / "ps-gone").string(),
       [] { return std::make_unique<SyncFailsStrategy>(); },
       "Warning: stopped at step 13 on SIGTERM without a checkpoint: parameter server ps/0 "
       "failed: connection refused; a restart resumes from the latest earlier checkpoint"},
  };
  for (const NoCheckpoint& c : cases) {
    SCOPED_TRACE(c.name);
    TrainerOptions options = o;
    options.output_path = c.output_path;
    options.save_checkpoints_steps = 1000;
    options.eval_every_steps = 0;  // evaluations sync the variables too
    std::ostringstream case_log;
    TrainerEnvironment case_env;
    case_env.log = &case_log;
    case_env.strategy = c.strategy();
    stop_in_step_13(case_env);
    absl::StatusOr<TrainResult> r = Train(options, std::move(case_env));
    ASSERT_FALSE(r.ok()) << case_log.str();
    EXPECT_EQ(ExitCodeFor(r.status()), kExitStoppedBySigterm) << r.status();
    EXPECT_NE(case_log.str().find(c.says), std::string::npos) << case_log.str();
    if (!c.output_path.empty()) {
      auto none = LatestCheckpoint(c.output_path);
      ASSERT_TRUE(none.ok()) << none.status();
      EXPECT_FALSE(none->has_value()) << **none;
    }
  }
}

TEST(TrainerTest, DivergingLossExitsWithCode4) {
  test_support::TempDir dir_folder("kubetrain-nan");
  std::string dir = dir_folder.path();
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
  test_support::TempDir dir_folder("kubetrain-bad");
  std::string dir = dir_folder.path();
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

// A device whose memory the engine must treat as not host memory: its
// buffers say kCuda, so every transfer above the kernel layer has to go
// through CopyFromHost/CopyToHost (counted here), as it would for a GPU.
// The memory is host memory underneath, so the CPU kernels can run on it
// and the results can be compared bit for bit with the CPU device's.
class NonHostAllocator final : public Allocator {
 public:
  DeviceType device_type() const override { return DeviceType::kCuda; }
  void* Allocate(size_t bytes) override { return HostAllocator()->Allocate(bytes); }
  void Deallocate(void* ptr) override { HostAllocator()->Deallocate(ptr); }
};

std::atomic<int64_t> uploads{0};
std::atomic<int64_t> downloads{0};

class NonHostDevice final : public Device {
 public:
  NonHostDevice() {
    for (const auto& [op, kernel] : CpuKernelTable()) RegisterKernel(op, kernel);
  }
  DeviceType type() const override { return DeviceType::kCuda; }
  absl::string_view name() const override { return "/device:TEST:0"; }
  Allocator* allocator() override { return &allocator_; }
  int num_threads() const override { return 1; }
  absl::Status CopyFromHost(const Tensor& host, Tensor& device_tensor) override {
    if (host.device_type() != DeviceType::kCpu ||
        device_tensor.device_type() != DeviceType::kCuda) {
      return absl::InvalidArgumentError("CopyFromHost wants host -> device");
    }
    ++uploads;
    return Copy(host, device_tensor);
  }
  absl::Status CopyToHost(const Tensor& device_tensor, Tensor& host) override {
    if (host.device_type() != DeviceType::kCpu ||
        device_tensor.device_type() != DeviceType::kCuda) {
      return absl::InvalidArgumentError("CopyToHost wants device -> host");
    }
    ++downloads;
    return Copy(device_tensor, host);
  }

 private:
  static absl::Status Copy(const Tensor& from, Tensor& to) {
    if (from.shape() != to.shape()) return absl::InvalidArgumentError("shape mismatch");
    std::memcpy(to.data(), from.data(), sizeof(float) * static_cast<size_t>(from.num_elements()));
    return absl::OkStatus();
  }
  NonHostAllocator allocator_;
};

DeviceFactory NonHostDeviceFactory() {
  return [](const TrainerOptions&) -> absl::StatusOr<std::unique_ptr<Device>> {
    return std::make_unique<NonHostDevice>();
  };
}

void ExpectSameCheckpoints(const std::string& a_path, const std::string& b_path) {
  auto a = ReadCheckpoint(a_path);
  auto b = ReadCheckpoint(b_path);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_GT(a->variables_size(), 0);
  ASSERT_EQ(a->variables_size(), b->variables_size());
  for (int i = 0; i < a->variables_size(); ++i) {
    EXPECT_EQ(a->variables(i).name(), b->variables(i).name());
    EXPECT_EQ(a->variables(i).value().data(), b->variables(i).value().data())
        << a->variables(i).name();
  }
  ASSERT_GT(a->optimizer().slots_size(), 0);
  ASSERT_EQ(a->optimizer().slots_size(), b->optimizer().slots_size());
  for (int i = 0; i < a->optimizer().slots_size(); ++i) {
    EXPECT_EQ(a->optimizer().slots(i).value().data(), b->optimizer().slots(i).value().data())
        << a->optimizer().slots(i).name();
  }
}

// Initialisation, feeds, loss/accuracy, checkpoints, optimizer slots,
// resume and export all work on a device whose memory is not host memory,
// and give exactly the CPU device's results.
TEST(TrainerTest, NonHostDeviceTrainsResumesAndExportsLikeCpu) {
  test_support::TempDir dir_folder("kubetrain-nonhost");
  std::string dir = dir_folder.path();
  TrainerOptions o = SmallRun(dir);
  o.max_steps = 30;
  o.save_checkpoints_steps = 10;
  std::ostringstream log;

  TrainerOptions cpu = o;
  cpu.output_path = (fs::path(dir) / "cpu").string();
  cpu.device = "cpu";
  cpu.cpu_kernels = CpuKernels::kBlas;  // NonHostDevice runs the reference kernels
  TrainerEnvironment cpu_env;
  cpu_env.log = &log;
  absl::StatusOr<TrainResult> on_cpu = Train(cpu, std::move(cpu_env));
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status() << "\n" << log.str();

  // Stopped after step 13, restarted from model.ckpt-10.
  TrainerOptions other = o;
  other.output_path = (fs::path(dir) / "other").string();
  other.device = "gpu";
  TrainerEnvironment first_env;
  first_env.log = &log;
  first_env.make_device = NonHostDeviceFactory();
  first_env.after_step = [](int64_t step) {
    return step == 13 ? absl::AbortedError("killed at step 13") : absl::OkStatus();
  };
  uploads = 0;
  downloads = 0;
  ASSERT_FALSE(Train(other, std::move(first_env)).ok());
  std::ostringstream resumed_log;
  TrainerEnvironment second_env;
  second_env.log = &resumed_log;
  second_env.make_device = NonHostDeviceFactory();
  absl::StatusOr<TrainResult> on_other = Train(other, std::move(second_env));
  ASSERT_TRUE(on_other.ok()) << on_other.status() << "\n" << resumed_log.str();
  EXPECT_NE(resumed_log.str().find("Device: /device:TEST:0"), std::string::npos)
      << resumed_log.str();
  EXPECT_NE(resumed_log.str().find("Restored checkpoint at step 10"), std::string::npos)
      << resumed_log.str();
  // Every step uploads a batch (features, labels) and reads back loss and
  // accuracy.
  EXPECT_GE(uploads.load(), 2 * (13 + 20));
  EXPECT_GE(downloads.load(), 2 * (13 + 20));

  EXPECT_EQ(on_other->global_step, 30);
  EXPECT_EQ(on_other->final_loss, on_cpu->final_loss);
  EXPECT_EQ(on_other->final_accuracy, on_cpu->final_accuracy);
  ExpectSameCheckpoints((fs::path(cpu.output_path) / "model.ckpt-30").string(),
                        (fs::path(other.output_path) / "model.ckpt-30").string());
  std::ifstream a(fs::path(cpu.output_path) / "export" / "model.pb", std::ios::binary);
  std::ifstream b(fs::path(other.output_path) / "export" / "model.pb", std::ios::binary);
  v1::ExportedModel ea, eb;
  ASSERT_TRUE(ea.ParseFromIstream(&a));
  ASSERT_TRUE(eb.ParseFromIstream(&b));
  ASSERT_GT(ea.variables_size(), 0);
  ASSERT_EQ(ea.variables_size(), eb.variables_size());
  for (int i = 0; i < ea.variables_size(); ++i) {
    EXPECT_EQ(ea.variables(i).value().data(), eb.variables(i).value().data());
  }
}

TEST(TrainerTest, GpuPlacementWithoutCudaIsUsageErrorBeforeLoadingData) {
  test_support::TempDir dir_folder("kubetrain-nogpu");
  std::string dir = dir_folder.path();
  TrainerOptions o = SmallRun(dir);
  o.device = "gpu";
  // Missing data would be exit code 3: the device is checked first.
  o.train_data_paths = (fs::path(dir) / "missing.csv").string();
  std::ostringstream log;
  TrainerEnvironment env;
  env.log = &log;
  absl::StatusOr<TrainResult> r = Train(o, std::move(env));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ExitCodeFor(r.status()), kExitUsage) << r.status();
  EXPECT_NE(r.status().message().find("--device=gpu"), std::string::npos) << r.status();

  o.device = "tpu";
  TrainerEnvironment env2;
  env2.log = &log;
  r = Train(o, std::move(env2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ExitCodeFor(r.status()), kExitUsage) << r.status();
  EXPECT_NE(r.status().message().find("--device"), std::string::npos) << r.status();
}

TEST(TrainerTest, DefaultDeviceFactoryIsReplaceable) {
  test_support::TempDir dir_folder("kubetrain-factory");
  std::string dir = dir_folder.path();
  TrainerOptions o = SmallRun(dir);
  o.max_steps = 3;
  std::ostringstream log;
  SetDefaultDeviceFactory(NonHostDeviceFactory());
  TrainerEnvironment env;
  env.log = &log;
  absl::StatusOr<TrainResult> r = Train(o, std::move(env));
  SetDefaultDeviceFactory(nullptr);  // back to CreateCpuOnlyDevice
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << log.str();
  EXPECT_NE(log.str().find("Device: /device:TEST:0"), std::string::npos) << log.str();
  absl::StatusOr<std::unique_ptr<Device>> cpu = DefaultDeviceFactory()(o);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->type(), DeviceType::kCpu);
}

// A strategy that reads tensor data directly (as a host-memory strategy
// may) runs on the CPU under --device=auto and refuses --device=gpu.
class HostOnlyStrategy final : public TrainingStrategy {
 public:
  absl::StatusOr<int64_t> Initialize(TrainingContext& ctx,
                                     const v1::Checkpoint* restored) override {
    return local_.Initialize(ctx, restored);
  }
  absl::StatusOr<StepResult> Step(TrainingContext& ctx, const data::Batch& batch,
                                  int64_t global_step) override {
    EXPECT_EQ(ctx.device.type(), DeviceType::kCpu);
    return local_.Step(ctx, batch, global_step);
  }

 private:
  LocalStrategy local_;
};

TEST(TrainerTest, HostMemoryStrategyStaysOnCpu) {
  test_support::TempDir dir_folder("kubetrain-hostonly");
  std::string dir = dir_folder.path();
  TrainerOptions o = SmallRun(dir);
  o.max_steps = 3;
  std::ostringstream log;
  TrainerEnvironment env;
  env.log = &log;
  env.make_device = NonHostDeviceFactory();
  env.strategy = std::make_unique<HostOnlyStrategy>();
  absl::StatusOr<TrainResult> r = Train(o, std::move(env));
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << log.str();
  EXPECT_EQ(r->global_step, 3);
  EXPECT_NE(log.str().find("Not using /device:TEST:0"), std::string::npos) << log.str();

  o.device = "gpu";
  TrainerEnvironment env2;
  env2.log = &log;
  env2.make_device = NonHostDeviceFactory();
  env2.strategy = std::make_unique<HostOnlyStrategy>();
  r = Train(o, std::move(env2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ExitCodeFor(r.status()), kExitUsage) << r.status();
  EXPECT_NE(r.status().message().find("--device=gpu"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace kubetrain::runtime::engine
