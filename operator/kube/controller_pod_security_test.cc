// Jobs in a namespace that enforces Pod Security "restricted", end to end:
// the real controller against the fake API server, whose admission refuses
// pods as kube-apiserver's does (tests/fake_apiserver/pod_security.h).
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "operator/kube/controller.h"
#include "operator/kube/controller_test_fixture.h"
#include "operator/kube/test_objects.h"
#include "operator/tuner/tuner.h"
#include "tests/fake_apiserver/fake_apiserver.h"
#include "tests/fake_apiserver/pod_security.h"

namespace kubetrain::kube {
namespace {

using nlohmann::json;

json FourRoleJob(const std::string& name) {
  return testing::TrainingJobObject(name, {{"trainingInput",
                                            {{"scaleTier", "CUSTOM"},
                                             {"masterType", "standard"},
                                             {"workerType", "standard"},
                                             {"workerCount", 2},
                                             {"parameterServerType", "standard"},
                                             {"parameterServerCount", 1},
                                             {"evaluatorType", "standard"},
                                             {"evaluatorCount", 1}}}});
}

class PodSecurityTest : public testing::ControllerOnFakeServerTest {
 protected:
  void SetUp() override {
    ControllerOnFakeServerTest::SetUp();
    server_->LabelNamespace("ns1", {{fake_apiserver::kPodSecurityEnforceLabel, "restricted"}});
    // A study needs a tuner: this controller has one.
    controller_->Stop();
    ControllerOptions options;
    options.ns = "ns1";
    options.workers = 2;
    options.reconcile.tuner_factory = tuner::Tuner::Create;
    controller_ = std::make_unique<Controller>(client_.get(), options, &studies_);
    ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  }

  // The pods of `job` by "<trial>/<role>-<index>" ("" trial outside studies).
  std::set<std::string> Replicas(const std::string& job) {
    std::set<std::string> out;
    for (const json& pod : server_->List("pods", "ns1")) {
      const json& labels = pod["metadata"]["labels"];
      if (labels.value("kubetrain.io/job-name", "") != job) continue;
      out.insert(labels.value("kubetrain.io/trial-id", "") + "/" +
                 labels.value("kubetrain.io/replica-type", "") + "-" +
                 labels.value("kubetrain.io/replica-index", ""));
    }
    return out;
  }
  json Condition(const std::string& job, const std::string& type) {
    auto j = server_->Get("trainingjobs", "ns1", job);
    if (!j.ok() || !j->contains("status")) return json::object();
    for (const json& c : (*j)["status"].value("conditions", json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return json::object();
  }
  int Warnings(const std::string& job, const std::string& reason) {
    int n = 0;
    for (const json& e : server_->List("events", "ns1")) {
      if (e["involvedObject"].value("name", "") == job && e.value("type", "") == "Warning" &&
          e.value("reason", "") == reason) {
        ++n;
      }
    }
    return n;
  }
};

TEST_F(PodSecurityTest, EveryRoleOfAJobIsAdmitted) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", FourRoleJob("mnist")).ok());
  const std::set<std::string> want = {"/master-0", "/worker-0", "/worker-1", "/ps-0",
                                      "/evaluator-0"};
  ASSERT_TRUE(server_->WaitUntil([&] { return Replicas("mnist") == want; }))
      << Condition("mnist", "ReplicasWaiting");
  for (const json& pod : server_->List("pods", "ns1")) {
    EXPECT_EQ(pod.value("/spec/containers/0/securityContext/runAsNonRoot"_json_pointer, json()),
              true);
    EXPECT_EQ(pod.value("/spec/automountServiceAccountToken"_json_pointer, json()), false);
  }
  EXPECT_NE(Condition("mnist", "ReplicasWaiting").value("status", ""), "True");
}

TEST_F(PodSecurityTest, EveryTrialOfAStudyIsAdmitted) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", testing::TuningJobObject("sweep", 4, 2)).ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    return Replicas("sweep") == std::set<std::string>{"1/master-0", "2/master-0"};
  })) << Condition("sweep", "ReplicasWaiting");
}

// A trial whose master runs its image's entrypoint gets the metrics sidecar,
// which the profile admits too (the user's image says it runs as non-root).
TEST_F(PodSecurityTest, AnEntrypointTrialsMetricsSidecarIsAdmitted) {
  controller_->Stop();
  ControllerOptions options;
  options.ns = "ns1";
  options.workers = 2;
  options.reconcile.tuner_factory = tuner::Tuner::Create;
  options.reconcile.metrics_address = "kubetrain-operator.kubetrain:9090";
  controller_ = std::make_unique<Controller>(client_.get(), options, &studies_);
  ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  json job = testing::TuningJobObject("entry", 2, 1);
  job["spec"]["trainingInput"]["masterConfig"] = {{"imageUri", "registry.example.com/trainer:1"}};
  job["spec"]["template"] = {{"spec", {{"securityContext", {{"runAsNonRoot", true}}}}}};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    return Replicas("entry") == std::set<std::string>{"1/master-0"};
  })) << Condition("entry", "ReplicasWaiting");
  for (const json& pod : server_->List("pods", "ns1")) {
    EXPECT_FALSE(pod["spec"]["containers"][0].contains("command"));
    EXPECT_EQ(pod.value("/spec/initContainers/0/name"_json_pointer, json()), "kubetrain-metrics");
    EXPECT_EQ(pod.value("/spec/initContainers/0/restartPolicy"_json_pointer, json()), "Always");
  }
}

TEST_F(PodSecurityTest, APythonPackageJobIsAdmitted) {
  json job = FourRoleJob("package");
  job["spec"]["trainingInput"]["pythonModule"] = "trainer.task";
  job["spec"]["trainingInput"]["packageUris"] = {"configmap://trainer/trainer-0.1.tar.gz"};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return Replicas("package").size() == 5; }))
      << Condition("package", "ReplicasWaiting");
  for (const json& pod : server_->List("pods", "ns1")) {
    // The package arrives in a configMap volume, which the profile allows.
    EXPECT_EQ(pod.value("/spec/containers/0/command/0"_json_pointer, json()), "kubetrain-runtime");
    EXPECT_TRUE(pod.value("/spec/volumes/0/configMap"_json_pointer, json()).is_object());
  }
}

TEST_F(PodSecurityTest, ATemplateAskingForRootIsRefusedInTheServersWords) {
  json job = FourRoleJob("root");
  job["spec"]["template"] = {{"spec", {{"securityContext", {{"runAsUser", 0}}}}}};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server_->WaitUntil([&] {
    return Condition("root", "ReplicasWaiting").value("reason", "") == "FailedCreate";
  })) << Condition("root", "ReplicasWaiting");
  const json condition = Condition("root", "ReplicasWaiting");
  EXPECT_EQ(condition.value("status", ""), "True");
  // The first replica's pod: creation stops at the first refusal.
  // Root asked for, kubetrain does not claim non-root beside it.
  EXPECT_EQ(condition.value("message", ""),
            "master-0 cannot be created: violates PodSecurity \"restricted:latest\": "
            "runAsNonRoot != true (pod or container \"kubetrain\" must set "
            "securityContext.runAsNonRoot=true), runAsUser=0 (pod must not set runAsUser=0)");
  EXPECT_EQ(server_->Count("pods"), 0u);
  ASSERT_TRUE(server_->WaitUntil([&] { return Warnings("root", "FailedCreate") == 1; }));
  // The controller keeps trying with backoff, and tells it once.
  const int64_t syncs = controller_->sync_count();
  // A sync that writes nothing changes nothing on the server: polled.
  ASSERT_TRUE(test_support::WaitUntil([&] { return controller_->sync_count() >= syncs + 2; }));
  EXPECT_EQ(Warnings("root", "FailedCreate"), 1);
  auto stored = server_->Get("trainingjobs", "ns1", "root");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ((*stored)["status"]["state"], "QUEUED");

  // The namespace relaxed (or the template fixed): the pods come, the
  // condition clears.
  server_->LabelNamespace("ns1", {{fake_apiserver::kPodSecurityEnforceLabel, "baseline"}});
  ASSERT_TRUE(server_->WaitUntil([&] { return Replicas("root").size() == 5; }, absl::Seconds(60)));
  ASSERT_TRUE(server_->WaitUntil([&] {
    return Condition("root", "ReplicasWaiting").value("status", "") == "False";
  })) << Condition("root", "ReplicasWaiting");
}

}  // namespace
}  // namespace kubetrain::kube
