#pragma once

// The local backend's state: one SQLite database (WAL journal, busy timeout)
// under $KUBETRAIN_HOME, shared by every `kubetrain` command and the local
// controller. What the Kubernetes API holds for the operator (TrainingJobs
// with their status, pods, events) lives here for the local backend, plus
// what the operator keeps elsewhere (metric reports, archived trials).
//
// Writers: the CLI creates jobs and requests cancellation (its own column, so
// it never races with the controller's status writes); the controller owns
// status, replica records, ports, metrics, archived trials and events.
//
// Thread safety: a JobStore is used by one thread; several processes may open
// the same file at once (SQLite locking, busy timeout of 10 s).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/naming.h"
#include "operator/core/reconciler.h"

struct sqlite3;

namespace kubetrain::local {

// The schema version this code writes (PRAGMA user_version). A database of a
// newer version is refused rather than misread.
inline constexpr int kSchemaVersion = 2;

// A replica process the controller started: enough to find it again after a
// controller restart (pid + the kernel's start time of that pid, so a reused
// pid is never mistaken for the replica) and to learn how it ended.
inline constexpr int kPidStarting = -1;

struct ReplicaRecord {
  std::string name;  // core::ReplicaName
  std::string job;   // metadata.name
  core::ReplicaKey key;
  // The replica's supervisor, leader of its process group; 0 when the
  // replica could not be started (it counts as exited with code 127);
  // kPidStarting while it is being started (recorded before the launch, so a
  // controller that dies mid-launch finds the pid in `pid_path` afterwards).
  int pid = 0;
  uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22; 0 when unknown
  std::string log_path;
  std::string exit_path;    // written (atomically) by the supervisor when the replica ends
  std::string state_path;   // restart count and last exit code, by the supervisor
  std::string pid_path;     // the supervisor's pid, written by itself
  std::string metric_path;  // the replica's CLOUD_ML_HP_METRIC_FILE ("" outside trials)
  absl::Time created = absl::InfinitePast();
};

struct StoredEvent {
  absl::Time time;
  std::string type;  // "Normal" or "Warning"
  std::string reason;
  std::string message;
};

class JobStore {
 public:
  // Opens (creating when missing) the database at `path`. Errors name the
  // file: unreadable, not a database, or written by a newer kubetrain.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // ---- Jobs, keyed by metadata.name.
  // AlreadyExists (naming both) when a job of that name exists, or one whose
  // name differs only in case and '_' versus '-' (it would have the same
  // Kubernetes object and replica names: docs/schema.md, "Job names").
  // Atomic: of several processes creating such names at once, one succeeds.
  absl::Status CreateJob(const v1::TrainingJob& job);
  // The job with its last written status; spec.cancel is set when a cancel
  // was requested. NotFound names the job.
  absl::StatusOr<v1::TrainingJob> GetJob(const std::string& name);
  // All jobs, oldest first.
  absl::StatusOr<std::vector<v1::TrainingJob>> ListJobs();
  absl::Status UpdateStatus(const std::string& name, const v1::TrainingJobStatus& status);
  // Sets the job's cancel request. NotFound names the job.
  absl::Status RequestCancel(const std::string& name);

  // ---- Replica processes (controller only).
  // Inserts the record, or replaces the job's own record of that name.
  // AlreadyExists (naming both jobs) when the name is another job's replica:
  // that record is kept, so its process is never lost from view.
  absl::Status PutReplica(const ReplicaRecord& record);
  absl::StatusOr<std::vector<ReplicaRecord>> ListReplicas(const std::string& job);
  // Every job's, in one read.
  absl::StatusOr<std::vector<ReplicaRecord>> ListAllReplicas();
  absl::Status DeleteReplica(const std::string& name);  // absent: ok

  // ---- Ports given to replicas, so TF_CONFIG stays the same across
  // reconciles and controller restarts.
  absl::StatusOr<std::map<std::string, int>> Ports(const std::string& job);
  absl::Status PutPort(const std::string& job, const std::string& replica, int port);
  // Whether any replica of any job has `port` on record.
  absl::StatusOr<bool> PortRecorded(int port);

  // ---- Metric reports per trial, in arrival order. `report_key` identifies
  // a report (the hypertune follower's key); adding a known one again is a
  // no-op returning false, so a restarted controller re-reading a metric file
  // stores nothing twice.
  absl::StatusOr<bool> AddMetricReport(const std::string& job, const std::string& trial_id,
                                       const std::string& report_key,
                                       const core::MetricReport& report);
  absl::StatusOr<std::map<std::string, std::vector<core::MetricReport>>> MetricReports(
      const std::string& job);

  // ---- Trials that left status (core::ArchiveTrial). Archiving again
  // replaces the stored copy.
  absl::Status ArchiveTrial(const std::string& job, const v1::HyperparameterOutput& trial);
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> ArchivedTrials(const std::string& job);

  // ---- Events, oldest first.
  absl::Status AddEvent(const std::string& job, const StoredEvent& event);
  absl::StatusOr<std::vector<StoredEvent>> Events(const std::string& job);

  const std::string& path() const { return path_; }

 private:
  JobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Migrate();

  sqlite3* db_;
  std::string path_;
};

}  // namespace kubetrain::local
