// The trainer end to end on the GPU that --device=gpu selects: the same run
// as on the CPU reaches the same loss and accuracy, and a run stopped and
// resumed from its checkpoint ends with the weights of an uninterrupted one.
// Every test skips without a CUDA build and a visible GPU.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "gtest/gtest.h"
#include "trainer-runtime/cmd/device_factory.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/engine/trainer.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::cmd {
namespace {

namespace fs = std::filesystem;

class TrainerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!BuiltWithCuda() || VisibleGpuCount() == 0) GTEST_SKIP() << "no CUDA build or no GPU";
    dir_ = fs::path(::testing::TempDir()) / ("trainer-gpu-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::mt19937 rng(1);
    std::normal_distribution<double> noise(0.0, 0.5);
    std::ofstream out(dir_ / "train.csv");
    for (int i = 0; i < 600; ++i) {
      int label = i % 3;
      for (int j = 0; j < 4; ++j) out << (j == label ? 2.0 : 0.0) + noise(rng) << ",";
      out << label << "\n";
    }
  }
  engine::TrainerOptions Options(const std::string& device, const std::string& out) const {
    engine::TrainerOptions o;
    o.train_data_paths = (dir_ / "train.csv").string();
    o.output_path = (dir_ / out).string();
    o.device = device;
    o.batch_size = 32;
    o.learning_rate = 0.01;
    o.hidden1 = 16;
    o.hidden2 = 8;
    o.threads = 1;
    o.seed = 7;
    o.max_steps = 40;
    o.save_checkpoints_steps = 10;
    o.eval_every_secs = 0;
    return o;
  }
  absl::StatusOr<engine::TrainResult> Run(const engine::TrainerOptions& o,
                                          std::function<absl::Status(int64_t)> after_step = {}) {
    engine::TrainerEnvironment env;
    env.log = &log_;
    env.make_device = CreateTrainerDevice;
    env.after_step = std::move(after_step);
    return engine::Train(o, std::move(env));
  }
  static std::vector<float> Floats(const std::string& bytes) {
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    return v;
  }
  fs::path dir_;
  std::ostringstream log_;
};

TEST_F(TrainerGpuTest, SameLossAndAccuracyAsCpu) {
  auto cpu = Run(Options("cpu", "cpu"));
  ASSERT_TRUE(cpu.ok()) << cpu.status() << "\n" << log_.str();
  auto gpu = Run(Options("gpu", "gpu"));
  ASSERT_TRUE(gpu.ok()) << gpu.status() << "\n" << log_.str();
  EXPECT_NE(log_.str().find("Device: /device:GPU:0"), std::string::npos) << log_.str();
  EXPECT_EQ(gpu->global_step, 40);
  // Float sums in another order (cuBLAS, parallel reductions), 40 steps.
  EXPECT_NEAR(gpu->final_loss, cpu->final_loss, 1e-3 * std::max(1.0, cpu->final_loss));
  EXPECT_NEAR(gpu->final_accuracy, cpu->final_accuracy, 0.01);
}

TEST_F(TrainerGpuTest, ResumeFromCheckpointMatchesUninterruptedRun) {
  ASSERT_TRUE(Run(Options("gpu", "straight")).ok()) << log_.str();
  engine::TrainerOptions crashed = Options("gpu", "crashed");
  auto first = Run(crashed, [](int64_t step) {
    return step == 13 ? absl::AbortedError("killed at step 13") : absl::OkStatus();
  });
  ASSERT_FALSE(first.ok());
  ASSERT_TRUE(Run(crashed).ok()) << log_.str();
  EXPECT_NE(log_.str().find("Restored checkpoint at step 10"), std::string::npos) << log_.str();
  auto a = engine::ReadCheckpoint((dir_ / "straight" / "model.ckpt-40").string());
  auto b = engine::ReadCheckpoint((dir_ / "crashed" / "model.ckpt-40").string());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_GT(a->variables_size(), 0);
  ASSERT_EQ(a->variables_size(), b->variables_size());
  for (int i = 0; i < a->variables_size(); ++i) {
    std::vector<float> x = Floats(a->variables(i).value().data());
    std::vector<float> y = Floats(b->variables(i).value().data());
    ASSERT_EQ(x.size(), y.size());
    for (size_t j = 0; j < x.size(); ++j) {
      EXPECT_NEAR(x[j], y[j], 1e-5) << a->variables(i).name() << "[" << j << "]";
    }
  }
  EXPECT_EQ(b->optimizer().iterations(), 40);
}

}  // namespace
}  // namespace kubetrain::runtime::cmd
