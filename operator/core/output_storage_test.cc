#include "operator/core/output_storage.h"

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace kubetrain::core {
namespace {

using google::protobuf::util::MessageDifferencer;

v1::TrainingJob Job(const std::string& job_dir) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("fmnist_hptuning");
  job.mutable_spec()->mutable_training_input()->set_job_dir(job_dir);
  return job;
}

v1::OutputLocation Location(const std::string& text) {
  v1::OutputLocation location;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &location).ok()) << text;
  return location;
}

void ExpectLocation(const v1::OutputLocation& got, const std::string& want) {
  EXPECT_TRUE(MessageDifferencer::Equals(got, Location(want)))
      << got.ShortDebugString() << " vs " << want;
}

TEST(OutputStorageTest, LocationNamesTheStorageUnderJobDir) {
  v1::TrainingJob job = Job("/outputs");
  // Local processes share the disk: just the folder.
  ExpectLocation(OutputLocationOf(job, false), R"({"path": "/outputs"})");
  // A pod's own filesystem: gone with it.
  ExpectLocation(OutputLocationOf(job, true), R"({"path": "/outputs", "ephemeral": true})");

  job.mutable_spec()->mutable_output_storage()->set_claim_name("team-outputs");
  job.mutable_spec()->mutable_output_storage()->set_sub_path("runs");
  ExpectLocation(OutputLocationOf(job, true),
                 R"({"path": "/outputs", "claimName": "team-outputs", "subPath": "runs"})");
  ExpectLocation(OutputLocationOf(job, false), R"({"path": "/outputs"})");

  job.mutable_spec()->mutable_output_storage()->Clear();
  job.mutable_spec()->mutable_output_storage()->mutable_new_claim()->set_size("1Gi");
  ExpectLocation(OutputLocationOf(job, true),
                 R"({"path": "/outputs", "claimName": "fmnist-hptuning-output"})");
  EXPECT_EQ(NewOutputClaimName(job), "fmnist-hptuning-output");

  job.mutable_spec()->mutable_output_storage()->Clear();
  job.mutable_spec()->mutable_output_storage()->set_volume_name("nfs");
  ExpectLocation(OutputLocationOf(job, true), R"({"path": "/outputs", "volumeName": "nfs"})");
  EXPECT_EQ(NewOutputClaimName(job), "");
}

TEST(OutputStorageTest, AVolumeTheTemplateMountsOverTheFolderCountsUnlessAnEmptyDir) {
  v1::TrainingJob job = Job("");
  job.mutable_spec()->mutable_training_input()->add_args("--output_path=/mnt/team/run1");
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"spec": {"containers": [{"volumeMounts": [
                        {"name": "team", "mountPath": "/mnt/team", "subPath": "alice"},
                        {"name": "scratch", "mountPath": "/scratch"}]}],
                      "volumes": [{"name": "team", "persistentVolumeClaim": {"claimName": "t"}},
                                  {"name": "scratch", "emptyDir": {}}]}})",
                  job.mutable_spec()->mutable_template_())
                  .ok());
  ExpectLocation(OutputLocationOf(job, true),
                 R"({"path": "/mnt/team/run1", "volumeName": "team", "subPath": "alice"})");
  job.mutable_spec()->mutable_training_input()->set_job_dir("/scratch/out");
  ExpectLocation(OutputLocationOf(job, true),
                 R"({"path": "/scratch/out", "volumeName": "scratch", "ephemeral": true})");
  EXPECT_THAT(EphemeralOutputsMessage(OutputLocationOf(job, true)),
              testing::StartsWith("the output folder /scratch/out is on volume \"scratch\", an "
                                  "emptyDir of each pod: checkpoints"));
  // A relative folder is in the container's working folder.
  job.mutable_spec()->mutable_training_input()->set_job_dir("out");
  EXPECT_TRUE(OutputLocationOf(job, true).ephemeral());
}

TEST(OutputStorageTest, AJobWithoutOutputsHasNoLocationAndIsNotEphemeral) {
  const v1::OutputLocation location = OutputLocationOf(Job(""), true);
  ExpectLocation(location, "{}");
  EXPECT_EQ(TrialOutputPath(location, "3"), "");
}

TEST(OutputStorageTest, TrialFoldersAreUnderThePath) {
  EXPECT_EQ(TrialOutputPath(Location(R"({"path": "/outputs"})"), "3"), "/outputs/3");
  EXPECT_EQ(TrialOutputPath(Location(R"({"path": "/outputs/"})"), "12"), "/outputs/12");
}

TEST(OutputStorageTest, MountIsJobDirWithTheClaimOrTheTemplatesVolume) {
  v1::TrainingJob job = Job("/outputs");
  EXPECT_FALSE(OutputMountOf(job).has_value());
  job.mutable_spec()->mutable_output_storage()->mutable_new_claim()->set_size("1Gi");
  std::optional<OutputMount> mount = OutputMountOf(job);
  ASSERT_TRUE(mount.has_value());
  EXPECT_EQ(mount->volume_name, kOutputVolumeName);
  EXPECT_EQ(mount->claim_name, "fmnist-hptuning-output");
  EXPECT_EQ(mount->mount_path, "/outputs");
  job.mutable_spec()->mutable_output_storage()->Clear();
  job.mutable_spec()->mutable_output_storage()->set_volume_name("nfs");
  mount = OutputMountOf(job);
  ASSERT_TRUE(mount.has_value());
  EXPECT_EQ(mount->volume_name, "nfs");
  EXPECT_EQ(mount->claim_name, "");
}

}  // namespace
}  // namespace kubetrain::core
