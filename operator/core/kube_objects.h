#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"
#include "operator/core/reconciler.h"
#include "operator/core/replica.h"

namespace kubetrain::core {

// Renders DesiredReplicas as Kubernetes objects and reads Pods back as
// ObservedReplicas. Pure: JSON in, JSON out. The Kubernetes backend and
// `kubetrain render` share it, so a dry run prints exactly what the operator
// creates.

// The name of the training container in every pod.
inline constexpr char kContainerName[] = "kubetrain";

// A v1 Pod for `replica` in `namespace_name`:
// - labels, and an ownerReference to the TrainingJob (controller: true,
//   blockOwnerDeletion: true; uid from job.metadata.uid);
// - hostname = the replica name, so the pod knows its own address;
// - one container "kubetrain": image, command, args, env (then
//   cpu_budget::kCpuRequestEnv from the downward API), port, resources
//   (cpu/memory requests, memory and nvidia.com/gpu limits), a restricted
//   securityContext (no privilege escalation, all capabilities dropped,
//   RuntimeDefault seccomp) and restartPolicy from replica.restart_policy:
//   what Pod Security "restricted" asks;
// - for each of replica.package_mounts, a configMap volume holding that one
//   key, mounted read-only at its mount_path;
// - then spec.template and spec.replicaTemplates[role] merged over it: both
//   are PodTemplateSpecs ({metadata, spec}); maps are merged (JSON merge
//   patch), containers merged by name (a template container named
//   "kubetrain", or unnamed, merges into ours; env by name, ports by
//   containerPort; others added),
//   volumes/tolerations/initContainers appended. The kubetrain.io labels and
//   the ownerReference cannot be overridden;
// - then, for kubetrain's own images (DesiredReplica::image_runs_as_non_root),
//   runAsNonRoot on the training container, unless the templates replaced
//   its image or set runAsUser or runAsNonRoot (pod or container);
// - and automountServiceAccountToken false (training never calls the API),
//   unless the templates set it or name a serviceAccountName;
// - with spec.outputStorage (output_storage.h), before the templates: the
//   claim's volume (kOutputVolumeName; none for a template's volumeName),
//   its mount at jobDir (with subPath) in the training container, and, unless
//   the templates set one, securityContext.fsGroup 65532 (the runtime
//   image's group) with fsGroupChangePolicy OnRootMismatch, so a non-root
//   trainer can write to a fresh volume.
nlohmann::json RenderPod(const v1::TrainingJob& job, const std::string& namespace_name,
                         const DesiredReplica& replica);

// The headless Service of the same name: clusterIP None,
// publishNotReadyAddresses true (peers resolve before they are ready),
// selector on the replica's labels, the replica's port, same ownerReference.
nlohmann::json RenderService(const v1::TrainingJob& job, const std::string& namespace_name,
                             const DesiredReplica& replica);

// The PersistentVolumeClaim of spec.outputStorage.newClaim
// (NewOutputClaimName): labelled with the job's name label, owned by the
// TrainingJob like its pods, spec.accessModes [accessMode],
// resources.requests.storage = size, storageClassName when the spec sets it
// (even ""). `job` must have a newClaim.
nlohmann::json RenderOutputClaim(const v1::TrainingJob& job, const std::string& namespace_name);

// What every object the operator creates for a job carries, so the garbage
// collector deletes it with the job: the TrainingJob as its controller, with
// blockOwnerDeletion.
nlohmann::json OwnerReference(const v1::TrainingJob& job);

// Reads a Pod object from the API. Errors (InvalidArgument, naming the field)
// when the pod lacks the kubetrain.io role/index labels or has malformed
// fields; never throws.
absl::StatusOr<ObservedReplica> ParsePod(const nlohmann::json& pod);

// Reads a Service object from the API; InvalidArgument without the labels.
absl::StatusOr<ObservedService> ParseService(const nlohmann::json& service);

// What `kubetrain render` prints: the per-job output claim when the job has
// one, then the gang's PodGroup when its pods name a gang scheduler
// (pod_group.h), then for every replica of the job (of trial `trial` for a tuning
// study; the trial's hyperparameters are what the tuner suggests for it when
// the earlier trials are still running), its Service then its Pod, as the
// operator would create them in `namespace_name` (TF_CONFIG addresses
// included; options.address is not used).
// `trial` is ignored outside studies and must be >= 1 in a study. Errors: an
// invalid job (InvalidArgument, every field error), or a tuner that cannot
// suggest the trial (the tuner's status / OutOfRange when exhausted).
absl::StatusOr<std::vector<nlohmann::json>> RenderJob(const v1::TrainingJob& job,
                                                      const std::string& namespace_name, int trial,
                                                      const ReconcileOptions& options);

}  // namespace kubetrain::core
