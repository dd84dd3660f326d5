#pragma once

// The local controller: the operator's reconcile loop with processes on
// 127.0.0.1 instead of pods, and the SQLite job store instead of the
// Kubernetes API. Same core::Reconcile, so restart policies, backoff,
// deadlines, cancel, cleanup and tuning behave as on a cluster.
//
// One sync of a job:
//   1. observe: every replica record in the store, probed through the
//      launcher (running / exited with code / gone), becomes a
//      core::ObservedReplica;
//   2. metrics: each trial replica's private CLOUD_ML_HP_METRIC_FILE is
//      followed (HypertuneFileFollower); new reports go to the store, which
//      dedupes them, so a restarted controller re-reading a file counts
//      nothing twice; Observed::trial_metrics comes from the store;
//   3. core::Reconcile with addresses 127.0.0.1:<port>, a free port picked
//      once per replica and kept in the store;
//   4. carry out the result in the core's order (core::CarryOut; JobSink is
//      this backend's side): archived trials, then status, then deletes,
//      then creates (skipped when the record exists: AlreadyExists), then
//      events.
// A delete is a pod deletion with a grace period, spread over syncs so that
// no sync waits for a replica to stop: SIGTERM, then the record stays
// (observed as terminating: deletion_requested) until the process group is
// gone, when it is dropped; a sync past kKillGracePeriod sends SIGKILL, as
// does a forced delete. A replica being deleted keeps its name, so its
// replacement starts once it is gone.
// Everything the controller knows is in the store or on disk, so a controller
// killed at any point and started again resumes every job: live replicas are
// re-adopted (pid + start time), exits that happened meanwhile are read from
// their exit files, and trials are on record before their replicas start, so
// none is lost or run twice.
//
// Files under `home`:
//   jobs/<job>/logs/[trial-<id>/]<role>-replica-<index>.log
//   jobs/<job>/run/<replica>.{exit,state}
//   jobs/<job>/metrics/[trial-<id>/]<role>-replica-<index>.metrics
//
// Not thread-safe: one controller per $KUBETRAIN_HOME (see ControllerLock).

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "api/python_runtimes.h"
#include "common/hypertune/hypertune.h"
#include "operator/core/reconciler.h"
#include "operator/local/container_replica.h"
#include "operator/local/job_store.h"
#include "operator/local/process_launcher.h"

namespace kubetrain::local {

struct ControllerOptions {
  std::string home;  // $KUBETRAIN_HOME
  // What replicas run when the job names no containerCommand/pythonModule
  // (the DesiredReplica command "kubetrain-runtime train"), and what
  // installs a pythonModule's package files and URLs (`exec --package`).
  std::string runtime_binary = "kubetrain-runtime";
  // For pythonModule: runs the module when its packages are folders (on
  // PYTHONPATH), else makes the environment exec installs them into.
  std::string python = "python3";
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  // A free TCP port on 127.0.0.1.
  std::function<absl::StatusOr<int>()> allocate_port;
  core::TunerFactory tuner_factory;
  core::StopRule stop_rule;
  // This machine's GPUs (MachineGpuCount()), for the NoGpu condition of
  // jobs that ask for more (core::ReconcileOptions::machine_gpus); nullopt:
  // not told.
  std::optional<int> machine_gpus;
  // $KUBETRAIN_HOME/runtimes.yaml: the runtimes runtimeVersion and
  // pythonVersion may name, and the Python each runs the module with. Null:
  // kubetrain's own only. Not owned.
  api::RuntimeCatalogFile* runtime_catalog = nullptr;
  // Process slots: gang admission on this machine (docs/admission.md). Each
  // replica process takes a slot; a job (a trial of a study) starts only
  // when all its processes have one, in submission order (the store's), and waits QUEUED
  // with its place in the queue until then. A job with more processes than
  // there are slots takes them all: it runs alone. 0: no admission, every
  // job starts at once.
  int slots = 0;
  // podman (FindPodman()), which runs the replicas that run their image's
  // entrypoint (container_replica.h). "": none here; such a replica fails to
  // start, saying so.
  std::string podman;
};

// The NVIDIA GPUs this machine shows its processes: one per entry of
// /proc/driver/nvidia/gpus (0 without the driver), fewer when
// CUDA_VISIBLE_DEVICES lists fewer (an empty list hides them all).
int MachineGpuCount();

class Controller {
 public:
  // `store` and `launcher` must outlive the controller.
  Controller(JobStore* store, ProcessLauncher* launcher, ControllerOptions options);

  // Syncs every job that is unfinished or still has replicas. Returns how
  // many such jobs there were (0: idle). A job whose sync fails is reported
  // in the error but does not stop the others.
  absl::StatusOr<int> SyncAll();

  // One sync of one job (see above). Returns false when the job is finished
  // and none of its replicas runs (nothing more to do). With slots, the job
  // gets the admission verdict of the last SyncAll.
  absl::StatusOr<bool> SyncJob(const std::string& name);

 private:
  // Carries out a reconcile result here (core::ResultSink).
  class JobSink;

  absl::Status CreateReplica(const v1::TrainingJob& job, const core::DesiredReplica& replica);
  // How a replica that runs its image's entrypoint runs here: `request`'s
  // environment, reporting to `metric_path`.
  ContainerRun ContainerReplicaRun(const v1::TrainingJob& job, const core::DesiredReplica& replica,
                                   const LaunchRequest& request,
                                   const std::string& metric_path) const;
  // The admission verdicts of every job on the process slots (by job name).
  absl::StatusOr<std::map<std::string, core::AdmissionVerdict>> PlanSlots(
      const std::vector<v1::TrainingJob>& jobs);
  std::string TaskFileStem(const core::ReplicaKey& key) const;
  // Drops the records of the job's terminating replicas whose process group
  // is gone (reading their metric files once more first: a trainer that
  // checkpoints on SIGTERM may report on its way out) and SIGKILLs those
  // past their grace period. Returns whether any
  // is still terminating.
  absl::StatusOr<bool> AdvanceTerminations(const std::string& job);
  // Stores the reports of a trial replica's metric file not read yet (its
  // follower remembers which were).
  absl::Status ReadMetricFile(const std::string& job, const ReplicaRecord& record);

  // A replica asked to stop whose process group may still run.
  struct Termination {
    std::string job;
    ProcessId id;
    absl::Time kill_at;  // SIGKILL from then on
    bool killed = false;
    // The replica's container, removed once its group is gone ("" for a
    // process).
    std::string container;
    // Its record, whose metric file is read once more when its group is gone.
    ReplicaRecord record;
  };

  JobStore* store_;
  ProcessLauncher* launcher_;
  ControllerOptions options_;
  // Per metric file.
  std::map<std::string, hypertune::HypertuneFileFollower> followers_;
  // By replica name. In memory only: a restarted controller sees such a
  // replica as running (or ended) again, and the reconciler deletes it again.
  std::map<std::string, Termination> terminations_;
  // By job name: the last SyncAll's (with slots).
  std::map<std::string, core::AdmissionVerdict> slot_verdicts_;
};

// The log task name of a replica: "master-replica-0", "worker-replica-1".
std::string LogTaskName(const core::ReplicaKey& key);

// Where a job's files live under `home`.
std::string JobDir(const std::string& home, const std::string& job_name);
// The log of one task ("" trial outside studies).
std::string LogPath(const std::string& home, const std::string& job_name,
                    const std::string& trial_id, const std::string& task_name);

// True while some replica process of the job runs (from the records, the
// exit files and the process table; no controller needed).
absl::StatusOr<bool> AnyReplicaRunning(JobStore& store, ProcessLauncher& launcher,
                                       const std::string& job);

// A free port on 127.0.0.1 (bind to port 0, read it, close).
absl::StatusOr<int> PickFreePort();

// The one controller per $KUBETRAIN_HOME: an exclusive flock on
// home/controller.lock, held while the object lives; the file holds the pid.
class ControllerLock {
 public:
  // nullptr (no error) when another process holds the lock.
  static absl::StatusOr<std::unique_ptr<ControllerLock>> TryAcquire(const std::string& home);
  // True when some process holds the lock now.
  static bool Held(const std::string& home);
  ~ControllerLock();

 private:
  explicit ControllerLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kubetrain::local
