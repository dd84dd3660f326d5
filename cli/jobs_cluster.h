#pragma once

// The Kubernetes side of `kubetrain jobs …`: TrainingJob resources created,
// read, listed and cancelled through operator/kube's ClusterClient, with the
// user's kubeconfig. The operator in the cluster does the rest; `describe`
// reads the same status the local backend shows.
//
// A Cloud ML job id such as "fmnist_hptuning" is not a valid object name:
// the resource is named api::KubernetesName(id) ("fmnist-hptuning") and
// keeps the id in the annotation kubetrain.io/job-id, so `describe` and
// `list` show what the user typed.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/cluster_logs.h"
#include "cli/jobs_format.h"
#include "cli/package_build.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::kube {
class ClusterClient;
}

namespace kubetrain::cli {

inline constexpr char kJobIdAnnotation[] = "kubetrain.io/job-id";

// Which cluster and namespace to talk to, as kubectl's flags say.
struct ClusterTarget {
  std::string kubeconfig;      // --kubeconfig: this file only; "": $KUBECONFIG, else ~/.kube/config
  std::string context;         // --context; "": the kubeconfig's current-context
  std::string namespace_name;  // --namespace; "": the context's namespace
};

class ClusterJobs {
 public:
  // Credentials as kubectl finds them: `target.kubeconfig`, else the files of
  // $KUBECONFIG merged (kube::LoadKubeconfigFiles), else ~/.kube/config, with
  // `target.context` or the current context; when no kubeconfig file exists
  // (and neither flag was given), the pod's service account. A kubeconfig
  // that exists but is broken, or names no such context, is an error, not a
  // reason to try elsewhere.
  static absl::StatusOr<std::unique_ptr<ClusterJobs>> Connect(const ClusterTarget& target);
  static absl::StatusOr<std::unique_ptr<ClusterJobs>> Connect(const std::string& namespace_name) {
    ClusterTarget target;
    target.namespace_name = namespace_name;
    return Connect(target);
  }
  ClusterJobs(std::unique_ptr<kube::ClusterClient> client, std::string namespace_name);
  ~ClusterJobs();

  // AlreadyExists names the job.
  absl::Status Create(const v1::TrainingJob& job);
  // `jobs submit training --package-path` (package_build.h): stores the
  // built package as key package.file_name of the ConfigMap
  // PackageConfigMapName(job id), labelled kubetrain.io/job-name; creates the
  // job, whose packageUris must already name it (PackageUri); then makes the
  // job the ConfigMap's owner (controller: false), so that deleting the job
  // deletes it. The ConfigMap exists before any pod can mount it. When a later
  // step fails, what this call made is deleted again. The package must fit a
  // ConfigMap (api::kMaxConfigMapBytes; the caller says what to do instead).
  absl::Status CreateWithPackage(const v1::TrainingJob& job, const BuiltPackage& package);
  // "<object name>-package".
  static std::string PackageConfigMapName(const std::string& job_id);
  // "configmap://<PackageConfigMapName>/<file name>" (api/packages.h).
  static std::string PackageUri(const std::string& job_id, const std::string& file_name);
  // NotFound names the job and the namespace.
  absl::StatusOr<v1::TrainingJob> Get(const std::string& job_id);
  // The trials `job` archived out of its status (ConfigMaps of the job:
  // operator/kube/trial_archive.h).
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> ArchivedTrials(const v1::TrainingJob& job);
  absl::StatusOr<std::vector<v1::TrainingJob>> List();
  // Sets spec.cancel (a merge patch); the operator does the rest.
  absl::Status Cancel(const std::string& job_id);
  // The recent Events of `job` (as Get returned it) and of its current pods,
  // oldest first: what `kubectl describe` shows for the job, plus why its
  // replicas are not running (FailedScheduling, image pull errors...), which
  // the pods' own events say. The pods' events are left out, with the job's
  // still returned, when the pods cannot be listed.
  absl::StatusOr<std::vector<JobEvent>> Events(const v1::TrainingJob& job);
  // Prints the job's replicas' logs and its events until it ends
  // (cluster_logs.h); returns the final job.
  absl::StatusOr<v1::TrainingJob> FollowLogs(const std::string& job_id,
                                             const ClusterLogOptions& options, std::ostream& out);

  // The job's replica pods, named as its logs are (cluster_logs.h
  // ListReplicaPods).
  absl::StatusOr<std::vector<ReplicaPod>> ReplicaPods(const std::string& job_id);
  // A replica pod's training container log as it stands (cluster_logs.h
  // ReadReplicaLog).
  absl::StatusOr<std::string> ReplicaLog(const std::string& pod);

  const std::string& namespace_name() const { return namespace_; }

 private:
  std::unique_ptr<kube::ClusterClient> client_;
  std::string namespace_;
};

}  // namespace kubetrain::cli
