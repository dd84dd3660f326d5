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
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::kube {
class ClusterClient;
}

namespace kubetrain::cli {

inline constexpr char kJobIdAnnotation[] = "kubetrain.io/job-id";

class ClusterJobs {
 public:
  // Credentials from $KUBECONFIG (its first path) or ~/.kube/config, else the
  // pod's service account. `namespace_name` empty: the context's namespace.
  // Unimplemented when this build has no Kubernetes client.
  static absl::StatusOr<std::unique_ptr<ClusterJobs>> Connect(const std::string& namespace_name);
  ClusterJobs(std::unique_ptr<kube::ClusterClient> client, std::string namespace_name);
  ~ClusterJobs();

  // AlreadyExists names the job.
  absl::Status Create(const v1::TrainingJob& job);
  // NotFound names the job and the namespace.
  absl::StatusOr<v1::TrainingJob> Get(const std::string& job_id);
  absl::StatusOr<std::vector<v1::TrainingJob>> List();
  // Sets spec.cancel (a merge patch); the operator does the rest.
  absl::Status Cancel(const std::string& job_id);

  const std::string& namespace_name() const { return namespace_; }

 private:
  std::unique_ptr<kube::ClusterClient> client_;
  std::string namespace_;
};

}  // namespace kubetrain::cli
