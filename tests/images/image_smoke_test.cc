// The built images (scripts/build-images.sh), run with podman as a cluster
// would run them: the runtime image trains as its non-root user on data
// mounted read-only, alone and as a 2-task parameter-server cluster of two
// containers on one network; the operator image serves its probes against
// the fake API server and creates the pods of a submitted job; the Python
// image runs a module under `kubetrain-runtime exec`, and installs and runs a
// packaged module as the operator renders its replica, its metric reaching a
// Metrics service. Also the archives and the sizes.
//
// Label `image`, built only with -DKUBETRAIN_IMAGE_TESTS=ON: `scripts/test.sh
// --images` builds the images, sets KUBETRAIN_IMAGE_ARCHIVES to the folder of
// their archives and runs these; they fail (not skip) when an image is missing.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/kubeflow.h"
#include "api/python_runtimes.h"
#include "cli/package_build.h"
#include "common/observability/http_get.h"
#include "common/testing/child_process.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/core/kube_objects.h"
#include "operator/core/python_module.h"
#include "operator/core/reconciler.h"
#include "operator/local/container_replica.h"
#include "operator/metrics/metrics_service.h"
#include "operator/metrics/metrics_test_server.h"
#include "tests/deploy/fake_cluster.h"
#include "tests/deploy/manifest_checks.h"
#include "tests/fake_apiserver/fake_apiserver.h"

#ifndef KUBETRAIN_VERSION
#error "KUBETRAIN_VERSION must be project(VERSION)"
#endif
#ifndef KUBETRAIN_SOURCE_DIR
#error "KUBETRAIN_SOURCE_DIR must be the source tree (examples/python-package)"
#endif

namespace kubetrain::images_testing {
namespace {

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

// `s` as one word of a shell command line.
std::string ShellQuote(const std::string& s) {
  return "'" + absl::StrReplaceAll(s, {{"'", "'\\''"}}) + "'";
}

constexpr char kMetricTag[] = "training/hptuning/metric";

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

// The container's environment as podman's -e flags, appended to `run_args`.
void AppendEnv(const json& container, std::string* run_args) {
  for (const json& e : container["env"]) {
    std::string value;
    if (e.contains("value")) {
      value = e["value"].get<std::string>();
    } else {
      // The one downward-API value kubetrain asks for, as the kubelet
      // resolves it: the container's CPU request in millicores.
      ASSERT_EQ(e["valueFrom"]["resourceFieldRef"]["resource"], "requests.cpu") << e.dump();
      ASSERT_EQ(e["valueFrom"]["resourceFieldRef"]["divisor"], "1m") << e.dump();
      const std::string cpu = container["resources"]["requests"].value("cpu", "0");
      value = absl::EndsWith(cpu, "m") ? cpu.substr(0, cpu.size() - 1)
                                       : std::to_string(std::lround(std::stod(cpu) * 1000));
    }
    absl::StrAppend(run_args, " -e ",
                    ShellQuote(absl::StrCat(e["name"].get<std::string>(), "=", value)));
  }
}

// A real Metrics service on this machine that takes trial 1 of `job_key`
// ("namespace/name"), and the pod the operator renders for that trial's
// only replica, told to report there.
struct TrialMetricsService {
  explicit TrialMetricsService(const std::string& job_key)
      : service(&tokens, &sink), server(metrics::LoopbackServer::Start(&service)) {
    tokens.Register(job_key, "1", token);
  }
  bool serving() const { return server != nullptr; }
  json TrialOnePod(const v1::TrainingJob& job, const tuner::Assignment& hyperparameters) {
    const std::vector<json> pods =
        TrialOnePods(job, hyperparameters, core::KubernetesAddresses(job.metadata().namespace_()));
    EXPECT_EQ(pods.size(), 1u);
    return pods.empty() ? json::object() : pods[0];
  }
  // Every pod of trial 1, the replicas reaching each other at `address`.
  std::vector<json> TrialOnePods(const v1::TrainingJob& job,
                                 const tuner::Assignment& hyperparameters,
                                 core::AddressFn address) {
    core::ReconcileOptions options;
    options.address = std::move(address);
    options.metrics_address = server->address();
    options.trial_token = [this](const std::string&, const std::string&) { return token; };
    std::vector<json> pods;
    for (const core::DesiredReplica& replica :
         core::DesiredReplicas(job, "1", hyperparameters, options)) {
      pods.push_back(core::RenderPod(job, job.metadata().namespace_(), replica));
    }
    return pods;
  }

  metrics::TokenRegistry tokens;
  metrics::RecordingReportSink sink;
  metrics::MetricsServiceImpl service;
  std::unique_ptr<metrics::LoopbackServer> server;
  const std::string token = metrics::NewTrialToken();
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
  test_support::ChildProcess op(
      {std::string(absl::StripAsciiWhitespace(podman.output)), "run", "--rm", "--name", name,
       "--network", "host", "-v", cluster->dir + ":/config:ro", Image("kubetrain-operator"),
       "--kubeconfig", "/config/kubeconfig", "--namespace", "ns1", "--leader-elect=false",
       "--http-address=127.0.0.1:0"},
      cluster->dir + "/operator.log");
  ASSERT_TRUE(op.Start().ok());

  // The container's process, then the port it listens on (port 0 above).
  std::optional<int> port;
  ASSERT_TRUE(test_support::WaitUntil(
      [&] {
        CommandResult pid = Podman("inspect --format '{{.State.Pid}}' " + name + " 2>/dev/null");
        int container_pid = 0;
        if (pid.exit_code != 0 ||
            !absl::SimpleAtoi(absl::StripAsciiWhitespace(pid.output), &container_pid) ||
            container_pid <= 0) {
          return false;
        }
        port = test_support::ListeningPort(container_pid);
        return port.has_value();
      },
      absl::Seconds(120)))
      << op.Log();
  for (const char* path : {"/healthz", "/readyz"}) {
    int status = 0;
    EXPECT_TRUE(test_support::WaitUntil(
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
  test_support::TempDir tmp("kubetrain-image-python");
  const std::string dir = tmp.path();
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

// Cloud ML's package workflow in the image, as a cluster runs it: the replica
// the operator renders for a pythonModule job whose package the CLI stored
// (configmap://), run with podman as the kubelet would: the package file at
// its volume's mount path, read-only, and the container's command, args and
// env as rendered. exec installs the sdist of examples/python-package into a
// virtual environment and runs its module, whose cloudml-hypertune reports
// reach a real Metrics service on this machine.
TEST_F(ImageTest, PythonImageInstallsAPackagedModuleWhoseReportsArrive) {
  const std::string python_version = absl::StrCat(
      "Python ", api::PythonRuntimeCatalog::BuiltIn().runtimes().front().python_version, ".");
  CommandResult version = Podman("run --rm --network none " + Image("kubetrain-python-runtime") +
                                 " python3 --version 2>&1");
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_TRUE(absl::StartsWith(version.output, python_version))
      << "the table of api/python_runtimes.cc says " << python_version << "x, the image has "
      << version.output;

  absl::StatusOr<cli::BuiltPackage> sdist =
      cli::BuildSdist(std::string(KUBETRAIN_SOURCE_DIR) + "/examples/python-package/trainer");
  ASSERT_TRUE(sdist.ok()) << sdist.status();
  test_support::TempDir tmp("kubetrain-image-package");
  const std::string dir = tmp.path();
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  // The job's folder, written by the trainer (uid 65532).
  const std::string outputs = dir + "/outputs";
  ASSERT_EQ(mkdir(outputs.c_str(), 0777), 0);
  ASSERT_EQ(chmod(outputs.c_str(), 0777), 0);

  v1::TrainingJob job;
  job.mutable_metadata()->set_name("lr-study");
  job.mutable_metadata()->set_namespace_("team-a");
  job.mutable_metadata()->set_uid("uid-1");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_python_module("trainer.task");
  input->add_package_uris("configmap://lr-study-package/" + sdist->file_name);
  input->add_args("--num_epochs=2");
  input->set_job_dir("/outputs");
  v1::ParameterSpec* lr = input->mutable_hyperparameters()->add_params();
  lr->set_parameter_name("learning_rate");
  lr->set_type(v1::ParameterSpec::DOUBLE);
  lr->set_min_value(0.001);
  lr->set_max_value(3.0);

  TrialMetricsService metrics_service("team-a/lr-study");
  ASSERT_TRUE(metrics_service.serving());
  const json pod = metrics_service.TrialOnePod(job, {{"learning_rate", "0.1"}});
  metrics::RecordingReportSink& sink = metrics_service.sink;
  const json& container = pod["spec"]["containers"][0];
  // The image the table picks is the one this build made.
  EXPECT_EQ(container["image"], "kubetrain/kubetrain-python-runtime:" KUBETRAIN_VERSION);

  // The kubelet's part: each ConfigMap volume's items as files, mounted
  // read-only where the container mounts the volume.
  std::string run_args = "run --rm --network host";
  int volumes = 0;
  for (const json& mount : container["volumeMounts"]) {
    for (const json& volume : pod["spec"]["volumes"]) {
      if (volume["name"] != mount["name"]) continue;
      ASSERT_EQ(volume["configMap"]["name"], "lr-study-package");  // what the CLI stores
      const std::string files = absl::StrCat(dir, "/volume-", volumes++);
      ASSERT_EQ(mkdir(files.c_str(), 0755), 0);
      for (const json& item : volume["configMap"]["items"]) {
        std::ofstream(files + "/" + item["path"].get<std::string>(), std::ios::binary)
            << sdist->bytes;
      }
      absl::StrAppend(&run_args, " -v ", files, ":", mount["mountPath"].get<std::string>(), ":ro");
    }
  }
  ASSERT_EQ(volumes, 1) << container.dump();
  absl::StrAppend(&run_args, " -v ", outputs, ":/outputs");
  ASSERT_NO_FATAL_FAILURE(AppendEnv(container, &run_args));
  // The image's entry replaced by the container's command, as Kubernetes does.
  absl::StrAppend(&run_args, " --entrypoint ", ShellQuote(container["command"].dump()), " ",
                  Image("kubetrain-python-runtime"));
  for (const json& arg : container["args"]) {
    absl::StrAppend(&run_args, " ", ShellQuote(arg.get<std::string>()));
  }
  CommandResult run = Podman(run_args + " 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run_args << "\n" << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "Successfully installed trainer-0.1")) << run.output;

  // One report per epoch, from the trial's master, at its global step.
  const std::vector<metrics::MetricsReport> reports = sink.reports();
  ASSERT_EQ(reports.size(), 2u) << run.output;
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].job, "team-a/lr-study");
    EXPECT_EQ(reports[i].trial, "1");
    EXPECT_EQ(reports[i].task, "master-0");
    EXPECT_EQ(reports[i].step, 400 * static_cast<int64_t>(i + 1));
    ASSERT_EQ(reports[i].values.count(kMetricTag), 1u);
    EXPECT_GT(reports[i].values.at(kMetricTag), 0.8);
    EXPECT_LE(reports[i].values.at(kMetricTag), 1.0);
  }
  // The installed module ran (not a copy on the search path) with the trial's
  // hyperparameter, in the trial's folder of the job.
  std::ifstream model_file(outputs + "/1/model.json");
  ASSERT_TRUE(model_file.good()) << run.output;
  const json model = json::parse(model_file, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(model.is_object()) << run.output;
  EXPECT_EQ(model["learning_rate"], 0.1);
  EXPECT_TRUE(
      absl::StrContains(model["module"].get<std::string>(), "/site-packages/trainer/task.py"))
      << model.dump();
  EXPECT_EQ(model["accuracy"], reports.back().values.at(kMetricTag));
}

// A tuning trial whose master runs its own image's entrypoint, as the
// operator renders it and a kubelet runs it: an image built FROM the Python
// runtime whose ENTRYPOINT writes cloudml-hypertune's file, and the metrics
// sidecar from the runtime image (`kubetrain-runtime collect`) on the
// volume both mount; the sidecar is stopped once the trainer has ended, and
// every report reaches a real Metrics service on this machine.
TEST_F(ImageTest, AnEntrypointTrialReportsThroughTheMetricsSidecar) {
  Cleanup cleanup;
  test_support::TempDir tmp("kubetrain-image-entrypoint");
  const std::string dir = tmp.path();
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  std::ofstream(dir + "/trainer.py")
      << "import json, os, sys, time\n"
         "x = int([a for a in sys.argv[1:] if a.startswith('--x=')][0][4:])\n"
         "lines = []\n"
         "for step in (1, 2, 3):\n"
         "    lines.append(json.dumps({'accuracy': str(x * step), 'global_step': str(step),\n"
         "                             'timestamp': time.time()}))\n"
         "    with open(os.environ['CLOUD_ML_HP_METRIC_FILE'], 'w') as f:\n"
         "        f.write('\\n'.join(lines) + '\\n')\n"
         "    time.sleep(0.3)\n";
  std::ofstream(dir + "/Containerfile") << "FROM " << Image("kubetrain-python-runtime") << "\n"
                                        << "COPY trainer.py /trainer.py\n"
                                           "ENTRYPOINT [\"python3\", \"/trainer.py\"]\n";
  const std::string trainer_image = "localhost/" + Unique("trainer") + ":1";
  CommandResult built =
      Podman(absl::StrCat("build --network none -t ", trainer_image, " ", dir, " 2>&1"));
  ASSERT_EQ(built.exit_code, 0) << built.output;
  struct RemoveImage {
    std::string name;
    ~RemoveImage() { Podman("rmi -f " + name + " >/dev/null 2>&1"); }
  } remove_image{trainer_image};

  v1::TrainingJob job;
  job.mutable_metadata()->set_name("entry");
  job.mutable_metadata()->set_namespace_("team-a");
  job.mutable_metadata()->set_uid("uid-1");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->mutable_master_config()->set_image_uri(trainer_image);
  input->mutable_hyperparameters()->set_hyperparameter_metric_tag("accuracy");
  v1::ParameterSpec* x = input->mutable_hyperparameters()->add_params();
  x->set_parameter_name("x");
  x->set_type(v1::ParameterSpec::INTEGER);
  x->set_min_value(1);
  x->set_max_value(100);
  TrialMetricsService metrics_service("team-a/entry");
  ASSERT_TRUE(metrics_service.serving());
  const json pod = metrics_service.TrialOnePod(job, {{"x", "7"}});
  metrics::RecordingReportSink& sink = metrics_service.sink;
  const json& trainer = pod["spec"]["containers"][0];
  ASSERT_FALSE(trainer.contains("command")) << trainer.dump();
  ASSERT_EQ(pod["spec"]["initContainers"].size(), 1u) << pod.dump();
  const json& sidecar = pod["spec"]["initContainers"][0];
  // The image the sidecar names is the one this build made.
  EXPECT_EQ(sidecar["image"], "kubetrain/kubetrain-runtime:" KUBETRAIN_VERSION);

  // The emptyDir, writable by both containers' users.
  const std::string shared = dir + "/metrics";
  ASSERT_EQ(mkdir(shared.c_str(), 0777), 0);
  ASSERT_EQ(chmod(shared.c_str(), 0777), 0);
  auto volume_args = [&](const json& container) {
    std::string args;
    for (const json& mount : container["volumeMounts"]) {
      EXPECT_EQ(mount["name"], "kubetrain-metrics") << container.dump();
      absl::StrAppend(&args, " -v ", shared, ":", mount["mountPath"].get<std::string>());
    }
    return args;
  };
  const std::string sidecar_name = Unique("metrics");
  cleanup.Container(sidecar_name);
  std::string sidecar_args =
      absl::StrCat("run -d --name ", sidecar_name, " --network host", volume_args(sidecar));
  ASSERT_NO_FATAL_FAILURE(AppendEnv(sidecar, &sidecar_args));
  absl::StrAppend(&sidecar_args, " --entrypoint ", ShellQuote(sidecar["command"].dump()), " ",
                  Image("kubetrain-runtime"));
  CommandResult started = Podman(sidecar_args + " 2>&1");
  ASSERT_EQ(started.exit_code, 0) << sidecar_args << "\n" << started.output;

  // The trainer: no --entrypoint, the image's own runs with the args.
  std::string run_args = "run --rm --network host" + volume_args(trainer);
  ASSERT_NO_FATAL_FAILURE(AppendEnv(trainer, &run_args));
  absl::StrAppend(&run_args, " ", trainer_image);
  for (const json& arg : trainer["args"]) {
    absl::StrAppend(&run_args, " ", ShellQuote(arg.get<std::string>()));
  }
  CommandResult run = Podman(run_args + " 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run_args << "\n" << run.output;

  // The kubelet stops the sidecar (SIGTERM) once the trainer has ended.
  CommandResult stopped = Podman("stop -t 25 " + sidecar_name + " 2>&1");
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  CommandResult code = Podman("inspect --format '{{.State.ExitCode}}' " + sidecar_name + " 2>&1");
  CommandResult logs = Podman("logs " + sidecar_name + " 2>&1");
  EXPECT_EQ(absl::StripAsciiWhitespace(code.output), "0") << logs.output;
  const std::vector<metrics::MetricsReport> reports = sink.reports();
  ASSERT_EQ(reports.size(), 3u) << logs.output;
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].job, "team-a/entry");
    EXPECT_EQ(reports[i].trial, "1");
    EXPECT_EQ(reports[i].task, "master-0");
    EXPECT_EQ(reports[i].step, static_cast<int64_t>(i + 1));
    ASSERT_EQ(reports[i].values.count("accuracy"), 1u) << logs.output;
    EXPECT_EQ(reports[i].values.at("accuracy"), 7.0 * static_cast<double>(i + 1));
  }
}

// An image FROM the Python runtime whose ENTRYPOINT is
// tests/images/allreduce_trainer.py: a PyTorch-style data-parallel trainer
// (env:// rendezvous) that reports through cloudml-hypertune's file. Removed
// with the object.
class AllReduceTrainerImage {
 public:
  AllReduceTrainerImage() : name_("localhost/" + Unique("allreduce") + ":1") {}
  ~AllReduceTrainerImage() { Podman("rmi -f " + name_ + " >/dev/null 2>&1"); }
  const std::string& name() const { return name_; }

  CommandResult Build() {
    std::ofstream(dir_.path() + "/Containerfile")
        << "FROM " << Image("kubetrain-python-runtime") << "\n"
        << "COPY allreduce_trainer.py /trainer.py\n"
           "ENTRYPOINT [\"python3\", \"/trainer.py\"]\n"
           "CMD []\n";
    std::filesystem::copy_file(KUBETRAIN_SOURCE_DIR "/tests/images/allreduce_trainer.py",
                               dir_.path() + "/allreduce_trainer.py");
    return Podman(absl::StrCat("build --network none -t ", name_, " ", dir_.path(), " 2>&1"));
  }

 private:
  test_support::TempDir dir_{"kubetrain-image-allreduce"};
  const std::string name_;
};

// What allreduce_trainer.py printed in `log`: each rank's weights digest, by
// rank, and rank 0's last test accuracy (-1 when none).
struct AllReduceRun {
  std::map<int, std::string> weights;
  double accuracy = -1;
  int64_t step = -1;
};
AllReduceRun ReadAllReduceRun(const std::string& log) {
  AllReduceRun run;
  static const std::regex kDone(R"(rank (\d+) done after \d+ steps: weights ([0-9a-f]+))");
  static const std::regex kAccuracy(R"(step (\d+): test accuracy ([0-9.]+))");
  for (std::sregex_iterator it(log.begin(), log.end(), kDone), end; it != end; ++it) {
    run.weights[std::stoi((*it)[1])] = (*it)[2];
  }
  for (std::sregex_iterator it(log.begin(), log.end(), kAccuracy), end; it != end; ++it) {
    run.step = std::stoll((*it)[1]);
    run.accuracy = std::stod((*it)[2]);
  }
  return run;
}

// The local backend runs a Kubeflow PyTorchJob whose containers have no
// command with podman: master + 2 workers of the image above, each its
// image's entrypoint, joined through the rendezvous variables on this
// machine's network, train as one group (every rank ends with the same
// weights). The same job with a tuning spec gets each trial's objective from
// the cloudml-hypertune file its master container writes.
TEST_F(ImageTest, ANoCommandPyTorchJobTrainsAndTunesOnTheLocalBackend) {
  AllReduceTrainerImage trainer;
  CommandResult built = trainer.Build();
  ASSERT_EQ(built.exit_code, 0) << built.output;
  test_support::TempDir home("kubetrain-image-local-home");
  test_support::TempDir work("kubetrain-image-local");
  struct StopController {
    std::string home;
    ~StopController() {
      int pid = 0;
      std::istringstream(test_support::ReadFile(home + "/controller.lock")) >> pid;
      if (pid > 0) kill(pid, SIGKILL);
    }
  } stop_controller{home.path()};
  auto kubetrain = [&](const std::string& args) {
    return RunCommand(absl::StrCat("KUBETRAIN_HOME=", ShellQuote(home.path()), " ",
                                   ShellQuote(KUBETRAIN_CLI), " ", args, " 2>&1 </dev/null"));
  };

  const std::string container = absl::StrCat(
      "          containers:\n"
      "            - name: pytorch\n"
      "              image: ",
      trainer.name(), "\n              args: [--steps=60]\n");
  const std::string manifest = work.path() + "/pytorchjob.yaml";
  std::ofstream(manifest) << "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n"
                             "metadata:\n  name: allreduce\nspec:\n  pytorchReplicaSpecs:\n"
                             "    Master:\n      replicas: 1\n      template:\n        spec:\n"
                          << container
                          << "    Worker:\n      replicas: 2\n      template:\n        spec:\n"
                          << container;
  CommandResult run =
      kubetrain("jobs submit training allreduce --local --wait --config " + ShellQuote(manifest));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "Job [allreduce] ended SUCCEEDED")) << run.output;
  CommandResult logs = kubetrain("jobs stream-logs allreduce --local");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(absl::StrContains(
        logs.output, absl::StrCat("rank ", rank, " of 3: MASTER_ADDR=127.0.0.1 MASTER_PORT=")))
        << logs.output;
  }
  const AllReduceRun group = ReadAllReduceRun(logs.output);
  ASSERT_EQ(group.weights.size(), 3u) << logs.output;
  EXPECT_EQ(group.weights.at(1), group.weights.at(0));
  EXPECT_EQ(group.weights.at(2), group.weights.at(0));
  EXPECT_EQ(group.step, 60);
  EXPECT_GT(group.accuracy, 0.8) << logs.output;
  std::cout << "PyTorchJob, master + 2 workers in containers: test accuracy " << group.accuracy
            << ", weights " << group.weights.at(0) << " on every rank\n";

  // The same replicas as the converted job, with a tuning spec.
  const std::string replica_config = absl::StrCat("{imageUri: ", trainer.name(), "}");
  const std::string study = work.path() + "/study.yaml";
  std::ofstream(study) << "apiVersion: kubetrain.io/v1\nkind: TrainingJob\n"
                          "metadata: {name: allreduce_study}\nspec:\n  trainingInput:\n"
                          "    framework: PYTORCH\n    scaleTier: CUSTOM\n"
                          "    masterType: standard\n    workerType: standard\n"
                          "    workerCount: 2\n    masterConfig: "
                       << replica_config << "\n    workerConfig: " << replica_config
                       << "\n    args: [--steps=60]\n"
                          "    hyperparameters:\n      goal: MAXIMIZE\n      maxTrials: 2\n"
                          "      maxParallelTrials: 2\n      hyperparameterMetricTag: accuracy\n"
                          "      params:\n        - {parameterName: learning_rate, type: DOUBLE, "
                          "minValue: 0.001, maxValue: 1.0, scaleType: UNIT_LOG_SCALE}\n";
  run = kubetrain("jobs submit training allreduce_study --local --wait --config " +
                  ShellQuote(study));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  CommandResult described = kubetrain("jobs describe allreduce_study --local --format json");
  ASSERT_EQ(described.exit_code, 0) << described.output;
  const json job = json::parse(described.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(job.is_object()) << described.output;
  EXPECT_EQ(job["state"], "SUCCEEDED") << described.output;
  const json& trials = job["trainingOutput"]["trials"];
  ASSERT_EQ(trials.size(), 2u) << described.output;
  for (const json& trial : trials) {
    const std::string id = trial["trialId"].get<std::string>();
    EXPECT_EQ(trial["state"], "SUCCEEDED") << trial.dump();
    // The objective is what the trial's master container reported last.
    const AllReduceRun master = ReadAllReduceRun(test_support::ReadFile(absl::StrCat(
        home.path(), "/jobs/allreduce_study/logs/trial-", id, "/master-replica-0.log")));
    ASSERT_TRUE(trial.contains("finalMetric")) << trial.dump();
    EXPECT_EQ(trial["finalMetric"]["trainingStep"], "60") << trial.dump();
    EXPECT_NEAR(trial["finalMetric"]["objectiveValue"].get<double>(), master.accuracy, 1e-9)
        << trial.dump();
    std::cout << "trial " << id << ": learning_rate " << trial["hyperparameters"]["learning_rate"]
              << ", objective " << trial["finalMetric"]["objectiveValue"] << "\n";
  }
  // Every container was removed with its replica.
  const std::string our_containers =
      "ps -a --format '{{.Names}}' --filter name=" + local::ContainerName(home.path(), "");
  EXPECT_EQ(absl::StripAsciiWhitespace(Podman(our_containers).output), "");

  // Cancelled while it trains: its containers end with their replicas.
  const std::string long_manifest =
      absl::StrReplaceAll(test_support::ReadFile(manifest), {{"--steps=60", "--steps=1000000"}});
  std::ofstream(manifest) << long_manifest;
  run = kubetrain("jobs submit training long_run --local --config " + ShellQuote(manifest));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(test_support::WaitUntil(
      [&] { return absl::StrContains(Podman(our_containers).output, "long-run-worker-1"); },
      absl::Seconds(60)))
      << Podman(our_containers).output;
  run = kubetrain("jobs cancel long_run --local");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // The job is CANCELLED once the controller has seen every replica end,
  // which can come after podman has already removed the containers.
  EXPECT_TRUE(test_support::WaitUntil(
      [&] {
        described = kubetrain("jobs describe long_run --local --format json");
        return absl::StrContains(described.output, "\"CANCELLED\"");
      },
      absl::Seconds(60), absl::Milliseconds(200)))
      << described.output;
  EXPECT_TRUE(test_support::WaitUntil(
      [&] { return absl::StripAsciiWhitespace(Podman(our_containers).output).empty(); },
      absl::Seconds(60)))
      << Podman(our_containers).output;
}

// The same PyTorchJob as a cluster runs it: a trial of the converted job with
// a tuning spec, its three pods as the operator renders them, each run with
// podman as a kubelet would (the image's entrypoint, no command), on one
// network where they reach each other by name; the master's metrics sidecar
// forwards what the trainer writes to the cloudml-hypertune file to a real
// Metrics service on this machine, and the trial's objective arrives.
TEST_F(ImageTest, ANoCommandPyTorchJobTrialRunsAsMasterAndTwoWorkerPods) {
  Cleanup cleanup;
  AllReduceTrainerImage trainer;
  CommandResult built = trainer.Build();
  ASSERT_EQ(built.exit_code, 0) << built.output;
  const std::string container = absl::StrCat(
      "          containers:\n"
      "            - name: pytorch\n"
      "              image: ",
      trainer.name(), "\n              args: [--steps=60]\n");
  api::KubeflowConversion converted = api::ConvertKubeflowJob(absl::StrCat(
      "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: allreduce\n"
      "  namespace: team-a\nspec:\n  pytorchReplicaSpecs:\n"
      "    Master:\n      replicas: 1\n      template:\n        spec:\n",
      container, "    Worker:\n      replicas: 2\n      template:\n        spec:\n", container));
  ASSERT_TRUE(converted.ok()) << (converted.errors.empty() ? "" : converted.errors[0].ToString());
  v1::TrainingJob job = converted.job;
  job.mutable_metadata()->set_uid("uid-1");
  v1::HyperparameterSpec* tuning =
      job.mutable_spec()->mutable_training_input()->mutable_hyperparameters();
  tuning->set_goal(v1::HyperparameterSpec::MAXIMIZE);
  tuning->set_max_trials(1);
  tuning->set_hyperparameter_metric_tag("accuracy");
  v1::ParameterSpec* rate = tuning->add_params();
  rate->set_parameter_name("learning_rate");
  rate->set_type(v1::ParameterSpec::DOUBLE);
  rate->set_min_value(0.001);
  rate->set_max_value(1);

  TrialMetricsService metrics_service("team-a/allreduce");
  ASSERT_TRUE(metrics_service.serving());
  const std::string network = Unique("pytorch-net");
  ASSERT_EQ(Podman("network create " + network + " >/dev/null").exit_code, 0);
  cleanup.Network(network);
  // Each pod's container is named for its pod, which is its address here.
  const std::vector<json> pods = metrics_service.TrialOnePods(
      job, {{"learning_rate", "0.3"}}, [](std::string_view pod, const core::ReplicaKey&, int port) {
        return absl::StrCat(Unique(std::string(pod)), ":", port);
      });
  ASSERT_EQ(pods.size(), 3u);

  // The emptyDir, writable by both containers' users.
  test_support::TempDir tmp("kubetrain-image-pytorch");
  ASSERT_EQ(chmod(tmp.path().c_str(), 0755), 0);
  const std::string shared = tmp.path() + "/metrics";
  ASSERT_EQ(mkdir(shared.c_str(), 0777), 0);
  ASSERT_EQ(chmod(shared.c_str(), 0777), 0);
  auto run_args = [&](const json& pod, const json& c, const std::string& mode) {
    const std::string name = Unique(pod["metadata"]["name"].get<std::string>()) +
                             (c["name"] == "kubetrain" ? "" : "-" + c["name"].get<std::string>());
    cleanup.Container(name);
    std::string args = absl::StrCat("run ", mode, " --name ", name);
    for (const json& mount : c.value("volumeMounts", json::array())) {
      EXPECT_EQ(mount["name"], "kubetrain-metrics") << c.dump();
      absl::StrAppend(&args, " -v ", shared, ":", mount["mountPath"].get<std::string>());
    }
    AppendEnv(c, &args);
    return std::make_pair(name, args);
  };
  std::vector<std::string> workers;
  std::string master_args, master_name, sidecar_name;
  for (const json& pod : pods) {
    const json& trainer_container = pod["spec"]["containers"][0];
    ASSERT_EQ(trainer_container["name"], "kubetrain") << pod.dump();
    ASSERT_FALSE(trainer_container.contains("command")) << trainer_container.dump();
    ASSERT_EQ(trainer_container["image"], trainer.name());
    const bool master = absl::EndsWith(pod["metadata"]["name"].get<std::string>(), "-master-0");
    ASSERT_EQ(pod["spec"].contains("initContainers"), master) << pod.dump();
    if (master) {
      // The sidecar reaches the Metrics service on this machine's loopback.
      const json& sidecar = pod["spec"]["initContainers"][0];
      auto [name, args] = run_args(pod, sidecar, "-d --network host");
      absl::StrAppend(&args, " --entrypoint ", ShellQuote(sidecar["command"].dump()), " ",
                      Image("kubetrain-runtime"));
      CommandResult started = Podman(args + " 2>&1");
      ASSERT_EQ(started.exit_code, 0) << args << "\n" << started.output;
      sidecar_name = name;
    }
    auto [name, args] = run_args(pod, trainer_container,
                                 master ? "--network " + network : "-d --network " + network);
    absl::StrAppend(&args, " ", trainer.name());
    for (const json& arg : trainer_container["args"]) {
      absl::StrAppend(&args, " ", ShellQuote(arg.get<std::string>()));
    }
    if (master) {
      master_name = name;
      master_args = args;
    } else {
      CommandResult started = Podman(args + " 2>&1");
      ASSERT_EQ(started.exit_code, 0) << args << "\n" << started.output;
      workers.push_back(name);
    }
  }
  CommandResult master_run = Podman(master_args + " 2>&1");
  EXPECT_EQ(master_run.exit_code, 0) << master_args << "\n" << master_run.output;
  std::string log = master_run.output;
  for (const std::string& worker : workers) {
    CommandResult code = Podman("wait " + worker);
    CommandResult worker_log = Podman("logs " + worker + " 2>&1");
    EXPECT_EQ(absl::StripAsciiWhitespace(code.output), "0") << worker_log.output;
    log += worker_log.output;
  }
  // The kubelet stops the sidecar (SIGTERM) once the trainer has ended.
  CommandResult stopped = Podman("stop -t 25 " + sidecar_name + " 2>&1");
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  CommandResult sidecar_log = Podman("logs " + sidecar_name + " 2>&1");

  const AllReduceRun group = ReadAllReduceRun(log);
  ASSERT_EQ(group.weights.size(), 3u) << log;
  EXPECT_EQ(group.weights.at(1), group.weights.at(0));
  EXPECT_EQ(group.weights.at(2), group.weights.at(0));
  EXPECT_TRUE(absl::StrContains(log, "rank 2 of 3: MASTER_ADDR=" + Unique("allreduce-t1-master-0")))
      << log;
  // Every report of the master (steps 20, 40, 60) reached the Metrics
  // service as trial 1's, the last being the objective.
  const std::vector<metrics::MetricsReport> reports = metrics_service.sink.reports();
  ASSERT_EQ(reports.size(), 3u) << sidecar_log.output;
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].job, "team-a/allreduce");
    EXPECT_EQ(reports[i].trial, "1");
    EXPECT_EQ(reports[i].task, "master-0");
    EXPECT_EQ(reports[i].step, static_cast<int64_t>(20 * (i + 1)));
  }
  ASSERT_EQ(reports.back().values.count("accuracy"), 1u) << sidecar_log.output;
  EXPECT_NEAR(reports.back().values.at("accuracy"), group.accuracy, 1e-9);
  EXPECT_GT(group.accuracy, 0.8) << log;
  std::cout << "trial 1 in 3 pods: objective " << reports.back().values.at("accuracy")
            << " through the sidecar, weights " << group.weights.at(0) << " on every rank\n";
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
    if (std::string(name) == "kubetrain-runtime") {
      EXPECT_LT(bytes, kRuntimeImageLimitBytes);
    }
  }
}

}  // namespace
}  // namespace kubetrain::images_testing
