// The built images (scripts/build-images.sh), run with podman as a cluster
// would run them: the runtime image trains as its non-root user on data
// mounted read-only, alone and as a 2-task parameter-server cluster of two
// containers on one network; the operator image serves its probes against
// the fake API server and creates the pods of a submitted job; the Python
// image runs a module under `kubetrain-runtime exec`. Also the archives and
// the sizes.
//
// Label `image`, built only with -DKUBETRAIN_IMAGE_TESTS=ON: `scripts/test.sh
// --images` builds the images, sets KUBETRAIN_IMAGE_ARCHIVES to the folder of
// their archives and runs these; they fail (not skip) when an image is missing.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/observability/http_get.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/deploy/child_process.h"
#include "tests/deploy/fake_cluster.h"
#include "tests/deploy/manifest_checks.h"
#include "tests/fake_apiserver/fake_apiserver.h"

#ifndef KUBETRAIN_VERSION
#error "KUBETRAIN_VERSION must be project(VERSION)"
#endif

namespace kubetrain::images_testing {
namespace {

using deploy_testing::ChildProcess;
using deploy_testing::CommandResult;
using deploy_testing::RunCommand;
using nlohmann::json;

constexpr char kDataDir[] = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kRuntimeImageLimitBytes = 250'000'000;

std::string Image(const std::string& name) {
  return absl::StrCat("docker.io/kubetrain/", name, ":", KUBETRAIN_VERSION);
}

// Names of containers and networks unique to this process, so runs on one
// machine do not collide.
std::string Unique(const std::string& what) {
  return absl::StrCat("kubetrain-smoke-", getpid(), "-", what);
}

CommandResult Podman(const std::string& args) { return RunCommand("podman " + args); }

// Removes the containers and the network a test made, whatever happened.
class Cleanup {
 public:
  ~Cleanup() {
    for (const std::string& c : containers_) Podman("rm -f -t 0 " + c + " >/dev/null 2>&1");
    for (const std::string& n : networks_) Podman("network rm -f " + n + " >/dev/null 2>&1");
  }
  void Container(const std::string& name) { containers_.push_back(name); }
  void Network(const std::string& name) { networks_.push_back(name); }

 private:
  std::vector<std::string> containers_, networks_;
};

class ImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(deploy_testing::OnPath("podman"))
        << "podman is not installed (scripts/install-deps.sh --images)";
    for (const char* name :
         {"kubetrain-operator", "kubetrain-runtime", "kubetrain-python-runtime"}) {
      ASSERT_EQ(Podman("image exists " + Image(name)).exit_code, 0)
          << Image(name) << " is not built: scripts/build-images.sh";
    }
  }
};

// The arguments of `kubetrain-runtime train` for 50 steps of the built-in
// MLP on the data mounted at /data.
std::string TrainArgs() {
  return "train --train_data_paths=/data/train-images-idx3-ubyte.gz"
         " --eval_data_paths=/data/t10k-images-idx3-ubyte.gz --max_steps=50";
}

TEST_F(ImageTest, RuntimeImageTrainsAsNonRootOnReadOnlyData) {
  CommandResult user =
      Podman("image inspect --format '{{.Config.User}}' " + Image("kubetrain-runtime"));
  EXPECT_EQ(absl::StripAsciiWhitespace(user.output), "65532:65532");
  // The mount is read-only for the trainer, and it runs as 65532.
  CommandResult probe = Podman(
      absl::StrCat("run --rm --network none -v ", kDataDir, ":/data:ro --entrypoint /bin/sh ",
                   Image("kubetrain-runtime"),
                   " -c 'id -u; touch /data/x 2>/dev/null && echo writable || echo read-only'"));
  EXPECT_EQ(probe.exit_code, 0) << probe.output;
  EXPECT_EQ(probe.output, "65532\nread-only\n");

  const std::string tf_config =
      R"({"cluster":{"master":["localhost:2222"]},"task":{"type":"master","index":0}})";
  CommandResult run = Podman(absl::StrCat(
      "run --rm --network none -v ", kDataDir, ":/data:ro -e 'TF_CONFIG=", tf_config, "' ",
      Image("kubetrain-runtime"), " ", TrainArgs(), " --job-dir /work/out 2>&1"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "Final metrics after 50 steps")) << run.output;
}

// A master and a parameter server, each its own container on one network,
// reaching each other by name as pods do through their Services.
TEST_F(ImageTest, RuntimeImagePsClusterOfTwoContainersTrains) {
  Cleanup cleanup;
  const std::string network = Unique("net");
  const std::string master = Unique("master-0"), ps = Unique("ps-0");
  ASSERT_EQ(Podman("network create " + network + " >/dev/null").exit_code, 0);
  cleanup.Network(network);
  const std::string cluster =
      absl::StrCat(R"({"cluster":{"master":[")", master, R"(:2222"],"ps":[")", ps, R"(:2222"]},)");
  auto run = [&](const std::string& name, const std::string& type, const std::string& mode,
                 const std::string& extra_args) {
    cleanup.Container(name);
    return Podman(absl::StrCat("run ", mode, " --name ", name, " --hostname ", name, " --network ",
                               network, " -v ", kDataDir, ":/data:ro -e 'TF_CONFIG=", cluster,
                               R"("task":{"type":")", type, R"(","index":0}}' )",
                               Image("kubetrain-runtime"), " ", TrainArgs(), extra_args, " 2>&1"));
  };
  // Without its parameter server the master does not train: it needs the
  // other container.
  CommandResult alone = run(master, "master", "--rm", " --connect_timeout_secs=5");
  EXPECT_EQ(alone.exit_code, 138) << alone.output;
  EXPECT_TRUE(absl::StrContains(alone.output, ps + ":2222")) << alone.output;

  CommandResult ps_start = run(ps, "ps", "-d", "");
  ASSERT_EQ(ps_start.exit_code, 0) << ps_start.output;
  CommandResult master_run = run(master, "master", "--rm", "");
  EXPECT_EQ(master_run.exit_code, 0) << master_run.output;
  EXPECT_TRUE(absl::StrContains(master_run.output, "Final metrics after 50 steps"))
      << master_run.output;
  // The parameter server served the master and ends with the job.
  CommandResult ps_exit = Podman("wait " + ps);
  CommandResult ps_log = Podman("logs " + ps);
  EXPECT_EQ(absl::StripAsciiWhitespace(ps_exit.output), "0") << ps_log.output;
}

TEST_F(ImageTest, OperatorImageServesProbesAndCreatesTheJobsPods) {
  Cleanup cleanup;
  auto cluster = deploy_testing::StartFakeCluster({.bearer_token = "image-test"}, "image_operator");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  fake_apiserver::FakeApiServer* server = cluster->server.get();
  // The operator runs as 65532: it must be able to read the kubeconfig.
  ASSERT_EQ(chmod(cluster->dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod((cluster->dir + "/kubeconfig").c_str(), 0644), 0);
  const std::string name = Unique("operator");
  cleanup.Container(name);
  CommandResult podman = RunCommand("command -v podman");
  ChildProcess op({std::string(absl::StripAsciiWhitespace(podman.output)), "run", "--rm", "--name",
                   name, "--network", "host", "-v", cluster->dir + ":/config:ro",
                   Image("kubetrain-operator"), "--kubeconfig", "/config/kubeconfig", "--namespace",
                   "ns1", "--leader-elect=false", "--http-address=127.0.0.1:0"},
                  cluster->dir + "/operator.log");
  ASSERT_TRUE(op.Start());

  // The container's process, then the port it listens on (port 0 above).
  std::optional<int> port;
  ASSERT_TRUE(fake_apiserver::PollUntil(
      [&] {
        CommandResult pid = Podman("inspect --format '{{.State.Pid}}' " + name + " 2>/dev/null");
        int container_pid = 0;
        if (pid.exit_code != 0 ||
            !absl::SimpleAtoi(absl::StripAsciiWhitespace(pid.output), &container_pid) ||
            container_pid <= 0) {
          return false;
        }
        port = deploy_testing::ListeningPort(container_pid);
        return port.has_value();
      },
      absl::Seconds(120)))
      << op.Log();
  for (const char* path : {"/healthz", "/readyz"}) {
    int status = 0;
    EXPECT_TRUE(fake_apiserver::PollUntil(
        [&] {
          auto response = observability::HttpGet("127.0.0.1", *port, path);
          status = response.ok() ? response->status : 0;
          return status == 200;
        },
        absl::Seconds(60)))
        << path << " answered " << status << "\n"
        << op.Log();
  }

  // 1 master, 2 workers, 1 parameter server.
  json job = {{"apiVersion", "kubetrain.io/v1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "smoke"}}},
              {"spec",
               {{"trainingInput",
                 {{"scaleTier", "CUSTOM"},
                  {"masterType", "standard"},
                  {"workerType", "standard"},
                  {"workerCount", "2"},
                  {"parameterServerType", "standard"},
                  {"parameterServerCount", "1"}}}}}};
  ASSERT_TRUE(server->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server->WaitUntil([&] { return server->Count("pods") == 4; }, absl::Seconds(60)))
      << server->Count("pods") << " pods\n"
      << op.Log();
  for (const json& pod : server->List("pods", "ns1")) {
    const json& container = pod["spec"]["containers"][0];
    EXPECT_EQ(container["image"], "kubetrain/kubetrain-runtime:" KUBETRAIN_VERSION);
    EXPECT_EQ(container["imagePullPolicy"], "IfNotPresent");
  }
  EXPECT_EQ(server->Count("services"), 4u);
}

TEST_F(ImageTest, PythonImageRunsAModuleUnderExec) {
  std::string dir = ::testing::TempDir() + "/image_python_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir + "/trainer").c_str(), 0755), 0);
  std::ofstream(dir + "/trainer/__init__.py") << "";
  std::ofstream(dir + "/trainer/task.py")
      << "import os, sys\n"
         "print('trainer uid', os.getuid(), 'args', ' '.join(sys.argv[1:]))\n"
         "sys.exit(3)\n";
  CommandResult run = Podman(
      absl::StrCat("run --rm --network none -v ", dir, ":/work/app:ro -e PYTHONPATH=/work/app ",
                   Image("kubetrain-python-runtime"), " python3 -m trainer.task --steps=5 2>&1"));
  // exec runs the module and ends with its exit code.
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "trainer uid 65532 args --steps=5")) << run.output;
  CommandResult pip = Podman("run --rm --network none " + Image("kubetrain-python-runtime") +
                             " python3 -m pip --version 2>&1");
  EXPECT_EQ(pip.exit_code, 0) << pip.output;
  EXPECT_TRUE(absl::StartsWith(pip.output, "pip ")) << pip.output;
}

// Each archive loads as the name the manifests use.
TEST_F(ImageTest, ArchivesCarryTheVersionedNames) {
  const char* archives = std::getenv("KUBETRAIN_IMAGE_ARCHIVES");
  ASSERT_NE(archives, nullptr) << "KUBETRAIN_IMAGE_ARCHIVES names no folder "
                                  "(scripts/test.sh --images sets it)";
  for (const char* name : {"kubetrain-operator", "kubetrain-runtime", "kubetrain-python-runtime"}) {
    const std::string archive = absl::StrCat(archives, "/", name, "-", KUBETRAIN_VERSION, ".tar");
    CommandResult manifest = RunCommand("tar -xOf " + archive + " manifest.json");
    ASSERT_EQ(manifest.exit_code, 0) << manifest.output;
    json parsed = json::parse(manifest.output, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(parsed.is_array() && parsed.size() == 1) << manifest.output;
    EXPECT_EQ(parsed[0]["RepoTags"], json::array({Image(name)})) << archive;
  }
}

TEST_F(ImageTest, RuntimeImageStaysSmall) {
  for (const char* name : {"kubetrain-operator", "kubetrain-runtime", "kubetrain-python-runtime"}) {
    CommandResult size = Podman("image inspect --format '{{.Size}}' " + Image(name));
    int64_t bytes = 0;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(size.output), &bytes)) << size.output;
    std::cout << Image(name) << ": " << bytes / 1000000 << " MB\n";
    if (std::string(name) == "kubetrain-runtime") EXPECT_LT(bytes, kRuntimeImageLimitBytes);
  }
}

}  // namespace
}  // namespace kubetrain::images_testing
