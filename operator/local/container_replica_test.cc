#include "operator/local/container_replica.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::local {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Not;

TEST(ContainerReplicaTest, RootRunsAsRootAndAnyOtherUserAsItselfInItsOwnNamespace) {
  ContainerRun run{.podman = "/usr/bin/podman",
                   .name = "kubetrain-0000abcd-j-master-0",
                   .image = "registry.example.com/trainer:1",
                   .env_names = {"TF_CONFIG", "RANK"},
                   .mounts = {"/home/u/.kubetrain/jobs/j/metrics"},
                   .args = {"--lr=0.1"}};
  EXPECT_THAT(ContainerRunArgv(run),
              ElementsAre("/usr/bin/podman", "run", "--rm", "--replace", "--name",
                          "kubetrain-0000abcd-j-master-0", "--network", "host", "--user", "0:0",
                          "--env", "TF_CONFIG", "--env", "RANK", "--volume",
                          "/home/u/.kubetrain/jobs/j/metrics:/home/u/.kubetrain/jobs/j/metrics",
                          "registry.example.com/trainer:1", "--lr=0.1"));
  run.uid = 1000;
  run.gid = 100;
  const std::vector<std::string> user = ContainerRunArgv(run);
  EXPECT_THAT(user, Contains("--userns=keep-id"));
  EXPECT_THAT(user, Contains("1000:100"));
  EXPECT_THAT(user, Not(Contains("0:0")));
}

TEST(ContainerReplicaTest, NamesAreStablePerHomeAndDifferAcrossHomes) {
  const std::string a = ContainerName("/home/a/.kubetrain", "j-master-0");
  EXPECT_EQ(a, ContainerName("/home/a/.kubetrain", "j-master-0"));
  EXPECT_NE(a, ContainerName("/home/b/.kubetrain", "j-master-0"));
  EXPECT_NE(a, ContainerName("/home/a/.kubetrain", "j-worker-0"));
  EXPECT_THAT(a, ::testing::MatchesRegex("kubetrain-[0-9a-f]{8}-j-master-0"));
}

TEST(ContainerReplicaTest, PodmanIsTheOneNamedElseTheOneOnPath) {
  test_support::TempDir dir("container-replica");
  const std::string saved_path = std::getenv("PATH");
  unsetenv("KUBETRAIN_PODMAN");
  setenv("PATH", (dir.path() + "/missing:" + dir.path()).c_str(), 1);
  EXPECT_EQ(FindPodman(), "");
  const std::string podman = dir.path() + "/podman";
  std::ofstream(podman) << "#!/bin/sh\n";
  EXPECT_EQ(FindPodman(), "") << "not executable";
  std::filesystem::permissions(podman, std::filesystem::perms::owner_all);
  EXPECT_EQ(FindPodman(), podman);
  setenv("KUBETRAIN_PODMAN", "/opt/podman/bin/podman", 1);
  EXPECT_EQ(FindPodman(), "/opt/podman/bin/podman");
  unsetenv("KUBETRAIN_PODMAN");
  setenv("PATH", saved_path.c_str(), 1);
}

TEST(ContainerReplicaTest, RemovingSaysWhenPodmanFails) {
  EXPECT_TRUE(RemoveContainer("/bin/true", "c").ok());
  const absl::Status failed = RemoveContainer("/bin/false", "c");
  EXPECT_THAT(failed.message(), ::testing::HasSubstr("removing container c: `/bin/false rm"));
  const absl::Status missing = RemoveContainer("/nonexistent/podman", "c");
  EXPECT_THAT(missing.message(),
              ::testing::HasSubstr("removing container c: cannot run /nonexistent/podman"));
}

}  // namespace
}  // namespace kubetrain::local
