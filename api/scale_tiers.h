#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/roles.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::api {

// What a machine type asks of the cluster. The one table of machine types is
// in scale_tiers.cc (and documented in docs/scale-tiers.md).
struct MachineResources {
  std::string machine_type;
  double cpu = 0;  // cores
  int64_t memory_mib = 0;
  int64_t gpus = 0;  // nvidia.com/gpu
};

std::optional<MachineResources> LookupMachineType(std::string_view machine_type);
const std::vector<MachineResources>& MachineTypes();

// Upper bound on workerCount/parameterServerCount/evaluatorCount: larger
// values are rejected as absurd (PREMIUM_1 uses 19 workers and 11 ps).
inline constexpr int64_t kMaxReplicasPerRole = 1000;

// One role of a normalised job: how many replicas, on what machine, running
// what.
struct ReplicaGroup {
  Role role;
  int64_t count = 0;
  MachineResources resources;
  v1::ReplicaConfig config;  // image, command, args, accelerators
};

// The role of a job's chief, replica 0 of it: the master, else the first
// worker (a job converted from Kubeflow without a chief). Its end decides its
// replica set's, and its reports are the trial's.
inline Role ChiefRole(const std::vector<ReplicaGroup>& groups) {
  for (const ReplicaGroup& group : groups) {
    if (group.role == Role::kMaster && group.count > 0) return Role::kMaster;
  }
  return Role::kWorker;
}

// Whether the role's replicas run their image's entrypoint: an image of the
// user's (imageUri) with neither containerCommand nor pythonModule to run in
// it, as Cloud ML's custom containers and Kubeflow's containers without a
// command do. Its `args` are appended to the entrypoint.
inline bool RunsImageEntrypoint(const v1::TrainingInput& input, const v1::ReplicaConfig& config) {
  return !config.image_uri().empty() && config.container_command().empty() &&
         input.python_module().empty();
}

// The replica groups of a defaulted, valid TrainingInput, in kAllRoles order,
// roles with no replicas left out. BASIC: 1 master; BASIC_GPU: 1 master with 1
// GPU; STANDARD_1: 1 master, 4 workers, 3 ps; PREMIUM_1: 1 master, 19
// workers, 11 ps; CUSTOM: from the *Type and *Count fields.
std::vector<ReplicaGroup> ReplicaGroups(const v1::TrainingInput& input);

// The replica groups of `job` (its defaults applied first) whose replicas run
// their image's entrypoint (RunsImageEntrypoint), in kAllRoles order.
std::vector<ReplicaGroup> ImageEntrypointGroups(const v1::TrainingJob& job);

// How many nodes an elastic group (spec.elasticPolicy) trains with, of a job
// whose master and workers are `nodes` replicas: minReplicas and
// maxReplicas, each `nodes` when not given.
struct ElasticNodeRange {
  int64_t min = 0;
  int64_t max = 0;
};
inline ElasticNodeRange ElasticNodes(const v1::ElasticPolicy& policy, int64_t nodes) {
  return {policy.has_min_replicas() ? policy.min_replicas() : nodes,
          policy.has_max_replicas() ? policy.max_replicas() : nodes};
}

}  // namespace kubetrain::api
