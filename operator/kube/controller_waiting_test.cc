// The ReplicasWaiting condition end to end: the real controller against the
// fake API server, pods left by the test as the scheduler and the kubelet
// would leave them.
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "operator/kube/controller.h"
#include "operator/kube/controller_test_fixture.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;

// A master and a worker, restarted in place on failure.
json Job(const std::string& name) {
  return testing::TrainingJobObject(
      name, {{"trainingInput",
              {{"scaleTier", "CUSTOM"},
               {"masterType", "standard"},
               {"workerType", "standard"},
               {"workerCount", "1"}}},
             {"runPolicy", {{"restartPolicy", "OnFailure"}, {"backoffLimit", 10}}}});
}

json Unschedulable() {
  return {{"phase", "Pending"},
          {"conditions",
           {{{"type", "PodScheduled"},
             {"status", "False"},
             {"reason", "Unschedulable"},
             {"message", "0/1 nodes are available: 1 Insufficient cpu."}}}}};
}

json ContainerWaiting(const std::string& reason, const std::string& message,
                      json last_state = json::object(), const std::string& phase = "Pending",
                      int restarts = 0) {
  return {{"phase", phase},
          {"conditions", {{{"type", "PodScheduled"}, {"status", "True"}}}},
          {"containerStatuses",
           {{{"name", "kubetrain"},
             {"image", "example/trainer:2"},
             {"restartCount", restarts},
             {"state", {{"waiting", {{"reason", reason}, {"message", message}}}}},
             {"lastState", last_state}}}}};
}

json Running() {
  return {{"phase", "Running"},
          {"conditions", {{{"type", "PodScheduled"}, {"status", "True"}}}},
          {"containerStatuses",
           {{{"name", "kubetrain"},
             {"image", "example/trainer:2"},
             {"restartCount", 0},
             {"state", {{"running", {{"startedAt", "2027-01-15T08:00:00Z"}}}}}}}}};
}

class WaitingReasonsTest : public testing::ControllerOnFakeServerTest {
 protected:
  json Condition(const std::string& job) {
    auto j = server_->Get("trainingjobs", "ns1", job);
    if (!j.ok() || !j->contains("status")) return json::object();
    for (const json& c : (*j)["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "ReplicasWaiting") return c;
    }
    return json::object();
  }
  bool WaitForCondition(const std::string& job, const std::string& status,
                        const std::string& reason) {
    return server_->WaitUntil([&] {
      json c = Condition(job);
      return c.value("status", "") == status && c.value("reason", "") == reason;
    });
  }
  // Warning events on `job` by reason.
  std::map<std::string, int> Warnings(const std::string& job) {
    std::map<std::string, int> out;
    for (const json& e : server_->List("events", "ns1")) {
      if (e["involvedObject"].value("name", "") == job && e.value("type", "") == "Warning") {
        ++out[e.value("reason", "")];
      }
    }
    return out;
  }
  // Each status below sets phase, conditions and containerStatuses, which a
  // merge patch replaces whole: one write, as the kubelet's.
  void SetStatus(const std::string& pod, json status) {
    ASSERT_TRUE(server_->MergePatch("pods", "ns1", pod, {{"status", status}}, "status").ok());
  }
  // Makes the controller reconcile the job `n` more times over the same
  // waiting replicas (the worker's pod changes in a way that does not matter).
  void Resync(int n) {
    for (int i = 0; i < n; ++i) {
      const int64_t before = controller_->sync_count();
      ASSERT_TRUE(server_
                      ->MergePatch("pods", "ns1", "mnist-worker-0",
                                   {{"status", {{"podIP", "10.0.0." + std::to_string(i + 1)}}}},
                                   "status")
                      .ok());
      // A sync that writes nothing changes nothing on the server: polled.
      ASSERT_TRUE(test_support::WaitUntil([&] { return controller_->sync_count() > before; }));
    }
  }
};

TEST_F(WaitingReasonsTest, EachCauseBecomesTheConditionAndOneWarning) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", Job("mnist")).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 2; }));
  SetStatus("mnist-worker-0", Running());

  struct Cause {
    json status;
    std::string reason;
    std::string message;
  };
  const std::vector<Cause> causes = {
      {Unschedulable(), "Unschedulable",
       "master-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu."},
      {ContainerWaiting("ErrImagePull", "manifest unknown"), "ErrImagePull",
       "master-0 cannot pull image \"example/trainer:2\" (ErrImagePull): manifest unknown"},
      {ContainerWaiting("CreateContainerConfigError", "secret \"gcs\" not found"),
       "CreateContainerConfigError",
       "master-0 cannot start (CreateContainerConfigError): secret \"gcs\" not found"},
      {ContainerWaiting("CrashLoopBackOff", "back-off 20s restarting failed container",
                        {{"terminated", {{"exitCode", 2}, {"message", "bad --learning_rate"}}}},
                        "Running", 2),
       "CrashLoopBackOff",
       "master-0 keeps crashing (CrashLoopBackOff), last exit code 2: bad --learning_rate"},
  };
  for (const Cause& cause : causes) {
    SCOPED_TRACE(cause.reason);
    SetStatus("mnist-master-0", cause.status);
    ASSERT_TRUE(WaitForCondition("mnist", "True", cause.reason)) << Condition("mnist");
    EXPECT_EQ(Condition("mnist").value("message", ""), cause.message);
    ASSERT_TRUE(server_->WaitUntil([&] { return Warnings("mnist")[cause.reason] == 1; }));
    Resync(3);
    EXPECT_EQ(Warnings("mnist")[cause.reason], 1) << "one event per cause, not per sync";
    // A pod whose container waits to start keeps the job PREPARING (a
    // crash loop's pod is in phase Running, which the job counts as running).
    if (cause.status["phase"] == "Pending") {
      auto job = server_->Get("trainingjobs", "ns1", "mnist");
      EXPECT_EQ((*job)["status"]["state"], "PREPARING");
    }
  }

  // Running: the condition clears, and the job runs.
  SetStatus("mnist-master-0", Running());
  ASSERT_TRUE(WaitForCondition("mnist", "False", "ReplicasNotWaiting")) << Condition("mnist");
  ASSERT_TRUE(server_->WaitUntil([&] {
    auto job = server_->Get("trainingjobs", "ns1", "mnist");
    return job.ok() && (*job)["status"].value("state", "") == "RUNNING";
  }));
  EXPECT_FALSE(Condition("mnist").contains("message"));  // empty, so left out
  EXPECT_EQ(Warnings("mnist"),
            (std::map<std::string, int>{{"Unschedulable", 1},
                                        {"ErrImagePull", 1},
                                        {"CreateContainerConfigError", 1},
                                        {"CrashLoopBackOff", 1},
                                        {"Restarting", 1}}));  // the crash loop's 2 restarts
}

TEST_F(WaitingReasonsTest, MaxWaitTimeFailsNamingTheLastReason) {
  json job = Job("stuck");
  job["spec"]["trainingInput"]["scheduling"] = {{"maxWaitTime", "3600s"}};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return server_->Count("pods") == 2; }));
  SetStatus("stuck-master-0", Unschedulable());
  ASSERT_TRUE(WaitForCondition("stuck", "True", "Unschedulable")) << Condition("stuck");
  // The wait is cut short: the deadline has passed at the next reconcile.
  ASSERT_TRUE(
      server_
          ->MergePatch("trainingjobs", "ns1", "stuck",
                       {{"spec", {{"trainingInput", {{"scheduling", {{"maxWaitTime", "1s"}}}}}}}})
          .ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    auto j = server_->Get("trainingjobs", "ns1", "stuck");
    return j.ok() && j->contains("status") && (*j)["status"].value("state", "") == "FAILED";
  })) << Condition("stuck");
  auto failed = server_->Get("trainingjobs", "ns1", "stuck");
  EXPECT_EQ((*failed)["status"]["errorMessage"],
            "scheduling.maxWaitTime 1s exceeded before the job started running; last waiting "
            "reason Unschedulable: master-0 cannot be scheduled: 0/1 nodes are available: 1 "
            "Insufficient cpu.");
  EXPECT_EQ(Condition("stuck").value("status", ""), "False");
}

}  // namespace
}  // namespace kubetrain::kube
