#include "cli/jobs_cluster.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/codec.h"
#include "api/validation.h"
#include "google/protobuf/util/json_util.h"

#include "operator/kube/cluster_client.h"
#ifdef KUBETRAIN_CLI_CLUSTER
#include "operator/kube/kubeconfig.h"
#include "operator/kube/rest_client.h"
#endif

namespace kubetrain::cli {

#ifdef KUBETRAIN_CLI_CLUSTER

namespace {

// The job as the user knows it: the annotation's id when present.
absl::StatusOr<v1::TrainingJob> FromObject(const nlohmann::json& object) {
  v1::TrainingJob job;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // managedFields, finalizers' friends...
  auto status = google::protobuf::util::JsonStringToMessage(object.dump(), &job, options);
  if (!status.ok()) {
    return absl::DataLossError(absl::StrCat("TrainingJob ", object.value("/metadata/name"_json_pointer, std::string()),
                                            " from the API server is unreadable: ", status.ToString()));
  }
  auto it = job.metadata().annotations().find(kJobIdAnnotation);
  if (it != job.metadata().annotations().end() && !it->second.empty()) job.mutable_metadata()->set_name(it->second);
  return job;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterJobs>> ClusterJobs::Connect(const std::string& namespace_name) {
  absl::StatusOr<kube::ClusterConfig> config;
  std::string kubeconfig;
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    const std::string paths = env;
    kubeconfig = paths.substr(0, paths.find(':'));
  } else if (const char* home = std::getenv("HOME"); home != nullptr) {
    kubeconfig = absl::StrCat(home, "/.kube/config");
  }
  config = kube::LoadKubeconfig(kubeconfig);
  if (!config.ok()) {
    absl::StatusOr<kube::ClusterConfig> in_cluster = kube::LoadInCluster();
    if (!in_cluster.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no Kubernetes cluster to talk to: ", config.status().message(),
          "; set KUBECONFIG, or use the local backend with --local (or KUBETRAIN_BACKEND=local)"));
    }
    config = std::move(in_cluster);
  }
  kube::RestClientOptions options;
  options.user_agent = "kubetrain-cli";
  absl::StatusOr<std::unique_ptr<kube::RestClusterClient>> client = kube::RestClusterClient::Create(*config, options);
  if (!client.ok()) return client.status();
  return std::make_unique<ClusterJobs>(*std::move(client),
                                       namespace_name.empty() ? config->namespace_name : namespace_name);
}

ClusterJobs::ClusterJobs(std::unique_ptr<kube::ClusterClient> client, std::string namespace_name)
    : client_(std::move(client)), namespace_(std::move(namespace_name)) {}

ClusterJobs::~ClusterJobs() = default;

absl::Status ClusterJobs::Create(const v1::TrainingJob& job) {
  v1::TrainingJob object = job;
  object.clear_status();  // the operator writes status, through its subresource
  const std::string id = job.metadata().name();
  object.mutable_metadata()->set_name(api::KubernetesName(id));
  object.mutable_metadata()->set_namespace_(namespace_);
  object.mutable_metadata()->clear_uid();
  object.mutable_metadata()->clear_creation_timestamp();
  (*object.mutable_metadata()->mutable_annotations())[kJobIdAnnotation] = id;
  nlohmann::json body = api::EncodeKubernetesJson(object);  // int64 as numbers, as the CRD says
  absl::StatusOr<nlohmann::json> created = client_->Create(kube::kTrainingJobs, namespace_, body);
  if (created.status().code() == absl::StatusCode::kAlreadyExists) {
    return absl::AlreadyExistsError(absl::StrCat("job [", id, "] already exists in namespace ", namespace_,
                                                 ": pick another name"));
  }
  return created.status();
}

absl::StatusOr<v1::TrainingJob> ClusterJobs::Get(const std::string& job_id) {
  absl::StatusOr<nlohmann::json> object = client_->Get(kube::kTrainingJobs, namespace_, api::KubernetesName(job_id));
  if (object.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat("job [", job_id, "] not found in namespace ", namespace_));
  }
  if (!object.ok()) return object.status();
  return FromObject(*object);
}

absl::StatusOr<std::vector<v1::TrainingJob>> ClusterJobs::List() {
  absl::StatusOr<nlohmann::json> list = client_->List(kube::kTrainingJobs, namespace_, {});
  if (!list.ok()) return list.status();
  std::vector<v1::TrainingJob> jobs;
  for (const nlohmann::json& item : list->value("items", nlohmann::json::array())) {
    absl::StatusOr<v1::TrainingJob> job = FromObject(item);
    if (!job.ok()) return job.status();
    jobs.push_back(*std::move(job));
  }
  // Oldest first, as the local store lists them.
  std::stable_sort(jobs.begin(), jobs.end(), [](const v1::TrainingJob& a, const v1::TrainingJob& b) {
    return a.metadata().creation_timestamp() < b.metadata().creation_timestamp();
  });
  return jobs;
}

absl::Status ClusterJobs::Cancel(const std::string& job_id) {
  absl::StatusOr<nlohmann::json> patched = client_->MergePatch(
      kube::kTrainingJobs, namespace_, api::KubernetesName(job_id), {{"spec", {{"cancel", true}}}}, false);
  if (patched.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat("job [", job_id, "] not found in namespace ", namespace_));
  }
  return patched.status();
}

#else  // no Kubernetes client in this build

absl::StatusOr<std::unique_ptr<ClusterJobs>> ClusterJobs::Connect(const std::string&) {
  return absl::UnimplementedError(
      "this kubetrain was built without the Kubernetes client (operator/kube); use the local backend "
      "with --local (or KUBETRAIN_BACKEND=local)");
}
ClusterJobs::ClusterJobs(std::unique_ptr<kube::ClusterClient>, std::string namespace_name)
    : namespace_(std::move(namespace_name)) {}
ClusterJobs::~ClusterJobs() = default;
absl::Status ClusterJobs::Create(const v1::TrainingJob&) { return absl::UnimplementedError("no cluster client"); }
absl::StatusOr<v1::TrainingJob> ClusterJobs::Get(const std::string&) {
  return absl::UnimplementedError("no cluster client");
}
absl::StatusOr<std::vector<v1::TrainingJob>> ClusterJobs::List() {
  return absl::UnimplementedError("no cluster client");
}
absl::Status ClusterJobs::Cancel(const std::string&) { return absl::UnimplementedError("no cluster client"); }

#endif

}  // namespace kubetrain::cli
