#pragma once

// One reconcile pass, as the reconciler's files share it (reconciler.cc: the
// state machine; desired_replicas.cc: the replicas a job asks for; study.cc:
// trials, archiving, resumed studies). Internal to operator/core: the
// contract is reconciler.h.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "api/scale_tiers.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/reconciler.h"
#include "operator/core/replica.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::core::internal {

// Condition types.
inline constexpr char kCreated[] = "Created";
inline constexpr char kRunning[] = "Running";
inline constexpr char kRestarting[] = "Restarting";
inline constexpr char kSucceeded[] = "Succeeded";
inline constexpr char kFailed[] = "Failed";
inline constexpr char kCancelled[] = "Cancelled";
inline constexpr char kSuspended[] = "Suspended";
inline constexpr char kOutputsEphemeral[] = "OutputsEphemeral";

absl::Time FromProto(const google::protobuf::Timestamp& ts);
void ToProto(absl::Time t, google::protobuf::Timestamp* ts);
absl::Duration FromProto(const google::protobuf::Duration& d);
// Cuts a message to status size (termination messages are the user's).
std::string Truncate(std::string text);
std::string DurationText(absl::Duration d);
// An objective as the trainer reported it: the shortest text that reads back
// as the same double ("0.8804", not std::to_string's "0.880400").
std::string ObjectiveText(double value);
bool IsStudy(const v1::TrainingJob& job);

// ---- Conditions ------------------------------------------------------------

v1::Condition* FindCondition(v1::TrainingJobStatus* status, const std::string& type);
bool ConditionIsTrue(const v1::TrainingJobStatus& status, const std::string& type);
// Sets a condition; returns true when it became true just now. A condition
// that never existed is not added as "False": absent reads as false.
bool SetCondition(v1::TrainingJobStatus* status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, absl::Time now);

// ---- Describing replicas ---------------------------------------------------

bool IsLost(const ObservedReplica& r);
std::string DescribeFailure(const ObservedReplica& r, bool use_chief);

// ---- The reconcile context -------------------------------------------------

struct Context {
  const v1::TrainingJob& stored;
  const Observed& observed;
  absl::Time now;
  const ReconcileOptions& options;

  v1::TrainingJob job;  // defaulted copy
  std::vector<api::ReplicaGroup> groups;
  std::string job_name;
  ReconcileResult result;
  // Trials both archived and in the stored status: `observed` leaves out
  // their archived copies, and CapTrials archives them again once finished.
  std::set<std::string> archived_and_in_status{};

  v1::TrainingJobStatus& status() { return result.status; }

  void Emit(EmitEvent::Type type, std::string reason, std::string message) {
    result.actions.push_back(EmitEvent{type, std::move(reason), Truncate(std::move(message))});
  }
  void RequeueAt(absl::Time t) {
    absl::Duration after = std::max(t - now, absl::Seconds(1));
    if (!result.requeue_after || after < *result.requeue_after) result.requeue_after = after;
  }
  const v1::RunPolicy& policy() const { return job.spec().run_policy(); }
  bool use_chief() const { return job.spec().training_input().use_chief_in_tf_config(); }
  const v1::HyperparameterSpec& hp() const { return job.spec().training_input().hyperparameters(); }
  bool ServiceObserved(const std::string& name) const {
    for (const ObservedService& s : observed.services) {
      if (s.name == name) return true;
    }
    return false;
  }
};

absl::Duration RecreateBackoff(int restarts, absl::Duration base);

// The trial's chief (api::ChiefRole), whose end decides its set's.
ReplicaKey ChiefOf(const Context& c, const std::string& trial_id);

// Deletes a replica (and its Service) unless deletion is already under way;
// force-deletes one stuck past its grace period.
void DeleteReplicaOnce(Context& c, const ObservedReplica& r, const std::string& reason,
                       bool with_service = true);

// Gang admission, after admission: the first of a gang's replicas (those
// `of_gang` names) that was recreated and has stayed Unschedulable for
// schedulingPolicy.scheduleTimeoutSeconds; null when none has yet (the pass
// is requeued for when the first would be due).
const ObservedReplica* UnplacedPastTimeout(
    Context& c, const std::function<bool(const ObservedReplica&)>& of_gang);
// What a gang release says: which replica could not be placed, for how long,
// and why.
std::string UnplacedReplicaText(const Context& c, const ObservedReplica& stuck);

// What a replica set amounts to after one pass over it.
struct SetOutcome {
  enum class Phase { kCreating, kStarting, kRunning, kSucceeded, kFailed };
  Phase phase = Phase::kCreating;
  std::string reason;   // for kFailed: the condition reason
  std::string message;  // for kFailed / kSucceeded
  int replicas = 0;
};

// ---- Desired replicas (desired_replicas.cc) --------------------------------

// One replica of `group`, as the reconciler creates it: name, labels, image,
// command and args, resources and environment (reconciler.h lists it).
DesiredReplica MakeReplica(const v1::TrainingJob& job, const std::vector<api::ReplicaGroup>& groups,
                           const api::ReplicaGroup& group, int64_t index,
                           const std::string& trial_id, const tuner::Assignment& hyperparameters,
                           const ReconcileOptions& options);
// Every replica of every group.
std::vector<DesiredReplica> MakeReplicas(const v1::TrainingJob& job,
                                         const std::vector<api::ReplicaGroup>& groups,
                                         const std::string& trial_id,
                                         const tuner::Assignment& hyperparameters,
                                         const ReconcileOptions& options);

// ---- The state machine's steps a study uses too (reconciler.cc) ------------

// Brings one replica set towards its desired state and says where it stands.
// `set_created`: every replica of the set has been observed at least once
// (job: the Created condition; trial: state past QUEUED). Only then does a
// missing replica wait for the recreation backoff.
SetOutcome ReconcileSet(Context& c, const std::string& trial_id,
                        const tuner::Assignment& hyperparameters,
                        const std::map<ReplicaKey, const ObservedReplica*>& observed,
                        bool set_created);
void SetTerminal(Context& c, v1::State state);
void FailJob(Context& c, const std::string& reason, const std::string& message);
void SucceedJob(Context& c, const std::string& message);
// Moves the job's state forward (never back) from its replicas' progress.
void AdvanceState(Context& c, SetOutcome::Phase phase, int replicas);
// Deletes what the finished job (or trial, with `only_trial`) no longer
// needs, per cleanPodPolicy.
void CleanUp(Context& c, v1::RunPolicy::CleanPodPolicy policy, const std::string& trial_id,
             bool only_trial);
// The observed replicas of `trials` that fill a current slot, by key.
std::map<ReplicaKey, const ObservedReplica*> IndexReplicas(Context& c,
                                                           const std::set<std::string>& trials);
// Replicas and Services of no current slot: left over from a changed spec,
// a trial that is gone, or another naming. Deleted. Those of `finished`
// trials are left to the trial's clean-up.
void DeleteStrays(Context& c, const std::map<ReplicaKey, const ObservedReplica*>& index,
                  const std::set<std::string>& active, const std::set<std::string>& finished);

// ---- Tuning studies (study.cc) ---------------------------------------------

// One pass over a study: finishes, judges and stops trials, starts new ones
// into the free slots, ends the study.
void ReconcileStudy(Context& c);
// What `kubectl get tj` shows of a study: status.trialProgress and
// status.bestObjectiveValue.
void SummarizeStudy(Context& c);
// Cancels every trial still active, stopping its replicas.
void StopActiveTrials(Context& c, const std::string& why);

}  // namespace kubetrain::core::internal
