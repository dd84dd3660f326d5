#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "api/scale_tiers.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/naming.h"

namespace kubetrain::core {

// Where a task can be reached: "host:port". Called with the replica's object
// name and key and the job's port.
using AddressFn =
    std::function<std::string(std::string_view replica_name, const ReplicaKey& key, int port)>;

// Kubernetes: "<replica>.<namespace>.svc:<port>", resolved through the
// replica's headless Service (as Kubeflow's TFJob does).
AddressFn KubernetesAddresses(std::string namespace_name);

// One machine: "127.0.0.1:<port>", where `port_of` gives each replica its own
// port (the local backend picks free ports).
AddressFn LoopbackAddresses(std::function<int(std::string_view replica_name)> port_of);

struct TfConfigOptions {
  // Adds "job": the trainingInput in protobuf's JSON mapping, as Cloud ML did.
  bool include_job = true;
};

// TF_CONFIG for one task (for a trial's task, task.trial_id names the trial:
// the cluster is that trial's replicas and "task" gets "trial") of a
// defaulted, valid job whose replicas are
// `groups` (api::ReplicaGroups of its trainingInput), e.g. for worker 1:
//
//   {"cluster":{"master":["j-master-0.ns.svc:2222"],"ps":[...],"worker":[...]},
//    "task":{"type":"worker","index":1},"environment":"cloud"}
//
// - cluster keys sorted by name, tasks in index order;
// - the master is "chief" when trainingInput.useChiefInTfConfig, else "master"
//   (also in task.type);
// - the evaluator appears in cluster only when spec.evaluatorInCluster (Cloud
//   ML's default: it only reads checkpoints); its own task is always set;
// - then "job" (when asked) and task.trial (trials).
// Compact JSON, keys in the order TensorFlow and Kubeflow print them.
std::string BuildTfConfig(const v1::TrainingJob& job, const std::vector<api::ReplicaGroup>& groups,
                          const ReplicaKey& task, const AddressFn& address,
                          const TfConfigOptions& options = {});

// The TF_CONFIG name of a role: "master"/"chief", "worker", "ps", "evaluator".
std::string TfConfigRoleName(api::Role role, bool use_chief);

}  // namespace kubetrain::core
