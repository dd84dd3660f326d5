// End-to-end training on Fashion-MNIST (Debian's dataset-fashion-mnist).
// Skipped when the data set is not installed.
#include <filesystem>
#include <sstream>

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

}  // namespace
}  // namespace kubetrain::runtime::engine
