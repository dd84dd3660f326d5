// The real kubetrain-operator binary against the in-process fake API server:
// what a user sees on a cluster, with pod phases set by hand (no kubelet).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/fake_apiserver/fake_apiserver.h"
#include "tests/operator/operator_process.h"

namespace kubetrain::testing {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;

constexpr char kToken[] = "operator-token";

json Job(const std::string& name, const std::string& restart_policy = "Never",
         json run_policy_extra = json::object()) {
  json run_policy = {{"restartPolicy", restart_policy}, {"cleanPodPolicy", "Running"}};
  run_policy.update(run_policy_extra);
  return {{"apiVersion", "kubetrain.io/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"trainingInput", {{"scaleTier", "STANDARD_1"}, {"args", {"--max_steps=10"}}}},
            {"runPolicy", run_policy}}}};
}

json PodStatus(const std::string& phase, std::optional<int> exit_code = std::nullopt) {
  json status = {{"phase", phase}};
  if (exit_code) {
    status["containerStatuses"] = {
        {{"name", "kubetrain"},
         {"restartCount", 0},
         {"state", {{"terminated", {{"exitCode", *exit_code}, {"message", "exit"}}}}}}};
  }
  return {{"status", status}};
}

class OperatorIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServer::Options options;
    options.bearer_token = kToken;
    options.bookmark_interval = absl::Milliseconds(200);
    auto server = FakeApiServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    std::string templ = ::testing::TempDir() + "/operator_itest_XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    kubeconfig_ = WriteKubeconfig(dir_, server_->url(), kToken);
  }

  std::unique_ptr<OperatorProcess> StartOperator(const std::string& name,
                                                 std::vector<std::string> extra = {
                                                     "--leader-elect=false"}) {
    // Port 0: operators run side by side (and beside other tests).
    std::vector<std::string> args = {"--kubeconfig", kubeconfig_, "--namespace", "ns1",
                                     "--workers",    "2",         "--http-address=127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto op = std::make_unique<OperatorProcess>(KUBETRAIN_OPERATOR_BINARY, args,
                                                dir_ + "/" + name + ".log");
    EXPECT_TRUE(op->Start());
    return op;
  }

  json JobObject(const std::string& name) {
    auto j = server_->Get("trainingjobs", "ns1", name);
    return j.ok() ? *j : json();
  }
  std::string State(const std::string& job) {
    json j = JobObject(job);
    return j.is_object() && j.contains("status") ? j["status"].value("state", "") : "";
  }
  bool WaitForState(const std::string& job, const std::string& state,
                    absl::Duration timeout = absl::Seconds(60)) {
    return server_->WaitUntil([&] { return State(job) == state; }, timeout);
  }
  bool WaitForReplicas(size_t n) {
    return server_->WaitUntil(
        [&] { return server_->Count("pods") == n && server_->Count("services") == n; });
  }
  std::set<std::string> Names(const std::string& resource) {
    std::set<std::string> out;
    for (const json& o : server_->List(resource, "ns1")) out.insert(o["metadata"]["name"]);
    return out;
  }
  void SetPhase(const std::string& pod, const json& status) {
    ASSERT_TRUE(server_->MergePatch("pods", "ns1", pod, status, "status").ok()) << pod;
  }
  void SetAllRunning() {
    for (const std::string& pod : Names("pods")) SetPhase(pod, PodStatus("Running"));
  }
  int64_t Requests(const std::string& key) { return server_->RequestCounts()[key]; }

  std::unique_ptr<FakeApiServer> server_;
  std::string dir_, kubeconfig_;
};

TEST_F(OperatorIntegrationTest, Standard1GetsEightPodsAndServicesWithTfConfig) {
  auto op = StartOperator("op");
  auto job = server_->Create("trainingjobs", "ns1", Job("mnist"));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  ASSERT_TRUE(WaitForState("mnist", "PREPARING")) << op->Log();
  std::set<std::string> expected = {"mnist-master-0", "mnist-worker-0", "mnist-worker-1",
                                    "mnist-worker-2", "mnist-worker-3", "mnist-ps-0",
                                    "mnist-ps-1",     "mnist-ps-2"};
  EXPECT_EQ(Names("pods"), expected);
  EXPECT_EQ(Names("services"), expected);

  for (const json& service : server_->List("services", "ns1")) {
    EXPECT_EQ(service["spec"]["clusterIP"], "None");
    EXPECT_EQ(service["spec"]["publishNotReadyAddresses"], true);
    EXPECT_EQ(service["metadata"]["ownerReferences"][0]["uid"], (*job)["metadata"]["uid"]);
  }
  auto pod = server_->Get("pods", "ns1", "mnist-worker-1");
  ASSERT_TRUE(pod.ok());
  const json& md = (*pod)["metadata"];
  EXPECT_EQ(md["labels"]["kubetrain.io/job-name"], "mnist");
  EXPECT_EQ(md["labels"]["kubetrain.io/replica-type"], "worker");
  EXPECT_EQ(md["labels"]["kubetrain.io/replica-index"], "1");
  const json& owner = md["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(owner["name"], "mnist");
  EXPECT_EQ(owner["uid"], (*job)["metadata"]["uid"]);
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["blockOwnerDeletion"], true);

  std::string tf_config;
  for (const json& env : (*pod)["spec"]["containers"][0]["env"]) {
    if (env["name"] == "TF_CONFIG") tf_config = env["value"];
  }
  ASSERT_FALSE(tf_config.empty());
  json tf = json::parse(tf_config);
  EXPECT_EQ(tf["cluster"]["master"], json({"mnist-master-0.ns1.svc:2222"}));
  EXPECT_EQ(tf["cluster"]["ps"], json({"mnist-ps-0.ns1.svc:2222", "mnist-ps-1.ns1.svc:2222",
                                       "mnist-ps-2.ns1.svc:2222"}));
  EXPECT_EQ(tf["cluster"]["worker"].size(), 4u);
  EXPECT_EQ(tf["cluster"]["worker"][1], "mnist-worker-1.ns1.svc:2222");
  EXPECT_EQ(tf["task"]["type"], "worker");
  EXPECT_EQ(tf["task"]["index"], 1);
  EXPECT_EQ(tf["environment"], "cloud");
  // Cluster keys in sorted order in the text itself, as TensorFlow users expect.
  EXPECT_LT(tf_config.find("\"master\""), tf_config.find("\"ps\""));
  EXPECT_LT(tf_config.find("\"ps\""), tf_config.find("\"worker\""));

  EXPECT_EQ(Requests("create pods"), 8);
  EXPECT_EQ(Requests("create services"), 8);
}

TEST_F(OperatorIntegrationTest, PodPhasesDriveEveryTransition) {
  auto op = StartOperator("op");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("j")).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  ASSERT_TRUE(WaitForState("j", "PREPARING"));
  SetPhase("j-master-0", PodStatus("Running"));
  SetPhase("j-ps-0", PodStatus("Running"));
  // Not all running yet: still PREPARING.
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("events") >= 1; }));
  EXPECT_EQ(State("j"), "PREPARING");
  SetAllRunning();
  ASSERT_TRUE(WaitForState("j", "RUNNING")) << op->Log();
  json job = JobObject("j");
  EXPECT_TRUE(job["status"].contains("startTime"));
  SetPhase("j-master-0", PodStatus("Succeeded", 0));
  ASSERT_TRUE(WaitForState("j", "SUCCEEDED")) << op->Log();
  // cleanPodPolicy Running: the still-running workers and ps are deleted.
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 1; })) << op->Log();
  EXPECT_EQ(Names("pods"), std::set<std::string>{"j-master-0"});
  EXPECT_TRUE(JobObject("j")["status"].contains("endTime"));
}

TEST_F(OperatorIntegrationTest, ExitCodePolicyRetriesSignalsAndFailsOnErrors) {
  auto op = StartOperator("op");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("e", "ExitCode")).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  SetAllRunning();
  ASSERT_TRUE(WaitForState("e", "RUNNING"));
  std::string old_uid = (*server_->Get("pods", "ns1", "e-worker-1"))["metadata"]["uid"];
  SetPhase("e-worker-1", PodStatus("Failed", 137));  // killed by a signal: retryable
  ASSERT_TRUE(server_->WaitUntil([&] {
    auto pod = server_->Get("pods", "ns1", "e-worker-1");
    return pod.ok() && (*pod)["metadata"]["uid"] != old_uid;
  })) << op->Log();
  EXPECT_NE(State("e"), "FAILED");
  SetPhase("e-worker-2", PodStatus("Failed", 1));  // a real error: the job fails
  ASSERT_TRUE(WaitForState("e", "FAILED")) << op->Log();
  EXPECT_NE(JobObject("e")["status"].value("errorMessage", "").find("worker-2"), std::string::npos);
}

TEST_F(OperatorIntegrationTest, NeverPolicyFailsOnAnyFailure) {
  auto op = StartOperator("op");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("n", "Never")).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  SetPhase("n-ps-1", PodStatus("Failed", 137));
  ASSERT_TRUE(WaitForState("n", "FAILED")) << op->Log();
}

TEST_F(OperatorIntegrationTest, ActiveDeadlineFailsTheJobWithNoOtherEvent) {
  auto op = StartOperator("op");
  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", Job("d", "Never", {{"activeDeadlineSeconds", 2}}))
          .ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  SetAllRunning();
  ASSERT_TRUE(WaitForState("d", "RUNNING"));
  // Nothing else happens; the operator's own timer must fire.
  ASSERT_TRUE(WaitForState("d", "FAILED", absl::Seconds(30))) << op->Log();
}

TEST_F(OperatorIntegrationTest, CancelDeletesEveryReplica) {
  auto op = StartOperator("op");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("c")).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  SetAllRunning();
  ASSERT_TRUE(server_->MergePatch("trainingjobs", "ns1", "c", {{"spec", {{"cancel", true}}}}).ok());
  ASSERT_TRUE(WaitForState("c", "CANCELLED")) << op->Log();
  EXPECT_EQ(server_->Count("pods"), 0u);
  EXPECT_EQ(server_->Count("services"), 0u);
}

TEST_F(OperatorIntegrationTest, KilledOperatorRestartsWithoutDuplicatesOrLostStatus) {
  auto op = StartOperator("op1");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("k")).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  ASSERT_TRUE(WaitForState("k", "PREPARING"));
  op->Kill(SIGKILL);
  std::string create_time = JobObject("k")["status"].value("createTime", "");
  ASSERT_FALSE(create_time.empty());
  SetAllRunning();  // while no operator runs

  auto restarted = StartOperator("op2");
  ASSERT_TRUE(WaitForState("k", "RUNNING")) << restarted->Log();
  EXPECT_EQ(Requests("create pods"), 8);
  EXPECT_EQ(Requests("create services"), 8);
  EXPECT_EQ(JobObject("k")["status"].value("createTime", ""), create_time);
  EXPECT_EQ(server_->Count("pods"), 8u);
}

TEST_F(OperatorIntegrationTest, RecoversFromDroppedWatchesGoneAndServerErrors) {
  auto op = StartOperator("op");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("w")).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  server_->FailNextRequests(3, 500);
  server_->DropWatches();
  SetAllRunning();            // changes made while the watches are down
  server_->CompactHistory();  // and the history they would resume from is gone
  ASSERT_TRUE(WaitForState("w", "RUNNING")) << op->Log();
  EXPECT_GE(Requests("list pods"), 2) << "a relist after 410";
  EXPECT_EQ(Requests("create pods"), 8);
}

TEST_F(OperatorIntegrationTest, OnlyTheLeaderActsAndTheOtherTakesOver) {
  std::vector<std::string> election = {"--leader-elect=true",
                                       "--lease-duration",
                                       "2",
                                       "--renew-deadline",
                                       "1.5",
                                       "--retry-period",
                                       "0.2",
                                       "--leader-election-namespace",
                                       "ns1"};
  auto a = StartOperator("a", election);
  auto holder = [&]() -> std::string {
    auto lease = server_->Get("leases", "ns1", "kubetrain-operator");
    return lease.ok() ? (*lease)["spec"].value("holderIdentity", "") : "";
  };
  ASSERT_TRUE(server_->WaitUntil([&] { return !holder().empty(); })) << a->Log();
  EXPECT_TRUE(absl::EndsWith(holder(), absl::StrCat("_", a->pid())));
  auto b = StartOperator("b", election);

  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("one")).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << a->Log();
  ASSERT_TRUE(WaitForState("one", "PREPARING"));
  EXPECT_EQ(Requests("create pods"), 8);
  EXPECT_NE(a->Log().find("caches synced"), std::string::npos);
  EXPECT_EQ(b->Log().find("starting"), std::string::npos) << b->Log();
  EXPECT_TRUE(absl::EndsWith(holder(), absl::StrCat("_", a->pid())));

  a->Kill(SIGKILL);  // no release: b must wait out the lease
  ASSERT_TRUE(server_->WaitUntil([&] {
    return absl::EndsWith(holder(), absl::StrCat("_", b->pid()));
  })) << b->Log();
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("two")).ok());
  ASSERT_TRUE(WaitForState("two", "PREPARING")) << b->Log();
  EXPECT_EQ(Requests("create pods"), 16);

  // A clean shutdown releases the lease at once.
  EXPECT_EQ(b->Terminate(), 0);
  EXPECT_EQ(holder(), "");
}

}  // namespace
}  // namespace kubetrain::testing
