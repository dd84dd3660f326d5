#include "operator/kube/controller.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/kube/controller_test_fixture.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/test_objects.h"
#include "operator/tuner/recording_tuner.h"
#include "operator/tuner/tuner.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;
using ::testing::HasSubstr;
using testing::TerminatedPodStatus;
using testing::TuningJobObject;

json StandardJob(const std::string& name) {
  return testing::TrainingJobObject(
      name, {{"trainingInput", {{"scaleTier", "STANDARD_1"}, {"args", {"--max_steps=10"}}}},
             {"runPolicy", {{"restartPolicy", "Never"}, {"cleanPodPolicy", "Running"}}}});
}

class ControllerTest : public testing::ControllerOnFakeServerTest {
 protected:
  // Namespace ns1, no workers: the test calls SyncJob.
  static ControllerOptions SyncedByTheTest() {
    ControllerOptions options;
    options.ns = "ns1";
    options.workers = 0;
    return options;
  }
  // A controller whose caches are frozen as the server is now (started, so
  // its informers list once, then stopped); it is told of nothing after.
  std::unique_ptr<Controller> FrozenController() {
    auto controller = std::make_unique<Controller>(client_.get(), SyncedByTheTest(), &studies_);
    EXPECT_TRUE(controller->Start(absl::Seconds(30)));
    controller->Stop();
    return controller;
  }
  json JobObject(const std::string& job) {
    auto j = server_->Get("trainingjobs", "ns1", job);
    return j.ok() ? *j : json();
  }
  std::string State(const std::string& job) {
    auto j = server_->Get("trainingjobs", "ns1", job);
    if (!j.ok() || !j->contains("status")) return "";
    return (*j)["status"].value("state", "");
  }
  bool WaitForState(const std::string& job, const std::string& state) {
    return server_->WaitUntil([&] { return State(job) == state; });
  }
  std::set<std::string> Names(const std::string& resource) {
    std::set<std::string> out;
    for (const json& o : server_->List(resource, "ns1")) out.insert(o["metadata"]["name"]);
    return out;
  }
  int64_t Writes() {
    int64_t total = 0;
    for (const auto& [key, count] : server_->RequestCounts()) {
      if (key.rfind("get", 0) == 0 || key.rfind("list", 0) == 0 || key.rfind("watch", 0) == 0) {
        continue;
      }
      total += count;
    }
    return total;
  }

  bool WaitForReplicas() {
    return server_->WaitUntil(
        [&] { return server_->Count("pods") == 8 && server_->Count("services") == 8; });
  }
};

TEST_F(ControllerTest, CreatesEveryReplicaOnceOwnedAndLabelled) {
  auto job = server_->Create("trainingjobs", "ns1", StandardJob("mnist"));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(server_->WaitUntil(
      [&] { return server_->Count("pods") == 8 && server_->Count("services") == 8; }));
  ASSERT_TRUE(WaitForState("mnist", "PREPARING"));
  std::set<std::string> expected = {"mnist-master-0", "mnist-worker-0", "mnist-worker-1",
                                    "mnist-worker-2", "mnist-worker-3", "mnist-ps-0",
                                    "mnist-ps-1",     "mnist-ps-2"};
  EXPECT_EQ(Names("pods"), expected);
  EXPECT_EQ(Names("services"), expected);
  for (const json& pod : server_->List("pods", "ns1")) {
    const json& ref = pod["metadata"]["ownerReferences"][0];
    EXPECT_EQ(ref["uid"], (*job)["metadata"]["uid"]);
    EXPECT_EQ(ref["controller"], true);
    EXPECT_EQ(pod["metadata"]["labels"]["kubetrain.io/job-name"], "mnist");
  }
  auto counts = server_->RequestCounts();
  EXPECT_EQ(counts["create pods"], 8);
  EXPECT_EQ(counts["create services"], 8);

  // Once everything is observed, a reconcile writes nothing. A second
  // controller, synced from the server after the first one stopped, shows it
  // without racing the first one's workers.
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("events") >= 2; }));
  controller_->Stop();
  int64_t writes = Writes();
  ControllerOptions options;
  options.ns = "ns1";
  options.workers = 0;  // caches only: the test calls SyncJob
  Controller second(client_.get(), options, &studies_);
  ASSERT_TRUE(second.Start(absl::Seconds(30)));
  ASSERT_TRUE(second.SyncJob("ns1/mnist").ok());
  EXPECT_EQ(Writes(), writes);
}

TEST_F(ControllerTest, PodPhasesDriveTheJobToSuccessAndCleanUp) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", StandardJob("j")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 8; }));
  for (const std::string& name : Names("pods")) {
    ASSERT_TRUE(
        server_->MergePatch("pods", "ns1", name, {{"status", {{"phase", "Running"}}}}, "status")
            .ok());
  }
  ASSERT_TRUE(WaitForState("j", "RUNNING"));
  ASSERT_TRUE(
      server_
          ->MergePatch("pods", "ns1", "j-master-0", TerminatedPodStatus("Succeeded", 0), "status")
          .ok());
  ASSERT_TRUE(WaitForState("j", "SUCCEEDED"));
  // cleanPodPolicy Running: the running workers and ps go, the master stays.
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 1; }));
  EXPECT_EQ(Names("pods"), std::set<std::string>{"j-master-0"});
  EXPECT_TRUE(server_->WaitUntil([&] {
    for (const json& e : server_->List("events", "ns1")) {
      if (e["involvedObject"]["name"] == "j" && e["reason"] == "JobSucceeded") return true;
    }
    return false;
  }));
}

TEST_F(ControllerTest, FailedWorkerUnderNeverFailsTheJob) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", StandardJob("f")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 8; }));
  ASSERT_TRUE(
      server_->MergePatch("pods", "ns1", "f-worker-2", TerminatedPodStatus("Failed", 1), "status")
          .ok());
  ASSERT_TRUE(WaitForState("f", "FAILED"));
  auto job = server_->Get("trainingjobs", "ns1", "f");
  EXPECT_NE((*job)["status"].value("errorMessage", "").find("worker-2"), std::string::npos)
      << (*job)["status"];
}

TEST_F(ControllerTest, CancelDeletesReplicas) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", StandardJob("c")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 8; }));
  ASSERT_TRUE(server_->MergePatch("trainingjobs", "ns1", "c", {{"spec", {{"cancel", true}}}}).ok());
  ASSERT_TRUE(WaitForState("c", "CANCELLED"));
  EXPECT_EQ(server_->Count("pods"), 0u);
}

TEST_F(ControllerTest, DeletedPodIsRecreatedWithoutDuplicates) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", StandardJob("d")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 8; }));
  ASSERT_TRUE(server_->Delete("pods", "ns1", "d-ps-1").ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Get("pods", "ns1", "d-ps-1").ok(); }));
  EXPECT_EQ(server_->Count("pods"), 8u);
  EXPECT_EQ(server_->RequestCounts()["create pods"], 9);
}

// Creates go out in slow-start batches (slow_start.h). A ResourceQuota that
// lets 3 of the job's 8 pods in refuses the 4th: that batch is the last, the
// job's condition and one Warning event say why, and once the quota grows
// the next reconciles create exactly what is missing; nothing is ever created
// twice (no create answered 409) and the first pods stay as they were.
TEST_F(ControllerTest, AQuotaRefusalStopsTheBatchesAndTheRestComesOnceItFits) {
  json quota = {{"apiVersion", "v1"},
                {"kind", "ResourceQuota"},
                {"metadata", {{"name", "pod-quota"}}},
                {"spec", {{"hard", {{"pods", "3"}}}}}};
  ASSERT_TRUE(server_->Create("resourcequotas", "ns1", quota).ok());
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", StandardJob("mnist")).ok());
  auto waiting = [&] {
    for (const json& c :
         JobObject("mnist").value("status", json::object()).value("conditions", json::array())) {
      if (c.value("type", "") == "ReplicasWaiting") return c;
    }
    return json::object();
  };
  ASSERT_TRUE(server_->WaitUntil([&] { return waiting().value("reason", "") == "FailedCreate"; }))
      << JobObject("mnist").dump();
  EXPECT_EQ(waiting().value("status", ""), "True");
  EXPECT_NE(waiting()
                .value("message", "")
                .find("exceeded quota: pod-quota, requested: pods=1, "
                      "used: pods=3, limited: pods=3"),
            std::string::npos)
      << waiting();
  EXPECT_EQ(server_->Count("pods"), 3u);
  std::map<std::string, std::string> first_uids;
  for (const json& pod : server_->List("pods", "ns1")) {
    first_uids[pod["metadata"]["name"]] = pod["metadata"]["uid"];
  }
  auto warnings = [&] {
    int n = 0;
    for (const json& e : server_->List("events", "ns1")) {
      n += e.value("type", "") == "Warning" && e.value("reason", "") == "FailedCreate";
    }
    return n;
  };
  ASSERT_TRUE(server_->WaitUntil([&] { return warnings() == 1; }));

  ASSERT_TRUE(server_
                  ->MergePatch("resourcequotas", "ns1", "pod-quota",
                               {{"spec", {{"hard", {{"pods", "8"}}}}}})
                  .ok());
  ASSERT_TRUE(WaitForReplicas());
  ASSERT_TRUE(server_->WaitUntil([&] { return waiting().value("status", "") != "True"; }))
      << waiting();
  for (const auto& [name, uid] : first_uids) {
    auto pod = server_->Get("pods", "ns1", name);
    ASSERT_TRUE(pod.ok()) << name;
    EXPECT_EQ((*pod)["metadata"]["uid"], uid) << name << " was created again";
  }
  const auto refused = server_->RefusalCounts();
  EXPECT_GT(refused.count("create pods 403") ? refused.at("create pods 403") : 0, 0);
  EXPECT_EQ(refused.count("create pods 409"), 0u) << "a pod was created twice";
  EXPECT_EQ(refused.count("create services 409"), 0u) << "a Service was created twice";
  EXPECT_EQ(warnings(), 1);
}

// Server errors anywhere in the creates: the next reconciles create what is
// missing, each object once.
TEST_F(ControllerTest, ServerErrorsAmidTheCreatesLoseNothingAndDuplicateNothing) {
  server_->FailNextRequests(5, 500);
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", StandardJob("mnist")).ok());
  ASSERT_TRUE(WaitForReplicas());
  ASSERT_TRUE(WaitForState("mnist", "PREPARING"));
  const auto refused = server_->RefusalCounts();
  EXPECT_EQ(refused.count("create pods 409"), 0u) << "a pod was created twice";
  EXPECT_EQ(refused.count("create services 409"), 0u) << "a Service was created twice";
}

TEST_F(ControllerTest, StatusConflictRereadsAndWritesAgain) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", StandardJob("s")).ok());
  ASSERT_TRUE(WaitForReplicas());
  ASSERT_TRUE(WaitForState("s", "PREPARING"));
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("events") >= 2; }));
  controller_->Stop();
  for (const std::string& name : Names("pods")) {
    ASSERT_TRUE(
        server_->MergePatch("pods", "ns1", name, {{"status", {{"phase", "Running"}}}}, "status")
            .ok());
  }
  // A controller whose caches are frozen right after syncing (it sees every
  // pod running), then a change to the job it is not told about.
  std::unique_ptr<Controller> stale = FrozenController();
  ASSERT_TRUE(
      server_->MergePatch("trainingjobs", "ns1", "s", {{"metadata", {{"labels", {{"team", "a"}}}}}})
          .ok());
  server_->ResetRequestCounts();
  // Its status write carries the old resourceVersion: 409, re-read, write again.
  ASSERT_TRUE(stale->SyncJob("ns1/s").ok());
  auto counts = server_->RequestCounts();
  EXPECT_EQ(counts["update trainingjobs/status"], 2);
  EXPECT_EQ(counts["get trainingjobs"], 1);
  EXPECT_EQ(State("s"), "RUNNING");
  EXPECT_EQ(JobObject("s")["metadata"]["labels"]["team"], "a");
}

// A BASIC job: one master pod (and its service).
json BasicJob(const std::string& name) {
  return {{"apiVersion", "kubetrain.io/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec", {{"trainingInput", {{"scaleTier", "BASIC"}, {"args", {"--max_steps=10"}}}}}}};
}

std::string ControllerUid(const json& object) {
  for (const json& ref : object["metadata"].value("ownerReferences", json::array())) {
    if (ref.value("controller", false)) return ref.value("uid", "");
  }
  return "";
}

// A TrainingJob deleted and created again under its name is another job
// (another uid). A controller whose job cache still holds the deleted one
// (its watch lags the pods' and the job's) creates nothing for it: pods
// owned by the old uid would take the names of the new job's pods, and the
// new job would wait for them forever. The new job's pods are its own.
TEST_F(ControllerTest, AJobCreatedAgainUnderItsNameGetsPodsOfItsOwnNotTheDeletedOnes) {
  controller_->Stop();  // this test drives its own controllers
  auto first = server_->Create("trainingjobs", "ns1", BasicJob("rerun"));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string first_uid = (*first)["metadata"]["uid"];
  // Caches frozen right after syncing: the first job, no pods.
  std::unique_ptr<Controller> stale = FrozenController();
  ASSERT_TRUE(server_->Delete("trainingjobs", "ns1", "rerun").ok());
  auto second = server_->Create("trainingjobs", "ns1", BasicJob("rerun"));
  ASSERT_TRUE(second.ok()) << second.status();
  const std::string second_uid = (*second)["metadata"]["uid"];
  ASSERT_NE(second_uid, first_uid);

  ASSERT_TRUE(stale->SyncJob("ns1/rerun").ok());
  for (const char* resource : {"pods", "services", "persistentvolumeclaims", "configmaps"}) {
    for (const json& object : server_->List(resource, "ns1")) {
      EXPECT_NE(ControllerUid(object), first_uid)
          << resource << "/" << object["metadata"]["name"].get<std::string>()
          << " is owned by the deleted job";
    }
  }

  Controller current(client_.get(), SyncedByTheTest(), &studies_);
  ASSERT_TRUE(current.Start(absl::Seconds(30)));
  ASSERT_TRUE(current.SyncJob("ns1/rerun").ok());
  auto pod = server_->Get("pods", "ns1", "rerun-master-0");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(ControllerUid(*pod), second_uid);
  EXPECT_EQ(State("rerun"), "QUEUED");
  current.Stop();
}

// The cluster's runtime catalog (a mounted ConfigMap) decides the image a
// runtimeVersion runs in and is read again when its admin edits it: a job
// naming a runtime the catalog lacks fails, saying what it offers; once the
// runtime is registered, the next job runs in its image with its Python.
TEST_F(ControllerTest, TheRuntimeCatalogPicksTheImageAndFollowsItsEdits) {
  controller_->Stop();  // this test drives its own controller
  const std::string path = ::testing::TempDir() + "/controller_test_runtimes.yaml";
  std::ofstream(path, std::ios::trunc) << "runtimes: []\n";
  api::RuntimeCatalogFile catalog(path, nullptr, std::chrono::seconds(0));
  ControllerOptions options = Options();
  options.runtime_catalog = &catalog;
  Controller controller(client_.get(), options, &studies_);
  ASSERT_TRUE(controller.Start(absl::Seconds(30)));
  auto tf1_job = [](const std::string& name) {
    json job = BasicJob(name);
    job["spec"]["trainingInput"]["pythonModule"] = "trainer.task";
    job["spec"]["trainingInput"]["packageUris"] = {"/pkg"};
    job["spec"]["trainingInput"]["runtimeVersion"] = "1.15";
    job["spec"]["trainingInput"]["pythonVersion"] = "3.7";
    return job;
  };

  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", tf1_job("early")).ok());
  ASSERT_TRUE(WaitForState("early", "FAILED"));
  const std::string message = JobObject("early")["status"]["errorMessage"];
  EXPECT_THAT(message, HasSubstr("spec.trainingInput.runtimeVersion: no runtime \"1.15\" in the "
                                 "runtime catalog (" +
                                 path + "); on offer: runtimeVersion "));
  EXPECT_THAT(message, HasSubstr("kubetrain-runtimes ConfigMap"));

  std::ofstream(path, std::ios::trunc)
      << "runtimes:\n- runtimeVersion: \"1.15\"\n  pythonVersion: \"3.7\"\n"
         "  image: registry.example.com/tf:1.15-py3.7\n  python: python3.7\n";
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", tf1_job("later")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return !Pod("later-master-0").is_null(); }));
  const json container = Pod("later-master-0")["spec"]["containers"][0];
  EXPECT_EQ(container["image"], "registry.example.com/tf:1.15-py3.7");
  const std::vector<std::string> command = container["command"];
  EXPECT_THAT(command, ::testing::Contains("python3.7"));
  controller.Stop();
  std::remove(path.c_str());
}

// A job deleted behind a stale cache: the reconcile's first write is the
// new job's status, which the server answers 404, so nothing is created for
// it, and no extra read was needed to know (the status write confirms the
// uid when it comes before every other write).
TEST_F(ControllerTest, AJobDeletedBehindAStaleCacheGetsNothingCreated) {
  controller_->Stop();  // this test drives its own controller
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", BasicJob("gone")).ok());
  std::unique_ptr<Controller> stale = FrozenController();
  ASSERT_TRUE(server_->Delete("trainingjobs", "ns1", "gone").ok());
  server_->ResetRequestCounts();

  EXPECT_TRUE(stale->SyncJob("ns1/gone").ok());
  auto counts = server_->RequestCounts();
  EXPECT_EQ(counts["update trainingjobs/status"], 1);
  EXPECT_EQ(counts["get trainingjobs"], 0);
  EXPECT_EQ(counts["create pods"], 0);
  EXPECT_EQ(counts["create services"], 0);
  EXPECT_TRUE(server_->List("pods", "ns1").empty());
}

// A pod of the job's pod name that another owner holds (here: nobody; it
// carries the job's label, so the controller's cache shows it) is not the
// job's: its create's AlreadyExists fails the sync, naming it, instead of
// passing for the job's own pod; once the name is free the job's pod is
// created.
TEST_F(ControllerTest, APodOfTheSameNameOwnedByAnotherUidIsNotTheJobs) {
  controller_->Stop();  // this test drives its own controller
  json squatter = {
      {"metadata", {{"name", "taken-master-0"}, {"labels", {{"kubetrain.io/job-name", "taken"}}}}},
      {"spec", {{"containers", {{{"name", "kubetrain"}, {"image", "x"}}}}}}};
  ASSERT_TRUE(server_->Create("pods", "ns1", squatter).ok());
  auto job = server_->Create("trainingjobs", "ns1", BasicJob("taken"));
  ASSERT_TRUE(job.ok()) << job.status();
  ControllerOptions options;
  options.ns = "ns1";
  options.workers = 0;  // the test calls SyncJob
  Controller controller(client_.get(), options, &studies_);
  ASSERT_TRUE(controller.Start(absl::Seconds(30)));

  absl::Status synced = controller.SyncJob("ns1/taken");
  EXPECT_EQ(synced.code(), absl::StatusCode::kAlreadyExists) << synced;
  EXPECT_NE(synced.message().find("pods/taken-master-0 exists and is not this job's"),
            absl::string_view::npos)
      << synced;
  EXPECT_EQ(ControllerUid(*server_->Get("pods", "ns1", "taken-master-0")), "");

  ASSERT_TRUE(server_->Delete("pods", "ns1", "taken-master-0").ok());
  // Synced until its expectations are met (the cache shows what the first
  // sync created before it stopped: the pod's Service may come first).
  EXPECT_TRUE(test_support::WaitUntil([&] {
    EXPECT_TRUE(controller.SyncJob("ns1/taken").ok());
    return server_->Get("pods", "ns1", "taken-master-0").ok();
  }));
  auto pod = server_->Get("pods", "ns1", "taken-master-0");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(ControllerUid(*pod), (*job)["metadata"]["uid"]);
  controller.Stop();
}

// The time a reconcile sees is the controller's clock
// (ControllerOptions::clock), not the machine's: activeDeadlineSeconds
// passes when the clock says so, and the failure is stamped with its time.
TEST_F(ControllerTest, ReconcilesAtTheTimeOfItsClock) {
  controller_->Stop();  // this test drives its own controller
  json spec = BasicJob("timed");
  spec["spec"]["runPolicy"]["activeDeadlineSeconds"] = 3600;
  auto created = server_->Create("trainingjobs", "ns1", spec);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::Time creation;
  std::string error;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full,
                              (*created)["metadata"]["creationTimestamp"].get<std::string>(),
                              &creation, &error))
      << error;
  absl::Mutex mu;
  absl::Time now = creation + absl::Seconds(30);
  ControllerOptions options;
  options.ns = "ns1";
  options.workers = 0;  // the test calls SyncJob
  options.clock = [&] {
    absl::MutexLock lock(&mu);
    return now;
  };
  Controller controller(client_.get(), options, &studies_);
  ASSERT_TRUE(controller.Start(absl::Seconds(30)));
  ASSERT_TRUE(controller.SyncJob("ns1/timed").ok());
  EXPECT_EQ(State("timed"), "QUEUED");

  const absl::Time past_deadline = creation + absl::Hours(1) + absl::Seconds(1);
  {
    absl::MutexLock lock(&mu);
    now = past_deadline;
  }
  // Synced until the caches show the pods it created (expectations) and the
  // status it wrote.
  EXPECT_TRUE(test_support::WaitUntil([&] {
    EXPECT_TRUE(controller.SyncJob("ns1/timed").ok());
    return State("timed") == "FAILED";
  }));
  const json status = JobObject("timed")["status"];
  EXPECT_NE(status.value("errorMessage", "").find("activeDeadlineSeconds"), std::string::npos)
      << status;
  std::string failed_at;
  for (const json& condition : status.value("conditions", json::array())) {
    if (condition.value("type", "") == "Failed") {
      failed_at = condition.value("lastTransitionTime", "");
    }
  }
  EXPECT_EQ(failed_at, absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", past_deadline, absl::UTCTimeZone()))
      << status;
  controller.Stop();
}

json FinishedTrialJson(const std::string& id, const std::string& x, double value) {
  return {{"trialId", id},
          {"hyperparameters", {{"x", x}}},
          {"state", "SUCCEEDED"},
          {"finalMetric", {{"trainingStep", 10}, {"objectiveValue", value}}}};
}

TEST_F(ControllerTest, ResumedStudyReadsTheEarlierJobAndItsArchivedTrials) {
  controller_->Stop();  // this test drives its own controller
  auto first = server_->Create("trainingjobs", "ns1", TuningJobObject("first", 2, 2));
  ASSERT_TRUE(first.ok());
  const json status = {
      {"state", "SUCCEEDED"},
      {"trainingOutput",
       {{"isHyperparameterTuningJob", true},
        {"trials", {FinishedTrialJson("2", "20", 0.7), FinishedTrialJson("1", "10", 0.5)}}}}};
  ASSERT_TRUE(
      server_->MergePatch("trainingjobs", "ns1", "first", {{"status", status}}, "status").ok());
  v1::HyperparameterOutput archived;
  archived.set_trial_id("3");
  (*archived.mutable_hyperparameters())["x"] = "30";
  archived.set_state(v1::SUCCEEDED);
  archived.mutable_final_metric()->set_objective_value(0.6);
  auto first_job = JobFromObject(*first);
  ASSERT_TRUE(first_job.ok());
  json archive = NewArchive(*first_job, "ns1", ArchiveName("first", "3"));
  AddToArchive(archive, archived);
  ASSERT_TRUE(server_->Create("configmaps", "ns1", archive).ok());
  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", TuningJobObject("second", 2, 2, "first")).ok());
  ASSERT_TRUE(
      server_->Create("trainingjobs", "ns1", TuningJobObject("orphan", 2, 2, "nowhere")).ok());

  std::vector<tuner::TrialRecord> history;
  ControllerOptions options;
  options.ns = "ns1";
  options.workers = 0;
  options.reconcile.tuner_factory =
      [&](const v1::HyperparameterSpec& spec,
          uint64_t seed) -> absl::StatusOr<std::unique_ptr<tuner::Tuner>> {
    absl::StatusOr<std::unique_ptr<tuner::Tuner>> inner = tuner::Tuner::Create(spec, seed);
    if (!inner.ok()) return inner.status();
    return std::make_unique<tuner::RecordingTuner>(*std::move(inner), &history);
  };
  Controller controller(client_.get(), options, &studies_);
  ASSERT_TRUE(controller.Start(absl::Seconds(30)));
  ASSERT_TRUE(controller.SyncJob("ns1/second").ok());
  std::map<std::string, std::string> seen;
  for (const tuner::TrialRecord& r : history) seen[r.trial_id] = r.assignment.at("x");
  EXPECT_EQ(seen, (std::map<std::string, std::string>{
                      {"first/1", "10"}, {"first/2", "20"}, {"first/3", "30"}}));
  json second = JobObject("second");
  const json& trials = second["status"]["trainingOutput"]["trials"];
  ASSERT_EQ(trials.size(), 2u) << second["status"];
  EXPECT_EQ(trials[0]["trialId"], "1");
  EXPECT_EQ(trials[1]["trialId"], "2");

  ASSERT_TRUE(controller.SyncJob("ns1/orphan").ok());
  EXPECT_EQ(State("orphan"), "FAILED");
  EXPECT_EQ(JobObject("orphan")["status"].value("errorMessage", ""),
            "spec.trainingInput.hyperparameters.resumePreviousJobId: no job 'nowhere' found in "
            "namespace 'ns1'");
  controller.Stop();
}

// ---- Outputs on shared storage (operator/core/output_storage.h) ----------

bool HasEvent(FakeApiServer& server, const std::string& job, const std::string& type,
              const std::string& reason, int* count = nullptr) {
  int n = 0;
  for (const json& e : server.List("events", "ns1")) {
    if (e["involvedObject"]["name"] == job && e["type"] == type && e["reason"] == reason) ++n;
  }
  if (count != nullptr) *count = n;
  return n > 0;
}

// Every pod of every trial, in every role, mounts the named claim at jobDir
// and is told its trial's folder under it.
TEST_F(ControllerTest, OutputClaimIsMountedInEveryRoleOfEveryTrial) {
  controller_->Stop();  // a study needs a tuner: this test drives its own controller
  json job = TuningJobObject("study", 2, 2);
  job["spec"]["trainingInput"].update({{"scaleTier", "CUSTOM"},
                                       {"masterType", "standard"},
                                       {"workerType", "standard"},
                                       {"workerCount", 1},
                                       {"evaluatorCount", 1},
                                       {"jobDir", "/outputs"}});
  job["spec"]["outputStorage"] = {{"claimName", "team-outputs"}, {"subPath", "study"}};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ControllerOptions options;
  options.ns = "ns1";
  options.workers = 2;
  options.reconcile.tuner_factory = tuner::Tuner::Create;
  Controller controller(client_.get(), options, &studies_);
  ASSERT_TRUE(controller.Start(absl::Seconds(30)));
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 6; }));
  std::set<std::string> seen;  // "<trial>/<role>"
  for (const json& pod : server_->List("pods", "ns1")) {
    const json& labels = pod["metadata"]["labels"];
    const std::string trial = labels["kubetrain.io/trial-id"];
    seen.insert(trial + "/" + labels["kubetrain.io/replica-type"].get<std::string>());
    EXPECT_EQ(pod["spec"]["volumes"], json::parse(R"([{"name": "kubetrain-output",
        "persistentVolumeClaim": {"claimName": "team-outputs"}}])"))
        << pod["metadata"]["name"];
    const json& container = pod["spec"]["containers"][0];
    EXPECT_EQ(container["volumeMounts"], json::parse(R"([{"name": "kubetrain-output",
        "mountPath": "/outputs", "subPath": "study"}])"))
        << pod["metadata"]["name"];
    const std::vector<std::string> args = container["args"];
    ASSERT_GE(args.size(), 2u);
    EXPECT_EQ(args[args.size() - 2], "--job-dir");
    EXPECT_EQ(args.back(), "/outputs/" + trial);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"1/master", "1/worker", "1/evaluator", "2/master",
                                         "2/worker", "2/evaluator"}));
  ASSERT_TRUE(server_->WaitUntil([&] {
    const json status = JobObject("study").value("status", json::object());
    return status.contains("trainingOutput") && status["trainingOutput"]["trials"].size() == 2 &&
           status["trainingOutput"]["trials"][1].value("outputPath", "") == "/outputs/2";
  })) << JobObject("study")["status"];
  const json status = JobObject("study")["status"];
  EXPECT_EQ(status["outputLocation"], json::parse(R"({"path": "/outputs",
      "claimName": "team-outputs", "subPath": "study"})"));
  EXPECT_EQ(status["trainingOutput"]["trials"][0]["outputPath"], "/outputs/1");
  EXPECT_FALSE(HasEvent(*server_, "study", "Warning", "OutputsEphemeral"));
  EXPECT_EQ(server_->Count("persistentvolumeclaims"), 0u);  // named, not made
  controller.Stop();
}

TEST_F(ControllerTest, JobDirOnNoSharedStorageGetsAWarningConditionAndOneEvent) {
  json job = StandardJob("scratch");
  job["spec"]["trainingInput"]["jobDir"] = "/outputs";
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 8; }));
  ASSERT_TRUE(server_->WaitUntil(
      [&] { return HasEvent(*server_, "scratch", "Warning", "OutputsEphemeral"); }));
  json condition;
  const json status = JobObject("scratch")["status"];
  for (const json& c : status["conditions"]) {
    if (c["type"] == "OutputsEphemeral") condition = c;
  }
  ASSERT_TRUE(condition.is_object()) << JobObject("scratch")["status"];
  EXPECT_EQ(condition["status"], "True");
  EXPECT_EQ(condition["reason"], "NoOutputStorage");
  EXPECT_NE(condition["message"].get<std::string>().find("/outputs is inside each replica's "
                                                         "container"),
            std::string::npos);
  EXPECT_EQ(JobObject("scratch")["status"]["outputLocation"]["ephemeral"], true);
  // The pods mount nothing.
  for (const json& pod : server_->List("pods", "ns1")) {
    EXPECT_FALSE(pod["spec"]["containers"][0].contains("volumeMounts")) << pod["metadata"]["name"];
  }
  // Running, then done: still one warning.
  for (const std::string& name : Names("pods")) {
    ASSERT_TRUE(
        server_->MergePatch("pods", "ns1", name, {{"status", {{"phase", "Running"}}}}, "status")
            .ok());
  }
  ASSERT_TRUE(WaitForState("scratch", "RUNNING"));
  ASSERT_TRUE(server_
                  ->MergePatch("pods", "ns1", "scratch-master-0",
                               TerminatedPodStatus("Succeeded", 0), "status")
                  .ok());
  ASSERT_TRUE(WaitForState("scratch", "SUCCEEDED"));
  int warnings = 0;
  HasEvent(*server_, "scratch", "Warning", "OutputsEphemeral", &warnings);
  EXPECT_EQ(warnings, 1);
}

TEST_F(ControllerTest, PerJobClaimIsCreatedOwnedByTheJobKeptAfterItAndGoesWithIt) {
  json job = StandardJob("claimed");
  job["spec"]["trainingInput"]["jobDir"] = "/outputs";
  job["spec"]["outputStorage"] = {{"newClaim", {{"size", "5Gi"}, {"storageClassName", "nfs"}}}};
  auto created = server_->Create("trainingjobs", "ns1", job);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    return server_->Get("persistentvolumeclaims", "ns1", "claimed-output").ok() &&
           server_->Count("pods") == 8;
  }));
  const json claim = *server_->Get("persistentvolumeclaims", "ns1", "claimed-output");
  const json& owner = claim["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(owner["name"], "claimed");
  EXPECT_EQ(owner["uid"], (*created)["metadata"]["uid"]);
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(claim["metadata"]["labels"]["kubetrain.io/job-name"], "claimed");
  EXPECT_EQ(claim["spec"], json::parse(R"({"accessModes": ["ReadWriteMany"],
      "resources": {"requests": {"storage": "5Gi"}}, "storageClassName": "nfs"})"));
  for (const json& pod : server_->List("pods", "ns1")) {
    EXPECT_EQ(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "claimed-output");
  }
  EXPECT_TRUE(server_->WaitUntil([&] {
    for (const json& e : server_->List("events", "ns1")) {
      if (e["reason"] == "SuccessfulCreate" &&
          e["message"] == "Created output claim claimed-output, mounted at /outputs") {
        return true;
      }
    }
    return false;
  }));
  ASSERT_TRUE(server_->WaitUntil([&] {
    return JobObject("claimed")["status"].value("outputLocation", json::object()) ==
           json({{"path", "/outputs"}, {"claimName", "claimed-output"}});
  })) << JobObject("claimed")["status"];

  // The job ends: the claim stays, with what the replicas wrote.
  ASSERT_TRUE(server_
                  ->MergePatch("pods", "ns1", "claimed-master-0",
                               TerminatedPodStatus("Succeeded", 0), "status")
                  .ok());
  ASSERT_TRUE(WaitForState("claimed", "SUCCEEDED"));
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 1; }));
  EXPECT_TRUE(server_->Get("persistentvolumeclaims", "ns1", "claimed-output").ok());
  EXPECT_EQ(server_->RequestCounts()["create persistentvolumeclaims"], 1);
  EXPECT_EQ(server_->RequestCounts()["delete persistentvolumeclaims"], 0);
  // Deleting the job takes its claim with it (the garbage collector).
  ASSERT_TRUE(server_->Delete("trainingjobs", "ns1", "claimed").ok());
  EXPECT_EQ(server_->Count("persistentvolumeclaims"), 0u);
}

// A tuner that records what each Suggest call was given and asked for.
class HistoryRecorder : public tuner::Tuner {
 public:
  struct Call {
    std::vector<tuner::TrialRecord> history;
    int count = 0;
  };
  HistoryRecorder(std::unique_ptr<tuner::Tuner> inner, std::vector<Call>* calls)
      : inner_(std::move(inner)), calls_(calls) {}
  std::vector<tuner::Assignment> Suggest(const std::vector<tuner::TrialRecord>& history,
                                         int count) override {
    calls_->push_back({history, count});
    return inner_->Suggest(history, count);
  }

 private:
  std::unique_ptr<tuner::Tuner> inner_;
  std::vector<Call>* calls_;
};

// 150 trials, at most core::kMaxTrialsInStatus (100) in status: the operator
// is replaced after 110 trials have finished (some archived already, with a
// new, empty study store, as after a crash or a leader change). The tuner's
// every later suggestion is made with every earlier trial in its history,
// objectives included, and the archived trials are ConfigMaps of the job.
TEST_F(ControllerTest, ALargeStudyKeepsItsWholeHistoryAcrossAnOperatorRestart) {
  controller_->Stop();  // this test drives its own controllers
  json spec = TuningJobObject("big", 150, 10);
  spec["spec"]["trainingInput"]["hyperparameters"]["params"][0]["maxValue"] = 100000;
  spec["spec"]["trainingInput"]["hyperparameters"]["algorithm"] = "RANDOM_SEARCH";
  auto created = server_->Create("trainingjobs", "ns1", spec);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string uid = MetaString(*created, "uid");
  auto objective = [](const std::string& x) { return std::stod(x) / 100000.0; };

  std::vector<HistoryRecorder::Call> calls;
  ControllerOptions options;
  options.ns = "ns1";
  options.workers = 2;
  options.reconcile.tuner_factory =
      [&](const v1::HyperparameterSpec& s,
          uint64_t seed) -> absl::StatusOr<std::unique_ptr<tuner::Tuner>> {
    absl::StatusOr<std::unique_ptr<tuner::Tuner>> inner = tuner::Tuner::Create(s, seed);
    if (!inner.ok()) return inner.status();
    return std::make_unique<HistoryRecorder>(*std::move(inner), &calls);
  };
  auto studies = std::make_unique<InMemoryStudyStore>();
  auto controller = std::make_unique<Controller>(client_.get(), options, studies.get());
  studies->SetListener([&](const std::string& u) { controller->EnqueueByUid(u); });
  ASSERT_TRUE(controller->Start(absl::Seconds(30)));

  auto status = [&] { return JobObject("big").value("status", json::object()); };
  auto trial_x = [&](const std::string& id) -> std::string {
    for (const json& t : status()["trainingOutput"].value("trials", json::array())) {
      if (t["trialId"] == id) return t["hyperparameters"]["x"];
    }
    return "";
  };
  // The kubelet and the trainers: every trial's pod reports its objective
  // and succeeds.
  std::set<std::string> finished;
  bool restarted = false;
  while (status().value("state", "") != "SUCCEEDED") {
    std::vector<json> running;
    ASSERT_TRUE(server_->WaitUntil(
        [&] {
          running.clear();
          for (const json& pod : server_->List("pods", "ns1")) {
            if (pod["status"].value("phase", "") == "Pending") running.push_back(pod);
          }
          return !running.empty() || status().value("state", "") == "SUCCEEDED";
        },
        absl::Seconds(60)))
        << status();
    for (const json& pod : running) {
      const std::string trial = pod["metadata"]["labels"]["kubetrain.io/trial-id"];
      const std::string x = trial_x(trial);
      ASSERT_FALSE(x.empty()) << "trial " << trial << " is not in status while it runs";
      studies->Report(uid, trial, core::MetricReport{10, {{"accuracy", objective(x)}}, true});
      ASSERT_TRUE(server_
                      ->MergePatch("pods", "ns1", pod["metadata"]["name"].get<std::string>(),
                                   TerminatedPodStatus("Succeeded", 0), "status")
                      .ok());
      finished.insert(trial);
    }
    if (!restarted && finished.size() >= 110) {
      // Every finished trial on record before the operator goes.
      ASSERT_TRUE(server_->WaitUntil([&] {
        return status()["trainingOutput"].value("completedTrialCount", int64_t{-1}) ==
               static_cast<int64_t>(finished.size());
      })) << status();
      controller->Stop();
      studies = std::make_unique<InMemoryStudyStore>();
      controller = std::make_unique<Controller>(client_.get(), options, studies.get());
      studies->SetListener([&](const std::string& u) { controller->EnqueueByUid(u); });
      ASSERT_TRUE(controller->Start(absl::Seconds(30)));
      restarted = true;
    }
  }
  ASSERT_TRUE(restarted);
  const json out = status()["trainingOutput"];
  EXPECT_EQ(out["totalTrialCount"], 150);
  EXPECT_EQ(out["completedTrialCount"], 150);
  EXPECT_EQ(out["trials"].size(), 100u);

  // The last suggestion was made with every trial started before it, each
  // finished one with its objective.
  ASSERT_FALSE(calls.empty());
  const HistoryRecorder::Call& last = calls.back();
  std::set<std::string> seen;
  for (const tuner::TrialRecord& r : last.history) {
    seen.insert(r.trial_id);
    if (r.status == tuner::TrialRecord::Status::kCompleted) {
      ASSERT_TRUE(r.objective.has_value()) << r.trial_id;
      EXPECT_DOUBLE_EQ(*r.objective, objective(r.assignment.at("x"))) << r.trial_id;
    }
  }
  std::set<std::string> started_before;
  for (int id = 1; id <= 150 - last.count; ++id) started_before.insert(std::to_string(id));
  EXPECT_EQ(seen, started_before);
  // And suggestions after the restart saw the trials archived before it.
  size_t completed_in_last = 0;
  for (const tuner::TrialRecord& r : last.history) {
    completed_in_last += r.status == tuner::TrialRecord::Status::kCompleted ? 1 : 0;
  }
  EXPECT_GT(completed_in_last, 110u);

  // The 50 trials that left status are ConfigMaps of the job.
  std::set<std::string> in_status;
  for (const json& t : out["trials"]) in_status.insert(t["trialId"]);
  std::set<std::string> archived;
  for (const json& cm : server_->List("configmaps", "ns1")) {
    EXPECT_EQ(cm["metadata"]["labels"]["kubetrain.io/job-name"], "big");
    EXPECT_EQ(cm["metadata"]["ownerReferences"][0]["uid"], uid);
    for (const v1::HyperparameterOutput& t : TrialsInArchive(cm)) {
      archived.insert(t.trial_id());
      EXPECT_EQ(in_status.count(t.trial_id()), 0u) << t.trial_id();
      EXPECT_TRUE(t.has_final_metric()) << t.trial_id();
    }
  }
  EXPECT_EQ(archived.size(), 50u);
  controller->Stop();
}

TEST(JobFromObjectTest, IgnoresServerFieldsAndRejectsWrongTypes) {
  json object = StandardJob("x");
  object["metadata"]["uid"] = "u-1";
  object["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  object["metadata"]["ownerReferences"] = json::array();
  auto job = JobFromObject(object);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->metadata().uid(), "u-1");
  EXPECT_EQ(job->spec().training_input().scale_tier(), v1::TrainingInput::STANDARD_1);
  object["spec"]["trainingInput"]["scaleTier"] = json::array();
  EXPECT_EQ(JobFromObject(object).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain::kube
