#pragma once

// Why a job's replicas do not run: read from their pods, summarised as the
// job's ReplicasWaiting condition. Pure: JSON and values in, values out.
//
// A replica waits for a reason worth telling when
//   - the API server refuses to create its pod (reason FailedCreate:
//     admission such as Pod Security or a quota, in the server's words), or
//   - the scheduler cannot place it (PodScheduled False, reason
//     Unschedulable: "0/1 nodes are available: 1 Insufficient cpu."), or
//   - one of its containers (init containers first) waits for anything but
//     the ordinary ContainerCreating / PodInitializing: an image that cannot
//     be pulled (ErrImagePull, ImagePullBackOff, InvalidImageName,
//     ErrImageNeverPull), a container that cannot be created
//     (CreateContainerConfigError: a missing Secret or ConfigMap;
//     CreateContainerError, RunContainerError, ...), or a crash loop
//     (CrashLoopBackOff) that the restart policy has not ended yet.
//
// The condition names each replica and its cause; replicas with the same
// cause share one entry ("worker-0, worker-1 cannot be scheduled: ...").
// Events: one Warning per distinct cause. The cause's key (its text without
// the parts that change on every retry: the kubelet's back-off delays, the
// flip between ErrImagePull and ImagePullBackOff) is looked up in the message
// the condition held before; a cause already there is not reported again, so
// a reconcile that sees nothing new emits nothing.

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kubetrain::core {

inline constexpr char kReplicasWaitingCondition[] = "ReplicasWaiting";
// The reason of a replica whose pod the API server refused (as Kubernetes'
// own controllers name it).
inline constexpr char kFailedCreateReason[] = "FailedCreate";

// What keeps one replica from running, as its pod says.
struct ReplicaWaiting {
  // "Unschedulable", kFailedCreateReason, or the container's waiting
  // reason ("ErrImagePull", "CrashLoopBackOff", ...).
  std::string reason;
  std::string message;  // the scheduler's or the kubelet's words
  // The waiting container when it is not the training container (an init
  // container or a sidecar); "" for the training container, or when the pod
  // itself waits (Unschedulable).
  std::string container;
  bool init_container = false;
  std::string image;  // the waiting container's image
  // The waiting container's previous run, when it has one (crash loops).
  std::optional<int> last_exit_code;
  std::string last_termination_message;
};

// Reads a Pod's status. nullopt when nothing unusual keeps it waiting
// (running, scheduling in progress, containers being created) or the status
// is absent or malformed (nothing to tell is better than a wrong cause).
// `main_container` is the training container's name (kube_objects.h).
std::optional<ReplicaWaiting> ReadPodWaiting(const nlohmann::json& pod,
                                             const std::string& main_container);

// One waiting replica of the job: `task` as TaskName() writes it.
struct WaitingReplica {
  std::string task;
  ReplicaWaiting waiting;
};

struct WaitingCause {
  std::string reason;   // the pod's reason, for the event
  std::string message;  // the replicas and the cause
};

struct WaitingSummary {
  // The condition's reason (the first cause's) and message; both empty when
  // no replica waits.
  std::string reason;
  std::string message;
  // Causes not in `previous_message`: one Warning event each.
  std::vector<WaitingCause> new_causes;
};

// At most this many causes are listed (and reported); the rest are counted.
inline constexpr size_t kMaxWaitingCauses = 3;
// And no more than fit in this many characters (whole causes; under the
// status's message limit with room for the count of the rest).
inline constexpr size_t kMaxWaitingMessageLength = 960;

// `replicas` in slot order (the first cause names the condition's reason).
// `previous_message`: the condition's message while it was True, else "".
WaitingSummary SummarizeWaiting(const std::vector<WaitingReplica>& replicas,
                                const std::string& previous_message);

}  // namespace kubetrain::core
