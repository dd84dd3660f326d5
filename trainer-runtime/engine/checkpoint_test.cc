#include "trainer-runtime/engine/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace kubetrain::runtime::engine {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

v1::Checkpoint At(int64_t step) {
  v1::Checkpoint c;
  c.set_global_step(step);
  c.add_variables()->set_name("w");
  return c;
}

TEST(CheckpointTest, SavesIndexAndKeepsTheNewest) {
  std::string dir = TempDir("ckpt");
  EXPECT_FALSE(LatestCheckpoint(dir)->has_value());
  for (int64_t step : {10, 20, 30, 40}) ASSERT_TRUE(SaveCheckpoint(dir, At(step), 3).ok());
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(fs::path(**latest).filename(), "model.ckpt-40");
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.ckpt-10"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model.ckpt-20"));
  std::ifstream index(fs::path(dir) / "checkpoint");
  std::string first;
  std::getline(index, first);
  EXPECT_EQ(first, "model_checkpoint_path: \"model.ckpt-40\"");
  auto read = ReadCheckpoint(**latest);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->global_step(), 40);
  // No temporary files left behind.
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST(CheckpointTest, WithoutIndexFindsHighestStep) {
  std::string dir = TempDir("ckpt-noindex");
  ASSERT_TRUE(SaveCheckpoint(dir, At(5)).ok());
  ASSERT_TRUE(SaveCheckpoint(dir, At(12)).ok());
  fs::remove(fs::path(dir) / "checkpoint");
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(fs::path(**latest).filename(), "model.ckpt-12");
}

TEST(CheckpointTest, CorruptFileIsDataLoss) {
  std::string dir = TempDir("ckpt-corrupt");
  std::string path = (fs::path(dir) / "model.ckpt-3").string();
  std::ofstream(path) << "\xff\xff\xff garbage";
  auto read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace kubetrain::runtime::engine
