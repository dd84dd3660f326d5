// Cloud ML's package workflow on the replica side, without a cluster: the
// trainer package of examples/python-package, built into an sdist by the
// CLI's builder (what `jobs submit training --package-path` stores in the
// cluster), installed and run by the real `kubetrain-runtime exec`; the
// module's cloudml-hypertune reports arrive at a real Metrics service.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "cli/package_build.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/core/kube_objects.h"
#include "operator/core/python_module.h"
#include "operator/core/reconciler.h"
#include "operator/metrics/metrics_service.h"
#include "operator/metrics/metrics_test_server.h"

namespace kubetrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kMetricTag[] = "training/hptuning/metric";
const std::string kExample = std::string(KUBETRAIN_SOURCE_DIR) + "/examples/python-package";

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Quote(const std::string& s) {
  return "'" + absl::StrReplaceAll(s, {{"'", "'\\''"}}) + "'";
}

class PackageWorkflowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_);
    service_ = std::make_unique<metrics::MetricsServiceImpl>(&tokens_, &sink_);
    server_ = metrics::LoopbackServer::Start(service_.get());
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_.reset(); }

  // Runs `argv` as a replica's container would: in `dir_`, with nothing of
  // the test's environment but Debian's PATH (its python3 has pip and
  // setuptools) and `env`. Its exit code; output in log_. A sanitizer
  // build's options go through too: they belong to the instrumented binary
  // (its suppressions, where its reports go), not to the replica.
  int RunReplica(const std::vector<std::string>& argv,
                 const std::vector<std::pair<std::string, std::string>>& env) {
    std::string command = absl::StrCat("cd ", Quote(dir_.string()), " && env -i PATH=/usr/bin:/bin",
                                       " HOME=", Quote(dir_.string()));
    for (const char* name : {"TSAN_OPTIONS", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"}) {
      if (const char* value = std::getenv(name)) {
        absl::StrAppend(&command, " ", name, "=", Quote(value));
      }
    }
    for (const auto& [name, value] : env) absl::StrAppend(&command, " ", name, "=", Quote(value));
    for (const std::string& arg : argv) absl::StrAppend(&command, " ", Quote(arg));
    absl::StrAppend(&command, " > ", Quote(log_.string()), " 2>&1");
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // The replica's working folder, and its log beside it.
  test_support::TempDir folder_{"kubetrain-package-workflow"};
  const fs::path dir_ = folder_.Path("work");
  const fs::path log_ = folder_.Path("replica.log");
  metrics::TokenRegistry tokens_;
  metrics::RecordingReportSink sink_;
  std::unique_ptr<metrics::MetricsServiceImpl> service_;
  std::unique_ptr<metrics::LoopbackServer> server_;
};

TEST_F(PackageWorkflowTest, ExecInstallsTheSdistAndForwardsItsModulesReports) {
  absl::StatusOr<cli::BuiltPackage> sdist = cli::BuildSdist(kExample + "/trainer");
  ASSERT_TRUE(sdist.ok()) << sdist.status();
  EXPECT_EQ(sdist->file_name, "trainer-0.1.tar.gz");
  const fs::path package = dir_ / sdist->file_name;
  std::ofstream(package, std::ios::binary) << sdist->bytes;

  const std::string token = metrics::NewTrialToken();
  tokens_.Register("team-a/lr-study", "2", token);
  const int code =
      RunReplica({KUBETRAIN_RUNTIME_BINARY, "exec", "--poll-interval", "50ms", "--package",
                  package.string(), "--", "python3", "-m", "trainer.task", "--num_epochs=3",
                  "--learning_rate=0.05", "--job-dir", (dir_ / "out").string()},
                 {{"KUBETRAIN_METRICS_ADDR", server_->address()},
                  {"KUBETRAIN_METRICS_TOKEN", token},
                  {"KUBETRAIN_NAMESPACE", "team-a"},
                  {"KUBETRAIN_JOB_NAME", "lr-study"},
                  {"KUBETRAIN_TRIAL_ID", "2"},
                  {"CLOUD_ML_TRIAL_ID", "2"},
                  {"KUBETRAIN_TASK_TYPE", "master"},
                  {"KUBETRAIN_TASK_INDEX", "0"}});
  const std::string log = Slurp(log_);
  ASSERT_EQ(code, 0) << log;
  EXPECT_THAT(log, HasSubstr("Successfully installed trainer-0.1"));

  // Every epoch's report, in order, at its global step.
  const std::vector<metrics::MetricsReport> reports = sink_.reports();
  ASSERT_EQ(reports.size(), 3u) << log;
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].job, "team-a/lr-study");
    EXPECT_EQ(reports[i].trial, "2");
    EXPECT_EQ(reports[i].task, "master-0");
    EXPECT_EQ(reports[i].step, 400 * static_cast<int64_t>(i + 1));
    ASSERT_EQ(reports[i].values.count(kMetricTag), 1u);
    EXPECT_GT(reports[i].values.at(kMetricTag), 0.8);
    EXPECT_LE(reports[i].values.at(kMetricTag), 1.0);
  }
  // The module that ran was the installed one, in exec's environment (now
  // removed), not the example's folder; it got its flags and --job-dir.
  const json model = json::parse(Slurp(dir_ / "out" / "model.json"));
  const std::string module = model["module"];
  EXPECT_THAT(module, HasSubstr("/venv/lib/python3"));
  EXPECT_THAT(module, HasSubstr("/site-packages/trainer/task.py"));
  EXPECT_THAT(module, Not(HasSubstr(kExample)));
  EXPECT_FALSE(fs::exists(module)) << "exec's environment outlived it";
  EXPECT_EQ(model["learning_rate"], 0.05);
  EXPECT_EQ(model["accuracy"], reports.back().values.at(kMetricTag));
}

// The pod the operator renders for a pythonModule job, run by a stand-in
// kubelet: the ConfigMap volume becomes files at the mount path (under a
// folder of the test), the container's command, args and env run as they
// are, with kubetrain-runtime the binary of this build.
TEST_F(PackageWorkflowTest, TheRenderedReplicaInstallsItsStoredPackageAndReports) {
  absl::StatusOr<cli::BuiltPackage> sdist = cli::BuildSdist(kExample + "/trainer");
  ASSERT_TRUE(sdist.ok()) << sdist.status();
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("lr-study");
  job.mutable_metadata()->set_namespace_("team-a");
  job.mutable_metadata()->set_uid("uid-1");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_python_module("trainer.task");
  input->add_package_uris("configmap://lr-study-package/" + sdist->file_name);
  input->add_args("--num_epochs=2");
  input->set_job_dir((dir_ / "outputs").string());
  v1::ParameterSpec* lr = input->mutable_hyperparameters()->add_params();
  lr->set_parameter_name("learning_rate");
  lr->set_type(v1::ParameterSpec::DOUBLE);
  lr->set_min_value(0.001);
  lr->set_max_value(3.0);
  const std::string token = metrics::NewTrialToken();
  tokens_.Register("team-a/lr-study", "1", token);
  core::ReconcileOptions options;
  options.address = core::KubernetesAddresses("team-a");
  options.metrics_address = server_->address();
  options.trial_token = [&](const std::string&, const std::string&) { return token; };
  const std::vector<core::DesiredReplica> replicas =
      core::DesiredReplicas(job, "1", {{"learning_rate", "0.1"}}, options);
  ASSERT_EQ(replicas.size(), 1u);
  const json pod = core::RenderPod(job, "team-a", replicas[0]);

  // The kubelet's part: volumes, then the container.
  const fs::path root = dir_ / "node";
  const json& container = pod["spec"]["containers"][0];
  for (const json& mount : container["volumeMounts"]) {
    for (const json& volume : pod["spec"]["volumes"]) {
      if (volume["name"] != mount["name"]) continue;
      ASSERT_EQ(volume["configMap"]["name"], "lr-study-package");  // what the CLI stores
      for (const json& item : volume["configMap"]["items"]) {
        const fs::path file = root /
                              fs::path(mount["mountPath"].get<std::string>()).relative_path() /
                              item["path"].get<std::string>();
        fs::create_directories(file.parent_path());
        std::ofstream(file, std::ios::binary) << sdist->bytes;
      }
    }
  }
  std::vector<std::string> argv;
  for (const json& arg : container["command"]) argv.push_back(arg);
  for (const json& arg : container["args"]) argv.push_back(arg);
  ASSERT_EQ(argv[0], "kubetrain-runtime");
  argv[0] = KUBETRAIN_RUNTIME_BINARY;
  for (std::string& arg : argv) {
    if (arg.rfind(core::kPackageMountRoot, 0) == 0)
      arg = (root / fs::path(arg).relative_path()).string();
  }
  std::vector<std::pair<std::string, std::string>> env;
  for (const json& e : container["env"]) {
    // The downward API's CPU request has no kubelet here to fill it in.
    if (e.contains("value")) env.emplace_back(e["name"], e["value"]);
  }
  const int code = RunReplica(argv, env);
  const std::string log = Slurp(log_);
  ASSERT_EQ(code, 0) << log;
  const std::vector<metrics::MetricsReport> reports = sink_.reports();
  ASSERT_EQ(reports.size(), 2u) << log;
  EXPECT_EQ(reports[1].trial, "1");
  EXPECT_EQ(reports[1].step, 800);
  // The trial's folder, and its hyperparameter.
  const json model = json::parse(Slurp(dir_ / "outputs" / "1" / "model.json"));
  EXPECT_EQ(model["learning_rate"], 0.1);
  EXPECT_EQ(model["accuracy"], reports.back().values.at(kMetricTag));
}

// setup.py sdist works in the package's folder: builds of one folder at once
// (two submits, or these tests run in parallel) take turns rather than
// deleting each other's release tree.
TEST_F(PackageWorkflowTest, BuildsOfOneFolderAtOnceAllSucceed) {
  constexpr int kBuilds = 4;
  std::vector<absl::StatusOr<cli::BuiltPackage>> built(kBuilds, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kBuilds; ++i) {
    threads.emplace_back([&built, i] { built[i] = cli::BuildSdist(kExample + "/trainer"); });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::StatusOr<cli::BuiltPackage>& sdist : built) {
    ASSERT_TRUE(sdist.ok()) << sdist.status();
    EXPECT_EQ(sdist->file_name, "trainer-0.1.tar.gz");
  }
}

TEST_F(PackageWorkflowTest, ThePackageOfAFolderWithoutSetupPyIsItsPythonCode) {
  const fs::path source = dir_ / "src" / "mytrainer";
  fs::create_directories(source / "sub" / "__pycache__");
  std::ofstream(source / "__init__.py");
  std::ofstream(source / "sub" / "__init__.py");
  std::ofstream(source / "sub" / "task.py") << "print('mytrainer.sub.task ran')\n";
  std::ofstream(source / "sub" / "__pycache__" / "task.cpython-311.pyc") << "stale";
  absl::StatusOr<cli::BuiltPackage> sdist =
      cli::BuildSdist(source.string() + "/", "/usr/bin/python3");
  ASSERT_TRUE(sdist.ok()) << sdist.status();
  EXPECT_EQ(sdist->file_name, "mytrainer-0.0.0.tar.gz");
  // The user's folder is left as it was: no egg-info, build or dist.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "src"), fs::directory_iterator()), 1);
  const fs::path package = dir_ / sdist->file_name;
  std::ofstream(package, std::ios::binary) << sdist->bytes;
  fs::remove_all(dir_ / "src");  // only the sdist is left to import from
  const int code = RunReplica({KUBETRAIN_RUNTIME_BINARY, "exec", "--package", package.string(),
                               "--", "python3", "-m", "mytrainer.sub.task"},
                              {});
  EXPECT_EQ(code, 0) << Slurp(log_);
  EXPECT_THAT(Slurp(log_), HasSubstr("mytrainer.sub.task ran"));

  EXPECT_EQ(cli::BuildSdist((dir_ / "nowhere").string()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain
