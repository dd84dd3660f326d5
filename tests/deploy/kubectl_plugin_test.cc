// The `kubetrain` binary on a cluster as its users run it: through kubectl's
// plugin discovery (`kubectl kubetrain ...` finds kubectl-kubetrain on PATH;
// skipped where kubectl is not installed), in kubectl's current context and
// namespace, with --namespace and --context; and `jobs describe` ending with
// the job's Events. Against the fake API server, through a kubeconfig.
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/crd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/deploy/fake_cluster.h"
#include "tests/deploy/manifest_checks.h"

namespace kubetrain::deploy_testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "plugin-token";

std::string CliDir() {
  const std::string binary = KUBETRAIN_CLI_BINARY;
  return binary.substr(0, binary.rfind('/'));
}

json Job(const std::string& name, const std::string& state) {
  return {{"apiVersion", "kubetrain.io/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"annotations", {{"kubetrain.io/job-id", name}}}}},
          {"spec", {{"trainingInput", {{"scaleTier", "BASIC"}}}}}};
}

json Event(const std::string& name, const std::string& kind, const std::string& object,
           const std::string& uid, const std::string& type, const std::string& reason,
           const std::string& message, const std::string& component) {
  return {{"metadata", {{"name", name}}},
          {"involvedObject", {{"kind", kind}, {"name", object}, {"uid", uid}}},
          {"type", type},
          {"reason", reason},
          {"message", message},
          {"source", {{"component", component}}},
          {"count", 1},
          {"firstTimestamp", "2030-01-01T00:00:00Z"},
          {"lastTimestamp", "2030-01-01T00:00:00Z"}};
}

class ClusterCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_apiserver::FakeApiServer::Options options;
    options.bearer_token = token_;
    auto cluster = StartFakeCluster(options, "cluster_cli");
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    server().ResetRequestCounts();
    struct Seed {
      const char* ns;
      const char* name;
      const char* state;
    };
    for (const Seed& seed : {Seed{"ns1", "mnist", "RUNNING"}, Seed{"ns1", "cifar", "SUCCEEDED"},
                             Seed{"ns2", "imdb", "QUEUED"}}) {
      const std::string ns = seed.ns, name = seed.name, state = seed.state;
      auto created = server().Create("trainingjobs", ns, Job(name, state));
      ASSERT_TRUE(created.ok()) << created.status();
      ASSERT_TRUE(
          server()
              .MergePatch("trainingjobs", ns, name, {{"status", {{"state", state}}}}, "status")
              .ok());
    }
    // A second context for the same server, in namespace ns2.
    std::ofstream(cluster_.dir + "/two-contexts") << absl::StrCat(
        "apiVersion: v1\nkind: Config\ncurrent-context: first\n"
        "clusters:\n- name: fake\n  cluster: {server: \"",
        server().url(),
        "\"}\n"
        "users:\n- name: robot\n  user: {token: \"",
        token_,
        "\"}\n"
        "contexts:\n- name: first\n  context: {cluster: fake, user: robot, namespace: ns1}\n"
        "- name: second\n  context: {cluster: fake, user: robot, namespace: ns2}\n");
  }

  fake_apiserver::FakeApiServer& server() { return *cluster_.server; }

  // Runs `command` with the kubeconfig of the fake cluster, the build's
  // kubetrain and kubectl-kubetrain first on PATH, and `environment`.
  CommandResult Run(const std::string& command, const std::string& kubeconfig = "kubeconfig",
                    const std::string& environment = "") {
    return RunCommand(absl::StrCat("cd ", cluster_.dir, " && KUBECONFIG=", cluster_.dir, "/",
                                   kubeconfig, " KUBETRAIN_HOME=", cluster_.dir,
                                   "/home PATH=", CliDir(), ":$PATH ", environment, " ", command));
  }

  // The fake's bearer token. kubectl sends none to an http:// server, so the
  // kubectl tests run it without one.
  std::string token_ = kToken;
  FakeCluster cluster_;
};

// ---- kubetrain on the cluster (no kubectl needed) ----

TEST_F(ClusterCliTest, DescribeEndsWithTheEventsOfTheJobAndItsPods) {
  const json job = *server().Get("trainingjobs", "ns1", "mnist");
  const std::string uid = job["metadata"]["uid"];
  json pod = {{"metadata",
               {{"name", "mnist-master-0"},
                {"labels", {{"kubetrain.io/job-name", "mnist"}}},
                {"ownerReferences", {{{"kind", "TrainingJob"}, {"name", "mnist"}, {"uid", uid}}}}}},
              {"spec", {{"containers", {{{"name", "kubetrain"}, {"image", "x"}}}}}}};
  ASSERT_TRUE(server().Create("pods", "ns1", pod).ok());
  const std::string pod_uid = (*server().Get("pods", "ns1", "mnist-master-0"))["metadata"]["uid"];
  for (const json& e : {
           Event("e1", "TrainingJob", "mnist", uid, "Normal", "ReplicasCreated",
                 "1 replicas created", "kubetrain-operator"),
           Event("e2", "Pod", "mnist-master-0", pod_uid, "Warning", "FailedScheduling",
                 "0/1 nodes are available: 1 Insufficient cpu.", "default-scheduler"),
           // Not this job's: another job, an earlier job of the same name, another job's pod.
           Event("e3", "TrainingJob", "cifar", "other-uid", "Normal", "JobSucceeded", "done", "op"),
           Event("e4", "TrainingJob", "mnist", "earlier-uid", "Warning", "Old", "an earlier job",
                 "op"),
           Event("e5", "Pod", "cifar-master-0", "p", "Warning", "BackOff", "not mnist's",
                 "kubelet"),
       }) {
    ASSERT_TRUE(server().Create("events", "ns1", e).ok());
  }

  CommandResult yaml = Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs describe mnist"));
  ASSERT_EQ(yaml.exit_code, 0) << yaml.output;
  EXPECT_THAT(yaml.output, HasSubstr("jobId: mnist\n"));
  EXPECT_THAT(yaml.output, HasSubstr("state: RUNNING\n"));
  // After the YAML, as comments (the output stays one YAML document).
  const size_t events = yaml.output.find("# Events:\n");
  ASSERT_NE(events, std::string::npos) << yaml.output;
  EXPECT_GT(events, yaml.output.find("state: RUNNING"));
  const std::string table = yaml.output.substr(events);
  EXPECT_THAT(table, HasSubstr("#   TYPE "));
  EXPECT_THAT(table, HasSubstr("ReplicasCreated"));
  EXPECT_THAT(table, HasSubstr("trainingjob/mnist"));
  EXPECT_THAT(table, HasSubstr("FailedScheduling"));
  EXPECT_THAT(table, HasSubstr("pod/mnist-master-0"));
  EXPECT_THAT(table, HasSubstr("0/1 nodes are available: 1 Insufficient cpu."));
  EXPECT_THAT(table, HasSubstr("default-scheduler"));
  for (const char* other : {"JobSucceeded", "an earlier job", "not mnist's"}) {
    EXPECT_THAT(table, Not(HasSubstr(other)));
  }

  CommandResult json_out =
      Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs describe mnist --format json"));
  ASSERT_EQ(json_out.exit_code, 0) << json_out.output;
  const json parsed = json::parse(json_out.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json_out.output;
  ASSERT_EQ(parsed["events"].size(), 2u) << parsed.dump(2);
  EXPECT_EQ(parsed["events"][1]["reason"], "FailedScheduling");
  EXPECT_EQ(parsed["events"][1]["object"], "pod/mnist-master-0");

  CommandResult summary =
      Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs describe mnist --summarize"));
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_THAT(summary.output, HasSubstr("\nEvents:\n  TYPE "));
  EXPECT_THAT(summary.output, HasSubstr("FailedScheduling"));
  // cifar's only event belongs to another job of that name (another uid).
  CommandResult none = Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs describe cifar"));
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_THAT(none.output, HasSubstr("\n# Events: <none>\n"));
}

TEST_F(ClusterCliTest, NamespaceAndContextAsKubectlTakesThem) {
  CommandResult current = Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs list"));
  EXPECT_EQ(current.exit_code, 0) << current.output;
  EXPECT_THAT(current.output, HasSubstr("mnist"));  // the current context's namespace, ns1
  EXPECT_THAT(current.output, Not(HasSubstr("imdb")));
  // With KUBETRAIN_BACKEND=local the standalone tool lists local jobs.
  CommandResult local = Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs list"), "kubeconfig",
                            "KUBETRAIN_BACKEND=local");
  EXPECT_THAT(local.output, Not(HasSubstr("mnist"))) << local.output;

  CommandResult ns2 =
      Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs list --context second"), "two-contexts");
  EXPECT_EQ(ns2.exit_code, 0) << ns2.output;
  EXPECT_THAT(ns2.output, HasSubstr("imdb"));
  EXPECT_THAT(ns2.output, Not(HasSubstr("mnist")));
  CommandResult flag_wins =
      Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs list --context second --namespace ns1"),
          "two-contexts");
  EXPECT_THAT(flag_wins.output, HasSubstr("mnist"));
  EXPECT_THAT(flag_wins.output, Not(HasSubstr("imdb")));
  CommandResult kubeconfig_flag =
      Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs describe imdb --kubeconfig ", cluster_.dir,
                       "/two-contexts --context second"),
          "nothing-here");
  EXPECT_EQ(kubeconfig_flag.exit_code, 0) << kubeconfig_flag.output;
  EXPECT_THAT(kubeconfig_flag.output, HasSubstr("state: QUEUED"));

  CommandResult missing =
      Run(absl::StrCat(KUBETRAIN_CLI_BINARY, " jobs list --context third"), "two-contexts");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output, HasSubstr("contexts[third]: no such entry")) << missing.output;
}

// ---- through kubectl's plugin discovery ----

class KubectlPluginTest : public ClusterCliTest {
 protected:
  void SetUp() override {
    if (!OnPath("kubectl")) GTEST_SKIP() << "kubectl is not installed";
    token_ = "";
    ClusterCliTest::SetUp();
  }

  // kubectl ARGS, with KUBETRAIN_BACKEND=local, which the plugin must not
  // follow: kubectl's users mean the cluster. kubectl's own commands keep
  // their discovery cache in the test's folder.
  CommandResult Kubectl(const std::string& args, const std::string& kubeconfig = "kubeconfig") {
    const bool plugin = absl::StartsWith(args, "kubetrain") || absl::StartsWith(args, "plugin");
    return Run(
        absl::StrCat("kubectl ", args,
                     plugin ? "" : absl::StrCat(" --cache-dir ", cluster_.dir, "/kubectl-cache")),
        kubeconfig, "KUBETRAIN_BACKEND=local");
  }
};

TEST_F(KubectlPluginTest, VersionAndJobsListRunAsAKubectlPlugin) {
  CommandResult version = Kubectl("kubetrain version");
  ASSERT_EQ(version.exit_code, 0) << version.output;
  EXPECT_THAT(version.output,
              ::testing::MatchesRegex("kubetrain [0-9.]+ \\(API kubetrain.io/v1\\)\n"));

  // kubectl's current context and its namespace (ns1), not the local
  // backend that KUBETRAIN_BACKEND asks the standalone tool for.
  CommandResult list = Kubectl("kubetrain jobs list");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_THAT(list.output, HasSubstr("JOB_ID"));
  EXPECT_THAT(list.output, HasSubstr("mnist"));
  EXPECT_THAT(list.output, HasSubstr("RUNNING"));
  EXPECT_THAT(list.output, HasSubstr("cifar"));
  EXPECT_THAT(list.output, Not(HasSubstr("imdb")));
  EXPECT_GE(server().RequestCounts()["list trainingjobs"], 1);

  CommandResult other_namespace = Kubectl("kubetrain jobs list --namespace ns2");
  EXPECT_THAT(other_namespace.output, HasSubstr("imdb"));
  EXPECT_THAT(other_namespace.output, Not(HasSubstr("mnist")));
  CommandResult other_context = Kubectl("kubetrain jobs list --context second", "two-contexts");
  EXPECT_THAT(other_context.output, HasSubstr("imdb"));
  EXPECT_THAT(other_context.output, Not(HasSubstr("cifar")));

  CommandResult describe = Kubectl("kubetrain jobs describe mnist");
  ASSERT_EQ(describe.exit_code, 0) << describe.output;
  EXPECT_THAT(describe.output, HasSubstr("jobId: mnist\n"));
  EXPECT_THAT(describe.output, HasSubstr("# Events: <none>\n"));

  CommandResult usage = Kubectl("kubetrain --help");
  EXPECT_THAT(usage.output, HasSubstr("Usage: kubectl kubetrain COMMAND"));
  CommandResult plugins = Kubectl("plugin list");
  EXPECT_THAT(plugins.output, HasSubstr(CliDir() + "/kubectl-kubetrain")) << plugins.output;
}

// kubectl itself against the generated CRD, served by the fake API server
// (discovery, Table printing, OpenAPI v3): the printer columns as kubectl
// prints them, the category, and `kubectl explain` with the proto comments.
TEST_F(KubectlPluginTest, KubectlGetAndExplainUseTheGeneratedCrd) {
  ASSERT_TRUE(server().ServeCrd(api::TrainingJobCrd()).ok());
  json study = Job("sweep", "RUNNING");
  study["spec"]["trainingInput"]["hyperparameters"] = {{"maxTrials", 10},
                                                       {"params", json::array()}};
  ASSERT_TRUE(server().Create("trainingjobs", "ns1", study).ok());
  ASSERT_TRUE(
      server()
          .MergePatch(
              "trainingjobs", "ns1", "sweep",
              {{"status",
                {{"state", "RUNNING"}, {"trialProgress", "2/10"}, {"bestObjectiveValue", 0.875}}}},
              "status")
          .ok());

  // A job gang admission holds: its place in the queue.
  ASSERT_TRUE(server().Create("trainingjobs", "ns1", Job("waiting", "QUEUED")).ok());
  ASSERT_TRUE(server()
                  .MergePatch("trainingjobs", "ns1", "waiting",
                              {{"status", {{"state", "QUEUED"}, {"queuePosition", 2}}}}, "status")
                  .ok());

  CommandResult get = Kubectl("get tj");
  ASSERT_EQ(get.exit_code, 0) << get.output;
  EXPECT_THAT(get.output, ::testing::ContainsRegex("NAME +STATE +QUEUE +TRIALS +AGE\n"));
  EXPECT_THAT(get.output, ::testing::ContainsRegex("\nsweep +RUNNING +2/10 +[0-9]+[smhd]"));
  // A job that does not tune: the Trials cell is null, which kubectl prints empty.
  EXPECT_THAT(get.output, ::testing::ContainsRegex("\nmnist +RUNNING +[0-9]+[smhd]"));
  EXPECT_THAT(get.output, ::testing::ContainsRegex("\nwaiting +QUEUED +2 +[0-9]+[smhd]"));
  EXPECT_THAT(get.output, Not(HasSubstr("BEST")));

  CommandResult wide = Kubectl("get trainingjobs -o wide");
  ASSERT_EQ(wide.exit_code, 0) << wide.output;
  EXPECT_THAT(wide.output, ::testing::ContainsRegex("NAME +STATE +QUEUE +TRIALS +BEST +AGE\n"));
  EXPECT_THAT(wide.output, ::testing::ContainsRegex("\nsweep +RUNNING +2/10 +0.875 +[0-9]+[smhd]"));

  CommandResult category = Kubectl("get kubetrain");
  ASSERT_EQ(category.exit_code, 0) << category.output;
  EXPECT_THAT(category.output, ::testing::ContainsRegex("\nsweep +RUNNING +2/10 +[0-9]+[smhd]"));
  EXPECT_THAT(category.output, ::testing::ContainsRegex("\nmnist +RUNNING +[0-9]+[smhd]"));

  CommandResult tier = Kubectl("explain trainingjob.spec.trainingInput.scaleTier");
  ASSERT_EQ(tier.exit_code, 0) << tier.output;
  EXPECT_THAT(tier.output, HasSubstr("FIELD: scaleTier <string>"));
  EXPECT_THAT(tier.output, HasSubstr("The cluster shape. Default BASIC."));
  EXPECT_THAT(tier.output, HasSubstr("STANDARD_1: One master, 4 workers"));
  EXPECT_THAT(tier.output, Not(HasSubstr("<no description>")));

  CommandResult count = Kubectl("explain trainingjob.spec.trainingInput.workerCount");
  ASSERT_EQ(count.exit_code, 0) << count.output;
  // int-or-string (a number, or Cloud ML's string of digits) has no single
  // OpenAPI type, so kubectl labels it <Object>; the description says what
  // it takes.
  EXPECT_THAT(count.output, HasSubstr("FIELD: workerCount <Object>"));
  EXPECT_THAT(count.output, HasSubstr("How many workers (integer, 0 to 1000"));
  EXPECT_THAT(count.output, HasSubstr("Takes a number or a string of"));

  CommandResult hyperparameters = Kubectl("explain trainingjob.spec.trainingInput.hyperparameters");
  ASSERT_EQ(hyperparameters.exit_code, 0) << hyperparameters.output;
  EXPECT_THAT(hyperparameters.output, Not(HasSubstr("<no description>"))) << hyperparameters.output;
  EXPECT_THAT(hyperparameters.output, HasSubstr("maxParallelTrials\t<integer>"));
}

}  // namespace
}  // namespace kubetrain::deploy_testing
