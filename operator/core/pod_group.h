#pragma once

// PodGroups for the gang schedulers a cluster may run beside the default
// one (docs/admission.md): where a job's pods name such a scheduler, the
// operator creates one PodGroup per gang (the job, or one trial of a study)
// and marks each pod with it, and that scheduler places the gang whole.
// Pure rendering; the Kubernetes backend creates what this returns.

#include <string>
#include <vector>

#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"

namespace kubetrain::core {

enum class PodGroupApi {
  kNone,
  // scheduler-plugins' coscheduling: scheduling.x-k8s.io/v1alpha1 PodGroup,
  // pods labelled kCoschedulingPodGroupLabel.
  kCoscheduling,
  // Volcano: scheduling.volcano.sh/v1beta1 PodGroup, pods annotated
  // kVolcanoGroupNameAnnotation.
  kVolcano,
};

inline constexpr char kVolcanoSchedulerName[] = "volcano";
inline constexpr char kCoschedulingPodGroupLabel[] = "scheduling.x-k8s.io/pod-group";
inline constexpr char kVolcanoGroupNameAnnotation[] = "scheduling.k8s.io/group-name";
inline constexpr char kCoschedulingApiVersion[] = "scheduling.x-k8s.io/v1alpha1";
inline constexpr char kVolcanoApiVersion[] = "scheduling.volcano.sh/v1beta1";

// Which PodGroup a pod of `job` (as rendered, templates applied) belongs to:
// Volcano's when its schedulerName is "volcano"; coscheduling's when it
// names another scheduler than default-scheduler and the job sets
// spec.runPolicy.schedulingPolicy (a scheduler that reads no PodGroup needs
// none); else none: the default scheduler, which the operator's own
// admission gangs.
PodGroupApi PodGroupApiOf(const v1::TrainingJob& job, const nlohmann::json& pod);

// Marks a rendered pod of trial `trial_id` ("" outside studies) as a member
// of its gang's PodGroup, when PodGroupApiOf says it has one.
void AddPodGroupMembership(const v1::TrainingJob& job, const std::string& trial_id,
                           nlohmann::json& pod);

// The PodGroup of one gang: `pods` are all its pods as RenderPod renders
// them, the first deciding the API (PodGroupApiOf; null JSON for none).
// spec.minMember: schedulingPolicy.minAvailable, else every pod;
// spec.minResources: the requests of the first minMember pods (the master
// first, as the replicas are ordered); coscheduling's
// scheduleTimeoutSeconds, Volcano's queue and priorityClassName
// (schedulingPolicy.priorityClass, else the first pod's) from the policy.
// Labelled with the job, owned by the TrainingJob, like its pods.
nlohmann::json RenderPodGroup(const v1::TrainingJob& job, const std::string& namespace_name,
                              const std::string& trial_id, const std::vector<nlohmann::json>& pods);

}  // namespace kubetrain::core
