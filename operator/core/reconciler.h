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
#include "api/defaults.h"
#include "api/python_runtimes.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/gang_admission.h"
#include "operator/core/replica.h"
#include "operator/core/tf_config.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::core {

// The controller core: one pure, level-triggered, idempotent function from
// (job, what the backend observes, now) to (actions, new status). No I/O, no
// clock, no global state: the Kubernetes backend (operator/kube) and the local
// backend both call it and carry out what it returns (carry_out.h).
//
// This header is the contract. The behaviour it implements (job states,
// conditions, restart policies, deadlines, lost replicas, suspend, outputs,
// tuning studies, archived and resumed trials) is described in
// docs/reconciler.md and held by reconciler_test.cc.

// Trials kept in status.trainingOutput.trials; the worst finished ones with an
// objective leave through ArchiveTrial actions past this many.
inline constexpr int kMaxTrialsInStatus = api::kMaxTrialsInStatus;
// Metric points kept per trial (allMetrics holds the last this many).
inline constexpr int kMaxMetricsPerTrial = api::kMaxMetricsPerTrial;
// The wait before the first recreation of a failed replica set (doubling with
// each further one) and its cap.
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
  // Trials that left status earlier (ArchiveTrial), from the job store. One
  // that is in the job's status too (the status write that was to drop it
  // failed, or is not seen yet) counts once, as status has it, and is
  // archived again once it has finished.
  std::vector<v1::HyperparameterOutput> archived_trials;
  // Read only when the spec names resumePreviousJobId; backends fill it then.
  PreviousStudy previous_study;
  // Names of the PersistentVolumeClaims the job owns (Kubernetes only): its
  // per-job output claim once it exists.
  std::vector<std::string> claims;
  // Pods of the job the API server refused to create on the backend's last
  // attempt (Kubernetes only); named in the ReplicasWaiting condition.
  std::vector<RefusedCreation> refused_creations;
  // Gang admission's latest verdict on the job (ReconcileOptions::
  // gang_admission; admission_queue.h), when it has one. The reconciler
  // writes it with the job's status (the Admitted condition,
  // status.queuePosition, a study's status.admittedTrialCount, and an event
  // when the reason changes) and, when it admits, creates the pods in the
  // same pass. A verdict never takes an admission back.
  std::optional<AdmissionVerdict> admission;
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

// The condition of a job whose replicas ask for more GPUs than the machine
// they run on has (ReconcileOptions::machine_gpus).
inline constexpr char kNoGpuCondition[] = "NoGpu";

// How long a new job under gang admission waits for its first verdict
// before it writes Admitted=False, reason Queued itself (from its
// creationTimestamp).
inline constexpr absl::Duration kFirstVerdictWait = absl::Seconds(2);

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
  // The GPUs of the one machine every replica runs on (local backend), when
  // known. A job whose replicas ask for more gets the kNoGpuCondition (True,
  // with one Warning event): its replicas run, on the CPU. nullopt
  // (Kubernetes): the scheduler places GPU replicas on GPU nodes, and one
  // that no node fits waits, Unschedulable (ReplicasWaiting).
  std::optional<int> machine_gpus;
  // The runtimes runtimeVersion and pythonVersion pick from (the cluster's
  // kubetrain-runtimes ConfigMap, the local backend's runtimes.yaml). Null:
  // kubetrain's own, built in.
  std::shared_ptr<const api::PythonRuntimeCatalog> runtimes;
  // Gang admission (gang_admission.h): a job creates nothing while it is
  // QUEUED without the Admitted condition True, which the backend's verdict
  // (Observed::admission) sets once all its replicas can be placed at once.
  // A new job waits up to kFirstVerdictWait for its first verdict without a
  // status write of its own (one write fewer per job, as admissions come
  // within a pass); after that, until a verdict comes, it shows
  // Admitted=False, reason Queued. Jobs another admits (AdmittedElsewhere),
  // and jobs past QUEUED (started before admission was turned on), are not
  // held.
  bool gang_admission = false;
};

// options.runtimes, or the built-in catalog.
const api::PythonRuntimeCatalog& Runtimes(const ReconcileOptions& options);

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
