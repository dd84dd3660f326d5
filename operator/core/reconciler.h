#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/replica.h"
#include "operator/core/tf_config.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::core {

// The controller core: one pure, level-triggered, idempotent function from
// (job, what the backend observes, now) to (actions, new status). No I/O, no
// clock, no global state: the Kubernetes backend (operator/kube) and the local
// backend both call it and carry out what it returns.
//
// Job states (status.state), Cloud ML's:
//
//   QUEUED ──► PREPARING ──► RUNNING ──► SUCCEEDED
//     │  replicas   │  all replicas │
//     │  requested  │  running      ├──► FAILED   (a replica failed for good,
//     │             │               │             backoffLimit, deadlines,
//     └─────────────┴───────────────┤             invalid spec, trial limit)
//                                   └──► CANCELLING ──► CANCELLED
//                       spec.cancel: true  (replicas deleted)  (none left)
//
// QUEUED: the first reconcile records the job and asks for its replicas.
// PREPARING: some replicas exist, not all run. RUNNING: all run (a tuning
// study: its first trial runs). The state never goes back; restarts show as
// the Restarting condition. SUCCEEDED, FAILED, CANCELLED are terminal.
//
// Conditions (Kubernetes-shaped, in status.conditions): Created, Running,
// Restarting, Succeeded, Failed, Cancelled, Suspended, with reasons and messages naming
// the replica ("worker-2 exited with code 1: <termination message>"), and
// ReplicasWaiting while current replicas wait on something their pods name
// (Unschedulable, ErrImagePull, CrashLoopBackOff...; see waiting_reasons.h),
// with one Warning event per distinct cause.
//
// Restart policies (runPolicy.restartPolicy):
//   Never      any replica failure fails the job.
//   OnFailure  failed replicas run again (in place on Kubernetes, counted by
//              container restarts; recreated after pod-level failures).
//   Always     as OnFailure. A replica that exits 0 is complete and is never
//              run again (Kubeflow restarts it: their #1186).
//   ExitCode   exit codes >= 128 (signals, OOM kills) and pod-level failures
//              (eviction, node loss, Unknown phase) are retried; 1-127 fail the
//              job.
// backoffLimit (default 3) bounds status.restartCount = recreations +
// container restarts (Kubeflow counts only one of them: their #2342): a
// failure that would need restart number backoffLimit+1 fails the job, and so
// does a replica restarted in place once the count is past the limit. A
// recreation waits an exponential backoff after the previous one
// (ReconcileOptions::recreate_backoff_base * 2^(n-1), at most kRecreateBackoffMax), enforced with
// requeue_after. A replica whose pod vanished without the reconciler deleting
// it is created again without being counted.
//
// Deadlines: activeDeadlineSeconds (from status.createTime, as Kubeflow
// counts from the job's start), scheduling.maxRunningTime (from
// status.startTime, set when the job enters RUNNING) and
// scheduling.maxWaitTime (from status.createTime until RUNNING; its message
// names the last waiting reason) fail the job when passed; requeue_after always names the next
// deadline, so they fire with no other event (Kubeflow's #3358).
//
// Lost replicas: phase Unknown, node_lost, or deletion requested and past its
// grace period count as pod-level failures: replaced (force-deleted, then
// recreated) when the policy retries, else the job fails. Never left hanging.
//
// runPolicy.suspend: every replica (and Service) is deleted and none created
// while it is true (condition Suspended); the state, trials and restartCount
// stay; clearing it creates the replicas again. Deadlines keep counting.
//
// Outputs (output_storage.h): status.outputLocation says where jobDir is and
// on what storage; each trial's outputPath is <path>/<trialId>. With
// ReconcileOptions::replicas_have_own_filesystems (Kubernetes), a job whose
// output folder is on no shared storage carries the condition
// OutputsEphemeral (True, reason NoOutputStorage, a Warning event when it
// appears), and a job with spec.outputStorage.newClaim gets its claim
// (CreateClaim, before its replicas need it; DeleteClaim once finished when
// deleteWhenFinished).
//
// Success: the master succeeds, or worker 0 when there is no master.
// At the end cleanPodPolicy applies (default Running: replicas still pending
// or running, e.g. ps, are deleted with their Services; All: every replica;
// None: none), and ttlSecondsAfterFinished asks for the job's deletion.
//
// Tuning studies (trainingInput.hyperparameters has params): every trial is a
// full replica set named "<job>-t<id>-<role>-<index>"; up to maxParallelTrials
// run at once, maxTrials in all. A new trial is written to
// status.trainingOutput.trials (state QUEUED, hyperparameters, startTime) in
// the same result that first asks for its replicas. Trial ids are "1", "2", ...
// (totalTrialCount + 1). A trial's objective is its LAST reported value of
// hyperparameterMetricTag; finalMetric holds it with its step, allMetrics every
// report of the tag (the last kMaxMetricsPerTrial). A trial that succeeds
// without reporting the tag is SUCCEEDED with an errorMessage saying so, and is
// not counted in completedTrialCount. status.trialProgress is
// "<completedTrialCount>/<maxTrials>" from the study's first pass (0/10
// before any trial completes): kubectl's Trials column. With
// enableTrialEarlyStopping a running trial is judged by tuner::ShouldStopEarly
// (the rule, exactly, is in tuner.h) against the trials that ran to their
// end (this study's, archived ones, a resumed study's; not those stopped
// early) each pass once it has a report, until its final report
// (MetricReport::final) has arrived. Flagged, it is stopped: SUCCEEDED,
// isTrialStoppedEarly, its replicas deleted (whatever the cleanPodPolicy),
// its last report before the stop as finalMetric. A trial whose master
// exits 0 first is SUCCEEDED and never marked: early stopping only ever
// marks a trial whose replicas it deleted before they finished.
// api::EffectiveMaxFailedTrials failed trials fail the job (message naming the
// trials and their errors) and stop the running ones. The study ends
// SUCCEEDED when maxTrials trials have ended (or the tuner has no new point
// and none runs) and at least one completed, with trials sorted best first by
// goal. backoffLimit is one budget for the whole study (status.restartCount);
// a trial that exceeds it fails, not the job.
//
// Trials kept in status: at most kMaxTrialsInStatus (with at most
// kMaxMetricsPerTrial metric points each, status stays well under etcd's
// object size limit). Past that, the worst finished trials with an objective
// leave status through ArchiveTrial actions (failed and metric-less trials
// stay until the study is over, so failure counting never depends on the
// store); the backend keeps them in its job store and passes them back in
// Observed::archived_trials, so the tuner still sees the whole study. A
// backend without a store loses only their hyperparameters for the tuner:
// completedTrialCount never decreases.
//
// Resumed studies (hyperparameters.resumePreviousJobId, Cloud ML's): the
// completed trials (those with an objective, stopped early included) of the
// earlier job, in its status and archived (Observed::previous_study), join
// the tuner's history as completed trials and the early-stopping rule's
// completed set: they shape the suggestions and are never suggested again.
// They are not this job's trials: not in trainingOutput.trials, not in
// completedTrialCount or totalTrialCount, not counted against maxTrials or
// maxFailedTrials; this job's trial ids start at "1". A resumed trial whose
// hyperparameters do not fit this spec (a parameter missing or unknown, a
// value out of range, not listed, an unknown category) is left out of the
// history; the StudyResumed event says how many. Before the first trial
// starts, the earlier study must be usable, else the job ends FAILED with a
// message naming spec.trainingInput.hyperparameters.resumePreviousJobId: no
// such job, this job itself, not a tuning job, not finished yet (as Cloud ML
// required; SUCCEEDED, FAILED and CANCELLED studies all qualify, and a
// running one would keep changing the history under the new study), a
// different goal, or a different hyperparameterMetricTag. Once trials run,
// the check is not repeated: an earlier job deleted meanwhile (e.g. by its
// TTL) only takes its trials out of the history, it does not fail this job.
inline constexpr int kMaxTrialsInStatus = 100;
inline constexpr int kMaxMetricsPerTrial = 100;
inline constexpr absl::Duration kRecreateBackoffBase = absl::Seconds(10);
inline constexpr absl::Duration kRecreateBackoffMax = absl::Minutes(5);

// One report of a trial's metrics ("kubetrain-runtime" over gRPC, or a
// cloudml-hypertune metrics file): training step and tag -> value.
struct MetricReport {
  int64_t step = 0;
  std::map<std::string, double> values;
  // The trainer's last evaluation (kubetrain-runtime marks it; see
  // proto/kubetrain/v1/metrics.proto): training is over.
  bool final = false;
};

// The earlier study a tuning job continues (hyperparameters.resumePreviousJobId),
// as the backend finds it: the TrainingJob of that name (same namespace on
// Kubernetes, same $KUBETRAIN_HOME locally) as stored, spec and status, and
// the trials it archived out of its status. Only the earlier job's own trials
// count: a study it resumed in turn is not followed.
struct PreviousStudy {
  // False when the backend has no job of that name.
  bool found = false;
  v1::TrainingJob job;
  std::vector<v1::HyperparameterOutput> archived_trials;
};

// Everything the backend observes of one job.
struct Observed {
  std::vector<ObservedReplica> replicas;  // pods/processes labelled with the job
  std::vector<ObservedService> services;  // Kubernetes only
  // Trial id -> reports in arrival order. Only trials the backend still holds
  // reports for; a finished trial's status keeps its final metric.
  std::map<std::string, std::vector<MetricReport>> trial_metrics;
  // Trials that left status earlier (ArchiveTrial), from the job store.
  std::vector<v1::HyperparameterOutput> archived_trials;
  // Read only when the spec names resumePreviousJobId; backends fill it then.
  PreviousStudy previous_study;
  // Names of the PersistentVolumeClaims the job owns (Kubernetes only): its
  // per-job output claim once it exists.
  std::vector<std::string> claims;
};

// ---- Actions. Carry them out in this order: store ArchiveTrials, write
// `status` when it changed (a new trial must be on record before its pods
// exist; an archived one in the store before it leaves status), then deletes,
// then creates, then events. Every action is idempotent: creating what exists
// (AlreadyExists) and deleting what is gone (NotFound) are success.
struct CreateReplica {
  DesiredReplica replica;
};
// The headless Service in front of a replica (Kubernetes backend only; see
// ReconcileOptions::services). Rendered from the same DesiredReplica.
struct CreateService {
  DesiredReplica replica;
};
struct DeleteReplica {
  std::string name;
  // Skip the grace period: the replica's node is lost or it is stuck
  // terminating.
  bool force = false;
  std::string reason;  // for logs and events
};
struct DeleteService {
  std::string name;
};
// The job's story: state changes, restarts, failures, trials. Creates and
// deletes are not repeated as events; a backend that records an Event per
// object derives it from the CreateReplica/DeleteReplica actions.
struct EmitEvent {
  enum class Type { kNormal, kWarning };
  Type type = Type::kNormal;
  std::string reason;   // CamelCase, e.g. "ReplicaFailed"
  std::string message;  // names the replica/trial
};
// Store a trial that leaves status (see kMaxTrialsInStatus).
struct ArchiveTrial {
  v1::HyperparameterOutput trial;
};
// The per-job output claim of spec.outputStorage.newClaim (Kubernetes only;
// rendered with kube_objects.h RenderOutputClaim). Created before replicas.
struct CreateClaim {
  std::string name;
};
struct DeleteClaim {
  std::string name;
};
using Action = std::variant<CreateReplica, CreateService, DeleteReplica, DeleteService, EmitEvent,
                            ArchiveTrial, CreateClaim, DeleteClaim>;

struct ReconcileResult {
  std::vector<Action> actions;
  // The job's new status. Write it (status subresource) only when
  // status_changed.
  v1::TrainingJobStatus status;
  bool status_changed = false;
  // Reconcile again after this long even if nothing changes (deadlines,
  // backoff, stuck deletions, TTL). Unset: only when something changes.
  std::optional<absl::Duration> requeue_after;
  // ttlSecondsAfterFinished has passed: delete the TrainingJob itself.
  bool delete_job = false;
};

// Builds the tuner of a study. Production passes tuner::Tuner::Create; tests
// pass a fake. The seed is StableHash(metadata.uid), so a study makes the same
// suggestions after an operator restart.
using TunerFactory = std::function<absl::StatusOr<std::unique_ptr<tuner::Tuner>>(
    const v1::HyperparameterSpec& spec, uint64_t seed)>;
// The early-stopping rule; production passes tuner::ShouldStopEarly.
using StopRule =
    std::function<bool(const v1::HyperparameterSpec& spec, const tuner::TrialRecord& running,
                       const std::vector<tuner::TrialRecord>& completed)>;

// The runtime image this version's build makes (scripts/build-images.sh):
// "kubetrain/kubetrain-runtime:<project version>". The operator's default for
// --default-image; deploy/ and the Helm chart pass the same name.
extern const char kDefaultRuntimeImage[];

// Per-process configuration of the reconciler; the same for every job.
struct ReconcileOptions {
  // How tasks reach each other (TF_CONFIG endpoints). Required.
  AddressFn address;
  // Create a headless Service per replica (Kubernetes: yes; local: no).
  bool services = true;
  // Image for replicas whose replicaConfig has no imageUri; they pull it
  // IfNotPresent.
  std::string default_image = kDefaultRuntimeImage;
  // Exported to trials as KUBETRAIN_METRICS_ADDR when not empty (the Metrics
  // service).
  std::string metrics_address;
  // The per-trial token the Metrics service checks, as
  // KUBETRAIN_METRICS_TOKEN. Called with (job uid, trial id); unset: no token.
  std::function<std::string(const std::string& job_uid, const std::string& trial_id)> trial_token;
  // Required for tuning studies (a study without them fails with an internal
  // error message, not a crash).
  TunerFactory tuner_factory;
  StopRule stop_rule;
  // The wait before the first recreation of a failed replica set; it doubles
  // with each further one, up to kRecreateBackoffMax.
  absl::Duration recreate_backoff_base = kRecreateBackoffBase;
  // Every replica has a filesystem of its own that goes with it (Kubernetes
  // pods): outputs need spec.outputStorage to survive, and without it the job
  // is told so (OutputsEphemeral). False: replicas share one disk (local).
  bool replicas_have_own_filesystems = false;
};

// One reconcile. `job` is the TrainingJob as stored (not defaulted: the
// reconciler validates with api::Validate and defaults a copy with
// api::ApplyDefaults); `job.status` is the status written last time.
//
// Idempotent: called again with the actions applied to `observed` (and the
// returned status in `job.status`), it returns no create/delete actions and no
// events. An invalid spec ends the job FAILED with every field error, one
// Warning event, and no retries. Never fails on any input: problems become
// job status.
//
// Environment of every replica: TF_CONFIG and the PyTorch set, as
// trainingInput.framework asks (pytorch_env.h), CLOUD_ML_JOB_ID (metadata.name),
// CLOUD_ML_TRIAL_ID (trials), KUBETRAIN_JOB_NAME, KUBETRAIN_NAMESPACE,
// KUBETRAIN_JOB_UID, KUBETRAIN_TASK_TYPE, KUBETRAIN_TASK_INDEX,
// KUBETRAIN_TRIAL_ID (trials), KUBETRAIN_METRIC_TAG (studies),
// KUBETRAIN_METRICS_ADDR and KUBETRAIN_METRICS_TOKEN (trials, when configured).
ReconcileResult Reconcile(const v1::TrainingJob& job, const Observed& observed, absl::Time now,
                          const ReconcileOptions& options);

// The replicas (one full set) a job asks for, as Reconcile would create them:
// for trial "" outside studies; for a study, trial `trial_id` with
// `hyperparameters` as its assignment. `job` must be valid; it is defaulted
// here (Normalize). Used by Reconcile and by `kubetrain render`.
std::vector<DesiredReplica> DesiredReplicas(const v1::TrainingJob& job, const std::string& trial_id,
                                            const tuner::Assignment& hyperparameters,
                                            const ReconcileOptions& options);

// The port every task listens on: spec.port; else the first containerPort of
// the training container in spec.template (named "kubetrain" or unnamed);
// else 2222. (Per-role templates do not change it: TF_CONFIG has one port.)
std::optional<int> TemplatePort(const v1::TrainingJob& job);

// A copy of `job` with its port resolved as above and api::ApplyDefaults
// applied: the form Reconcile, DesiredReplicas and RenderJob work on.
v1::TrainingJob Normalize(const v1::TrainingJob& job);

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsTerminal(v1::State state);

}  // namespace kubetrain::core
