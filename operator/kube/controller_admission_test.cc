// Gang admission end to end: the real controller against the fake API
// server, whose stand-in scheduler binds pods to nodes by their requests
// (FakeApiServer::Options::schedule_pods) and starts them.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/core/gang_admission.h"
#include "operator/kube/controller.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/study_store.h"
#include "operator/kube/test_objects.h"
#include "operator/observability/operator_metrics.h"
#include "prometheus/registry.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;
using ::testing::HasSubstr;

// Synchronous PS: a master, two workers and a ps, each a "standard" machine
// (4 CPUs, 15 GiB); `extra` is merged into the spec.
json SyncPsJob(const std::string& name, json extra = json::object()) {
  json spec = {{"trainingInput",
                {{"scaleTier", "CUSTOM"},
                 {"masterType", "standard"},
                 {"workerType", "standard"},
                 {"workerCount", 2},
                 {"parameterServerType", "standard"},
                 {"parameterServerCount", 1}}},
               {"runPolicy", {{"restartPolicy", "Never"}}}};
  spec.merge_patch(extra);
  return testing::TrainingJobObject(name, spec);
}

// A node with room for two "standard" replicas.
json Node(const std::string& name) {
  return {{"metadata", {{"name", name}}},
          {"status", {{"allocatable", {{"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}}}}}};
}

class AdmissionTest : public ::testing::Test {
 protected:
  // `nodes` nodes of two replicas each; `write_latency` on every write, so
  // the pods of jobs submitted together are created interleaved, as the
  // round trips of a real API server interleave them.
  void StartServer(int nodes, absl::Duration write_latency = absl::ZeroDuration(),
                   bool pod_group_crds = false) {
    FakeApiServer::Options options;
    options.default_nodes = 0;  // this test's own
    options.bookmark_interval = absl::Milliseconds(200);
    options.schedule_pods = true;
    options.write_latency = write_latency;
    options.pod_group_crds = pod_group_crds;
    server_ = *FakeApiServer::Start(options);
    for (int i = 0; i < nodes; ++i) {
      ASSERT_TRUE(server_->Create("nodes", "", Node(absl::StrCat("node-", i))).ok());
    }
    client_ = testing::FakeServerClient(server_->url());
  }

  void StartController(bool admission, const std::string& ns = "ns1") {
    ControllerOptions options;
    options.ns = ns;
    options.workers = 2;
    options.gang_admission = admission;
    options.admission.min_interval = absl::Milliseconds(20);
    options.metrics = &metrics_;
    controller_ = std::make_unique<Controller>(client_.get(), options, &studies_);
    ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  }

  void TearDown() override {
    if (controller_ != nullptr) controller_->Stop();
  }

  json Job(const std::string& name) const {
    auto job = server_->Get("trainingjobs", "ns1", name);
    return job.ok() ? *job : json::object();
  }
  std::string State(const std::string& name) const {
    return Job(name).value("/status/state"_json_pointer, std::string());
  }
  json Admitted(const std::string& name) const {
    for (const json& c : Job(name).value("/status/conditions"_json_pointer, json::array())) {
      if (c.value("type", "") == core::kAdmittedCondition) return c;
    }
    return json::object();
  }
  bool WaitForAdmitted(const std::string& name, const std::string& reason,
                       absl::Duration timeout = absl::Seconds(30)) {
    return server_->WaitUntil([&] { return Admitted(name).value("reason", "") == reason; },
                              timeout);
  }

  // The job's pods by phase.
  std::map<std::string, int> Phases(const std::string& job) const {
    std::map<std::string, int> phases;
    for (const json& pod : server_->List("pods", "ns1")) {
      if (pod.value("/metadata/labels/kubetrain.io~1job-name"_json_pointer, std::string()) == job) {
        ++phases[pod.value("/status/phase"_json_pointer, std::string())];
      }
    }
    return phases;
  }
  int PodCount(const std::string& job) const {
    int n = 0;
    for (const auto& [phase, count] : Phases(job)) n += count;
    return n;
  }

  // `job` as a study of `trials` trials, `parallel` at a time, tuning lr.
  static json Sweep(json job, int trials, int parallel) {
    job["spec"]["trainingInput"]["hyperparameters"] = {
        {"goal", "MAXIMIZE"},
        {"maxTrials", trials},
        {"maxParallelTrials", parallel},
        {"hyperparameterMetricTag", "accuracy"},
        {"params",
         {{{"parameterName", "lr"}, {"type", "DOUBLE"}, {"minValue", 0.001}, {"maxValue", 0.1}}}}};
    return job;
  }
  // The pods of ns1 by trial, then phase: how many.
  std::map<std::string, std::map<std::string, int>> TrialPhases() const {
    std::map<std::string, std::map<std::string, int>> by_trial;
    for (const json& pod : server_->List("pods", "ns1")) {
      const std::string trial =
          pod.value("/metadata/labels/kubetrain.io~1trial-id"_json_pointer, std::string());
      ++by_trial[trial][pod.value("/status/phase"_json_pointer, std::string())];
    }
    return by_trial;
  }

  // Sync-PS job a is admitted and its 4 replicas run; then b, which the
  // room left cannot hold, waits for capacity.
  void RunAThenQueueB() {
    ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("a")).ok());
    ASSERT_TRUE(WaitForAdmitted("a", core::kAdmittedReason));
    ASSERT_TRUE(server_->WaitUntil([&] { return Phases("a")["Running"] == 4; }));
    ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("b")).ok());
    ASSERT_TRUE(WaitForAdmitted("b", core::kWaitingForCapacityReason)) << Admitted("b").dump();
  }

  // Every pod of the job exits 0, as its trainer ends: once its four
  // replicas run (a pod not yet created or bound has no trainer to end, and
  // one skipped here would keep the job running). The master ends last: its
  // success ends the job, and the controller then deletes the pods still
  // running, which a later patch would find gone.
  void Finish(const std::string& job) {
    ASSERT_TRUE(server_->WaitUntil([&] { return Phases(job)["Running"] == 4; }))
        << job << ": " << Job(job)["status"].dump();
    std::vector<std::string> pods;
    for (const json& pod : server_->List("pods", "ns1")) {
      if (pod.value("/metadata/labels/kubetrain.io~1job-name"_json_pointer, std::string()) != job) {
        continue;
      }
      const std::string name = pod["metadata"]["name"].get<std::string>();
      const bool master = pod.value("/metadata/labels/kubetrain.io~1replica-type"_json_pointer,
                                    std::string()) == "master";
      pods.insert(master ? pods.end() : pods.begin(), name);
    }
    ASSERT_EQ(pods.size(), 4u);
    for (const std::string& name : pods) {
      ASSERT_TRUE(server_
                      ->MergePatch("pods", "ns1", name,
                                   testing::TerminatedPodStatus("Succeeded", 0), "status")
                      .ok())
          << name;
    }
  }

  std::vector<std::string> Events(const std::string& job, const std::string& type) const {
    std::vector<std::string> reasons;
    for (const json& e : server_->List("events", "ns1")) {
      if (e["involvedObject"].value("name", "") == job && e.value("type", "") == type) {
        reasons.push_back(e.value("reason", ""));
      }
    }
    return reasons;
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
  InMemoryStudyStore studies_;
  prometheus::Registry registry_;
  observability::OperatorMetrics metrics_{registry_};
  std::unique_ptr<Controller> controller_;

  // A gauge's or counter's value, a histogram's count.
  double Metric(const std::string& family) {
    for (const prometheus::MetricFamily& f : registry_.Collect()) {
      if (f.name != family || f.metric.empty()) continue;
      const prometheus::ClientMetric& m = f.metric.front();
      if (f.type == prometheus::MetricType::Gauge) return m.gauge.value;
      if (f.type == prometheus::MetricType::Counter) return m.counter.value;
      if (f.type == prometheus::MetricType::Histogram) {
        return static_cast<double>(m.histogram.sample_count);
      }
    }
    return -1;
  }
};

TEST_F(AdmissionTest, WithoutAdmissionTwoJobsThatFitOneAtATimeEachHoldHalfTheCluster) {
  // Room for 6 replicas, two jobs of 4 submitted together: the scheduler
  // places pods one by one, with no notion of the job.
  StartServer(3, absl::Milliseconds(100));
  StartController(/*admission=*/false);
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("a")).ok());
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("b")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return PodCount("a") == 4 && PodCount("b") == 4; }));
  const std::map<std::string, int> a = Phases("a"), b = Phases("b");
  // The deadlock: each job has replicas running that wait for peers that
  // cannot be placed while the other job's hold their room.
  EXPECT_GT(a.count("Running") ? a.at("Running") : 0, 0);
  EXPECT_GT(a.count("Pending") ? a.at("Pending") : 0, 0);
  EXPECT_GT(b.count("Running") ? b.at("Running") : 0, 0);
  EXPECT_GT(b.count("Pending") ? b.at("Pending") : 0, 0);
  EXPECT_EQ(a.at("Running") + b.at("Running"), 6);
}

TEST_F(AdmissionTest, OneJobRunsWhileTheOtherWaitsQueuedThenBothSucceed) {
  StartServer(3, absl::Milliseconds(100));
  StartController(/*admission=*/true);
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("a")).ok());
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("b")).ok());
  // Created in the same second, they are ordered by uid: either may go first.
  std::string first, second;
  ASSERT_TRUE(server_->WaitUntil([&] {
    const std::string a = Admitted("a").value("reason", ""), b = Admitted("b").value("reason", "");
    if (a == core::kAdmittedReason && b == core::kWaitingForCapacityReason) {
      first = "a", second = "b";
    } else if (b == core::kAdmittedReason && a == core::kWaitingForCapacityReason) {
      first = "b", second = "a";
    }
    return !first.empty();
  })) << Admitted("a").dump()
      << Admitted("b").dump();
  ASSERT_TRUE(server_->WaitUntil([&] { return Phases(first)["Running"] == 4; }));
  EXPECT_EQ(PodCount(second), 0);
  EXPECT_EQ(State(second), "QUEUED");
  EXPECT_EQ(Admitted(second)["status"], "False");
  EXPECT_EQ(Admitted(second)["message"],
            "needs 4 pods of cpu 4, memory 15Gi; the cluster can place 2 of them now; no job "
            "ahead of it");
  EXPECT_EQ(Admitted(first)["status"], "True");
  // Its place in the queue, for kubectl's Queue column and `jobs list`.
  EXPECT_EQ(Job(second).value("/status/queuePosition"_json_pointer, 0), 1);
  EXPECT_FALSE(Job(first)["status"].contains("queuePosition"));
  EXPECT_EQ(Metric("kubetrain_operator_admission_queued_jobs"), 1.0);
  EXPECT_EQ(Metric("kubetrain_operator_admission_admitted_total"), 1.0);

  Finish(first);
  ASSERT_TRUE(server_->WaitUntil([&] { return State(first) == "SUCCEEDED"; }));
  ASSERT_TRUE(WaitForAdmitted(second, core::kAdmittedReason)) << Admitted(second).dump();
  ASSERT_TRUE(server_->WaitUntil([&] { return Phases(second)["Running"] == 4; }));
  EXPECT_FALSE(Job(second)["status"].contains("queuePosition"));
  Finish(second);
  ASSERT_TRUE(server_->WaitUntil([&] { return State(second) == "SUCCEEDED"; }));
  // An Admitted event marks a job leaving the queue: the second's; the first
  // was admitted on arrival (its condition says so).
  EXPECT_THAT(Events(first, "Normal"), ::testing::Not(::testing::Contains("Admitted")));
  EXPECT_THAT(Events(second, "Normal"), ::testing::Contains("Admitted"));
  EXPECT_EQ(Metric("kubetrain_operator_admission_admitted_total"), 2.0);
  EXPECT_EQ(Metric("kubetrain_operator_admission_wait_seconds"), 2.0);
  EXPECT_GT(Metric("kubetrain_operator_admission_pass_duration_seconds"), 0.0);
  // The server refused no create.
  EXPECT_EQ(server_->RefusalCounts().count("create pods 403"), 0u);
}

// What the pods cache keeps of a pod no reconcile reads: placement's fields,
// the job label among them (a pod of a job was set aside at its admission,
// so its events start no pass).
TEST(KeepForPlacementTest, KeepsTheJobLabelAndWhatPlacementReadsOnly) {
  const json pod = json::parse(R"({
    "metadata": {"name": "a-worker-0", "namespace": "ns2",
                 "labels": {"kubetrain.io/job-name": "a", "team": "x"},
                 "annotations": {"note": "long"}},
    "spec": {"nodeName": "node-1",
             "containers": [{"name": "c", "image": "busybox",
                             "env": [{"name": "A", "value": "1"}],
                             "resources": {"requests": {"cpu": "1"}}}]},
    "status": {"phase": "Running", "podIP": "10.0.0.1"}})");
  json kept = json::object();
  GangAdmission::KeepForPlacement(pod, kept);
  EXPECT_EQ(kept, json::parse(R"({
    "metadata": {"name": "a-worker-0", "namespace": "ns2",
                 "labels": {"kubetrain.io/job-name": "a"}},
    "spec": {"nodeName": "node-1", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
    "status": {"phase": "Running"}})"))
      << kept.dump();
}

TEST_F(AdmissionTest, AnOperatorOfEveryNamespaceWatchesPodsOnceForBoth) {
  StartServer(3);
  StartController(/*admission=*/true, /*ns=*/"");
  // Room for 2 more replicas beside a's: b waits, counting a's pods from the
  // one watch the controller and admission share.
  ASSERT_NO_FATAL_FAILURE(RunAThenQueueB());
  EXPECT_EQ(PodCount("b"), 0);
  // One pods informer: one list (a watch that ends is resumed without one).
  EXPECT_EQ(server_->RequestCounts()["list pods"], 1);
  Finish("a");
  ASSERT_TRUE(WaitForAdmitted("b", core::kAdmittedReason)) << Admitted("b").dump();
}

TEST_F(AdmissionTest, AnOperatorOfOneNamespaceWatchesPodsOnceAndLeavesOthersPods) {
  StartServer(4);
  // Another team's job "a" in ns2 (another operator's), one pod filling a
  // node: admission counts it; this operator's controller leaves it be.
  json other = {{"metadata",
                 {{"name", "a-master-0"},
                  {"labels", {{std::string(core::kLabelJobName), "a"}}},
                  {"ownerReferences",
                   {{{"apiVersion", "kubetrain.io/v1"},
                     {"kind", "TrainingJob"},
                     {"name", "a"},
                     {"uid", "uid-of-ns2-a"},
                     {"controller", true}}}}}},
                {"spec",
                 {{"containers",
                   {{{"name", "c"},
                     {"image", "busybox"},
                     {"resources", {{"requests", {{"cpu", "8"}, {"memory", "1Gi"}}}}}}}}}}};
  ASSERT_TRUE(server_->Create("pods", "ns2", other).ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    auto pod = server_->Get("pods", "ns2", "a-master-0");
    return pod.ok() && !pod->value("/spec/nodeName"_json_pointer, std::string()).empty();
  }));
  StartController(/*admission=*/true, /*ns=*/"ns1");
  // Three nodes' room less a's four replicas: the next job waits.
  ASSERT_NO_FATAL_FAILURE(RunAThenQueueB());
  EXPECT_EQ(Admitted("b")["message"],
            "needs 4 pods of cpu 4, memory 15Gi; the cluster can place 2 of them now; no job "
            "ahead of it");
  // One pods informer, of every namespace, for the controller and admission.
  EXPECT_EQ(server_->RequestCounts()["list pods"], 1);
  EXPECT_TRUE(server_->Get("pods", "ns2", "a-master-0").ok());
  EXPECT_EQ(server_->RequestCounts()["delete pods"], 0);
  Finish("a");
  ASSERT_TRUE(WaitForAdmitted("b", core::kAdmittedReason)) << Admitted("b").dump();
}

TEST_F(AdmissionTest, AJobBiggerThanTheClusterNeverFitsAtOnce) {
  StartServer(2);
  StartController(/*admission=*/true);
  ASSERT_TRUE(server_
                  ->Create("trainingjobs", "ns1",
                           SyncPsJob("huge", {{"trainingInput", {{"workerCount", 8}}}}))
                  .ok());
  ASSERT_TRUE(WaitForAdmitted("huge", core::kNeverFitsReason)) << Admitted("huge").dump();
  EXPECT_THAT(Admitted("huge")["message"].get<std::string>(),
              HasSubstr("needs 10 pods of cpu 4, memory 15Gi; together they ask for cpu 40, "
                        "memory 150Gi, more than the cluster's nodes can hold at once even empty "
                        "(cpu 16, memory 64Gi allocatable in all)"));
  EXPECT_EQ(PodCount("huge"), 0);
  EXPECT_EQ(State("huge"), "QUEUED");
  ASSERT_TRUE(server_->WaitUntil([&] { return !Events("huge", "Warning").empty(); }));
  EXPECT_EQ(Events("huge", "Warning"), std::vector<std::string>{core::kNeverFitsReason});
  // A node more and it fits... not yet: 10 replicas need 5 nodes.
  ASSERT_TRUE(server_->Create("nodes", "", Node("node-2")).ok());
  ASSERT_TRUE(server_->Create("nodes", "", Node("node-3")).ok());
  ASSERT_TRUE(server_->Create("nodes", "", Node("node-4")).ok());
  ASSERT_TRUE(WaitForAdmitted("huge", core::kAdmittedReason)) << Admitted("huge").dump();
  ASSERT_TRUE(server_->WaitUntil([&] { return Phases("huge")["Running"] == 10; }));
}

TEST_F(AdmissionTest, AJobOverTheNamespaceQuotaWaitsAndNoCreateIsRefused) {
  StartServer(4);
  ASSERT_TRUE(server_
                  ->Create("resourcequotas", "ns1",
                           {{"metadata", {{"name", "team-cpu"}}},
                            {"spec", {{"hard", {{"requests.cpu", "20"}}}}}})
                  .ok());
  StartController(/*admission=*/true);
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("a")).ok());
  ASSERT_TRUE(WaitForAdmitted("a", core::kAdmittedReason));
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("b")).ok());
  ASSERT_TRUE(WaitForAdmitted("b", core::kQuotaExceededReason)) << Admitted("b").dump();
  EXPECT_EQ(Admitted("b")["message"],
            "ResourceQuota team-cpu in namespace ns1: requests.cpu 16 of 20 used, and the job "
            "asks for 16; no job ahead of it");
  EXPECT_EQ(PodCount("b"), 0);
  ASSERT_TRUE(server_->WaitUntil([&] { return !Events("b", "Warning").empty(); }));
  EXPECT_EQ(Events("b", "Warning"), std::vector<std::string>{core::kQuotaExceededReason});

  Finish("a");
  ASSERT_TRUE(WaitForAdmitted("b", core::kAdmittedReason))
      << Admitted("b").dump() << "\na: " << Job("a")["status"].dump();
  ASSERT_TRUE(server_->WaitUntil([&] { return Phases("b")["Running"] == 4; }));
  EXPECT_EQ(server_->RefusalCounts().count("create pods 403"), 0u);
}

TEST_F(AdmissionTest, AStudyOfFourParallelTrialsOnRoomForOneAndAHalfRunsEveryTrial) {
  StartServer(3);  // 6 replicas; a trial is 4
  StartController(/*admission=*/true);
  const json study = Sweep(SyncPsJob("sweep"), 4, 4);
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", study).ok());
  std::set<std::string> finished;
  for (int round = 0; round < 4; ++round) {
    std::string running;
    ASSERT_TRUE(server_->WaitUntil([&] {
      for (const auto& [trial, phases] : TrialPhases()) {
        if (finished.count(trial) == 0 && phases.count("Running") && phases.at("Running") == 4) {
          running = trial;
          return true;
        }
      }
      return false;
    })) << Job("sweep").dump();
    // One trial at a time fits, and only one was let start: no pod of the
    // study waits for room.
    for (const auto& [trial, phases] : TrialPhases()) {
      EXPECT_EQ(phases.count("Pending"), 0u) << "trial " << trial;
      if (finished.count(trial) == 0) {
        EXPECT_EQ(trial, running);
      }
    }
    for (const json& pod : server_->List("pods", "ns1")) {
      if (pod.value("/metadata/labels/kubetrain.io~1trial-id"_json_pointer, std::string()) ==
          running) {
        ASSERT_TRUE(server_
                        ->MergePatch("pods", "ns1", pod["metadata"]["name"].get<std::string>(),
                                     testing::TerminatedPodStatus("Succeeded", 0), "status")
                        .ok());
      }
    }
    finished.insert(running);
  }
  ASSERT_TRUE(server_->WaitUntil([&] {
    const std::string state = State("sweep");
    return state == "SUCCEEDED" || state == "FAILED";
  })) << Job("sweep").dump();
  const json output = Job("sweep")["status"]["trainingOutput"];
  ASSERT_EQ(output["trials"].size(), 4u) << output.dump();
  for (const json& trial : output["trials"]) EXPECT_EQ(trial["state"], "SUCCEEDED") << trial.dump();
  EXPECT_EQ(Job("sweep")["status"]["admittedTrialCount"], 4);
}

// Each trial of a study is a gang of its own after admission too: a trial
// that loses a node and cannot be placed again is released alone, waits,
// and runs again when there is room; the study goes on meanwhile.
TEST_F(AdmissionTest, AStudyTrialThatCannotBePlacedAgainIsReleasedAloneThenRunsAgain) {
  StartServer(2);  // room for 4 replicas: two trials of a master and a worker
  StartController(/*admission=*/true);
  const json study = Sweep(
      SyncPsJob("sweep", {{"trainingInput", {{"workerCount", 1}, {"parameterServerCount", 0}}},
                          {"runPolicy",
                           {{"restartPolicy", "OnFailure"},
                            {"schedulingPolicy", {{"scheduleTimeoutSeconds", 1}}}}}}),
      2, 2);
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", study).ok());
  auto trials = [&] {
    return Job("sweep").value("/status/trainingOutput/trials"_json_pointer, json::array());
  };
  ASSERT_TRUE(server_->WaitUntil([&] {
    const auto pods = TrialPhases();
    return pods.size() == 2 && pods.count("1") && pods.at("1").count("Running") &&
           pods.at("1").at("Running") == 2 && pods.count("2") && pods.at("2").count("Running") &&
           pods.at("2").at("Running") == 2;
  })) << Job("sweep").dump();

  // node-1 goes, and its pods with it (as the node lifecycle controller
  // evicts them): what is recreated finds no room.
  ASSERT_TRUE(server_->Delete("nodes", "", "node-1").ok());
  for (const json& pod : server_->List("pods", "ns1")) {
    if (pod.value("/spec/nodeName"_json_pointer, std::string()) == "node-1") {
      ASSERT_TRUE(server_->Delete("pods", "ns1", pod["metadata"]["name"].get<std::string>()).ok());
    }
  }
  // Past scheduleTimeoutSeconds a trial that lost a replica is released: all
  // of its pods go, and it waits. One trial runs on node-0 meanwhile (the
  // other, if node-1 held both trials' workers, was admitted again there).
  std::string waiting;
  ASSERT_TRUE(server_->WaitUntil([&] {
    waiting.clear();
    int running_trials = 0;
    for (const json& trial : trials()) {
      if (trial.value("awaitingAdmission", false) && trial.value("state", "") == "QUEUED") {
        waiting = trial.value("trialId", "");
      }
    }
    for (const auto& [trial, phases] : TrialPhases()) {
      if (phases.count("Pending")) return false;
      if (phases.count("Running") && phases.at("Running") == 2) ++running_trials;
    }
    return !waiting.empty() && TrialPhases().count(waiting) == 0 && running_trials == 1;
  })) << Job("sweep").dump();
  EXPECT_EQ(State("sweep"), "RUNNING");
  EXPECT_EQ(Admitted("sweep")["status"], "True");
  // (The event is written after the status that records the release.)
  EXPECT_TRUE(server_->WaitUntil([&] {
    return absl::c_linear_search(Events("sweep", "Normal"), core::kGangReleasedReason);
  })) << ::testing::PrintToString(Events("sweep", "Normal"));

  // Room again: the waiting trial is admitted again and runs, as itself.
  ASSERT_TRUE(server_->Create("nodes", "", Node("node-1")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    const auto pods = TrialPhases();
    return pods.count(waiting) && pods.at(waiting).count("Running") &&
           pods.at(waiting).at("Running") == 2;
  })) << Job("sweep").dump();
  for (const json& trial : trials()) EXPECT_FALSE(trial.value("awaitingAdmission", false));

  for (const json& pod : server_->List("pods", "ns1")) {
    ASSERT_TRUE(server_
                    ->MergePatch("pods", "ns1", pod["metadata"]["name"].get<std::string>(),
                                 testing::TerminatedPodStatus("Succeeded", 0), "status")
                    .ok());
  }
  ASSERT_TRUE(server_->WaitUntil([&] {
    const std::string state = State("sweep");
    return state == "SUCCEEDED" || state == "FAILED";
  })) << Job("sweep").dump();
  const json output = Job("sweep")["status"]["trainingOutput"];
  EXPECT_EQ(output["totalTrialCount"], 2) << output.dump();
  ASSERT_EQ(output["trials"].size(), 2u) << output.dump();
  for (const json& trial : output["trials"]) EXPECT_EQ(trial["state"], "SUCCEEDED") << trial.dump();
}

TEST_F(AdmissionTest, AJobLeftToKueueIsNotHeld) {
  StartServer(1);  // room for 2 replicas; the job has 4
  StartController(/*admission=*/true);
  json job = SyncPsJob("kueued");
  job["metadata"]["labels"] = {{core::kKueueQueueLabel, "team-a"}};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  // Kueue admitted it (it would have suspended it otherwise): its pods are
  // created at once, and the scheduler places what it can.
  ASSERT_TRUE(server_->WaitUntil([&] { return PodCount("kueued") == 4; }));
  EXPECT_EQ(Phases("kueued")["Running"], 2);
  EXPECT_EQ(Admitted("kueued"), json::object());
}

// A job that takes the whole cluster (3 nodes, 6 replicas) runs; `first`
// and then `second` are submitted behind it.
class QueueOrderTest : public AdmissionTest {
 protected:
  void FillTheCluster() {
    StartServer(2);
    ASSERT_TRUE(
        server_
            ->Create("priorityclasses", "", {{"metadata", {{"name", "urgent"}}}, {"value", 100000}})
            .ok());
    StartController(/*admission=*/true);
    ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("running")).ok());
    ASSERT_TRUE(server_->WaitUntil([&] { return Phases("running")["Running"] == 4; }));
  }
};

TEST_F(AdmissionTest, AVolcanoJobGetsItsPodGroupAndIsLeftToVolcano) {
  StartServer(1, absl::ZeroDuration(), /*pod_group_crds=*/true);
  StartController(/*admission=*/true);
  // Bigger than the cluster: the operator's admission would hold it.
  ASSERT_TRUE(
      server_
          ->Create(
              "trainingjobs", "ns1",
              SyncPsJob("gang", {{"template", {{"spec", {{"schedulerName", "volcano"}}}}},
                                 {"runPolicy",
                                  {{"schedulingPolicy",
                                    {{"queue", "research"}, {"priorityClass", "team-high"}}}}}}))
          .ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return PodCount("gang") == 4; }));
  const auto group = server_->Get("podgroups.scheduling.volcano.sh", "ns1", "gang");
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)["spec"]["minMember"], 4);
  EXPECT_EQ((*group)["spec"]["minResources"], json({{"cpu", "16"}, {"memory", "60Gi"}}));
  EXPECT_EQ((*group)["spec"]["queue"], "research");
  EXPECT_EQ((*group)["spec"]["priorityClassName"], "team-high");
  EXPECT_EQ((*group)["metadata"]["ownerReferences"][0]["name"], "gang");
  for (const json& pod : server_->List("pods", "ns1")) {
    EXPECT_EQ(pod.value("/metadata/annotations/scheduling.k8s.io~1group-name"_json_pointer,
                        std::string()),
              "gang");
    // Volcano places them, not the default scheduler.
    EXPECT_EQ(pod.value("/status/phase"_json_pointer, std::string()), "Pending");
  }
  EXPECT_TRUE(Admitted("gang").is_null() || Admitted("gang").empty());
  EXPECT_TRUE(server_->List("podgroups.scheduling.x-k8s.io", "ns1").empty());
}

TEST_F(AdmissionTest, ACoschedulingJobGetsItsPodGroupWithTheTimeout) {
  StartServer(3, absl::ZeroDuration(), /*pod_group_crds=*/true);
  StartController(/*admission=*/true);
  ASSERT_TRUE(
      server_
          ->Create("trainingjobs", "ns1",
                   SyncPsJob("cosched",
                             {{"template", {{"spec", {{"schedulerName", "scheduler-plugins"}}}}},
                              {"runPolicy",
                               {{"schedulingPolicy",
                                 {{"minAvailable", 3}, {"scheduleTimeoutSeconds", 60}}}}}}))
          .ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return PodCount("cosched") == 4; }));
  const auto group = server_->Get("podgroups.scheduling.x-k8s.io", "ns1", "cosched");
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ((*group)["spec"]["minMember"], 3);
  EXPECT_EQ((*group)["spec"]["minResources"], json({{"cpu", "12"}, {"memory", "45Gi"}}));
  EXPECT_EQ((*group)["spec"]["scheduleTimeoutSeconds"], 60);
  for (const json& pod : server_->List("pods", "ns1")) {
    EXPECT_EQ(
        pod.value("/metadata/labels/scheduling.x-k8s.io~1pod-group"_json_pointer, std::string()),
        "cosched");
  }
}

TEST_F(AdmissionTest, WithoutThePodGroupCrdTheJobSaysWhyNoPodIsCreated) {
  StartServer(3);
  StartController(/*admission=*/true);
  ASSERT_TRUE(
      server_
          ->Create("trainingjobs", "ns1",
                   SyncPsJob("orphan", {{"template", {{"spec", {{"schedulerName", "volcano"}}}}}}))
          .ok());
  json waiting;
  ASSERT_TRUE(server_->WaitUntil([&] {
    for (const json& c : Job("orphan").value("/status/conditions"_json_pointer, json::array())) {
      if (c.value("type", "") == "ReplicasWaiting") waiting = c;
    }
    return !waiting.is_null();
  })) << Job("orphan").dump();
  EXPECT_THAT(waiting["message"].get<std::string>(),
              HasSubstr("PodGroup orphan (scheduling.volcano.sh/v1beta1), which the pods' "
                        "scheduler reads, was refused"));
  EXPECT_THAT(waiting["message"].get<std::string>(),
              HasSubstr("(is that scheduler's PodGroup CRD installed?)"));
  EXPECT_EQ(PodCount("orphan"), 0);
}

TEST_F(QueueOrderTest, AHigherPriorityJobSubmittedLaterIsAdmittedFirst) {
  FillTheCluster();
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("low")).ok());
  ASSERT_TRUE(WaitForAdmitted("low", core::kWaitingForCapacityReason));
  // Kubeflow's form: the pods' priorityClassName (read by the planner's
  // tests) or, here, runPolicy.schedulingPolicy.priorityClass.
  ASSERT_TRUE(
      server_
          ->Create("trainingjobs", "ns1",
                   SyncPsJob("high", {{"runPolicy",
                                       {{"schedulingPolicy", {{"priorityClass", "urgent"}}}}}}))
          .ok());
  // (One pass writes both, at once.)
  ASSERT_TRUE(server_->WaitUntil([&] {
    return absl::StrContains(Admitted("low").value("message", ""), "1 job ahead of it") &&
           absl::StrContains(Admitted("high").value("message", ""), "no job ahead of it");
  })) << Admitted("low").dump()
      << Admitted("high").dump();
  EXPECT_EQ(Job("high").value("/status/queuePosition"_json_pointer, 0), 1);
  EXPECT_EQ(Job("low").value("/status/queuePosition"_json_pointer, 0), 2);

  Finish("running");
  ASSERT_TRUE(WaitForAdmitted("high", core::kAdmittedReason)) << Admitted("high").dump();
  ASSERT_TRUE(server_->WaitUntil([&] { return Phases("high")["Running"] == 4; }));
  EXPECT_EQ(PodCount("low"), 0);
  EXPECT_EQ(Admitted("low")["reason"], core::kWaitingForCapacityReason);
}

TEST_F(QueueOrderTest, ARestartedOperatorKeepsTheOrder) {
  FillTheCluster();
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("first")).ok());
  ASSERT_TRUE(WaitForAdmitted("first", core::kWaitingForCapacityReason));
  // Created in a later second than `first`: the order is the objects' own.
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", SyncPsJob("second")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    return absl::StrContains(Admitted("second").value("message", ""), "1 job ahead of it");
  })) << Admitted("second").dump();

  // A new operator (a restart, or another replica taking the lease) finds
  // the queue in the jobs, with nothing remembered.
  controller_->Stop();
  controller_.reset();
  Finish("running");
  StartController(/*admission=*/true);
  ASSERT_TRUE(WaitForAdmitted("first", core::kAdmittedReason)) << Admitted("first").dump();
  ASSERT_TRUE(server_->WaitUntil([&] { return Phases("first")["Running"] == 4; }));
  EXPECT_EQ(PodCount("second"), 0);
  EXPECT_THAT(Admitted("second")["message"].get<std::string>(),
              HasSubstr("the cluster can place 0 of them now; no job ahead of it"));
}

}  // namespace
}  // namespace kubetrain::kube
