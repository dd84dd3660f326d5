// `kubetrain jobs` without --local: TrainingJob resources on a (fake)
// Kubernetes API server, through the CLI library and the real binary.
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "api/python_runtimes.h"
#include "cli/jobs_cluster.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/kube/controller.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/study_store.h"
#include "operator/kube/test_objects.h"
#include "operator/kube/trial_archive.h"
#include "operator/tuner/tuner.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::TrainingJob Job(const std::string& id) {
  v1::TrainingJob job;
  job.set_api_version("kubetrain.io/v1");
  job.set_kind("TrainingJob");
  job.mutable_metadata()->set_name(id);
  job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::BASIC);
  job.mutable_spec()->mutable_training_input()->add_args("--num_epochs=1");
  return job;
}

class ClusterJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = fake_apiserver::FakeApiServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    kube::ClusterConfig config;
    config.server = server_->url();
    auto client = kube::RestClusterClient::Create(config);
    ASSERT_TRUE(client.ok()) << client.status();
    jobs_ = std::make_unique<ClusterJobs>(*std::move(client), "team-a");
  }

  // Runs the kubetrain binary with a kubeconfig of the fake server
  // (namespace team-a) in `dir`: its exit code and output.
  std::pair<int, std::string> RunCli(const test_support::TempDir& dir, const std::string& args) {
    const std::string kubeconfig = dir.path() + "/config";
    std::ofstream(kubeconfig)
        << "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        << "clusters: [{name: k, cluster: {server: '" << server_->url() << "'}}]\n"
        << "users: [{name: u, user: {token: t}}]\n"
        << "contexts: [{name: c, context: {cluster: k, user: u, namespace: team-a}}]\n";
    const std::string out = dir.path() + "/out";
    std::string command =
        absl::StrCat("KUBECONFIG=", kubeconfig, " KUBETRAIN_BACKEND= KUBETRAIN_HOME=", dir.path(),
                     " ", KUBETRAIN_CLI, " ", args, " >", out, " 2>&1");
    int status = std::system(command.c_str());
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str());
  }

  std::unique_ptr<fake_apiserver::FakeApiServer> server_;
  std::unique_ptr<ClusterJobs> jobs_;
};

TEST_F(ClusterJobsTest, CreateGetListCancelKeepTheCloudMlJobId) {
  ASSERT_TRUE(jobs_->Create(Job("fmnist_hptuning")).ok());
  auto object = server_->Get("trainingjobs", "team-a", "fmnist-hptuning");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ((*object)["metadata"]["annotations"][kJobIdAnnotation], "fmnist_hptuning");
  EXPECT_EQ((*object)["spec"]["trainingInput"]["args"][0], "--num_epochs=1");

  auto job = jobs_->Get("fmnist_hptuning");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->metadata().name(), "fmnist_hptuning");
  EXPECT_EQ(job->spec().training_input().scale_tier(), v1::TrainingInput::BASIC);

  EXPECT_EQ(jobs_->Create(Job("fmnist_hptuning")).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(jobs_->Create(Job("second")).ok());
  auto list = jobs_->List();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 2u);

  ASSERT_TRUE(jobs_->Cancel("fmnist_hptuning").ok());
  EXPECT_EQ((*server_->Get("trainingjobs", "team-a", "fmnist-hptuning"))["spec"]["cancel"], true);

  auto missing = jobs_->Get("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("team-a"));
  EXPECT_EQ(jobs_->Cancel("nope").code(), absl::StatusCode::kNotFound);
}

// Trials past the first 100 live in ConfigMaps of the job (the operator's
// archive); describe shows them with the ones in status, and not those of an
// earlier job of the same name.
TEST_F(ClusterJobsTest, ArchivedTrialsAreReadFromTheJobsConfigMaps) {
  ASSERT_TRUE(jobs_->Create(Job("big_study")).ok());
  auto job = jobs_->Get("big_study");
  ASSERT_TRUE(job.ok()) << job.status();
  v1::HyperparameterOutput trial;
  trial.set_trial_id("7");
  trial.set_state(v1::SUCCEEDED);
  trial.mutable_final_metric()->set_objective_value(0.8804);
  nlohmann::json archive = kube::NewArchive(*job, "team-a", kube::ArchiveName("big-study", "7"));
  kube::AddToArchive(archive, trial);
  ASSERT_TRUE(server_->Create("configmaps", "team-a", archive).ok());
  v1::TrainingJob earlier = *job;
  earlier.mutable_metadata()->set_uid("an-earlier-uid");
  nlohmann::json theirs = kube::NewArchive(earlier, "team-a", "big-study-trials-9");
  trial.set_trial_id("401");
  kube::AddToArchive(theirs, trial);
  ASSERT_TRUE(server_->Create("configmaps", "team-a", theirs).ok());

  auto archived = jobs_->ArchivedTrials(*job);
  ASSERT_TRUE(archived.ok()) << archived.status();
  ASSERT_EQ(archived->size(), 1u);
  EXPECT_EQ((*archived)[0].trial_id(), "7");
  EXPECT_EQ((*archived)[0].final_metric().objective_value(), 0.8804);
}

TEST_F(ClusterJobsTest, CliWithoutLocalUsesTheKubeconfig) {
  test_support::TempDir dir;
  const std::string config = dir.path() + "/job.yaml";
  std::ofstream(config) << "trainingInput:\n  scaleTier: BASIC\n";
  auto run = [&](const std::string& args) { return RunCli(dir, args); };
  auto [code, out] = run("jobs submit training cli_job --config " + config);
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("Job [cli_job] submitted successfully."));
  ASSERT_TRUE(server_->Get("trainingjobs", "team-a", "cli-job").ok());
  auto [dcode, describe] = run("jobs describe cli_job");
  EXPECT_EQ(dcode, 0) << describe;
  EXPECT_THAT(describe, HasSubstr("jobId: cli_job"));
  EXPECT_THAT(describe, Not(HasSubstr("waiting:")));
  // The operator's ReplicasWaiting condition, as describe shows it.
  ASSERT_TRUE(server_
                  ->MergePatch("trainingjobs", "team-a", "cli-job",
                               {{"status",
                                 {{"state", "PREPARING"},
                                  {"conditions",
                                   {{{"type", "ReplicasWaiting"},
                                     {"status", "True"},
                                     {"reason", "ErrImagePull"},
                                     {"message", "master-0 cannot pull image \"t:1\""}}}}}}},
                               "status")
                  .ok());
  std::tie(dcode, describe) = run("jobs describe cli_job");
  EXPECT_EQ(dcode, 0) << describe;
  EXPECT_THAT(describe, HasSubstr("waiting:\n  message: master-0 cannot pull image \"t:1\"\n  "
                                  "reason: ErrImagePull\n"));
  auto [lcode, list] = run("jobs list");
  EXPECT_EQ(lcode, 0) << list;
  EXPECT_THAT(list, HasSubstr("cli_job"));
  auto [ccode, cancel] = run("jobs cancel cli_job");
  EXPECT_EQ(ccode, 0) << cancel;
  EXPECT_EQ((*server_->Get("trainingjobs", "team-a", "cli-job"))["spec"]["cancel"], true);
}

// A job whose template asks for root, submitted to a namespace that enforces
// Pod Security "restricted": the real controller's pods are refused, and
// `jobs describe` says so in the API server's words.
TEST_F(ClusterJobsTest, DescribeShowsThePodSecurityRefusal) {
  server_->LabelNamespace("team-a", {{"pod-security.kubernetes.io/enforce", "restricted"}});
  kube::ClusterConfig config;
  config.server = server_->url();
  auto client = kube::RestClusterClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.status();
  kube::InMemoryStudyStore studies;
  kube::ControllerOptions options;
  options.ns = "team-a";
  kube::Controller controller(client->get(), options, &studies);
  ASSERT_TRUE(controller.Start(absl::Seconds(30)));

  test_support::TempDir dir;
  const std::string manifest = dir.path() + "/job.yaml";
  std::ofstream(manifest) << "apiVersion: kubetrain.io/v1\nkind: TrainingJob\n"
                             "metadata: {name: as-root}\n"
                             "spec:\n  trainingInput: {scaleTier: BASIC}\n"
                             "  template: {spec: {securityContext: {runAsUser: 0}}}\n";
  auto [code, out] = RunCli(dir, "jobs submit training as_root --config " + manifest);
  ASSERT_EQ(code, 0) << out;
  ASSERT_TRUE(server_->WaitUntil([&] {
    auto job = server_->Get("trainingjobs", "team-a", "as-root");
    return job.ok() && job->contains("status") &&
           (*job)["status"]
                   .value("conditions", nlohmann::json::array())
                   .dump()
                   .find("FailedCreate") != std::string::npos;
  }));
  controller.Stop();
  std::tie(code, out) = RunCli(dir, "jobs describe as_root");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("state: QUEUED\n"));
  EXPECT_THAT(out,
              HasSubstr("waiting:\n  message: 'master-0 cannot be created: violates "
                        "PodSecurity \"restricted:latest\": runAsNonRoot != true (pod or "
                        "container \"kubetrain\" must set securityContext.runAsNonRoot=true), "
                        "runAsUser=0 (pod must not set runAsUser=0)'\n  reason: FailedCreate\n"))
      << out;
  EXPECT_EQ(server_->Count("pods"), 0u);
}

// `cancel --wait` on a cluster: the cancel is asked for, then the command
// waits for the operator to end the job and says how it ended.
TEST_F(ClusterJobsTest, CancelWaitWaitsForTheOperatorToEndTheJob) {
  test_support::TempDir dir;
  ASSERT_TRUE(jobs_->Create(Job("waited_job")).ok());
  ASSERT_TRUE(server_
                  ->MergePatch("trainingjobs", "team-a", "waited-job",
                               {{"status", {{"state", "RUNNING"}}}}, "status")
                  .ok());
  // The operator's part: once the cancel is asked for, the job ends.
  std::thread operator_side([&] {
    const bool asked = test_support::WaitUntil([&] {
      auto job = server_->Get("trainingjobs", "team-a", "waited-job");
      return job.ok() && (*job)["spec"].value("cancel", false);
    });
    if (!asked) return;
    (void)server_->MergePatch("trainingjobs", "team-a", "waited-job",
                              {{"status", {{"state", "CANCELLED"}}}}, "status");
  });
  auto [code, out] = RunCli(dir, "jobs cancel waited_job --wait");
  operator_side.join();
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("Cancelled job [waited_job].\n"));
  EXPECT_THAT(out, HasSubstr("Job [waited_job] is CANCELLED.\n"));

  // An ended job is not cancelled again.
  std::tie(code, out) = RunCli(dir, "jobs cancel waited_job --wait");
  EXPECT_EQ(code, 1) << out;
  EXPECT_THAT(out, HasSubstr("job [waited_job] has already ended CANCELLED; nothing to cancel"));
}

// Object-store URIs are refused at submit on both backends, with the field
// path, before anything exists: no TrainingJob, no local job, no folder named
// "gs:" where the command ran.
TEST_F(ClusterJobsTest, ObjectStoreUrisAreRefusedAtSubmitOnBothBackends) {
  test_support::TempDir dir;
  const std::string cwd = dir.path() + "/cwd";
  std::filesystem::create_directories(cwd);
  const std::string kubeconfig = fake_apiserver::WriteKubeconfig(dir.path(), server_->url(), "t");
  const std::string config = dir.path() + "/job.yaml";
  std::ofstream(config) << "trainingInput:\n  scaleTier: BASIC\n"
                        << "  args: [--eval_data_paths=gs://my-bucket/eval]\n";
  const std::string good_config = dir.path() + "/good.yaml";
  std::ofstream(good_config) << "trainingInput:\n  scaleTier: BASIC\n";
  auto run = [&](const std::string& args) {
    const std::string out = dir.path() + "/out";
    std::string command = absl::StrCat("cd ", cwd, " && KUBECONFIG=", kubeconfig,
                                       " KUBETRAIN_BACKEND= KUBETRAIN_HOME=", dir.path(), "/home ",
                                       KUBETRAIN_CLI, " ", args, " >", out, " 2>&1");
    int status = std::system(command.c_str());
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str());
  };
  for (const std::string backend : {"", " --local"}) {
    auto [code, out] = run("jobs submit training uri_job --job-dir gs://my-bucket/run1" + backend);
    EXPECT_EQ(code, 2) << backend << out;
    EXPECT_THAT(out, HasSubstr("spec.trainingInput.jobDir: \"gs://my-bucket/run1\" names object "
                               "storage (gs://)"));
    EXPECT_THAT(out, HasSubstr("nothing was submitted"));
    // The config file is checked as written (a bare config's paths)...
    std::tie(code, out) = run("jobs submit training uri_job --config " + config + backend);
    EXPECT_EQ(code, 2) << backend << out;
    EXPECT_THAT(out, HasSubstr("job.yaml:3:10: trainingInput.args[0]: --eval_data_paths: "
                               "\"gs://my-bucket/eval\" names object storage (gs://)"));
    // ... and the job the flags make of it as a whole.
    std::tie(code, out) = run("jobs submit training uri_job --config " + good_config + backend +
                              " -- --job-dir=s3://b/run");
    EXPECT_EQ(code, 2) << backend << out;
    EXPECT_THAT(out, HasSubstr("spec.trainingInput.args[0]: --job-dir: \"s3://b/run\""));
    // gcloud's gs:// package path.
    std::tie(code, out) =
        run("jobs submit training uri_job --module-name trainer.task "
            "--package-path gs://my-bucket/trainer" +
            backend);
    EXPECT_EQ(code, 2) << backend << out;
    EXPECT_THAT(out, HasSubstr("--package-path: \"gs://my-bucket/trainer\" names object storage "
                               "(gs://)"));
  }
  // `local train` runs the replicas itself: refused before any starts.
  const std::pair<std::string, std::string> local_train[] = {
      {"--job-dir gs://my-bucket/run1",
       "spec.trainingInput.jobDir: \"gs://my-bucket/run1\" names object storage (gs://)"},
      {"-- --output_path=hdfs://nn/out",
       "spec.trainingInput.args[0]: --output_path: \"hdfs://nn/out\" names object storage "
       "(hdfs://)"},
      {"--module-name trainer.task --package-path gs://my-bucket/trainer",
       "--package-path: \"gs://my-bucket/trainer\" names object storage (gs://)"}};
  for (const auto& [args, expected] : local_train) {
    auto [code, out] = run("local train " + args);
    EXPECT_EQ(code, 2) << args << out;
    EXPECT_THAT(out, HasSubstr(expected)) << args;
    EXPECT_THAT(out, Not(HasSubstr("Final metrics"))) << args;
  }
  auto [code, out] = run("validate " + config);
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, HasSubstr("job.yaml:3:10: trainingInput.args[0]: --eval_data_paths: "
                             "\"gs://my-bucket/eval\""));
  EXPECT_EQ(server_->Count("trainingjobs"), 0u);
  std::tie(code, out) = run("jobs list --local");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, Not(HasSubstr("uri_job")));
  EXPECT_TRUE(std::filesystem::is_empty(cwd));
}

// Cloud ML's way to go on with a study: a config that names
// resumePreviousJobId and no params. `validate` accepts it, and `jobs submit
// training` copies the earlier job's params, goal and metric tag into the
// TrainingJob, so the operator's study is the earlier one's.
TEST_F(ClusterJobsTest, AResumedStudyWithoutParamsTakesThemFromTheEarlierJob) {
  test_support::TempDir dir;
  v1::TrainingJob earlier = Job("hyper1_1");
  v1::HyperparameterSpec* hp =
      earlier.mutable_spec()->mutable_training_input()->mutable_hyperparameters();
  hp->set_goal(v1::HyperparameterSpec::MINIMIZE);
  hp->set_hyperparameter_metric_tag("loss");
  hp->set_algorithm(v1::HyperparameterSpec::RANDOM_SEARCH);
  v1::ParameterSpec* lr = hp->add_params();
  lr->set_parameter_name("lr");
  lr->set_type(v1::ParameterSpec::DOUBLE);
  lr->set_min_value(0.001);
  lr->set_max_value(0.1);
  ASSERT_TRUE(jobs_->Create(earlier).ok());
  ASSERT_TRUE(jobs_->Create(Job("plain_job")).ok());
  auto write_config = [&](const std::string& resumed) {
    const std::string config = dir.path() + "/continue_" + resumed + ".yaml";
    std::ofstream(config) << "trainingInput:\n  scaleTier: STANDARD_1\n  hyperparameters:\n"
                          << "    enableTrialEarlyStopping: True\n    maxTrials: 30\n"
                          << "    resumePreviousJobId: " << resumed
                          << "\n    maxParallelTrials: 5\n";
    return config;
  };

  auto [code, out] = RunCli(dir, "validate " + write_config("hyper1_1"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("ok (its params, goal and hyperparameterMetricTag are those of job "
                             "\"hyper1_1\", which it resumes"));

  std::tie(code, out) =
      RunCli(dir, "jobs submit training hyper1_2 --config " + write_config("hyper1_1"));
  ASSERT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("Job [hyper1_2] goes on with the study of job [hyper1_1]"));
  auto stored = jobs_->Get("hyper1_2");
  ASSERT_TRUE(stored.ok()) << stored.status();
  const v1::HyperparameterSpec& ours = stored->spec().training_input().hyperparameters();
  ASSERT_EQ(ours.params_size(), 1);
  EXPECT_EQ(ours.params(0).parameter_name(), "lr");
  EXPECT_EQ(ours.params(0).max_value(), 0.1);
  EXPECT_EQ(ours.goal(), v1::HyperparameterSpec::MINIMIZE);
  EXPECT_EQ(ours.hyperparameter_metric_tag(), "loss");
  EXPECT_EQ(ours.algorithm(), v1::HyperparameterSpec::RANDOM_SEARCH);
  // What the config itself says stays.
  EXPECT_EQ(ours.max_trials(), 30);
  EXPECT_EQ(ours.max_parallel_trials(), 5);
  EXPECT_EQ(ours.resume_previous_job_id(), "hyper1_1");

  // Nothing to take them from: refused, naming the field; nothing created.
  std::tie(code, out) =
      RunCli(dir, "jobs submit training hyper1_3 --config " + write_config("gone_study"));
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, HasSubstr("trainingInput.hyperparameters.resumePreviousJobId: "));
  EXPECT_THAT(out, HasSubstr("gone_study"));
  EXPECT_THAT(out, HasSubstr("a study without params of its own takes them from that job"));
  std::tie(code, out) =
      RunCli(dir, "jobs submit training hyper1_3 --config " + write_config("plain_job"));
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, HasSubstr("trainingInput.hyperparameters.resumePreviousJobId: job \"plain_job\" "
                             "is not a hyperparameter tuning job"));
  EXPECT_EQ(server_->Count("trainingjobs"), 3u);

  // A TrainingJob is the submitted form: it lists its params.
  const std::string manifest = dir.path() + "/resume.yaml";
  std::ofstream(manifest) << "apiVersion: kubetrain.io/v1\nkind: TrainingJob\n"
                          << "metadata: {name: hyper1-4}\nspec:\n  trainingInput:\n"
                          << "    hyperparameters: {maxTrials: 4, resumePreviousJobId: hyper1_1}\n";
  std::tie(code, out) = RunCli(dir, "validate " + manifest);
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, HasSubstr("spec.trainingInput.hyperparameters.params: at least one parameter "
                             "is required for hyperparameter tuning, also when resuming job "
                             "\"hyper1_1\": a TrainingJob lists them"));
}

// Every `jobs` verb takes the namespace as kubectl does (-n NS, -nNS, -n=NS,
// --namespace NS, --namespace=NS) and, without it, uses the kubeconfig
// context's.
TEST_F(ClusterJobsTest, EveryVerbTakesTheNamespaceAsKubectlDoes) {
  test_support::TempDir dir;
  const std::string kubeconfig = dir.path() + "/config";
  std::ofstream(kubeconfig)
      << "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
      << "clusters: [{name: k, cluster: {server: '" << server_->url() << "'}}]\n"
      << "users: [{name: u, user: {token: t}}]\n"
      << "contexts: [{name: c, context: {cluster: k, user: u, namespace: team-a}}]\n";
  const std::string config = dir.path() + "/job.yaml";
  std::ofstream(config) << "trainingInput:\n  scaleTier: BASIC\n";
  auto run = [&](const std::string& args) {
    const std::string out = dir.path() + "/out";
    std::string command =
        absl::StrCat("KUBECONFIG=", kubeconfig, " KUBETRAIN_BACKEND= KUBETRAIN_HOME=", dir.path(),
                     " ", KUBETRAIN_CLI, " ", args, " >", out, " 2>&1");
    int status = std::system(command.c_str());
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str());
  };
  struct Spelling {
    std::string flag;
    std::string ns;
  };
  const std::vector<Spelling> spellings = {
      {"-n team-b", "team-b"},          {"-nteam-c", "team-c"},           {"-n=team-d", "team-d"},
      {"--namespace team-e", "team-e"}, {"--namespace=team-f", "team-f"}, {"", "team-a"}};
  for (const Spelling& s : spellings) {
    SCOPED_TRACE("flag \"" + s.flag + "\"");
    auto [code, out] = run("jobs submit training ns_job --config " + config + " " + s.flag);
    EXPECT_EQ(code, 0) << out;
    ASSERT_TRUE(server_->Get("trainingjobs", s.ns, "ns-job").ok()) << out;
    std::tie(code, out) = run("jobs describe ns_job " + s.flag);
    EXPECT_EQ(code, 0) << out;
    EXPECT_THAT(out, HasSubstr("jobId: ns_job"));
    std::tie(code, out) = run("jobs list " + s.flag);
    EXPECT_EQ(code, 0) << out;
    EXPECT_THAT(out, HasSubstr("ns_job"));
    std::tie(code, out) = run("jobs cancel ns_job " + s.flag);
    EXPECT_EQ(code, 0) << out;
    EXPECT_EQ((*server_->Get("trainingjobs", s.ns, "ns-job"))["spec"]["cancel"], true);
    ASSERT_TRUE(server_
                    ->MergePatch("trainingjobs", s.ns, "ns-job",
                                 {{"status", {{"state", "CANCELLED"}}}}, "status")
                    .ok());
    std::tie(code, out) = run("jobs stream-logs ns_job --polling-interval 1 " + s.flag);
    EXPECT_EQ(code, 0) << out;
  }
  // One job per namespace: each verb went where its flag said.
  EXPECT_EQ(server_->Count("trainingjobs"), spellings.size());

  // The local backend has no namespaces: refused, not ignored.
  auto [local_code, local] = run("jobs list --local -n team-b");
  EXPECT_EQ(local_code, 2);
  EXPECT_THAT(local, HasSubstr("-n/--namespace names a Kubernetes namespace"));
  auto [odd_code, odd] = run("jobs list -x");
  EXPECT_EQ(odd_code, 2);
  EXPECT_THAT(odd, HasSubstr("unknown flag -x"));
}

const std::string kPackageExample = std::string(KUBETRAIN_SOURCE_DIR) + "/examples/python-package";

// gcloud's package workflow against a cluster: the CLI builds an sdist of the
// folder, stores it in a ConfigMap the job owns, and every replica the
// operator creates installs it from there and runs the module through exec,
// in the Python runtime image.
TEST_F(ClusterJobsTest, PackagePathIsStoredInTheClusterAndTheReplicasInstallIt) {
  test_support::TempDir dir;
  auto [code, out] = RunCli(dir, "jobs submit training lr_study --package-path " + kPackageExample +
                                     "/trainer/ --module-name trainer.task --config " +
                                     kPackageExample + "/hptuning_config.yaml -- --num_epochs=2");
  ASSERT_EQ(code, 0) << out;
  std::cout << out;
  EXPECT_THAT(out, HasSubstr("Package [trainer-0.1.tar.gz] stored in ConfigMap "
                             "team-a/lr-study-package.\nJob [lr_study] submitted successfully."));

  // The job names the stored package, not a folder of this machine.
  auto job = server_->Get("trainingjobs", "team-a", "lr-study");
  ASSERT_TRUE(job.ok()) << job.status();
  const nlohmann::json& input = (*job)["spec"]["trainingInput"];
  EXPECT_EQ(input["pythonModule"], "trainer.task");
  EXPECT_EQ(input["packageUris"],
            nlohmann::json::array({"configmap://lr-study-package/trainer-0.1.tar.gz"}));
  auto [dcode, describe] = RunCli(dir, "jobs describe lr_study");
  EXPECT_EQ(dcode, 0) << describe;
  EXPECT_THAT(describe, HasSubstr("- configmap://lr-study-package/trainer-0.1.tar.gz"));
  EXPECT_THAT(describe, ::testing::Not(HasSubstr(kPackageExample)));

  // The ConfigMap holds the sdist (gzip) and is owned by the job.
  auto config_map = server_->Get("configmaps", "team-a", "lr-study-package");
  ASSERT_TRUE(config_map.ok()) << config_map.status();
  std::string sdist;
  ASSERT_TRUE(absl::Base64Unescape(
      (*config_map)["binaryData"]["trainer-0.1.tar.gz"].get<std::string>(), &sdist));
  ASSERT_GT(sdist.size(), 2u);
  EXPECT_EQ(sdist.substr(0, 2), "\x1f\x8b");
  const nlohmann::json& owner = (*config_map)["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(owner["name"], "lr-study");
  EXPECT_EQ(owner["uid"], (*job)["metadata"]["uid"]);
  EXPECT_EQ((*config_map)["metadata"]["labels"]["kubetrain.io/job-name"], "lr-study");

  // The operator's replicas (two trials at a time) mount it and install it.
  kube::ControllerOptions options;
  options.ns = "team-a";
  options.workers = 1;
  options.reconcile.tuner_factory = tuner::Tuner::Create;
  options.reconcile.stop_rule = tuner::ShouldStopEarly;
  kube::InMemoryStudyStore studies;
  auto client = kube::testing::FakeServerClient(server_->url());
  kube::Controller controller(client.get(), options, &studies);
  ASSERT_TRUE(controller.Start(absl::Seconds(30)));
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 2; }));
  controller.Stop();
  for (const nlohmann::json& pod : server_->List("pods", "team-a")) {
    const nlohmann::json& c = pod["spec"]["containers"][0];
    EXPECT_EQ(c["image"], api::PythonRuntimeCatalog::BuiltIn().Find("", "")->image);
    EXPECT_EQ(c["command"], nlohmann::json({"kubetrain-runtime", "exec", "--package",
                                            "/var/kubetrain/packages/0/trainer-0.1.tar.gz", "--",
                                            "python3", "-m", "trainer.task"}));
    EXPECT_EQ(c["args"][0], "--num_epochs=2");
    EXPECT_THAT(c["args"][1].get<std::string>(), ::testing::StartsWith("--learning_rate="));
    EXPECT_EQ(c["volumeMounts"][0]["mountPath"], "/var/kubetrain/packages/0");
    EXPECT_EQ(pod["spec"]["volumes"][0]["configMap"]["name"], "lr-study-package");
  }

  // Deleting the job takes its package along.
  ASSERT_TRUE(client->Delete(kube::kTrainingJobs, "team-a", "lr-study").ok());
  EXPECT_EQ(server_->Count("configmaps"), 0u);
}

TEST_F(ClusterJobsTest, PackagesTheClusterCannotFetchAreRefusedAtSubmit) {
  test_support::TempDir dir;
  const std::string config = dir.path() + "/job.yaml";
  std::ofstream(config) << "trainingInput:\n  pythonModule: trainer.task\n  packageUris:\n"
                        << "    - gs://my-bucket/trainer-0.1.tar.gz\n";
  auto [code, out] = RunCli(dir, "jobs submit training gs_job --config " + config);
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, HasSubstr(config + ":4:7: trainingInput.packageUris[0]: "
                                      "\"gs://my-bucket/trainer-0.1.tar.gz\" names object "
                                      "storage (gs://), which kubetrain cannot fetch packages "
                                      "from"));
  EXPECT_EQ(server_->Count("trainingjobs"), 0u);

  // A module with no package and no image holding it, likewise.
  std::ofstream(config) << "trainingInput:\n  pythonModule: trainer.task\n";
  std::tie(code, out) = RunCli(dir, "jobs submit training no_code --config " + config);
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, HasSubstr("trainingInput.packageUris: required for pythonModule trainer.task"));
  EXPECT_EQ(server_->Count("trainingjobs"), 0u);
}

TEST_F(ClusterJobsTest, APackageTooLargeForAConfigMapIsRefusedNamingTheAlternatives) {
  test_support::TempDir dir;
  const std::string package = dir.path() + "/big/trainer";
  std::filesystem::create_directories(package);
  std::ofstream(package + "/__init__.py");
  // Random bytes do not compress: 1.5 MiB of them, as a Python literal.
  std::mt19937 rng(1);
  std::string blob(1536 * 1024, '\0');
  for (char& c : blob) c = static_cast<char>(rng());
  std::ofstream(package + "/task.py") << "DATA = \"" << absl::Base64Escape(blob) << "\"\n";
  auto [code, out] = RunCli(dir, "jobs submit training big_job --package-path " + package +
                                     " --module-name trainer.task");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out,
              HasSubstr("--package-path " + package + ": the package trainer-0.0.0.tar.gz is "));
  EXPECT_THAT(out, HasSubstr("bytes, more than the 1048576 bytes (1 MiB) a ConfigMap holds; serve "
                             "it over http(s) and give its URL in packageUris"));
  EXPECT_EQ(server_->Count("trainingjobs"), 0u);
  EXPECT_EQ(server_->Count("configmaps"), 0u);
}

}  // namespace
}  // namespace kubetrain::cli
