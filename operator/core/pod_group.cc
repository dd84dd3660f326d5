#include "operator/core/pod_group.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "operator/core/gang_admission.h"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"

namespace kubetrain::core {

using nlohmann::json;

PodGroupApi PodGroupApiOf(const v1::TrainingJob& job, const json& pod) {
  const std::string scheduler = pod.value("/spec/schedulerName"_json_pointer, std::string());
  if (scheduler == kVolcanoSchedulerName) return PodGroupApi::kVolcano;
  if (!scheduler.empty() && scheduler != "default-scheduler" &&
      job.spec().run_policy().has_scheduling_policy()) {
    return PodGroupApi::kCoscheduling;
  }
  return PodGroupApi::kNone;
}

void AddPodGroupMembership(const v1::TrainingJob& job, const std::string& trial_id, json& pod) {
  const std::string group = PodGroupName(JobObjectName(job), trial_id);
  switch (PodGroupApiOf(job, pod)) {
    case PodGroupApi::kCoscheduling:
      pod["metadata"]["labels"][kCoschedulingPodGroupLabel] = group;
      break;
    case PodGroupApi::kVolcano:
      pod["metadata"]["annotations"][kVolcanoGroupNameAnnotation] = group;
      break;
    case PodGroupApi::kNone:
      break;
  }
}

json RenderPodGroup(const v1::TrainingJob& job, const std::string& namespace_name,
                    const std::string& trial_id, const std::vector<json>& pods) {
  if (pods.empty()) return json();
  const PodGroupApi api = PodGroupApiOf(job, pods.front());
  if (api == PodGroupApi::kNone) return json();
  const v1::SchedulingPolicy& policy = job.spec().run_policy().scheduling_policy();
  const int32_t members =
      policy.has_min_available() ? policy.min_available() : static_cast<int32_t>(pods.size());
  ResourceAmounts total;
  for (size_t i = 0; i < pods.size() && i < static_cast<size_t>(members); ++i) {
    absl::StatusOr<PodPlacement> placement = ParsePodPlacement(pods[i]);
    if (!placement.ok()) continue;  // the API server refuses the pod itself, and says why
    for (const auto& [resource, milli] : placement->requests) {
      if (resource != "pods") total[resource] += milli;
    }
  }
  json min_resources = json::object();
  for (const auto& [resource, milli] : total) {
    min_resources[resource] = FormatQuantity(resource, milli);
  }
  json labels = {{kLabelJobName, JobLabelValue(JobObjectName(job))}};
  if (!trial_id.empty()) labels[kLabelTrialId] = trial_id;
  json spec = {{"minMember", members}, {"minResources", min_resources}};
  if (api == PodGroupApi::kCoscheduling) {
    if (policy.has_schedule_timeout_seconds()) {
      spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds();
    }
  } else {
    if (!policy.queue().empty()) spec["queue"] = policy.queue();
    const std::string priority =
        !policy.priority_class().empty()
            ? policy.priority_class()
            : pods.front().value("/spec/priorityClassName"_json_pointer, std::string());
    if (!priority.empty()) spec["priorityClassName"] = priority;
  }
  return {
      {"apiVersion", api == PodGroupApi::kVolcano ? kVolcanoApiVersion : kCoschedulingApiVersion},
      {"kind", "PodGroup"},
      {"metadata",
       {{"name", PodGroupName(JobObjectName(job), trial_id)},
        {"namespace", namespace_name},
        {"labels", labels},
        {"ownerReferences", json::array({OwnerReference(job)})}}},
      {"spec", spec}};
}

}  // namespace kubetrain::core
