// The real kubetrain-operator binary against the in-process fake API server:
// what a user sees on a cluster, with pod phases set by hand (no kubelet).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/child_process.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "operator/kube/test_objects.h"
#include "proto/kubetrain/v1/metrics_reporter.h"
#include "tests/fake_apiserver/fake_apiserver.h"

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

// A pod whose container the kubelet restarted in place `restarts` times (its
// restartPolicy OnFailure), running again after exiting with `last_exit_code`.
json RestartedInPlace(int restarts, int last_exit_code) {
  json container = {
      {"name", "kubetrain"},
      {"restartCount", restarts},
      {"state", {{"running", json::object()}}},
      {"lastState", {{"terminated", {{"exitCode", last_exit_code}, {"message", "crashed"}}}}}};
  return {{"status", {{"phase", "Running"}, {"containerStatuses", json::array({container})}}}};
}

// A pod the kubelet evicted: failed as a whole, no container exit code.
json Evicted() {
  return {{"status",
           {{"phase", "Failed"},
            {"reason", "Evicted"},
            {"message", "The node was low on resource: memory."}}}};
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
    kubeconfig_ = fake_apiserver::WriteKubeconfig(dir_, server_->url(), kToken);
  }

  // Leader election on a short lease, so that a takeover takes seconds.
  static std::vector<std::string> LeaderElectionFlags() {
    return {"--leader-elect=true",
            "--lease-duration",
            "2",
            "--renew-deadline",
            "1.5",
            "--retry-period",
            "0.2",
            "--leader-election-namespace",
            "ns1"};
  }

  std::unique_ptr<test_support::ChildProcess> StartOperator(const std::string& name,
                                                            std::vector<std::string> extra = {
                                                                "--leader-elect=false"}) {
    // Port 0: operators run side by side (and beside other tests).
    std::vector<std::string> args = {"--kubeconfig",
                                     kubeconfig_,
                                     "--namespace",
                                     "ns1",
                                     "--workers",
                                     "2",
                                     "--http-address=127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.begin(), KUBETRAIN_OPERATOR_BINARY);
    auto op = std::make_unique<test_support::ChildProcess>(test_support::ChildOptions{
        .argv = args, .output_path = dir_ + "/" + name + ".log", .append_output = true});
    EXPECT_TRUE(op->Start().ok());
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

  // Recreations wait 200 ms (doubling) instead of the default 10 s.
  std::unique_ptr<test_support::ChildProcess> StartFastRestartingOperator(const std::string& name) {
    return StartOperator(name, {"--leader-elect=false", "--restart-backoff=200ms"});
  }
  std::string PodUid(const std::string& pod) {
    auto p = server_->Get("pods", "ns1", pod);
    return p.ok() ? (*p)["metadata"].value("uid", "") : "";
  }
  std::string PodPhase(const std::string& pod) {
    auto p = server_->Get("pods", "ns1", pod);
    return p.ok() && p->contains("status") ? (*p)["status"].value("phase", "") : "";
  }
  // Waits until `pod` exists again as a new object (another uid).
  bool WaitForRecreation(const std::string& pod, const std::string& old_uid) {
    return server_->WaitUntil([&] {
      const std::string uid = PodUid(pod);
      return !uid.empty() && uid != old_uid;
    });
  }
  json Status(const std::string& job) {
    json j = JobObject(job);
    return j.is_object() && j.contains("status") ? j["status"] : json::object();
  }
  int RestartCount(const std::string& job) { return Status(job).value("restartCount", 0); }
  json Condition(const std::string& job, const std::string& type) {
    for (const json& c : Status(job).value("conditions", json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return json::object();
  }
  int Succeeded(const std::string& job, const std::string& role) {
    json statuses = Status(job).value("replicaStatuses", json::object());
    return statuses.contains(role) ? statuses[role].value("succeeded", 0) : 0;
  }
  // An Event on `job` with this reason whose message contains `text`.
  bool HasEvent(const std::string& job, const std::string& reason, const std::string& text = "") {
    for (const json& e : server_->List("events", "ns1")) {
      if (e["involvedObject"].value("name", "") == job && e.value("reason", "") == reason &&
          e.value("message", "").find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  // Ends `job` the way a TensorFlow job ends: every replica running, worker 3
  // finishes first, then the master; the ps and the other workers still run.
  void FinishWithMaster(const std::string& job, test_support::ChildProcess& op) {
    SetAllRunning();
    ASSERT_TRUE(WaitForState(job, "RUNNING")) << op.Log();
    SetPhase(job + "-worker-3", PodStatus("Succeeded", 0));
    SetPhase(job + "-master-0", PodStatus("Succeeded", 0));
    ASSERT_TRUE(WaitForState(job, "SUCCEEDED")) << op.Log();
  }

  std::unique_ptr<FakeApiServer> server_;
  test_support::TempDir tmp_{"kubetrain-operator-itest"};
  const std::string dir_ = tmp_.path();
  std::string kubeconfig_;
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
  // Long enough that the job is RUNNING before it runs out, even when every
  // process runs under ThreadSanitizer on a loaded machine.
  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", Job("d", "Never", {{"activeDeadlineSeconds", 10}}))
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
  op->SignalAndWait(SIGKILL);
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
  std::vector<std::string> election = LeaderElectionFlags();
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

  a->SignalAndWait(SIGKILL);  // no release: b must wait out the lease
  ASSERT_TRUE(server_->WaitUntil([&] {
    return absl::EndsWith(holder(), absl::StrCat("_", b->pid()));
  })) << b->Log();
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("two")).ok());
  ASSERT_TRUE(WaitForState("two", "PREPARING")) << b->Log();
  EXPECT_EQ(Requests("create pods"), 16);

  // A clean shutdown releases the lease at once.
  EXPECT_EQ(b->SignalAndWait(SIGTERM), 0);
  EXPECT_EQ(holder(), "");
}

TEST_F(OperatorIntegrationTest, ANewLeaderAdmitsTheQueueInTheSameOrder) {
  // A cluster with room for one STANDARD_1 job (8 replicas of 4 CPUs) at a time.
  FakeApiServer::Options options;
  options.bearer_token = kToken;
  options.bookmark_interval = absl::Milliseconds(200);
  options.default_nodes = 0;
  options.schedule_pods = true;  // running pods are bound to the node, as on a real cluster
  server_ = *FakeApiServer::Start(options);
  kubeconfig_ = fake_apiserver::WriteKubeconfig(dir_, server_->url(), kToken);
  ASSERT_TRUE(
      server_
          ->Create("nodes", "",
                   {{"metadata", {{"name", "node-0"}}},
                    {"status",
                     {{"allocatable", {{"cpu", "32"}, {"memory", "128Gi"}, {"pods", "110"}}}}}})
          .ok());
  auto holder = [&]() -> std::string {
    auto lease = server_->Get("leases", "ns1", "kubetrain-operator");
    return lease.ok() ? (*lease)["spec"].value("holderIdentity", "") : "";
  };
  auto admitted = [&](const std::string& job) {
    return Condition(job, "Admitted").value("reason", "");
  };
  // (Gang admission is on by default.)
  auto a = StartOperator("a", LeaderElectionFlags());
  ASSERT_TRUE(server_->WaitUntil([&] { return !holder().empty(); })) << a->Log();
  auto b = StartOperator("b", LeaderElectionFlags());
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("first")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return admitted("first") == "Admitted"; })) << a->Log();
  ASSERT_TRUE(WaitForReplicas(8)) << a->Log();
  // Two more, in later seconds: the queue's order is theirs.
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("second")).ok());
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("third")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    return Status("second").value("queuePosition", 0) == 1 &&
           Status("third").value("queuePosition", 0) == 2;
  })) << Status("second").dump()
      << Status("third").dump() << a->Log();
  EXPECT_EQ(admitted("third"), "WaitingForCapacity");

  // The leader dies; the standby takes the lease, with nothing of the
  // queue in memory.
  a->SignalAndWait(SIGKILL);
  ASSERT_TRUE(server_->WaitUntil([&] {
    return absl::EndsWith(holder(), absl::StrCat("_", b->pid()));
  })) << b->Log();
  FinishWithMaster("first", *b);
  ASSERT_TRUE(server_->WaitUntil([&] { return admitted("second") == "Admitted"; })) << b->Log();
  EXPECT_EQ(admitted("third"), "WaitingForCapacity");
  EXPECT_TRUE(server_->WaitUntil([&] { return Status("third").value("queuePosition", 0) == 1; }))
      << Status("third").dump();
}

// ---- Restart policies, backoffLimit, cleanPodPolicy --------------------------

TEST_F(OperatorIntegrationTest, RestartBackoffFlagRejectsWhatIsNotAPositiveDuration) {
  // "10" has no unit; 0 would recreate a crash-looping replica with no pause.
  const std::vector<std::string> bad_values = {"soon", "10", "0s", "-1s"};
  for (size_t i = 0; i < bad_values.size(); ++i) {
    const std::string& bad = bad_values[i];
    auto op =
        StartOperator(absl::StrCat("bad", i), {"--leader-elect=false", "--restart-backoff=" + bad});
    EXPECT_EQ(op->Wait(absl::InfiniteFuture()).value_or(-1), 2) << bad;
    const std::string log = op->Log();
    EXPECT_NE(log.find("--restart-backoff: not a positive duration such as 500ms, 10s or 1m: " +
                       bad + "\n"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("--restart-backoff DURATION"), std::string::npos) << "usage:\n" << log;
  }
  EXPECT_EQ(Requests("list trainingjobs"), 0);
}

// An elastic PyTorch job against the API server (whose schema checks
// spec.elasticPolicy): torchrun's rendezvous in every pod; a lost worker is
// recreated while the job runs on, then, with the budget spent, left out
// while minReplicas remain; the master's success ends the job.
TEST_F(OperatorIntegrationTest, AnElasticJobRunsOnWithoutALostWorker) {
  auto op = StartFastRestartingOperator("op");
  const json torchrun = {{"containerCommand", {"torchrun", "train.py"}}};
  const json job = {{"apiVersion", "kubetrain.io/v1"},
                    {"kind", "TrainingJob"},
                    {"metadata", {{"name", "el"}}},
                    {"spec",
                     {{"trainingInput",
                       {{"framework", "PYTORCH"},
                        {"scaleTier", "CUSTOM"},
                        {"masterType", "standard"},
                        {"workerType", "standard"},
                        {"workerCount", 2},
                        {"masterConfig", torchrun},
                        {"workerConfig", torchrun}}},
                      {"elasticPolicy", {{"minReplicas", 2}, {"maxReplicas", 3}}},
                      {"runPolicy", {{"restartPolicy", "OnFailure"}, {"backoffLimit", 1}}}}}};
  ASSERT_EQ(server_->Create("trainingjobs", "ns1", job).status(), absl::OkStatus());
  ASSERT_TRUE(WaitForReplicas(3)) << op->Log();
  const absl::StatusOr<json> pod = server_->Get("pods", "ns1", "el-worker-1");
  ASSERT_TRUE(pod.ok()) << pod.status();
  std::map<std::string, std::string> env;
  for (const json& e : (*pod)["spec"]["containers"][0]["env"]) {
    if (e.contains("value")) env[e["name"].get<std::string>()] = e["value"].get<std::string>();
  }
  EXPECT_EQ(env["PET_NNODES"], "2:3");
  EXPECT_EQ(env["PET_RDZV_ENDPOINT"], "el-master-0.ns1.svc:2222");
  EXPECT_EQ(env["PET_RDZV_CONF"], "is_host=false");
  EXPECT_EQ(env.count("RANK"), 0u);
  SetAllRunning();
  ASSERT_TRUE(WaitForState("el", "RUNNING")) << op->Log();

  const std::string uid = PodUid("el-worker-1");
  SetPhase("el-worker-1", PodStatus("Failed", 137));
  ASSERT_TRUE(WaitForRecreation("el-worker-1", uid)) << op->Log();
  EXPECT_TRUE(
      HasEvent("el", "Restarting", "meanwhile the elastic group goes on with 2 of 3 nodes"));
  EXPECT_EQ(Condition("el", "Running").value("status", ""), "True");
  SetAllRunning();

  SetPhase("el-worker-0", PodStatus("Failed", 1));
  ASSERT_TRUE(server_->WaitUntil([&] {
    return HasEvent("el", "ElasticNodeLost",
                    "worker-0 exited with code 1: exit; backoffLimit 1 reached: not recreated; the "
                    "elastic group goes on with 2 of 3 nodes (elasticPolicy.minReplicas 2)");
  })) << op->Log();
  EXPECT_EQ(State("el"), "RUNNING");
  EXPECT_EQ(PodPhase("el-worker-0"), "Failed");  // kept, not recreated

  SetPhase("el-master-0", PodStatus("Succeeded", 0));
  ASSERT_TRUE(WaitForState("el", "SUCCEEDED")) << op->Log();
  EXPECT_EQ(RestartCount("el"), 1);
  EXPECT_EQ(Requests("create pods"), 4);
}

// OnFailure and Always: a failed replica runs again and the job goes on.
class RetryingPolicyTest : public OperatorIntegrationTest,
                           public ::testing::WithParamInterface<std::string> {};

TEST_P(RetryingPolicyTest, FailedReplicasAreRecreatedAndTheJobGoesOn) {
  auto op = StartFastRestartingOperator("op");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("r", GetParam())).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  SetAllRunning();
  ASSERT_TRUE(WaitForState("r", "RUNNING")) << op->Log();

  // A container error, which Never and ExitCode would not retry.
  std::string uid = PodUid("r-worker-2");
  SetPhase("r-worker-2", PodStatus("Failed", 1));
  ASSERT_TRUE(WaitForRecreation("r-worker-2", uid)) << op->Log();
  EXPECT_EQ(RestartCount("r"), 1);
  EXPECT_TRUE(HasEvent("r", "Restarting", "worker-2 exited with code 1"));
  EXPECT_EQ(Condition("r", "Restarting").value("status", ""), "True");

  // A pod-level failure (no exit code), on a ps this time.
  uid = PodUid("r-ps-1");
  SetPhase("r-ps-1", Evicted());
  ASSERT_TRUE(WaitForRecreation("r-ps-1", uid)) << op->Log();
  EXPECT_EQ(RestartCount("r"), 2);
  EXPECT_TRUE(HasEvent("r", "Restarting", "ps-1 failed: Evicted"));
  // The state never goes back; restarts show in the conditions.
  EXPECT_EQ(State("r"), "RUNNING");

  SetAllRunning();  // the new pods start
  ASSERT_TRUE(server_->WaitUntil([&] {
    return Condition("r", "Running").value("status", "") == "True" &&
           Condition("r", "Restarting").value("status", "") == "False";
  })) << op->Log();
  SetPhase("r-master-0", PodStatus("Succeeded", 0));
  ASSERT_TRUE(WaitForState("r", "SUCCEEDED")) << op->Log();
  EXPECT_EQ(RestartCount("r"), 2);
  EXPECT_EQ(Requests("create pods"), 10);
}

INSTANTIATE_TEST_SUITE_P(Policies, RetryingPolicyTest, ::testing::Values("OnFailure", "Always"),
                         [](const auto& info) { return info.param; });

// A replica that exited 0 has done its part (workers often finish before the
// master): it is never run again, whatever else restarts (Kubeflow's #1186).
class CompletedReplicaTest : public OperatorIntegrationTest,
                             public ::testing::WithParamInterface<std::string> {};

TEST_P(CompletedReplicaTest, IsNeverRecreated) {
  auto op = StartFastRestartingOperator("op");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("c", GetParam())).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  SetAllRunning();
  ASSERT_TRUE(WaitForState("c", "RUNNING")) << op->Log();

  const std::string done_uid = PodUid("c-worker-3");
  SetPhase("c-worker-3", PodStatus("Succeeded", 0));
  ASSERT_TRUE(server_->WaitUntil([&] { return Succeeded("c", "worker") == 1; })) << op->Log();
  // The operator keeps reconciling the job: another worker is killed by a
  // signal (retryable under both policies) and comes back...
  const std::string killed_uid = PodUid("c-worker-1");
  SetPhase("c-worker-1", PodStatus("Failed", 137));
  ASSERT_TRUE(WaitForRecreation("c-worker-1", killed_uid)) << op->Log();
  // ...while the completed one stays as it was.
  EXPECT_EQ(PodUid("c-worker-3"), done_uid);
  EXPECT_EQ(PodPhase("c-worker-3"), "Succeeded");
  EXPECT_EQ(Requests("delete pods"), 1);
  EXPECT_EQ(Requests("create pods"), 9);
  EXPECT_EQ(RestartCount("c"), 1);

  SetPhase("c-master-0", PodStatus("Succeeded", 0));
  ASSERT_TRUE(WaitForState("c", "SUCCEEDED")) << op->Log();
  // cleanPodPolicy Running: what still runs goes, the completed replicas stay.
  const std::set<std::string> completed = {"c-master-0", "c-worker-3"};
  ASSERT_TRUE(server_->WaitUntil([&] { return Names("pods") == completed; })) << op->Log();
  EXPECT_EQ(PodUid("c-worker-3"), done_uid);
}

INSTANTIATE_TEST_SUITE_P(Policies, CompletedReplicaTest, ::testing::Values("OnFailure", "ExitCode"),
                         [](const auto& info) { return info.param; });

// Without a kubelet to restart containers in place, every failure here is a
// recreation: backoffLimit must count them (Kubeflow's #2342).
TEST_F(OperatorIntegrationTest, BackoffLimitCountsRecreations) {
  auto op = StartFastRestartingOperator("op");
  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", Job("b", "OnFailure", {{"backoffLimit", 2}})).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  SetAllRunning();
  ASSERT_TRUE(WaitForState("b", "RUNNING")) << op->Log();

  for (int restart = 1; restart <= 2; ++restart) {
    const std::string uid = PodUid("b-worker-0");
    SetPhase("b-worker-0", PodStatus("Failed", 1));
    ASSERT_TRUE(WaitForRecreation("b-worker-0", uid)) << "restart " << restart << "\n" << op->Log();
    EXPECT_EQ(RestartCount("b"), restart);
    EXPECT_EQ(State("b"), "RUNNING");
  }
  // The third failure would need a third restart: over the limit.
  const std::string last_uid = PodUid("b-worker-0");
  SetPhase("b-worker-0", PodStatus("Failed", 1));
  ASSERT_TRUE(WaitForState("b", "FAILED")) << op->Log();
  const std::string message = Status("b").value("errorMessage", "");
  EXPECT_NE(message.find("backoffLimit 2"), std::string::npos) << message;
  EXPECT_NE(message.find("worker-0 exited with code 1"), std::string::npos) << message;
  EXPECT_EQ(Condition("b", "Failed").value("reason", ""), "BackoffLimitExceeded");
  EXPECT_EQ(RestartCount("b"), 2);

  // Not recreated; cleanPodPolicy Running deletes the replicas that still run
  // and keeps the failed one (its logs tell why).
  ASSERT_TRUE(server_->WaitUntil([&] {
    return Names("pods") == std::set<std::string>{"b-worker-0"};
  })) << op->Log();
  EXPECT_EQ(PodUid("b-worker-0"), last_uid);
  EXPECT_EQ(Requests("create pods"), 10);
}

// Restarts in place (the container's restartCount in pod status) and
// recreations draw on the same budget.
TEST_F(OperatorIntegrationTest, BackoffLimitCountsContainerRestartsWithRecreations) {
  auto op = StartFastRestartingOperator("op");
  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", Job("i", "OnFailure", {{"backoffLimit", 2}})).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  SetAllRunning();
  ASSERT_TRUE(WaitForState("i", "RUNNING")) << op->Log();

  // Restart 1 of 2: a recreation.
  const std::string uid = PodUid("i-worker-1");
  SetPhase("i-worker-1", PodStatus("Failed", 1));
  ASSERT_TRUE(WaitForRecreation("i-worker-1", uid)) << op->Log();
  EXPECT_EQ(RestartCount("i"), 1);

  // Restart 2 of 2: the kubelet restarted worker-2's container in place.
  SetPhase("i-worker-2", RestartedInPlace(1, 1));
  ASSERT_TRUE(server_->WaitUntil([&] { return RestartCount("i") == 2; })) << op->Log();
  ASSERT_TRUE(server_->WaitUntil([&] {
    return HasEvent("i", "Restarting", "worker-2 restarted in place (1 so far), last exit code 1");
  })) << op->Log();
  EXPECT_EQ(State("i"), "RUNNING");

  // A third restart, in place again, is one too many.
  SetPhase("i-worker-2", RestartedInPlace(2, 1));
  ASSERT_TRUE(WaitForState("i", "FAILED")) << op->Log();
  const std::string message = Status("i").value("errorMessage", "");
  EXPECT_NE(message.find("backoffLimit 2"), std::string::npos) << message;
  EXPECT_NE(message.find("worker-2 restarted in place 2 times"), std::string::npos) << message;
  EXPECT_EQ(Condition("i", "Failed").value("reason", ""), "BackoffLimitExceeded");
  EXPECT_EQ(RestartCount("i"), 3);
  EXPECT_EQ(Requests("create pods"), 9);
}

TEST_F(OperatorIntegrationTest, CleanPodPolicyDefaultsToRunning) {
  auto op = StartOperator("op");
  json job = Job("p");
  job["spec"]["runPolicy"].erase("cleanPodPolicy");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  ASSERT_NO_FATAL_FAILURE(FinishWithMaster("p", *op));
  // The ps (which never exit on their own) and the running workers go, with
  // their Services; the completed replicas stay.
  const std::set<std::string> completed = {"p-master-0", "p-worker-3"};
  ASSERT_TRUE(server_->WaitUntil([&] {
    return Names("pods") == completed && Names("services") == completed;
  })) << op->Log();
  EXPECT_FALSE(JobObject("p")["spec"]["runPolicy"].contains("cleanPodPolicy"));
}

TEST_F(OperatorIntegrationTest, CleanPodPolicyAllDeletesEveryReplica) {
  auto op = StartOperator("op");
  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", Job("a", "Never", {{"cleanPodPolicy", "All"}})).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  ASSERT_NO_FATAL_FAILURE(FinishWithMaster("a", *op));
  ASSERT_TRUE(server_->WaitUntil([&] {
    return server_->Count("pods") == 0 && server_->Count("services") == 0;
  })) << op->Log();
  EXPECT_EQ(State("a"), "SUCCEEDED");
}

TEST_F(OperatorIntegrationTest, CleanPodPolicyNoneKeepsEveryReplica) {
  auto op = StartOperator("op");
  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", Job("z", "Never", {{"cleanPodPolicy", "None"}})).ok());
  ASSERT_TRUE(WaitForReplicas(8)) << op->Log();
  ASSERT_NO_FATAL_FAILURE(FinishWithMaster("z", *op));
  // The operator records a pass's events after its deletes: once the
  // JobSucceeded event is there, any clean-up of that pass has been done.
  ASSERT_TRUE(server_->WaitUntil([&] { return HasEvent("z", "JobSucceeded"); })) << op->Log();
  EXPECT_EQ(server_->Count("pods"), 8u);
  EXPECT_EQ(server_->Count("services"), 8u);
  EXPECT_EQ(Requests("delete pods"), 0);
  EXPECT_EQ(Requests("delete services"), 0);
  EXPECT_EQ(PodPhase("z-ps-0"), "Running");
}

}  // namespace
}  // namespace kubetrain::testing

// ---- The Metrics service: trials report to the leader ------------------------

namespace kubetrain::testing {
namespace {

// A pod standing for an operator replica (the fake server runs no Deployment).
json OperatorPod(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name}, {"labels", {{"app.kubernetes.io/name", "kubetrain-operator"}}}}},
          {"spec", {{"containers", {{{"name", "operator"}, {"image", "op"}}}}}}};
}

// One report, as a trial's master sends it; the service's answer.
absl::Status SendReport(const std::string& address, const std::string& trial,
                        const std::string& token, int64_t step, double accuracy) {
  return metrics::MetricsReporter::Create(address, {"ns1/hp", trial, "master-0"}, token)
      ->Report(step, {{"accuracy", accuracy}}, std::chrono::seconds(30));
}

TEST_F(OperatorIntegrationTest, TrialReportsReachTheLeaderAcrossAFailover) {
  EXPECT_NE(StartOperator("half", {"--leader-elect=false", "--metrics-listen=127.0.0.1:0"})
                ->Wait(absl::InfiniteFuture())
                .value_or(-1),
            0);
  ASSERT_TRUE(server_->Create("pods", "ns1", OperatorPod("op-a")).ok());
  ASSERT_TRUE(server_->Create("pods", "ns1", OperatorPod("op-b")).ok());
  auto election = [](const std::string& pod) {
    std::vector<std::string> flags = LeaderElectionFlags();
    flags.insert(flags.end(),
                 {"--metrics-listen=127.0.0.1:0",
                  "--metrics-address=kubetrain-operator-trials:9090", "--pod-name", pod});
    return flags;
  };
  // The bound gRPC address, from the operator's log.
  auto grpc_address = [](test_support::ChildProcess& op) -> std::string {
    const std::string log = op.Log();
    const std::string prefix = "serving trial metrics on ";
    size_t at = log.find(prefix);
    if (at == std::string::npos) return "";
    size_t end = log.find('\n', at);
    return log.substr(at + prefix.size(), end - at - prefix.size());
  };
  auto label = [&](const std::string& pod) -> std::string {
    auto object = server_->Get("pods", "ns1", pod);
    return object.ok() ? (*object)["metadata"]["labels"].value("kubetrain.io/metrics-leader", "")
                       : "<missing>";
  };
  auto a = StartOperator("a", election("op-a"));
  ASSERT_TRUE(server_->WaitUntil([&] { return label("op-a") == "true"; })) << a->Log();
  auto b = StartOperator("b", election("op-b"));
  ASSERT_TRUE(test_support::WaitUntil([&] {
    return !grpc_address(*a).empty() && !grpc_address(*b).empty();
  })) << b->Log();
  const std::string address_a = grpc_address(*a), address_b = grpc_address(*b);

  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", kube::testing::TuningJobObject("hp", 1, 1)).ok());
  std::string token;
  ASSERT_TRUE(server_->WaitUntil([&] {
    for (const json& pod : server_->List("pods", "ns1")) {
      if (pod["metadata"]["labels"].value("kubetrain.io/trial-id", "") != "1") continue;
      for (const json& var : pod["spec"]["containers"][0]["env"]) {
        if (var["name"] == "KUBETRAIN_METRICS_ADDR") {
          EXPECT_EQ(var["value"], "kubetrain-operator-trials:9090");
        }
        if (var["name"] == "KUBETRAIN_METRICS_TOKEN") token = var["value"];
      }
    }
    return !token.empty();
  })) << a->Log();

  // The standby sends the trial elsewhere; the leader takes the report, but
  // not with another token.
  EXPECT_EQ(SendReport(address_b, "1", token, 10, 0.5).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SendReport(address_a, "1", token + "0", 10, 0.5).code(),
            absl::StatusCode::kPermissionDenied);
  absl::Status first = SendReport(address_a, "1", token, 10, 0.5);
  ASSERT_TRUE(first.ok()) << first << a->Log();

  // The leader dies holding its label; b takes over, moves the label, and
  // takes the trial's reports with the token a issued.
  a->SignalAndWait(SIGKILL);
  ASSERT_TRUE(server_->WaitUntil([&] { return label("op-b") == "true" && label("op-a").empty(); }))
      << b->Log();
  absl::Status second;
  ASSERT_TRUE(test_support::WaitUntil([&] {
    second = SendReport(address_b, "1", token, 20, 0.8);
    return !absl::IsUnavailable(second);
  })) << b->Log();
  ASSERT_TRUE(second.ok()) << second;

  std::string master;
  for (const json& pod : server_->List("pods", "ns1")) {
    if (pod["metadata"]["labels"].value("kubetrain.io/trial-id", "") == "1") {
      master = pod["metadata"]["name"];
    }
  }
  ASSERT_FALSE(master.empty());
  SetPhase(master, PodStatus("Succeeded", 0));
  ASSERT_TRUE(WaitForState("hp", "SUCCEEDED")) << b->Log();
  const json trial = Status("hp")["trainingOutput"]["trials"][0];
  EXPECT_EQ(trial["finalMetric"]["objectiveValue"], 0.8) << trial;
  // int64 as a JSON number: the CRD's schema says integer.
  EXPECT_EQ(trial["finalMetric"]["trainingStep"], 20) << trial;

  // A clean stop drops the label.
  EXPECT_EQ(b->SignalAndWait(SIGTERM), 0);
  EXPECT_EQ(label("op-b"), "");
}

}  // namespace
}  // namespace kubetrain::testing
