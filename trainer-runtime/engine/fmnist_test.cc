// End-to-end training on Fashion-MNIST (Debian's dataset-fashion-mnist).
// Skipped when the data set is not installed.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "trainer-runtime/engine/trainer.h"

namespace kubetrain::runtime::engine {
namespace {

constexpr char kDir[] = "/usr/share/datasets/fashion-mnist";

TEST(FashionMnistTest, MlpReaches082AfterOneEpoch) {
  if (!std::filesystem::exists(std::string(kDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed";
  }
  TrainerOptions o;
  o.train_data_paths = std::string(kDir) + "/train-images-idx3-ubyte.gz";
  o.eval_data_paths = std::string(kDir) + "/t10k-images-idx3-ubyte.gz";
  o.model = "mlp";
  o.optimizer = "adam";
  o.learning_rate = 0.001;
  o.batch_size = 128;
  o.num_epochs = 1;
  o.eval_every_secs = 0;
  o.threads = 1;  // BLAS threads spin; one is steadier on a shared machine
  std::ostringstream log;
  TrainerEnvironment env;
  env.log = &log;
  absl::StatusOr<TrainResult> r = Train(o, std::move(env));
  ASSERT_TRUE(r.ok()) << r.status();
  std::cout << log.str();
  EXPECT_EQ(r->global_step, 469);
  EXPECT_GE(r->final_accuracy, 0.82);
}

TrainerOptions CnnRun() {
  TrainerOptions o;
  o.train_data_paths = std::string(kDir) + "/train-images-idx3-ubyte.gz";
  o.eval_data_paths = std::string(kDir) + "/t10k-images-idx3-ubyte.gz";
  o.model = "cnn";
  o.optimizer = "adam";
  o.learning_rate = 0.001;
  o.batch_size = 128;
  o.eval_every_secs = 0;
  o.threads = 1;
  o.seed = 3;
  o.log_every_steps = 100;
  return o;
}

// The bar for the oneDNN kernels: one epoch of the built-in cnn
// reaches the BLAS path's test accuracy within half a point (same seed,
// same batches, same dropout masks; only the float rounding differs).
TEST(FashionMnistTest, CnnOneEpochAccuracyIsTheSameOnBothKernelPaths) {
  if (!std::filesystem::exists(std::string(kDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed";
  }
  if (!OneDnnAvailable()) GTEST_SKIP() << "this build has no oneDNN kernels";
  std::map<CpuKernels, double> accuracy;
  for (CpuKernels kernels : {CpuKernels::kOneDnn, CpuKernels::kBlas}) {
    TrainerOptions o = CnnRun();
    o.num_epochs = 1;
    o.cpu_kernels = kernels;
    std::ostringstream log;
    TrainerEnvironment env;
    env.log = &log;
    absl::StatusOr<TrainResult> r = Train(o, std::move(env));
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << log.str();
    EXPECT_EQ(r->global_step, 469);
    accuracy[kernels] = r->final_accuracy;
    std::cout << "cnn, 1 epoch, --cpu_kernels=" << CpuKernelsName(kernels) << ": test accuracy "
              << r->final_accuracy << std::endl;
  }
  EXPECT_GE(accuracy[CpuKernels::kBlas], 0.85);
  EXPECT_NEAR(accuracy[CpuKernels::kOneDnn], accuracy[CpuKernels::kBlas], 0.005);
}

// Checkpoints hold row-major variables whichever kernels wrote them: a cnn
// run stopped after step 13 resumes from step 10 on the other path and ends
// where an uninterrupted run does, up to the paths' rounding.
TEST(FashionMnistTest, CnnCheckpointsRestoreOnTheOtherKernelPath) {
  if (!std::filesystem::exists(std::string(kDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed";
  }
  if (!OneDnnAvailable()) GTEST_SKIP() << "this build has no oneDNN kernels";
  test_support::TempDir folder("kubetrain-cnn-checkpoints");
  const std::filesystem::path dir = folder.path();
  TrainerOptions o = CnnRun();
  o.batch_size = 32;
  o.max_steps = 20;
  o.save_checkpoints_steps = 10;
  o.log_every_steps = 10;
  for (CpuKernels first : {CpuKernels::kOneDnn, CpuKernels::kBlas}) {
    const CpuKernels second =
        first == CpuKernels::kOneDnn ? CpuKernels::kBlas : CpuKernels::kOneDnn;
    SCOPED_TRACE(absl::StrCat(CpuKernelsName(first), " then ", CpuKernelsName(second)));
    TrainerOptions whole = o;
    whole.cpu_kernels = first;
    whole.output_path = (dir / absl::StrCat("whole_", CpuKernelsName(first))).string();
    std::ostringstream log;
    TrainerEnvironment env;
    env.log = &log;
    absl::StatusOr<TrainResult> uninterrupted = Train(whole, std::move(env));
    ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status() << "\n" << log.str();

    TrainerOptions split = o;
    split.cpu_kernels = first;
    split.output_path = (dir / absl::StrCat("split_", CpuKernelsName(first))).string();
    TrainerEnvironment killed;
    killed.log = &log;
    killed.after_step = [](int64_t step) {
      return step == 13 ? absl::AbortedError("killed at step 13") : absl::OkStatus();
    };
    ASSERT_FALSE(Train(split, std::move(killed)).ok());
    split.cpu_kernels = second;
    std::ostringstream resumed_log;
    TrainerEnvironment resumed;
    resumed.log = &resumed_log;
    absl::StatusOr<TrainResult> r = Train(split, std::move(resumed));
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << resumed_log.str();
    EXPECT_NE(resumed_log.str().find("Restored checkpoint at step 10"), std::string::npos)
        << resumed_log.str();
    EXPECT_EQ(r->global_step, 20);
    EXPECT_NEAR(r->final_loss, uninterrupted->final_loss, 0.01 * uninterrupted->final_loss);
    EXPECT_NEAR(r->final_accuracy, uninterrupted->final_accuracy, 0.01);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kubetrain::runtime::engine
