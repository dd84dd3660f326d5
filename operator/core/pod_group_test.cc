#include "operator/core/pod_group.h"

#include <string>
#include <vector>

#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"

namespace kubetrain::core {
namespace {

using nlohmann::json;

// A master, two workers and a ps of "standard" machines (4 cpus, 15Gi
// each); `scheduler` in spec.template when not empty.
v1::TrainingJob GangJob(const std::string& scheduler) {
  v1::TrainingJob job;
  job.set_api_version("kubetrain.io/v1");
  job.set_kind("TrainingJob");
  job.mutable_metadata()->set_name("gang");
  job.mutable_metadata()->set_uid("uid-7");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_scale_tier(v1::TrainingInput::CUSTOM);
  input->set_master_type("standard");
  input->set_worker_type("standard");
  input->set_worker_count(2);
  input->set_parameter_server_type("standard");
  input->set_parameter_server_count(1);
  if (!scheduler.empty()) {
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(
                    R"({"spec": {"schedulerName": ")" + scheduler + R"("}})",
                    job.mutable_spec()->mutable_template_())
                    .ok());
  }
  return job;
}

ReconcileOptions PodGroupTestOptions() {
  ReconcileOptions options;
  options.address = KubernetesAddresses("ns1");
  return options;
}

std::vector<json> Pods(const v1::TrainingJob& job, const std::string& trial = "") {
  std::vector<json> pods;
  for (const DesiredReplica& replica : DesiredReplicas(job, trial, {}, PodGroupTestOptions())) {
    pods.push_back(RenderPod(job, "ns1", replica));
  }
  return pods;
}

TEST(PodGroupTest, TheSchedulerNamedAndThePolicyPickTheApi) {
  const json volcano = {{"spec", {{"schedulerName", "volcano"}}}};
  const json other = {{"spec", {{"schedulerName", "scheduler-plugins-scheduler"}}}};
  const json plain = {{"spec", json::object()}};
  const json named_default = {{"spec", {{"schedulerName", "default-scheduler"}}}};
  v1::TrainingJob job = GangJob("");
  EXPECT_EQ(PodGroupApiOf(job, volcano), PodGroupApi::kVolcano);
  // Another scheduler reads PodGroups only where the job asks for gang
  // scheduling.
  EXPECT_EQ(PodGroupApiOf(job, other), PodGroupApi::kNone);
  EXPECT_EQ(PodGroupApiOf(job, plain), PodGroupApi::kNone);
  job.mutable_spec()->mutable_run_policy()->mutable_scheduling_policy()->set_min_available(2);
  EXPECT_EQ(PodGroupApiOf(job, other), PodGroupApi::kCoscheduling);
  EXPECT_EQ(PodGroupApiOf(job, volcano), PodGroupApi::kVolcano);
  EXPECT_EQ(PodGroupApiOf(job, plain), PodGroupApi::kNone);
  EXPECT_EQ(PodGroupApiOf(job, named_default), PodGroupApi::kNone);
}

TEST(PodGroupTest, VolcanoGroupTakesEveryPodAndThePolicysQueueAndPriority) {
  v1::TrainingJob job = GangJob("volcano");
  v1::SchedulingPolicy* policy =
      job.mutable_spec()->mutable_run_policy()->mutable_scheduling_policy();
  policy->set_queue("research");
  policy->set_priority_class("team-high");
  policy->set_schedule_timeout_seconds(60);  // coscheduling's, not Volcano's
  const std::vector<json> pods = Pods(job);
  ASSERT_EQ(pods.size(), 4u);
  for (const json& pod : pods) {
    EXPECT_EQ(pod["metadata"]["annotations"][kVolcanoGroupNameAnnotation], "gang");
    EXPECT_FALSE(pod["metadata"]["labels"].contains(kCoschedulingPodGroupLabel));
  }
  const json group = RenderPodGroup(job, "ns1", "", pods);
  EXPECT_EQ(group["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(group["kind"], "PodGroup");
  EXPECT_EQ(group["metadata"]["name"], "gang");
  EXPECT_EQ(group["metadata"]["namespace"], "ns1");
  EXPECT_EQ(group["metadata"]["labels"]["kubetrain.io/job-name"], "gang");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], "uid-7");
  EXPECT_EQ(group["spec"], json({{"minMember", 4},
                                 {"minResources", {{"cpu", "16"}, {"memory", "60Gi"}}},
                                 {"queue", "research"},
                                 {"priorityClassName", "team-high"}}));
}

TEST(PodGroupTest, CoschedulingGroupCountsTheFirstMinAvailablePodsOfATrial) {
  v1::TrainingJob job = GangJob("scheduler-plugins-scheduler");
  v1::SchedulingPolicy* policy =
      job.mutable_spec()->mutable_run_policy()->mutable_scheduling_policy();
  policy->set_min_available(2);
  policy->set_schedule_timeout_seconds(60);
  policy->set_queue("research");  // Volcano's, not coscheduling's
  const std::vector<json> pods = Pods(job, "3");
  for (const json& pod : pods) {
    EXPECT_EQ(pod["metadata"]["labels"][kCoschedulingPodGroupLabel], "gang-t3");
  }
  const json group = RenderPodGroup(job, "ns1", "3", pods);
  EXPECT_EQ(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(group["metadata"]["name"], "gang-t3");
  EXPECT_EQ(group["metadata"]["labels"]["kubetrain.io/trial-id"], "3");
  EXPECT_EQ(group["spec"], json({{"minMember", 2},
                                 {"minResources", {{"cpu", "8"}, {"memory", "30Gi"}}},
                                 {"scheduleTimeoutSeconds", 60}}));
}

TEST(PodGroupTest, PodsForTheDefaultSchedulerHaveNoGroup) {
  const v1::TrainingJob job = GangJob("");
  const std::vector<json> pods = Pods(job);
  EXPECT_TRUE(RenderPodGroup(job, "ns1", "", pods).is_null());
  EXPECT_TRUE(RenderPodGroup(job, "ns1", "", {}).is_null());
  for (const json& pod : pods) {
    EXPECT_FALSE(pod["metadata"].contains("annotations"));
    EXPECT_FALSE(pod["metadata"]["labels"].contains(kCoschedulingPodGroupLabel));
  }
}

TEST(PodGroupTest, RenderPrintsThePodGroupBeforeThePods) {
  const v1::TrainingJob job = GangJob("volcano");
  absl::StatusOr<std::vector<json>> objects = RenderJob(job, "ns1", 1, PodGroupTestOptions());
  ASSERT_TRUE(objects.ok()) << objects.status();
  ASSERT_EQ(objects->size(), 9u);  // the group, then a Service and a Pod per replica
  EXPECT_EQ((*objects)[0]["kind"], "PodGroup");
  EXPECT_EQ((*objects)[1]["kind"], "Service");
  EXPECT_EQ((*objects)[2]["kind"], "Pod");
}

TEST(PodGroupTest, LongNamesAreShortenedAsReplicaNamesAre) {
  const std::string long_name(70, 'a');
  EXPECT_EQ(PodGroupName("gang", ""), "gang");
  EXPECT_EQ(PodGroupName("gang", "12"), "gang-t12");
  EXPECT_EQ(PodGroupName(long_name, "1").size(), kMaxObjectNameLength);
  EXPECT_NE(PodGroupName(long_name, "1"), PodGroupName(long_name, "2"));
}

}  // namespace
}  // namespace kubetrain::core
