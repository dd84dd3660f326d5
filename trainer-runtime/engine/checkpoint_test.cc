#include "trainer-runtime/engine/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::runtime::engine {
namespace {

namespace fs = std::filesystem;

v1::Checkpoint At(int64_t step) {
  v1::Checkpoint c;
  c.set_global_step(step);
  c.add_variables()->set_name("w");
  return c;
}

TEST(CheckpointTest, SavesIndexAndKeepsTheNewest) {
  test_support::TempDir dir_folder("kubetrain-ckpt");
  std::string dir = dir_folder.path();
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
  test_support::TempDir dir_folder("kubetrain-ckpt-noindex");
  std::string dir = dir_folder.path();
  ASSERT_TRUE(SaveCheckpoint(dir, At(5)).ok());
  ASSERT_TRUE(SaveCheckpoint(dir, At(12)).ok());
  fs::remove(fs::path(dir) / "checkpoint");
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(fs::path(**latest).filename(), "model.ckpt-12");
}

TEST(CheckpointTest, CorruptFileIsDataLoss) {
  test_support::TempDir dir_folder("kubetrain-ckpt-corrupt");
  std::string dir = dir_folder.path();
  std::string path = (fs::path(dir) / "model.ckpt-3").string();
  std::ofstream(path) << "\xff\xff\xff garbage";
  auto read = ReadCheckpoint(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find(path), std::string::npos);
}

// ---- Whose checkpoints a run restores ----

using ::testing::HasSubstr;

v1::CheckpointOwner Owner(const std::string& uid, const std::string& name, const std::string& trial,
                          const std::string& fingerprint = "00000000000000aa") {
  v1::CheckpointOwner owner;
  owner.set_job_uid(uid);
  owner.set_job_name(name);
  owner.set_trial_id(trial);
  owner.set_model_fingerprint(fingerprint);
  return owner;
}

v1::Checkpoint OwnedAt(int64_t step, const v1::CheckpointOwner& owner) {
  v1::Checkpoint c = At(step);
  *c.mutable_owner() = owner;
  return c;
}

TEST(OutputFolderTest, AnEmptyFolderIsTheRunsOwn) {
  test_support::TempDir dir_folder("kubetrain-owner-empty");
  std::string dir = dir_folder.path();
  auto folder = ResolveOutputFolder(dir, Owner("uid-a", "a", "1"));
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->path, dir);
  EXPECT_EQ(folder->moved_because, "");
  EXPECT_FALSE(folder->latest.has_value());
  // A folder that does not exist yet, too.
  folder = ResolveOutputFolder(dir + "/not-yet", Owner("uid-a", "a", "1"));
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->path, dir + "/not-yet");
}

TEST(OutputFolderTest, TheSameJobsTrialResumesFromItsOwnCheckpoint) {
  test_support::TempDir dir_folder("kubetrain-owner-same");
  std::string dir = dir_folder.path();
  const v1::CheckpointOwner me = Owner("uid-a", "a", "3");
  ASSERT_TRUE(SaveCheckpoint(dir, OwnedAt(40, me)).ok());
  auto folder = ResolveOutputFolder(dir, me);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->path, dir);
  ASSERT_TRUE(folder->latest.has_value());
  EXPECT_EQ(folder->latest->global_step(), 40);
}

TEST(OutputFolderTest, AnotherJobsCheckpointSendsTheRunToItsOwnSubfolder) {
  test_support::TempDir dir_folder("kubetrain-owner-other-job");
  std::string dir = dir_folder.path();
  const v1::CheckpointOwner earlier = Owner("11111111-aaaa", "fmnist", "3");
  ASSERT_TRUE(SaveCheckpoint(dir, OwnedAt(785, earlier)).ok());
  // Another job (even of the same name, even with the same model), the same
  // job's other trial, and a checkpoint without owner are all foreign.
  for (const v1::CheckpointOwner& me :
       {Owner("22222222-bbbb", "fmnist_2", "3"), Owner("33333333-cccc", "fmnist", "3"),
        Owner("11111111-aaaa", "fmnist", "4")}) {
    auto folder = ResolveOutputFolder(dir, me);
    ASSERT_TRUE(folder.ok()) << folder.status();
    EXPECT_EQ(folder->path, dir + "/" + OwnFolderName(me));
    EXPECT_FALSE(folder->latest.has_value());
    EXPECT_THAT(folder->moved_because, HasSubstr("model.ckpt-785"));
    EXPECT_THAT(folder->moved_because, HasSubstr("job 'fmnist' (uid 11111111-aaaa, trial 3)"));
  }
  EXPECT_EQ(OwnFolderName(Owner("22222222-bbbb", "fmnist_2", "3")), "fmnist_2-22222222");

  // The run's own checkpoints there are found again after a restart, and
  // the earlier job's folder is as it was.
  const v1::CheckpointOwner me = Owner("22222222-bbbb", "fmnist_2", "3");
  ASSERT_TRUE(SaveCheckpoint(dir + "/" + OwnFolderName(me), OwnedAt(100, me)).ok());
  auto again = ResolveOutputFolder(dir, me);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->path, dir + "/" + OwnFolderName(me));
  ASSERT_TRUE(again->latest.has_value());
  EXPECT_EQ(again->latest->global_step(), 100);
  EXPECT_EQ(again->latest->owner().job_uid(), "22222222-bbbb");
  auto theirs = LatestCheckpoint(dir);
  ASSERT_TRUE(theirs.ok() && theirs->has_value());
  EXPECT_EQ(fs::path(**theirs).filename(), "model.ckpt-785");

  test_support::TempDir ownerless_folder("kubetrain-owner-none");
  std::string ownerless = ownerless_folder.path();
  ASSERT_TRUE(SaveCheckpoint(ownerless, At(7)).ok());
  auto folder = ResolveOutputFolder(ownerless, me);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->path, ownerless + "/" + OwnFolderName(me));
  EXPECT_THAT(folder->moved_because, HasSubstr("a run that recorded no owner"));
}

TEST(OutputFolderTest, AJobsOwnCheckpointOfAnotherModelIsAnError) {
  test_support::TempDir dir_folder("kubetrain-owner-model-changed");
  std::string dir = dir_folder.path();
  ASSERT_TRUE(SaveCheckpoint(dir, OwnedAt(5, Owner("uid-a", "a", "1", "1111"))).ok());
  auto folder = ResolveOutputFolder(dir, Owner("uid-a", "a", "1", "2222"));
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(folder.status().message(), HasSubstr(dir));
  EXPECT_THAT(folder.status().message(), HasSubstr("the model changed"));
  // Without a fingerprint to compare (the evaluator) it is the run's own.
  folder = ResolveOutputFolder(dir, Owner("uid-a", "a", "1", ""));
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_TRUE(folder->latest.has_value());
}

TEST(OutputFolderTest, ARunByHandResumesOnlyItsOwnModel) {
  const v1::CheckpointOwner by_hand = Owner("", "", "", "00000000000000aa");
  test_support::TempDir dir_folder("kubetrain-owner-hand");
  std::string dir = dir_folder.path();
  ASSERT_TRUE(SaveCheckpoint(dir, OwnedAt(9, by_hand)).ok());
  auto same = ResolveOutputFolder(dir, by_hand);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->path, dir);
  ASSERT_TRUE(same->latest.has_value());

  auto other_model = ResolveOutputFolder(dir, Owner("", "", "", "00000000000000bb"));
  ASSERT_FALSE(other_model.ok());
  EXPECT_EQ(other_model.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other_model.status().message(), HasSubstr("--output_path " + dir));
  EXPECT_THAT(other_model.status().message(), HasSubstr("not of this model"));

  test_support::TempDir job_dir_folder("kubetrain-owner-hand-job");
  std::string job_dir = job_dir_folder.path();
  ASSERT_TRUE(SaveCheckpoint(job_dir, OwnedAt(9, Owner("uid-j", "tuned", "2"))).ok());
  auto jobs = ResolveOutputFolder(job_dir, by_hand);
  ASSERT_FALSE(jobs.ok());
  EXPECT_THAT(jobs.status().message(), HasSubstr("job 'tuned' (uid uid-j, trial 2)"));

  // Checkpoints from before owners were recorded: resumed (their shapes are
  // still checked when restored).
  test_support::TempDir old_folder("kubetrain-owner-hand-old");
  std::string old = old_folder.path();
  ASSERT_TRUE(SaveCheckpoint(old, At(3)).ok());
  auto legacy = ResolveOutputFolder(old, by_hand);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->path, old);
  EXPECT_TRUE(legacy->latest.has_value());
}

TEST(OutputFolderTest, FingerprintsNameTheModelAndOptimizer) {
  v1::GraphDef a;
  a.add_nodes()->set_name("dense_0/kernel");
  (*a.mutable_nodes(0)->mutable_attrs())["shape"].mutable_ints()->add_values(784);
  (*a.mutable_nodes(0)->mutable_attrs())["dtype"].set_s("float");
  v1::GraphDef b = a;
  b.mutable_nodes(0)->mutable_attrs()->at("shape").mutable_ints()->set_values(0, 785);
  const std::string fa = ModelFingerprint(a, "adam");
  EXPECT_EQ(fa.size(), 16u);
  EXPECT_EQ(fa, ModelFingerprint(a, "adam"));
  EXPECT_NE(fa, ModelFingerprint(b, "adam"));
  EXPECT_NE(fa, ModelFingerprint(a, "sgd"));
}

}  // namespace
}  // namespace kubetrain::runtime::engine
