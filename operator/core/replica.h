#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "api/roles.h"
#include "operator/core/naming.h"
#include "operator/core/waiting_reasons.h"

namespace kubetrain::core {

// What one replica asks of the machine it runs on (from the scale-tier machine
// table, api::ReplicaGroups, plus the role's acceleratorConfig).
struct ReplicaResources {
  std::string machine_type;
  double cpu = 0;  // cores
  int64_t memory_mib = 0;
  int64_t gpus = 0;              // nvidia.com/gpu
  std::string accelerator_type;  // e.g. "NVIDIA_TESLA_T4"; empty when no GPU
};

// What the kubelet (or the local backend) does when the process exits, derived
// from runPolicy.restartPolicy: Never and ExitCode leave restarts to the
// reconciler ("Never"); OnFailure and Always restart failed containers in
// place ("OnFailure"). A replica that exits 0 is complete and is never run
// again under any policy: see docs/reconciler.md.
enum class ContainerRestartPolicy { kNever, kOnFailure };

// A package stored in a ConfigMap (packageUris configmap://NAME/FILE), which
// a pod mounts read-only: key `key` of ConfigMap `config_map` as the file
// `key` in the folder `mount_path` (python_module.h).
struct PackageMount {
  std::string volume;  // the pod's volume name
  std::string config_map;
  std::string key;
  std::string mount_path;
};

// A replica the job should have: a pod (and, on Kubernetes, a headless Service
// of the same name) or, on the local backend, a process. Backend-neutral: the
// Kubernetes backend renders it with kube_objects.h, the local backend spawns
// `command` + `args` with `env` on 127.0.0.1:`port`.
struct DesiredReplica {
  std::string name;  // ReplicaName(job, key)
  ReplicaKey key;
  std::map<std::string, std::string> labels;  // ReplicaLabels(job, key)
  // In a stable order: TF_CONFIG, the PyTorch set (pytorch_env.h; each as
  // the framework asks), CLOUD_ML_JOB_ID, CLOUD_ML_TRIAL_ID (trials),
  // then KUBETRAIN_* (see reconciler.h for the list).
  std::vector<std::pair<std::string, std::string>> env;
  // replicaConfig.imageUri; else the Python runtime image for pythonModule
  // (python_module.h); else ReconcileOptions::default_image.
  std::string image;
  // "IfNotPresent" for the default image (a versioned image loaded onto the
  // nodes or pulled once); "" for an imageUri, which keeps Kubernetes' default
  // for its tag.
  std::string image_pull_policy;
  // The image is kubetrain's own (the runtime image or a Python runtime
  // image, no imageUri), which runs as uid 65532: the pod says
  // runAsNonRoot, as Pod Security "restricted" asks.
  bool image_runs_as_non_root = false;
  // containerCommand when given; else, for pythonModule, `kubetrain-runtime
  // exec ... -- PYTHON -m MODULE` (python_module.h); else empty for an
  // imageUri of the user's (its ENTRYPOINT runs, api::RunsImageEntrypoint);
  // else {"kubetrain-runtime", "train"}.
  std::vector<std::string> command;
  // containerArgs when given, else trainingInput.args; then, for trials, one
  // "--<name>=<value>" per hyperparameter (in the spec's order) and, when the
  // args name an --output_path X, "--output_path=X/<trialId>" (the later flag
  // wins); then "--job-dir", "<jobDir>[/<trialId>]" when jobDir is set.
  std::vector<std::string> args;
  int port = 2222;
  ReplicaResources resources;
  ContainerRestartPolicy restart_policy = ContainerRestartPolicy::kNever;
  // trainingInput.pythonModule when this replica runs it; `command` is then
  // python_module.h's, and `package_mounts` what it reads on Kubernetes.
  std::string python_module;
  // The interpreter that runs it: the runtime's that runtimeVersion and
  // pythonVersion pick (python_module.h).
  std::string python;
  std::vector<PackageMount> package_mounts;
  // A tuning trial's chief that runs its image's entrypoint reports through
  // the cloudml-hypertune file: a sidecar of kubetrain's runtime image
  // (`kubetrain-runtime collect`) forwards the file's reports to the Metrics
  // service. `env` then holds CLOUD_ML_HP_METRIC_FILE (on a volume both
  // mount) and not the trial's token, which only the sidecar gets.
  static constexpr char kMetricsSidecarName[] = "kubetrain-metrics";
  struct MetricsSidecar {
    std::string image;
    std::string metric_file;
    std::vector<std::pair<std::string, std::string>> env;
  };
  std::optional<MetricsSidecar> metrics_sidecar;

  std::string Env(std::string_view name) const;  // "" when absent
};

// The phase of an observed replica, Kubernetes' pod phases.
enum class ReplicaPhase { kPending, kRunning, kSucceeded, kFailed, kUnknown };
std::string_view PhaseName(ReplicaPhase phase);

// A replica as the backend sees it now (from the informer cache, or the local
// backend's process table). Only replicas carrying the job's labels are
// passed in; `key` comes from those labels.
struct ObservedReplica {
  std::string name;
  ReplicaKey key;
  ReplicaPhase phase = ReplicaPhase::kPending;
  // The main container's last termination, when it has terminated (in the
  // current run, or the previous one after an in-place restart).
  std::optional<int> exit_code;
  std::string termination_message;  // container message, else pod message
  // A pod-level reason: "Evicted", "NodeLost", "OOMKilled", "Preempting"...
  std::string reason;
  int container_restarts = 0;  // the main container's restartCount
  // The replica's node is unreachable (pod reason NodeLost, or the backend
  // knows the node or process table is gone).
  bool node_lost = false;
  // Deletion was requested (Kubernetes deletionTimestamp set). `deletion_time`
  // is when the grace period ends; past it the replica counts as stuck.
  bool deletion_requested = false;
  absl::Time deletion_time = absl::InfinitePast();
  absl::Time created = absl::InfinitePast();
  // When its current run began (the running container's startedAt) or, for
  // a container waiting to be restarted in place, when its last run ended:
  // nothing of the current run happened before. InfinitePast when unknown
  // (not started yet: `created` stands for it).
  absl::Time run_since = absl::InfinitePast();
  // When a replica that stopped ended (the container's finishedAt; the
  // local backend's exit record). InfinitePast when unknown.
  absl::Time finished = absl::InfinitePast();
  // What keeps it from running, when something unusual does (Unschedulable,
  // an image that cannot be pulled, a crash loop...): see waiting_reasons.h.
  std::optional<ReplicaWaiting> waiting;
};

// A Service observed on Kubernetes (the local backend has none).
struct ObservedService {
  std::string name;
  ReplicaKey key;
};

// A replica whose pod the API server refused to create (admission: Pod
// Security, a quota, a webhook; or an invalid pod), as the backend saw on
// its last attempt; it tries again with backoff.
struct RefusedCreation {
  std::string name;
  ReplicaKey key;
  std::string message;  // the server's words
};

}  // namespace kubetrain::core
