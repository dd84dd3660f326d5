#include "cli/jobs_cluster.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "api/packages.h"
#include "api/validation.h"
#include "google/protobuf/util/json_util.h"
#include "operator/core/naming.h"
#include "operator/kube/cluster_client.h"
#include "operator/kube/kubeconfig.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/trial_archive_format.h"

namespace kubetrain::cli {

namespace {

// The job as the user knows it: the annotation's id when present.
absl::StatusOr<v1::TrainingJob> FromObject(const nlohmann::json& object) {
  v1::TrainingJob job;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // managedFields, finalizers' friends...
  auto status = google::protobuf::util::JsonStringToMessage(object.dump(), &job, options);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat("TrainingJob ", object.value("/metadata/name"_json_pointer, std::string()),
                     " from the API server is unreadable: ", status.ToString()));
  }
  auto it = job.metadata().annotations().find(kJobIdAnnotation);
  if (it != job.metadata().annotations().end() && !it->second.empty())
    job.mutable_metadata()->set_name(it->second);
  return job;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterJobs>> ClusterJobs::Connect(const ClusterTarget& target) {
  std::vector<std::string> paths;
  if (!target.kubeconfig.empty()) {
    paths.push_back(target.kubeconfig);
  } else {
    const char* env = std::getenv("KUBECONFIG");
    const char* home = std::getenv("HOME");
    paths = kube::KubeconfigPaths(env == nullptr ? "" : env, home == nullptr ? "" : home);
  }
  absl::StatusOr<kube::ClusterConfig> config =
      paths.empty() ? absl::NotFoundError("no kubeconfig: neither KUBECONFIG nor HOME is set")
                    : kube::LoadKubeconfigFiles(paths, target.context);
  const bool flags = !target.kubeconfig.empty() || !target.context.empty();
  if (!config.ok() && config.status().code() == absl::StatusCode::kNotFound && !flags) {
    // No kubeconfig at all: inside a pod, its service account.
    absl::StatusOr<kube::ClusterConfig> in_cluster = kube::LoadInCluster();
    if (!in_cluster.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no Kubernetes cluster to talk to: ", config.status().message(),
          "; set KUBECONFIG, or use the local backend with --local (or KUBETRAIN_BACKEND=local)"));
    }
    config = std::move(in_cluster);
  }
  if (!config.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot use the kubeconfig: ", config.status().message()));
  }
  kube::RestClientOptions options;
  options.user_agent = "kubetrain-cli";
  absl::StatusOr<std::unique_ptr<kube::RestClusterClient>> client =
      kube::RestClusterClient::Create(*config, options);
  if (!client.ok()) return client.status();
  return std::make_unique<ClusterJobs>(*std::move(client), target.namespace_name.empty()
                                                               ? config->namespace_name
                                                               : target.namespace_name);
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
    return absl::AlreadyExistsError(absl::StrCat("job [", id, "] already exists in namespace ",
                                                 namespace_, ": pick another name"));
  }
  return created.status();
}

absl::Status ClusterJobs::CreateWithPackage(const v1::TrainingJob& job,
                                            const BuiltPackage& package) {
  const std::string id = job.metadata().name();
  const std::string object_name = api::KubernetesName(id);
  const std::string config_map = PackageConfigMapName(id);
  const nlohmann::json body = {
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata",
       {{"name", config_map},
        {"namespace", namespace_},
        {"labels", {{"kubetrain.io/job-name", object_name}}},
        {"annotations", {{kJobIdAnnotation, id}}}}},
      {"binaryData", {{package.file_name, absl::Base64Escape(package.bytes)}}}};
  absl::StatusOr<nlohmann::json> stored = client_->Create(kube::kConfigMaps, namespace_, body);
  if (stored.status().code() == absl::StatusCode::kAlreadyExists) {
    return absl::AlreadyExistsError(absl::StrCat(
        "ConfigMap ", config_map, " already exists in namespace ", namespace_, ": job [", id,
        "] exists, or an interrupted submission left its package behind (then "
        "delete it: kubectl delete configmap ",
        config_map, " -n ", namespace_, ")"));
  }
  if (!stored.ok()) {
    return absl::Status(stored.status().code(),
                        absl::StrCat("storing the package in ConfigMap ", config_map, ": ",
                                     stored.status().message()));
  }
  auto forget_package = [&] { (void)client_->Delete(kube::kConfigMaps, namespace_, config_map); };
  if (absl::Status created = Create(job); !created.ok()) {
    forget_package();
    return created;
  }
  absl::StatusOr<nlohmann::json> created_job =
      client_->Get(kube::kTrainingJobs, namespace_, object_name);
  absl::Status owned = created_job.status();
  if (created_job.ok()) {
    const nlohmann::json owner = {
        {"apiVersion", api::kApiVersion},
        {"kind", api::kKind},
        {"name", object_name},
        {"uid", created_job->value("/metadata/uid"_json_pointer, std::string())},
        {"controller", false},
        {"blockOwnerDeletion", false}};
    owned = client_
                ->MergePatch(kube::kConfigMaps, namespace_, config_map,
                             {{"metadata", {{"ownerReferences", nlohmann::json::array({owner})}}}},
                             false)
                .status();
  }
  if (!owned.ok()) {
    (void)client_->Delete(kube::kTrainingJobs, namespace_, object_name);
    forget_package();
    return absl::Status(owned.code(),
                        absl::StrCat("making job [", id, "] the owner of ConfigMap ", config_map,
                                     " (the job was deleted again): ", owned.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::TrainingJob> ClusterJobs::Get(const std::string& job_id) {
  absl::StatusOr<nlohmann::json> object =
      client_->Get(kube::kTrainingJobs, namespace_, api::KubernetesName(job_id));
  if (object.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(
        absl::StrCat("job [", job_id, "] not found in namespace ", namespace_));
  }
  if (!object.ok()) return object.status();
  return FromObject(*object);
}

absl::StatusOr<std::vector<v1::HyperparameterOutput>> ClusterJobs::ArchivedTrials(
    const v1::TrainingJob& job) {
  kube::ListOptions options;
  options.label_selector = kube::ArchiveSelector(job);
  absl::StatusOr<nlohmann::json> list = client_->List(kube::kConfigMaps, namespace_, options);
  if (!list.ok()) return list.status();
  std::vector<nlohmann::json> items;
  for (const nlohmann::json& item : list->value("items", nlohmann::json::array())) {
    items.push_back(item);
  }
  return kube::ArchivedTrialsOf(job, items);
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
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const v1::TrainingJob& a, const v1::TrainingJob& b) {
                     return a.metadata().creation_timestamp() < b.metadata().creation_timestamp();
                   });
  return jobs;
}

absl::StatusOr<v1::TrainingJob> ClusterJobs::FollowLogs(const std::string& job_id,
                                                        const ClusterLogOptions& options,
                                                        std::ostream& out) {
  return FollowClusterLogs(
      *client_, namespace_, api::KubernetesName(job_id), [&] { return Get(job_id); }, options, out);
}

absl::StatusOr<std::vector<ReplicaPod>> ClusterJobs::ReplicaPods(const std::string& job_id) {
  return ListReplicaPods(*client_, namespace_, api::KubernetesName(job_id));
}

absl::StatusOr<std::string> ClusterJobs::ReplicaLog(const std::string& pod) {
  return ReadReplicaLog(*client_, namespace_, pod);
}

absl::Status ClusterJobs::Cancel(const std::string& job_id) {
  absl::StatusOr<nlohmann::json> patched =
      client_->MergePatch(kube::kTrainingJobs, namespace_, api::KubernetesName(job_id),
                          {{"spec", {{"cancel", true}}}}, false);
  if (patched.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(
        absl::StrCat("job [", job_id, "] not found in namespace ", namespace_));
  }
  return patched.status();
}

namespace {

// A string field of an object from the API server; "" when absent or not a
// string (what the server sends is input: never trusted to be well-typed).
std::string StringField(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

const nlohmann::json& ObjectField(const nlohmann::json& object, const char* key) {
  static const nlohmann::json empty = nlohmann::json::object();
  if (!object.is_object()) return empty;
  auto it = object.find(key);
  return it != object.end() && it->is_object() ? *it : empty;
}

absl::Time EventTime(const nlohmann::json& object, const char* field) {
  absl::Time t;
  std::string error;
  const std::string text = StringField(object, field);
  if (!text.empty() && absl::ParseTime(absl::RFC3339_full, text, &t, &error)) return t;
  return absl::InfinitePast();
}

JobEvent ToJobEvent(const nlohmann::json& e) {
  JobEvent event;
  event.type = StringField(e, "type");
  event.reason = StringField(e, "reason");
  const nlohmann::json& involved = ObjectField(e, "involvedObject");
  event.object =
      absl::AsciiStrToLower(StringField(involved, "kind")) + "/" + StringField(involved, "name");
  event.source = StringField(ObjectField(e, "source"), "component");
  if (event.source.empty()) event.source = StringField(e, "reportingComponent");
  event.message = StringField(e, "message");
  if (auto count = e.find("count"); count != e.end() && count->is_number_integer()) {
    event.count = std::max(1, count->get<int>());
  }
  // Events written through events.k8s.io carry eventTime rather than the
  // first/last timestamps.
  event.first_seen = EventTime(e, "firstTimestamp");
  event.last_seen = EventTime(e, "lastTimestamp");
  if (event.last_seen == absl::InfinitePast()) event.last_seen = EventTime(e, "eventTime");
  if (event.last_seen == absl::InfinitePast()) {
    event.last_seen = EventTime(ObjectField(e, "metadata"), "creationTimestamp");
  }
  if (event.first_seen == absl::InfinitePast()) event.first_seen = event.last_seen;
  return event;
}

}  // namespace

absl::StatusOr<std::vector<JobEvent>> ClusterJobs::Events(const v1::TrainingJob& job) {
  const std::string name = api::KubernetesName(job.metadata().name());
  std::vector<JobEvent> events;
  kube::ListOptions job_events;
  job_events.field_selector =
      absl::StrCat("involvedObject.kind=TrainingJob,involvedObject.name=", name);
  if (!job.metadata().uid().empty())
    absl::StrAppend(&job_events.field_selector, ",involvedObject.uid=", job.metadata().uid());
  absl::StatusOr<nlohmann::json> list = client_->List(kube::kEvents, namespace_, job_events);
  if (!list.ok()) return list.status();
  auto items = [](const nlohmann::json& list) {
    auto it = list.find("items");
    return it != list.end() && it->is_array() ? *it : nlohmann::json::array();
  };
  for (const nlohmann::json& e : items(*list)) events.push_back(ToJobEvent(e));

  // The job's pods (owned by this incarnation of the job), then their events.
  kube::ListOptions job_pods;
  job_pods.label_selector = core::JobSelector(name);
  absl::StatusOr<nlohmann::json> pods = client_->List(kube::kPods, namespace_, job_pods);
  std::set<std::string> pod_names;
  if (pods.ok()) {
    for (const nlohmann::json& pod : items(*pods)) {
      const nlohmann::json& metadata = ObjectField(pod, "metadata");
      bool ours = job.metadata().uid().empty();
      if (auto owners = metadata.find("ownerReferences");
          owners != metadata.end() && owners->is_array()) {
        for (const nlohmann::json& owner : *owners)
          ours = ours || StringField(owner, "uid") == job.metadata().uid();
      }
      if (ours) pod_names.insert(StringField(metadata, "name"));
    }
  }
  if (!pod_names.empty()) {
    kube::ListOptions pod_events;
    pod_events.field_selector = "involvedObject.kind=Pod";
    absl::StatusOr<nlohmann::json> list = client_->List(kube::kEvents, namespace_, pod_events);
    if (list.ok()) {
      for (const nlohmann::json& e : items(*list)) {
        if (pod_names.count(StringField(ObjectField(e, "involvedObject"), "name")) > 0) {
          events.push_back(ToJobEvent(e));
        }
      }
    }
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const JobEvent& a, const JobEvent& b) { return a.last_seen < b.last_seen; });
  return events;
}

std::string ClusterJobs::PackageConfigMapName(const std::string& job_id) {
  return api::KubernetesName(job_id) + "-package";
}

std::string ClusterJobs::PackageUri(const std::string& job_id, const std::string& file_name) {
  return api::ConfigMapPackageUri(PackageConfigMapName(job_id), file_name);
}

}  // namespace kubetrain::cli
