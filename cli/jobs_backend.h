#pragma once

// Where the `kubetrain jobs …` verbs (jobs.cc) find and keep jobs: the local
// store with its controller process ($KUBETRAIN_HOME), or TrainingJobs on a
// Kubernetes cluster. The verbs parse the flags, check the input and print
// the results the same way for both; a backend does what differs. Its errors
// name the job, file or namespace concerned; the verb adds the command.

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/jobs_cluster.h"
#include "cli/jobs_format.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::cli {

// `--package-path DIR`, checked with the job's pythonModule
// (local_backend.h PackageSearchPath).
struct UserPackage {
  std::string path;         // DIR as given
  std::string search_path;  // DIR's parent, absolute: what goes on PYTHONPATH
};

// What `Follow` prints while it waits for a job to end.
struct FollowOptions {
  bool logs = false;         // the replicas' log lines and the job's events
  std::string task_filter;   // with logs: "master-replica-0", "service"; "": all
  std::string trial_filter;  // with logs: one trial's lines; "": all
  bool progress = false;     // "[kubetrain] …" lines as the state and trials move
  // How often the job is read; unset: the backend's own.
  std::optional<absl::Duration> poll_interval;
};

class JobsBackend {
 public:
  virtual ~JobsBackend() = default;

  // The first step that can fail: opens the store, or reads the kubeconfig.
  // The other calls need it; AttachPackage does not.
  virtual absl::Status Open() = 0;

  // `--package-path`: sets the job's packageUris to what the replicas will
  // install, the folder to put on PYTHONPATH locally, a ConfigMap on a
  // cluster (the package is built now and stored by Submit).
  // InvalidArgument when the package cannot be used as given.
  virtual absl::Status AttachPackage(const UserPackage& package, v1::TrainingJob& job) = 0;

  // Creates `job` (valid, named) and prints how to find it; `streaming`:
  // its logs follow, so the hint to stream them is left out.
  virtual absl::Status Submit(v1::TrainingJob job, bool streaming, std::ostream& out) = 0;

  // NotFound names the job (and the namespace).
  virtual absl::StatusOr<v1::TrainingJob> Get(const std::string& job_id) = 0;
  virtual absl::StatusOr<std::vector<v1::HyperparameterOutput>> ArchivedTrials(
      const v1::TrainingJob& job) = 0;
  // The job's Kubernetes events, for `describe`; nullopt where there are
  // none (locally the controller's events are the "service" log lines).
  virtual std::optional<absl::StatusOr<std::vector<JobEvent>>> Events(
      const v1::TrainingJob& job) = 0;
  // Oldest first.
  virtual absl::StatusOr<std::vector<v1::TrainingJob>> List() = 0;
  // Asks for a job that has not ended to be cancelled.
  virtual absl::Status Cancel(const std::string& job_id) = 0;
  // Prints what `options` asks for until the job has ended; returns it then.
  virtual absl::StatusOr<v1::TrainingJob> Follow(const std::string& job_id,
                                                 const FollowOptions& options,
                                                 std::ostream& out) = 0;

  // A command is showing a job that has not ended: makes sure something
  // will move it on. The local controller exits when idle and may have died
  // (killed, the machine restarted), so it is started again, as a Cloud ML
  // job moves on without anyone watching it; an error says why it could not
  // be. A cluster's operator runs on its own.
  virtual absl::Status KeepUnfinishedJobsMoving() = 0;
};

// The local backend of $KUBETRAIN_HOME (local_backend.h).
std::unique_ptr<JobsBackend> LocalJobsBackend();
// The cluster and namespace `target` names, with the user's credentials.
std::unique_ptr<JobsBackend> ClusterJobsBackend(const ClusterTarget& target);

}  // namespace kubetrain::cli
