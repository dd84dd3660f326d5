// The real kubetrain-operator against the fake API server, through a job's
// whole life with leader election on: every request it makes must be one the
// shipped RBAC grants. This checks rbac_test.cc's reading of the code from
// the other side (requests actually sent, though only on the paths run here).
#include <stdlib.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/observability/http_get.h"
#include "common/testing/child_process.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/kube/test_objects.h"
#include "tests/deploy/fake_cluster.h"
#include "tests/deploy/manifest_checks.h"
#include "tests/deploy/rbac_calls.h"
#include "tests/fake_apiserver/fake_apiserver.h"

#ifndef KUBETRAIN_OPERATOR_BINARY
#error "KUBETRAIN_OPERATOR_BINARY must name the kubetrain-operator binary"
#endif

namespace kubetrain::deploy_testing {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;

constexpr char kToken[] = "deploy-test-token";

std::set<Permission> GrantedByFile(const std::string& file) {
  auto text = ReadFile(SourcePath(file));
  EXPECT_TRUE(text.ok()) << text.status();
  auto docs = ParseDocuments(text.ok() ? *text : "");
  EXPECT_TRUE(docs.ok() && !docs->empty());
  if (!docs.ok() || docs->empty()) return {};
  auto granted = GrantedPermissions(YAML::Dump((*docs)[0]["rules"]));
  EXPECT_TRUE(granted.ok()) << granted.status();
  return granted.ok() ? *granted : std::set<Permission>{};
}

TEST(OperatorRbacE2eTest, EveryRequestOfAJobsLifeIsGranted) {
  auto cluster = StartFakeCluster(
      {.bookmark_interval = absl::Milliseconds(200), .bearer_token = kToken}, "deploy_rbac_e2e");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  FakeApiServer* server = cluster->server.get();
  const std::string dir = cluster->dir;
  // The operator's own pod, which it labels when it leads (as deployed:
  // --metrics-listen, --metrics-address, --pod-name).
  json operator_pod = {{"apiVersion", "v1"},
                       {"kind", "Pod"},
                       {"metadata", {{"name", "kubetrain-operator-0"}}},
                       {"spec", {{"containers", {{{"name", "operator"}, {"image", "op"}}}}}}};
  ASSERT_TRUE(server->Create("pods", "ns1", operator_pod).ok());
  test_support::ChildProcess op(
      {KUBETRAIN_OPERATOR_BINARY, "--kubeconfig", dir + "/kubeconfig", "--namespace", "ns1",
       "--leader-elect=true", "--leader-election-namespace", "ns1", "--http-address=127.0.0.1:0",
       "--metrics-listen=127.0.0.1:0", "--metrics-address=kubetrain-operator-trials:9091",
       "--pod-name", "kubetrain-operator-0"},
      dir + "/operator.log");
  ASSERT_TRUE(op.Start().ok());
  ASSERT_TRUE(server->WaitUntil(
      [&] {
        auto pod = server->Get("pods", "ns1", "kubetrain-operator-0");
        return pod.ok() && (*pod)["metadata"]
                                   .value("labels", json::object())
                                   .value("kubetrain.io/metrics-leader", "") == "true";
      },
      absl::Seconds(60)))
      << op.Log();

  // A STANDARD_1 job with an output claim of its own that succeeds, has its
  // claim deleted, and is then deleted by its TTL.
  json job = {{"apiVersion", "kubetrain.io/v1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "rbac"}}},
              {"spec",
               {{"trainingInput", {{"scaleTier", "STANDARD_1"}, {"jobDir", "/outputs"}}},
                {"outputStorage", {{"newClaim", {{"size", "1Gi"}, {"deleteWhenFinished", true}}}}},
                {"runPolicy",
                 {{"restartPolicy", "Never"},
                  {"cleanPodPolicy", "Running"},
                  {"ttlSecondsAfterFinished", 0}}}}}};
  ASSERT_TRUE(server->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server->WaitUntil([&] { return server->Count("pods") == 9; }, absl::Seconds(60)))
      << op.Log();
  for (const json& pod : server->List("pods", "ns1")) {
    if (pod["metadata"]["name"] == "kubetrain-operator-0") continue;
    ASSERT_TRUE(server
                    ->MergePatch("pods", "ns1", pod["metadata"]["name"].get<std::string>(),
                                 {{"status", {{"phase", "Running"}}}}, "status")
                    .ok());
  }
  ASSERT_TRUE(server
                  ->MergePatch("pods", "ns1", "rbac-master-0",
                               kube::testing::TerminatedPodStatus("Succeeded", 0), "status")
                  .ok());
  // Gone: succeeded, cleaned up, deleted by the TTL.
  EXPECT_TRUE(
      server->WaitUntil([&] { return server->Count("trainingjobs") == 0; }, absl::Seconds(60)))
      << op.Log();
  op.Stop();

  auto header = ReadFile(SourcePath("operator/kube/cluster_client.h"));
  ASSERT_TRUE(header.ok());
  auto constants = ParseResourceConstants(*header);
  ASSERT_TRUE(constants.ok()) << constants.status();
  std::map<std::string, std::string> group_of;  // plural -> group
  for (const auto& [name, group_plural] : *constants) {
    std::vector<std::string> parts = absl::StrSplit(group_plural, '/');
    group_of[parts.back()] = parts.front();
  }

  std::set<Permission> granted = GrantedByFile("deploy/rbac/cluster/cluster_role.yaml");
  for (const Permission& p : GrantedByFile("deploy/rbac/base/leader_election_role.yaml")) {
    granted.insert(p);
  }
  std::set<Permission> seen;
  for (const auto& [key, count] : server->RequestCounts()) {
    // "verb plural[/subresource]"
    std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits(' ', 1));
    ASSERT_EQ(parts.size(), 2u) << key;
    std::string plural = parts[1].substr(0, parts[1].find('/'));
    ASSERT_TRUE(group_of.count(plural))
        << "request on a resource the operator does not name: " << key;
    Permission p{parts[0], absl::StrCat(group_of[plural], "/", parts[1])};
    seen.insert(p);
    EXPECT_TRUE(granted.count(p)) << "the operator sent " << count << " x '" << key
                                  << "', which the RBAC does not grant";
  }
  // The run went through the paths that matter.
  for (const Permission& p : std::vector<Permission>{{"create", "/pods"},
                                                     {"create", "/services"},
                                                     {"create", "/persistentvolumeclaims"},
                                                     {"delete", "/persistentvolumeclaims"},
                                                     {"watch", "/pods"},
                                                     {"update", "kubetrain.io/trainingjobs/status"},
                                                     {"delete", "kubetrain.io/trainingjobs"},
                                                     {"create", "/events"},
                                                     {"create", "coordination.k8s.io/leases"},
                                                     {"patch", "/pods"}}) {
    EXPECT_TRUE(seen.count(p)) << "not exercised: " << p.first << " " << p.second;
  }
}

}  // namespace
}  // namespace kubetrain::deploy_testing

namespace kubetrain::deploy_testing {
namespace {

// kubetrain-operator serves /metrics, /healthz and /readyz on --http-address
// (operator/observability's MetricsServer): the Deployment's probes and the
// Prometheus scrape work against the real binary, and a job's reconcile shows
// in the metrics.
// The value of the sample `series` (name and labels exactly as the text
// format prints them) in a /metrics body; nullopt when absent.
std::optional<double> SampleValue(const std::string& metrics, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) continue;
    double value;
    if (absl::SimpleAtod(line, &value)) return value;
  }
  return std::nullopt;
}

TEST(OperatorHttpEndpointTest, ServesMetricsHealthAndReadiness) {
  CommandResult help = RunCommand(std::string(KUBETRAIN_OPERATOR_BINARY) + " --help");
  ASSERT_TRUE(absl::StrContains(help.output, "--http-address")) << help.output;
  auto cluster = StartFakeCluster({.bearer_token = kToken}, "deploy_http_e2e");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  FakeApiServer* server = cluster->server.get();
  const std::string dir = cluster->dir;
  test_support::ChildProcess op(
      {KUBETRAIN_OPERATOR_BINARY, "--kubeconfig", dir + "/kubeconfig", "--namespace", "ns1",
       "--leader-elect=true", "--leader-election-namespace", "ns1", "--http-address=127.0.0.1:0"},
      dir + "/operator.log");
  ASSERT_TRUE(op.Start().ok());
  json job = {{"apiVersion", "kubetrain.io/v1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "http"}}},
              {"spec", {{"trainingInput", {{"scaleTier", "BASIC"}}}}}};
  ASSERT_TRUE(server->Create("trainingjobs", "ns1", job).ok());

  // Poll (the deadline bounds it) until the endpoint answers as a ready leader
  // that has reconciled the job.
  std::optional<int> port;
  std::string metrics, last = "not listening";
  bool healthy = false, ready = false;
  test_support::WaitUntil(
      [&] {
        if (op.Exited()) return true;
        if (!port) port = test_support::ListeningPort(op.pid());
        if (!port) return false;
        auto live = observability::HttpGet("127.0.0.1", *port, "/healthz");
        auto readyz = observability::HttpGet("127.0.0.1", *port, "/readyz");
        auto scrape = observability::HttpGet("127.0.0.1", *port, "/metrics");
        healthy = live.ok() && live->status == 200;
        ready = readyz.ok() && readyz->status == 200;
        metrics = scrape.ok() && scrape->status == 200 ? scrape->body : "";
        last =
            absl::StrCat("healthz ", healthy, " readyz ", ready, " metrics ", metrics.size(), "B");
        return healthy && ready && SampleValue(metrics, "kubetrain_operator_leader") == 1 &&
               SampleValue(metrics, "kubetrain_operator_reconcile_total{result=\"success\"}") >=
                   1 &&
               SampleValue(metrics, "kubetrain_operator_jobs{state=\"PREPARING\"}") == 1;
      },
      absl::Seconds(60), absl::Milliseconds(100));
  EXPECT_TRUE(healthy) << last << "\n" << op.Log();
  EXPECT_TRUE(ready) << last;
  EXPECT_EQ(SampleValue(metrics, "kubetrain_operator_leader"), 1) << metrics;
  EXPECT_GE(SampleValue(metrics, "kubetrain_operator_reconcile_total{result=\"success\"}"), 1);
  EXPECT_EQ(SampleValue(metrics, "kubetrain_operator_jobs{state=\"PREPARING\"}"), 1);
  // At least the BASIC job's one pod and one service were created.
  EXPECT_GE(
      SampleValue(metrics, "kubetrain_operator_api_requests_total{code=\"201\",verb=\"create\"}"),
      2);
  for (const char* family :
       {"kubetrain_operator_reconcile_total{result=\"success\"}",
        "kubetrain_operator_reconcile_duration_seconds_count{result=\"success\"}",
        "kubetrain_operator_workqueue_depth", "kubetrain_operator_workqueue_wait_seconds_count",
        "kubetrain_operator_api_requests_total{code=\"201\",verb=\"create\"}",
        "kubetrain_operator_api_requests_total{code=\"200\",verb=\"list\"}",
        "kubetrain_operator_api_requests_total{code=\"200\",verb=\"watch\"}",
        "kubetrain_operator_jobs{state=\"PREPARING\"}"}) {
    EXPECT_TRUE(absl::StrContains(metrics, family)) << family;
  }
  op.Stop();
}

}  // namespace
}  // namespace kubetrain::deploy_testing
