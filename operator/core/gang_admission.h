#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"

namespace kubetrain::core {

// Gang admission: a job's pods are created only when all of them can be
// placed at once, so two jobs that each fit alone never hold half the
// cluster each, waiting for peers that cannot be placed. Pure: the backend
// observes nodes, pods and quotas, describes each job as a Gang, and carries
// out the decisions (docs/admission.md says how they are shown).
//
// The simulation is the default scheduler's resource fit (requests against
// a node's allocatable minus what is bound there), node selectors, taints
// against tolerations and required node affinity. It places a gang's pods
// largest first, each on the node it fills most (the default scheduler
// spreads; packing here is what makes the answer "fits" the safe one).

// The condition admission writes on a job: False while it waits (with one of
// the reasons below), True once its pods may be created.
inline constexpr char kAdmittedCondition[] = "Admitted";
inline constexpr char kAdmittedReason[] = "Admitted";
inline constexpr char kWaitingForCapacityReason[] = "WaitingForCapacity";
inline constexpr char kQuotaExceededReason[] = "QuotaExceeded";
inline constexpr char kNeverFitsReason[] = "NeverFits";
// The reason of a job seen before the first admission pass decided on it.
inline constexpr char kQueuedReason[] = "Queued";
// The reason of a job whose gang was released: a replica recreated after
// admission could not be placed within scheduleTimeoutSeconds.
inline constexpr char kGangReleasedReason[] = "GangReleased";
// schedulingPolicy.scheduleTimeoutSeconds unset.
inline constexpr absl::Duration kDefaultScheduleTimeout = absl::Seconds(300);
// Kueue's label: a job that carries it is Kueue's to admit (it resumes the
// job through runPolicy.suspend).
inline constexpr char kKueueQueueLabel[] = "kueue.x-k8s.io/queue-name";

// What admission decided about one job, carried to the reconciler
// (Observed::admission), which writes it with the job's status: admitting
// costs no status write of its own, and the pods are created in the same
// pass.
struct AdmissionVerdict {
  std::string reason;  // kAdmittedReason, or why the job waits
  std::string message;
  int32_t position = 0;  // its place in the queue; 0 when admitted or never fitting
  // An admitted study: how many of its trials admission has let start in
  // all (status.admittedTrialCount); 0 for other jobs.
  int64_t admitted_trials = 0;
  // An admitted study: trials that were released (a replica could not be
  // placed again) and are admitted again now, by trial id.
  std::vector<std::string> readmitted_trials;

  bool admitted() const { return reason == kAdmittedReason; }
  bool operator==(const AdmissionVerdict&) const = default;
};

// The job's Admitted condition; null when it has none.
const v1::Condition* FindAdmittedCondition(const v1::TrainingJobStatus& status);
// Sets the Admitted condition (adding it, False included), its transition
// time when its status changes.
void SetAdmittedCondition(v1::TrainingJobStatus* status, bool admitted, const std::string& reason,
                          const std::string& message, absl::Time now);
// Whether admission let the study in and now admits its trials one gang at a
// time (status.admittedTrialCount caps the trials it starts).
bool AdmitsTrialsOneByOne(const v1::TrainingJobStatus& status);

// Who admits the job when kubetrain does not: "Kueue" for a job with
// kKueueQueueLabel; "scheduler NAME" when spec.template or a replica
// template names a schedulerName other than default-scheduler (a gang
// scheduler places the pods). "" when kubetrain's own admission does.
std::string AdmittedElsewhere(const v1::TrainingJob& job);

// "no job ahead of it", "1 job ahead of it", "3 jobs ahead of it": what a
// waiting job's message says of the queue before it.
std::string JobsAhead(int n);

// Amounts of resources in thousandths of their unit: cpu "500m" is 500,
// memory "1Ki" is 1,024,000, "pods" 1 is 1,000. Keys are resource names
// ("cpu", "memory", "nvidia.com/gpu", "pods").
using ResourceAmounts = std::map<std::string, int64_t>;

// A Kubernetes quantity ("500m", "4", "15Gi", "1.5", "2e3") in thousandths,
// rounded up as the API server rounds a request. InvalidArgument naming the
// text otherwise (negative amounts included).
absl::StatusOr<int64_t> ParseQuantityMilli(absl::string_view quantity);
// The amount as a person reads it: cpu "4" or "500m", memory in the largest
// binary unit that divides it ("15Gi", "512Mi", else bytes), others whole
// units (or thousandths, "m").
std::string FormatQuantity(absl::string_view resource, int64_t milli);
// "cpu 4, memory 15Gi, nvidia.com/gpu 1": every resource but "pods".
std::string FormatAmounts(const ResourceAmounts& amounts);

struct Toleration {
  std::string key;           // "" with operator Exists: every taint
  std::string op = "Equal";  // "Equal" or "Exists"
  std::string value;
  std::string effect;  // "" tolerates every effect
};
struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule, PreferNoSchedule, NoExecute
};
struct NodeSelectorRequirement {
  std::string key;  // a label; "metadata.name" for a matchFields term
  std::string op;   // In, NotIn, Exists, DoesNotExist, Gt, Lt
  std::vector<std::string> values;
};

// What placing a pod depends on.
struct PodPlacement {
  std::string name;
  std::string ns;
  std::string node;  // spec.nodeName; "" while unbound
  // Per resource: the sum over containers (a container without requests
  // asks for its limits, as the API server defaults it), or an init
  // container's, when larger; plus "pods" 1.
  ResourceAmounts requests;
  std::map<std::string, std::string> node_selector;
  std::vector<Toleration> tolerations;
  // requiredDuringSchedulingIgnoredDuringExecution: the node must match one
  // term, that is every requirement of it. Empty: any node.
  std::vector<std::vector<NodeSelectorRequirement>> required_terms;
  std::string priority_class;  // spec.priorityClassName
};
// Reads a v1 Pod (as rendered, or as the API returns it). InvalidArgument
// naming the field when a quantity or a term is malformed.
absl::StatusOr<PodPlacement> ParsePodPlacement(const nlohmann::json& pod);

struct NodeCapacity {
  std::string name;
  ResourceAmounts allocatable;  // status.allocatable
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  bool unschedulable = false;  // spec.unschedulable (cordoned)
};
absl::StatusOr<NodeCapacity> ParseNode(const nlohmann::json& node);

// A namespace's ResourceQuota: spec.hard, of which admission reads
// requests.cpu (or cpu), requests.memory (or memory), requests.<extended
// resource>, and count/pods (or pods).
struct NamespaceQuota {
  std::string name;
  std::string ns;
  ResourceAmounts hard;  // keyed as in spec.hard
};
absl::StatusOr<NamespaceQuota> ParseResourceQuota(const nlohmann::json& quota);

// One job, or one trial of a study: its pods are admitted together or not at all.
struct Gang {
  std::string key;  // "namespace/name"
  std::string ns;
  int32_t priority = 0;            // its PriorityClass's value
  absl::Time created;              // the job's creationTimestamp
  std::string uid;                 // the tie-breaker of jobs created together
  int64_t trial = 0;               // a study's trials go in the order they were started
  std::vector<PodPlacement> pods;  // every pod of the gang
  // When set, the gang's pods instead of `pods`: owned by the caller, alive
  // for the call (a pass plans a thousand gangs without copying their pods).
  const std::vector<PodPlacement>* pods_view = nullptr;
  const std::vector<PodPlacement>& Pods() const { return pods_view != nullptr ? *pods_view : pods; }
  // Admitted already: its pods not yet bound are placed before any queued
  // gang is considered (they are coming).
  bool admitted = false;
  // Since when it waits (its Admitted=False condition's transition); the
  // default: not yet.
  absl::Time waiting_since = absl::InfiniteFuture();
};

// What the cluster holds now.
struct ClusterState {
  std::vector<NodeCapacity> nodes;
  // Every pod that is not Succeeded or Failed, bound or not, of any job or none.
  std::vector<PodPlacement> pods;
  std::vector<NamespaceQuota> quotas;
  // More pods, as `pods`: owned by the caller, alive for the call.
  std::vector<const PodPlacement*> pod_views;
};

struct AdmissionPolicy {
  // Gangs behind one that waits for capacity and fit now are admitted before
  // it (backfill) while it has waited less than this; after that, nothing
  // behind the first gang that has waited this long is, until it is
  // admitted: a small job does not wait for a big one that needs the cluster
  // emptied, and the big one waits at most this long plus the time the jobs
  // running then take to free what it needs.
  absl::Duration backfill_limit = absl::Minutes(10);
};

struct AdmissionDecision {
  std::string key;
  // kAdmittedReason, kWaitingForCapacityReason, kQuotaExceededReason or kNeverFitsReason.
  std::string reason;
  // 1-based place among the gangs still waiting (capacity or quota); 0 when
  // admitted or never fitting.
  int position = 0;
  std::string message;
};

// Decides on every gang not yet admitted, in queue order: priority (higher
// first), then creation time, then uid. A gang is admitted when its
// namespace's quotas hold it and its pods fit the nodes' allocatable minus
// the requests of every pod bound there and of the admitted gangs' pods still
// to be placed; a gang that would not fit even the empty cluster never fits.
std::vector<AdmissionDecision> PlanAdmission(const ClusterState& cluster,
                                             const std::vector<Gang>& gangs, absl::Time now,
                                             const AdmissionPolicy& policy = {});

// The gang's order key: true when `a` is admitted before `b`.
bool AdmitsBefore(const Gang& a, const Gang& b);

}  // namespace kubetrain::core
