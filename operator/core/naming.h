#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "api/roles.h"
#include "common/stable_hash.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::core {

// Labels every replica (pod/process) and Service of a job carries. The
// Kubernetes backend selects on kLabelJobName; the reconciler reads the other
// three back to know which slot an observed replica fills.
inline constexpr char kLabelJobName[] = "kubetrain.io/job-name";
inline constexpr char kLabelReplicaType[] = "kubetrain.io/replica-type";
inline constexpr char kLabelReplicaIndex[] = "kubetrain.io/replica-index";
// Absent (not empty) on replicas of a job that is not a tuning study.
inline constexpr char kLabelTrialId[] = "kubetrain.io/trial-id";

// Kubernetes object names of pods and Services must be DNS-1123 labels (at most
// 63 characters). Longer generated names keep a readable prefix and end in a
// hash of the full name, so they stay unique and deterministic.
inline constexpr size_t kMaxObjectNameLength = 63;

// The object-name form of the job's name: api::KubernetesName(metadata.name).
std::string JobObjectName(const v1::TrainingJob& job);

// Identifies one replica slot of a job: a role, an index within the role and,
// for tuning studies, the trial ("" outside studies).
struct ReplicaKey {
  std::string trial_id;
  api::Role role = api::Role::kMaster;
  int64_t index = 0;

  auto operator<=>(const ReplicaKey&) const = default;
};

// The role as it appears in names, labels and messages: api::RoleName, except
// that the master is "chief" when the job sets trainingInput.useChiefInTfConfig
// (so pods, Services and TF_CONFIG agree, as in Kubeflow: "mnist-chief-0").
std::string ReplicaRoleName(api::Role role, bool use_chief);

// "<job>-<role>-<index>", or "<job>-t<trialId>-<role>-<index>" for a trial.
// `job_object_name` is JobObjectName(job). Shortened with a hash suffix when
// longer than kMaxObjectNameLength.
std::string ReplicaName(std::string_view job_object_name, const ReplicaKey& key,
                        bool use_chief = false);

// The PersistentVolumeClaim the operator creates for a job's outputs
// (spec.outputStorage.newClaim): "<job>-output", shortened as ReplicaName.
std::string OutputClaimName(std::string_view job_object_name);

// The PodGroup of a gang (pod_group.h): "<job>", or "<job>-t<trialId>" for a
// trial's, shortened as ReplicaName.
std::string PodGroupName(std::string_view job_object_name, std::string_view trial_id);

// The task name used in messages and log prefixes: "worker-2" ("master-0"),
// or "trial 3 worker-2" for trials.
std::string TaskName(const ReplicaKey& key, bool use_chief = false);

// The four labels above for one replica. Label values longer than 63
// characters (long job names) are shortened the same way as ReplicaName.
std::map<std::string, std::string> ReplicaLabels(std::string_view job_object_name,
                                                 const ReplicaKey& key, bool use_chief = false);

// Reads a ReplicaKey back from labels ("chief" reads as the master); nullopt
// when the role or index label is missing or malformed (such objects are not
// the job's replicas).
std::optional<ReplicaKey> ReplicaKeyFromLabels(const std::map<std::string, std::string>& labels);

// The label selector (in Kubernetes' `labelSelector` syntax) matching every
// replica of a job: "kubetrain.io/job-name=<job>".
std::string JobSelector(std::string_view job_object_name);

// The value of kLabelJobName on the job's replicas: its object name,
// shortened as ReplicaName shortens names.
std::string JobLabelValue(std::string_view job_object_name);

}  // namespace kubetrain::core
