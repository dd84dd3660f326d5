#include "operator/kube/controller.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "api/validation.h"
#include "operator/core/carry_out.h"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"
#include "operator/core/pod_group.h"
#include "operator/core/previous_study.h"
#include "operator/core/tf_config.h"
#include "operator/kube/api_status.h"
#include "operator/kube/slow_start.h"
#include "operator/metrics/metrics_service.h"

namespace kubetrain::kube {

using nlohmann::json;

namespace {

// The job key an owned pod/service belongs to: its controller ownerReference
// of kind TrainingJob.
std::string OwnerJobKey(const json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return "";
  const json& md = object["metadata"];
  if (!md.contains("ownerReferences") || !md["ownerReferences"].is_array()) return "";
  for (const json& ref : md["ownerReferences"]) {
    if (!ref.is_object() || ref.value("kind", "") != "TrainingJob") continue;
    if (!ref.value("controller", false)) continue;
    std::string name = ref.value("name", "");
    if (name.empty()) return "";
    return absl::StrCat(MetaString(object, "namespace"), "/", name);
  }
  return "";
}

std::string OwnerUid(const json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return "";
  const json& md = object["metadata"];
  if (!md.contains("ownerReferences") || !md["ownerReferences"].is_array()) return "";
  for (const json& ref : md["ownerReferences"]) {
    if (ref.is_object() && ref.value("controller", false)) return ref.value("uid", "");
  }
  return "";
}

// How expectations name a replica's object: "pods/NAME", "services/NAME".
std::string ExpectationKey(absl::string_view plural, absl::string_view name) {
  return absl::StrCat(plural, "/", name);
}

// The replica caches keep only what is read back, as controller-runtime's
// cache transforms do: at 10,000 jobs they hold 160,000 objects, and every
// field kept costs each of them (bench/operator_scale reports the RSS).
//  - metadata: name, namespace, the kubetrain.io/ labels, deletionTimestamp,
//    the controller ownerReference's kind, name and uid (whose job it is)
//    and, but for Services (core::ParseService reads no more),
//    creationTimestamp (core::ParsePod);
//  - status, but for Services, without what describes the node and the
//    container's run (IPs, image IDs, container IDs, QoS class);
//  - of the spec (container env with TF_CONFIG, resources: what we rendered,
//    never read back) only the trial's metrics token, as containers[].env,
//    for the Metrics service to check reports against (TrialPodHasToken).
void StripForCache(const Resource& resource, json& object) {
  json kept = json::object();
  const bool service = &resource == &kServices;
  if (auto md = object.find("metadata"); md != object.end() && md->is_object()) {
    json& meta = kept["metadata"];
    for (const char* field : {"name", "namespace", "deletionTimestamp", "creationTimestamp"}) {
      if (service && absl::string_view(field) == "creationTimestamp") continue;
      if (auto value = md->find(field); value != md->end()) meta[field] = std::move(*value);
    }
    if (auto labels = md->find("labels"); labels != md->end() && labels->is_object()) {
      json ours = json::object();
      for (auto it = labels->begin(); it != labels->end(); ++it) {
        if (absl::StartsWith(it.key(), "kubetrain.io/")) ours[it.key()] = std::move(it.value());
      }
      meta["labels"] = std::move(ours);
    }
    if (auto refs = md->find("ownerReferences"); refs != md->end() && refs->is_array()) {
      for (json& ref : *refs) {
        if (!ref.is_object() || !ref.value("controller", false)) continue;
        json owner = {{"controller", true}};
        for (const char* field : {"kind", "name", "uid"}) {
          if (auto value = ref.find(field); value != ref.end()) owner[field] = std::move(*value);
        }
        meta["ownerReferences"] = json::array({std::move(owner)});
        break;
      }
    }
  }
  if (auto status = object.find("status");
      !service && status != object.end() && status->is_object()) {
    for (const char* field : {"podIP", "podIPs", "hostIP", "hostIPs", "qosClass"}) {
      status->erase(field);
    }
    for (const char* list : {"containerStatuses", "initContainerStatuses"}) {
      if (auto statuses = status->find(list); statuses != status->end() && statuses->is_array()) {
        for (json& container : *statuses) {
          if (!container.is_object()) continue;
          // (The image stays: a pull failure names it.)
          for (const char* field : {"imageID", "containerID"}) container.erase(field);
        }
      }
    }
    kept["status"] = std::move(*status);
  }
  // The trial's token: the trainer's, or its metrics sidecar's (an init
  // container), kept as one container's env.
  json token_env = json::array();
  if (auto spec = object.find("spec"); spec != object.end() && spec->is_object()) {
    for (const char* list : {"containers", "initContainers"}) {
      auto containers = spec->find(list);
      if (containers == spec->end() || !containers->is_array()) continue;
      for (const json& container : *containers) {
        if (!container.is_object() || !container.contains("env") || !container["env"].is_array()) {
          continue;
        }
        for (const json& var : container["env"]) {
          if (var.is_object() && var.value("name", json()) == "KUBETRAIN_METRICS_TOKEN") {
            token_env.push_back(var);
          }
        }
      }
    }
  }
  if (!token_env.empty()) kept["spec"]["containers"] = {{{"env", std::move(token_env)}}};
  object = std::move(kept);
}

// A pod as the controller's cache keeps it (StripForCache), plus what
// admission's placement reads (GangAdmission::KeepForPlacement): for the one
// pods informer both share.
void StripPodForControllerAndAdmission(json& pod) {
  json placement = json::object();
  GangAdmission::KeepForPlacement(pod, placement);
  StripForCache(kPods, pod);
  pod.merge_patch({{"status", placement.value("status", json::object())}});
  if (!placement.contains("spec")) return;
  json& spec = pod["spec"];
  if (placement["spec"].contains("nodeName")) spec["nodeName"] = placement["spec"]["nodeName"];
  for (const char* list : {"containers", "initContainers"}) {
    if (!placement["spec"].contains(list)) continue;
    if (!spec.contains(list)) spec[list] = json::array();
    for (json& container : placement["spec"][list]) spec[list].push_back(std::move(container));
  }
}

}  // namespace

absl::StatusOr<v1::TrainingJob> JobFromObject(const json& object) {
  if (!object.is_object()) return absl::InvalidArgumentError("TrainingJob: not an object");
  json trimmed = json::object();
  for (const char* field : {"apiVersion", "kind", "spec", "status"}) {
    if (object.contains(field)) trimmed[field] = object[field];
  }
  if (object.contains("metadata") && object["metadata"].is_object()) {
    json md = json::object();
    for (const char* field :
         {"name", "namespace", "uid", "resourceVersion", "generation", "labels", "annotations",
          "creationTimestamp", "deletionTimestamp", "finalizers"}) {
      if (object["metadata"].contains(field)) md[field] = object["metadata"][field];
    }
    trimmed["metadata"] = std::move(md);
  }
  v1::TrainingJob job;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(trimmed.dump(), &job, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("TrainingJob ", MetaString(object, "namespace"),
                                                   "/", MetaString(object, "name"), ": ",
                                                   status.ToString()));
  }
  return job;
}

// int64 fields as numbers: the CRD's schema says integer.
json StatusToJson(const v1::TrainingJobStatus& status) {
  json encoded = api::EncodeKubernetesJson(status);
  return encoded.is_discarded() ? json::object() : encoded;
}

Controller::Controller(ClusterClient* client, ControllerOptions options, StudyStore* studies)
    : client_(client),
      options_(std::move(options)),
      studies_(studies),
      recorder_(client, "kubetrain-operator"),
      expectations_(options_.expectations_timeout),
      archive_(client, options_.ns) {
  auto enqueue_job = [this](const ObjectPtr& o) {
    std::string key = ObjectKey(*o);
    if (!key.empty()) queue_.Add(key);
  };
  // A job that comes, goes or changes its spec or state may change who is
  // admitted (GangAdmission::OnJobChange); what its pods take or free, their
  // own events tell.
  auto poke_admission = [this] {
    if (admission_ != nullptr) admission_->Poke();
  };
  jobs_ = std::make_unique<Informer>(
      client_, InformerOptions{.resource = kTrainingJobs, .ns = options_.ns},
      InformerHandlers{.on_add =
                           [enqueue_job, poke_admission](const ObjectPtr& o) {
                             enqueue_job(o);
                             poke_admission();
                           },
                       .on_update =
                           [this, enqueue_job](const ObjectPtr& before, const ObjectPtr& o) {
                             enqueue_job(o);
                             if (admission_ != nullptr) admission_->OnJobChange(before, o);
                           },
                       .on_delete =
                           [this, enqueue_job, poke_admission](const ObjectPtr& o) {
                             // Its replicas go with it (the garbage collector); what it
                             // expected to see will not come.
                             expectations_.Forget(MetaString(*o, "uid"));
                             enqueue_job(o);
                             poke_admission();
                           }});
  // Only our own replicas: everything we create carries the job-name label.
  auto replica_informer = [this](const Resource& resource, const std::string& kind) {
    return std::make_unique<Informer>(
        client_,
        InformerOptions{.resource = resource,
                        .ns = options_.ns,
                        .label_selector = core::kLabelJobName,
                        .index_label = core::kLabelJobName,
                        .transform = [&resource](json& o) { StripForCache(resource, o); }},
        InformerHandlers{
            .on_add = [this, kind](const ObjectPtr& o) { OnReplicaEvent(o, true, false, kind); },
            .on_update = [this, kind](
                             const ObjectPtr&,
                             const ObjectPtr& o) { OnReplicaEvent(o, false, false, kind); },
            .on_delete = [this,
                          kind](const ObjectPtr& o) { OnReplicaEvent(o, false, true, kind); }});
  };
  // Gang admission reads every pod in the cluster, so the controller's pods
  // informer is that one (indexed by job, keeping what either reads), and
  // each pod event is read once; an operator of one namespace reconciles
  // only the pods there.
  if (options_.gang_admission) {
    // The pods the controller reconciles: labelled with their job, in the
    // watched namespace. They keep what either reads; every other pod only
    // what placement reads, so a cluster's other pods cost little memory.
    auto ours = [ns = options_.ns](const json& pod) {
      return pod.contains(json::json_pointer("/metadata/labels") / core::kLabelJobName) &&
             (ns.empty() || pod.value("/metadata/namespace"_json_pointer, std::string()) == ns);
    };
    auto transform = [ours](json& pod) {
      if (ours(pod)) {
        StripPodForControllerAndAdmission(pod);
      } else {
        GangAdmission::StripForPlacement(pod);
      }
    };
    pods_ = std::make_unique<Informer>(
        client_,
        InformerOptions{
            .resource = kPods, .index_label = core::kLabelJobName, .transform = transform},
        InformerHandlers{.on_add =
                             [this, ours](const ObjectPtr& o) {
                               if (ours(*o)) OnReplicaEvent(o, true, false, "pods");
                               if (admission_ != nullptr) admission_->OnPodChange(nullptr, o);
                             },
                         .on_update =
                             [this, ours](const ObjectPtr& before, const ObjectPtr& o) {
                               if (ours(*o)) OnReplicaEvent(o, false, false, "pods");
                               if (admission_ != nullptr) admission_->OnPodChange(before, o);
                             },
                         .on_delete =
                             [this, ours](const ObjectPtr& o) {
                               if (ours(*o)) OnReplicaEvent(o, false, true, "pods");
                               if (admission_ != nullptr) admission_->OnPodChange(o, nullptr);
                             }});
  } else {
    pods_ = replica_informer(kPods, "pods");
  }
  if (options_.gang_admission) {
    GangAdmissionOptions admission = options_.admission;
    admission.ns = options_.ns;
    admission.clock = options_.clock;
    admission.metrics = options_.metrics;
    admission_ = std::make_unique<GangAdmission>(
        client_, &jobs_->cache(), &pods_->cache(), admission,
        [this](const std::string& ns) { return ReconcileOptionsFor(ns); },
        [this](const std::string& job_key) { queue_.Add(job_key); });
  }
  services_ = replica_informer(kServices, "services");
  claims_ = replica_informer(kPersistentVolumeClaims, "persistentvolumeclaims");
}

Controller::~Controller() { Stop(); }

void Controller::OnReplicaEvent(const ObjectPtr& object, bool added, bool deleted,
                                const std::string& kind) {
  std::string job_key = OwnerJobKey(*object);
  if (job_key.empty()) return;
  // Expectations are the owner's, by uid: a replica of an earlier job of the
  // same name never meets (or lowers) what the current one expects.
  const std::string owner_uid = OwnerUid(*object);
  const std::string name = ExpectationKey(kind, MetaString(*object, "name"));
  if (added) expectations_.CreationObserved(owner_uid, name);
  if (deleted) expectations_.DeletionObserved(owner_uid, name);
  // The job of that name syncs either way: a replica of an earlier
  // incarnation that goes frees the name for the current one's replica.
  queue_.Add(job_key);
}

core::ReconcileOptions Controller::ReconcileOptionsFor(const std::string& ns) const {
  core::ReconcileOptions reconcile = options_.reconcile;
  reconcile.address = core::KubernetesAddresses(ns);
  if (options_.runtime_catalog != nullptr) reconcile.runtimes = options_.runtime_catalog->Current();
  reconcile.replicas_have_own_filesystems = true;  // pods: outputs need shared storage
  reconcile.gang_admission = options_.gang_admission;
  return reconcile;
}

bool Controller::Start(absl::Duration sync_timeout) {
  jobs_->Start();
  pods_->Start();
  services_->Start();
  claims_->Start();
  archive_.Start();
  absl::Time deadline = absl::Now() + sync_timeout;
  for (Informer* informer : {pods_.get(), services_.get(), claims_.get(), jobs_.get()}) {
    if (!informer->WaitForSync(deadline - absl::Now())) return false;
  }
  if (!archive_.WaitForSync(deadline - absl::Now())) return false;
  if (admission_ != nullptr && !admission_->Start(deadline - absl::Now())) return false;
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this] { Worker(); });
  }
  if (options_.metrics != nullptr) {
    state_metrics_thread_ = std::thread([this] {
      do {
        RecordStateMetrics();
      } while (!stopping_.WaitForNotificationWithTimeout(options_.state_metrics_period));
    });
  }
  return true;
}

void Controller::Stop() {
  if (stopped_.exchange(true)) return;
  stopping_.Notify();
  if (state_metrics_thread_.joinable()) state_metrics_thread_.join();
  queue_.ShutDown();
  for (auto& t : workers_) t.join();
  workers_.clear();
  if (admission_ != nullptr) admission_->Stop();
  jobs_->Stop();
  pods_->Stop();
  services_->Stop();
  claims_->Stop();
  archive_.Stop();
}

void Controller::EnqueueByUid(const std::string& uid) {
  for (const ObjectPtr& job : jobs_->cache().List()) {
    if (MetaString(*job, "uid") == uid) {
      queue_.Add(ObjectKey(*job));
      return;
    }
  }
}

std::optional<std::string> Controller::CachedJobUid(const std::string& job_key) const {
  ObjectPtr job = jobs_ ? jobs_->cache().Get(job_key) : nullptr;
  if (job == nullptr) return std::nullopt;
  return MetaString(*job, "uid");
}

bool Controller::TrialPodHasToken(const std::string& job_key, const std::string& trial_id,
                                  const std::string& token) const {
  ObjectPtr job = jobs_ ? jobs_->cache().Get(job_key) : nullptr;
  if (job == nullptr || pods_ == nullptr) return false;
  // The object's member `key` when it is there with the expected type.
  auto member = [](const json& object, const char* key, json::value_t type) -> const json* {
    if (!object.is_object()) return nullptr;
    auto it = object.find(key);
    return it != object.end() && it->type() == type ? &*it : nullptr;
  };
  for (const ObjectPtr& pod : Owned(pods_->cache(), *job)) {
    const json* metadata = member(*pod, "metadata", json::value_t::object);
    const json* labels = metadata ? member(*metadata, "labels", json::value_t::object) : nullptr;
    const json* trial =
        labels ? member(*labels, core::kLabelTrialId, json::value_t::string) : nullptr;
    if (trial == nullptr || trial->get<std::string>() != trial_id) continue;
    const json* spec = member(*pod, "spec", json::value_t::object);
    const json* containers = spec ? member(*spec, "containers", json::value_t::array) : nullptr;
    if (containers == nullptr) continue;
    for (const json& container : *containers) {
      const json* env = member(container, "env", json::value_t::array);
      if (env == nullptr) continue;
      for (const json& var : *env) {
        const json* name = member(var, "name", json::value_t::string);
        const json* value = member(var, "value", json::value_t::string);
        if (name && value && name->get<std::string>() == "KUBETRAIN_METRICS_TOKEN" &&
            metrics::TokensEqual(value->get<std::string>(), token)) {
          return true;
        }
      }
    }
  }
  return false;
}

bool Controller::TrialReportRecorded(const std::string& job_key, const std::string& trial_id,
                                     int64_t step,
                                     const std::map<std::string, double>& values) const {
  ObjectPtr object = jobs_ ? jobs_->cache().Get(job_key) : nullptr;
  if (object == nullptr) return true;
  absl::StatusOr<v1::TrainingJob> job = JobFromObject(*object);
  if (!job.ok()) return true;
  std::string tag = job->spec().training_input().hyperparameters().hyperparameter_metric_tag();
  if (tag.empty()) tag = api::kDefaultMetricTag;
  auto value = values.find(tag);
  if (value == values.end()) return true;
  for (const v1::HyperparameterOutput& trial : job->status().training_output().trials()) {
    if (trial.trial_id() != trial_id) continue;
    for (const v1::HyperparameterMetric& m : trial.all_metrics()) {
      if (m.training_step() == step && m.objective_value() == value->second) return true;
    }
    return false;
  }
  return true;
}

void Controller::RecordStateMetrics() {
  std::map<std::string, int64_t> jobs, trials;
  for (const ObjectPtr& job : jobs_->cache().List()) {
    const json* status = nullptr;
    if (auto it = job->find("status"); it != job->end() && it->is_object()) status = &*it;
    // A job the controller has not written a status for yet is waiting: QUEUED.
    std::string state = "QUEUED";
    if (status != nullptr && status->contains("state") && (*status)["state"].is_string()) {
      state = (*status)["state"].get<std::string>();
    }
    ++jobs[state];
    if (status == nullptr) continue;
    auto output = status->find("trainingOutput");
    if (output == status->end() || !output->is_object()) continue;
    auto list = output->find("trials");
    if (list == output->end() || !list->is_array()) continue;
    for (const json& trial : *list) {
      if (trial.is_object() && trial.contains("state") && trial["state"].is_string()) {
        ++trials[trial["state"].get<std::string>()];
      }
    }
  }
  options_.metrics->SetJobsByState(jobs);
  options_.metrics->SetTrialsByState(trials);
  options_.metrics->SetWorkQueueDepth(static_cast<int64_t>(queue_.Len()));
}

void Controller::Worker() {
  observability::OperatorMetrics* metrics = options_.metrics;
  absl::Duration waited;
  while (auto key = queue_.Get(&waited)) {
    if (metrics != nullptr) {
      metrics->ObserveWorkQueueWait(absl::ToDoubleSeconds(waited));
      metrics->SetWorkQueueDepth(static_cast<int64_t>(queue_.Len()));
    }
    const absl::Time start = absl::Now();
    bool requeued = false;
    absl::Status status = SyncJob(*key, &requeued);
    if (metrics != nullptr) {
      metrics->ObserveReconcile(!status.ok() ? "error"
                                : requeued   ? "requeue"
                                             : "success",
                                absl::ToDoubleSeconds(absl::Now() - start));
    }
    if (status.ok()) {
      queue_.Forget(*key);
    } else {
      std::cerr << "sync " << *key << ": " << status << "\n";
      queue_.AddRateLimited(*key);
    }
    queue_.Done(*key);
  }
}

std::vector<ObjectPtr> Controller::Owned(const ObjectCache& cache, const json& job) const {
  std::string ns = MetaString(job, "namespace");
  std::string uid = MetaString(job, "uid");
  // The job's object name (core::JobObjectName) from the metadata, not
  // JobFromObject: parsing the whole job into its message once per cache
  // cost a reconcile three parses it did not need.
  const std::string label = core::JobLabelValue(api::KubernetesName(MetaString(job, "name")));
  std::vector<ObjectPtr> out;
  for (ObjectPtr& o : cache.ByIndex(ns, label)) {
    // Replicas of an earlier job of the same name are not ours (the garbage
    // collector removes them).
    if (OwnerUid(*o) == uid) out.push_back(std::move(o));
  }
  return out;
}

std::vector<core::RefusedCreation> Controller::RefusedCreations(const std::string& job_key,
                                                                const std::string& uid) const {
  std::lock_guard<std::mutex> lock(refused_mu_);
  auto it = refused_creations_.find(job_key);
  // Another uid: an earlier job of the same name.
  if (it == refused_creations_.end() || it->second.uid != uid) return {};
  return it->second.creations;
}

void Controller::SetRefusedCreations(const std::string& job_key, JobRefusals refusals) {
  std::lock_guard<std::mutex> lock(refused_mu_);
  if (refusals.creations.empty()) {
    refused_creations_.erase(job_key);
  } else {
    refused_creations_[job_key] = std::move(refusals);
  }
}

absl::Status Controller::WriteStatus(json job_object, const v1::TrainingJobStatus& status) {
  job_object["status"] = StatusToJson(status);
  return client_
      ->Update(kTrainingJobs, MetaString(job_object, "namespace"), job_object,
               /*status=*/true)
      .status();
}

// Carries out a reconcile result on the API server for one job: what is
// created is rendered from `job` (its owner) and the events are about
// `object`, both the job as reconciled. Deletes and creates raise the job's
// expectations first (lowered for calls that fail: nothing will be
// observed); deletes go on past a failure, creates stop at the first one
// (one failed call for a quota error, not one per replica). A per-object
// Event for the claims, one summary Event for the pods a step created or
// deleted.
class Controller::JobSink : public core::ResultSink {
 public:
  JobSink(Controller* controller, const v1::TrainingJob& job, const json& object, absl::Time now)
      : c_(controller),
        job_(job),
        object_(object),
        ns_(MetaString(object, "namespace")),
        uid_(job.metadata().uid()),
        now_(now) {}

  // Whether the archive or the status write failed, which ends the
  // carry-out there (core::CarryOut): nothing else has happened.
  bool ended_early() const { return ended_early_; }
  // Whether the status write failed with 409 Conflict (the job changed since
  // the cache saw it).
  bool status_conflicted() const { return status_conflicted_; }
  // Whether the status write found no job (deleted since the cache saw it).
  bool job_gone() const { return job_gone_; }
  // Whether creates were attempted, and which of them the server refused
  // (admission, an invalid object): what the next reconcile tells the user.
  bool attempted_creates() const { return attempted_creates_; }
  // Read once the carry-out is over (no batch runs).
  std::vector<core::RefusedCreation> refused_creations() {
    absl::MutexLock lock(&refused_lock_);
    return refused_;
  }

  absl::Status Archive(const std::vector<v1::HyperparameterOutput>& trials) override {
    absl::Status archived = c_->archive_.Archive(job_, trials);
    ended_early_ = !archived.ok();
    return archived;
  }

  absl::Status WriteStatus(const v1::TrainingJobStatus& status) override {
    absl::Status written = c_->WriteStatus(object_, status);
    ended_early_ = !written.ok();
    status_conflicted_ = IsConflict(written);
    job_gone_ = written.code() == absl::StatusCode::kNotFound;
    if (written.ok() && c_->options_.metrics != nullptr && Admits(status) &&
        !Admits(job_.status())) {
      // Admitted in this write: how long it waited, from its creation.
      absl::Time created = now_;
      std::string unparsed;
      absl::ParseTime(absl::RFC3339_full, job_.metadata().creation_timestamp(), &created,
                      &unparsed);
      c_->options_.metrics->ObserveAdmission(absl::ToDoubleSeconds(now_ - created));
    }
    return written;
  }

  absl::Status Delete(const std::vector<core::Deletion>& deletions) override {
    std::vector<std::pair<const Resource*, std::string>> targets;
    for (const core::Deletion& deletion : deletions) {
      if (auto* d = std::get_if<core::DeleteReplica>(&deletion)) {
        targets.emplace_back(&kPods, d->name);
      } else if (auto* d = std::get_if<core::DeleteService>(&deletion)) {
        targets.emplace_back(&kServices, d->name);
      } else if (auto* d = std::get_if<core::DeleteClaim>(&deletion)) {
        targets.emplace_back(&kPersistentVolumeClaims, d->name);
      }
    }
    std::vector<std::string> expected;
    for (const auto& [resource, name] : targets) {
      expected.push_back(ExpectationKey(resource->plural, name));
    }
    c_->expectations_.ExpectDeletions(uid_, expected, now_);
    // Concurrently, in slow-start batches (slow_start.h), as creates; what
    // is not sent stays "not attempted".
    std::vector<absl::Status> results(targets.size(), absl::AbortedError("not attempted"));
    const size_t called = SlowStartBatches(targets.size(), [&](size_t i) {
      const auto& [resource, name] = targets[i];
      results[i] = c_->client_->Delete(*resource, ns_, name);
      return results[i].ok() || results[i].code() == absl::StatusCode::kNotFound;
    });
    absl::Status first_error;
    std::vector<std::string> deleted_pods;
    for (size_t i = 0; i < targets.size(); ++i) {
      const auto& [resource, name] = targets[i];
      const absl::Status& status = results[i];
      if (status.ok() && resource == &kPods) deleted_pods.push_back(name);
      if (status.ok() && resource == &kPersistentVolumeClaims) {
        c_->recorder_.Record(object_, EventRecorder::Type::kNormal, "SuccessfulDelete",
                             absl::StrCat("Deleted output claim ", name,
                                          " (spec.outputStorage.newClaim.deleteWhenFinished)"));
      }
      if (status.ok()) continue;
      // Nothing will be observed for a failed or skipped call; NotFound is
      // done already.
      c_->expectations_.DeletionObserved(uid_, ExpectationKey(resource->plural, name));
      if (i < called && status.code() != absl::StatusCode::kNotFound && first_error.ok()) {
        first_error = status;
      }
    }
    if (!deleted_pods.empty()) {
      c_->recorder_.Record(object_, EventRecorder::Type::kNormal, "SuccessfulDelete",
                           absl::StrCat("Deleted pods: ", absl::StrJoin(deleted_pods, ", ")));
    }
    return first_error;
  }

  // Claims one by one first (pods mount them), then the pods and their
  // Services together in slow-start batches (slow_start.h): a Service goes
  // in the same batch as its pod, not before it, since its DNS name has an
  // address only once the pod runs, and the runtime waits for its peers
  // (--connect_timeout_secs) whichever comes first. The first batch with a
  // failure is the last: its error is returned (and named in the job's
  // condition when the server refused a pod or Service); what was not sent
  // is created by the next reconcile.
  absl::Status Create(const std::vector<core::Creation>& creations) override {
    std::vector<std::string> expected;
    std::vector<const core::Creation*> claims, others;
    for (const core::Creation& creation : creations) {
      const auto [resource, name] = Target(creation);
      expected.push_back(ExpectationKey(resource->plural, name));
      (std::holds_alternative<core::CreateClaim>(creation) ? claims : others).push_back(&creation);
    }
    c_->expectations_.ExpectCreations(uid_, expected, now_);
    attempted_creates_ = true;
    absl::Status first_error;
    for (const core::Creation* claim : claims) {
      if (!first_error.ok()) {
        NotAttempted(*claim);
        continue;
      }
      first_error = CreateOne(*claim);
    }
    if (first_error.ok()) first_error = CreatePodGroups(others);
    if (!first_error.ok()) {
      for (const core::Creation* other : others) NotAttempted(*other);
      return first_error;
    }
    std::vector<absl::Status> results(others.size());
    const size_t called = SlowStartBatches(others.size(), [&](size_t i) {
      results[i] = CreateOne(*others[i]);
      return results[i].ok();
    });
    std::vector<std::string> created_pods;
    for (size_t i = 0; i < others.size(); ++i) {
      if (i >= called) {
        NotAttempted(*others[i]);
      } else if (!results[i].ok()) {
        if (first_error.ok()) first_error = results[i];
      } else if (const auto [resource, name] = Target(*others[i]); resource == &kPods) {
        created_pods.push_back(name);
      }
    }
    if (!created_pods.empty()) {
      c_->recorder_.Record(
          object_, EventRecorder::Type::kNormal, "SuccessfulCreate",
          absl::StrCat("Created pods (and their services): ", absl::StrJoin(created_pods, ", ")));
    }
    return first_error;
  }

  absl::Status Emit(const std::vector<core::EmitEvent>& events) override {
    for (const core::EmitEvent& e : events) {
      c_->recorder_.Record(object_,
                           e.type == core::EmitEvent::Type::kWarning ? EventRecorder::Type::kWarning
                                                                     : EventRecorder::Type::kNormal,
                           e.reason, e.message);
    }
    return absl::OkStatus();  // best effort (event_recorder.h)
  }

 private:
  static bool Admits(const v1::TrainingJobStatus& status) {
    const v1::Condition* condition = core::FindAdmittedCondition(status);
    return condition != nullptr && condition->status() == "True";
  }

  // A creation the batches never sent: no object will be observed for it.
  void NotAttempted(const core::Creation& creation) {
    const auto [resource, name] = Target(creation);
    c_->expectations_.CreationObserved(uid_, ExpectationKey(resource->plural, name));
  }

  // The PodGroup of each gang whose pods are about to be created, where they
  // name a gang scheduler (pod_group.h): before the pods, which that
  // scheduler would otherwise place one by one (Volcano) or hold
  // (coscheduling). One refused (its CRD not installed, say) refuses the
  // gang's pods, and the job's condition says why.
  absl::Status CreatePodGroups(const std::vector<const core::Creation*>& creations) {
    std::map<std::string, std::vector<const core::CreateReplica*>> gangs;  // by trial
    for (const core::Creation* creation : creations) {
      if (auto* c = std::get_if<core::CreateReplica>(creation)) {
        gangs[c->replica.key.trial_id].push_back(c);
      }
    }
    for (const auto& [trial, creating] : gangs) {
      if (core::PodGroupApiOf(job_, core::RenderPod(job_, ns_, creating.front()->replica)) ==
          core::PodGroupApi::kNone) {
        continue;
      }
      std::vector<json> pods;
      for (const core::DesiredReplica& replica :
           core::DesiredReplicas(job_, trial, {}, c_->ReconcileOptionsFor(ns_))) {
        pods.push_back(core::RenderPod(job_, ns_, replica));
      }
      const json group = core::RenderPodGroup(job_, ns_, trial, pods);
      if (group.is_null()) continue;
      const bool volcano = group["apiVersion"] == core::kVolcanoApiVersion;
      const std::string api_version = group["apiVersion"].get<std::string>();
      const std::string name = group["metadata"]["name"].get<std::string>();
      absl::StatusOr<json> created = volcano
                                         ? c_->client_->Create(kVolcanoPodGroups, ns_, group)
                                         : c_->client_->Create(kCoschedulingPodGroups, ns_, group);
      if (created.ok()) {
        c_->recorder_.Record(
            object_, EventRecorder::Type::kNormal, "SuccessfulCreate",
            absl::StrCat("Created PodGroup ", name, " (", api_version, ") for the gang scheduler"));
        continue;
      }
      if (created.status().code() == absl::StatusCode::kAlreadyExists) continue;
      const std::string message = absl::StrCat(
          "PodGroup ", name, " (", api_version,
          "), which the pods' scheduler reads, was refused: ", ServerMessage(created.status()),
          HttpCode(created.status()) == 404 ? " (is that scheduler's PodGroup CRD installed?)"
                                            : "");
      {
        absl::MutexLock lock(&refused_lock_);
        for (const core::CreateReplica* c : creating) {
          refused_.push_back({.name = c->replica.name, .key = c->replica.key, .message = message});
        }
      }
      return absl::FailedPreconditionError(message);
    }
    return absl::OkStatus();
  }

  // Creates one object. Creating what exists and is this job's is success.
  // Thread-safe: the batches call it concurrently.
  absl::Status CreateOne(const core::Creation& creation) {
    const auto [resource, name] = Target(creation);
    json object = std::visit(
        [&](const auto& c) -> json {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, core::CreateReplica>) {
            return core::RenderPod(job_, ns_, c.replica);
          } else if constexpr (std::is_same_v<T, core::CreateService>) {
            return core::RenderService(job_, ns_, c.replica);
          } else {
            return core::RenderOutputClaim(job_, ns_);
          }
        },
        creation);
    auto created = c_->client_->Create(*resource, ns_, object);
    if (created.ok()) {
      if (resource == &kPersistentVolumeClaims) {
        c_->recorder_.Record(object_, EventRecorder::Type::kNormal, "SuccessfulCreate",
                             absl::StrCat("Created output claim ", name, ", mounted at ",
                                          job_.spec().training_input().job_dir()));
      }
      return absl::OkStatus();
    }
    c_->expectations_.CreationObserved(uid_, ExpectationKey(resource->plural, name));
    absl::Status failed = created.status();
    if (failed.code() == absl::StatusCode::kAlreadyExists) {
      // Ours (the cache has not shown it yet) is done; one another owner
      // holds (a replica of an earlier job of this name that the garbage
      // collector has not removed yet, or someone else's object with our
      // label) is not ours: this replica waits until the name is free.
      const ObjectCache& cache = resource == &kPods       ? c_->pods_->cache()
                                 : resource == &kServices ? c_->services_->cache()
                                                          : c_->claims_->cache();
      ObjectPtr existing = cache.Get(absl::StrCat(ns_, "/", name));
      if (existing == nullptr || OwnerUid(*existing) == uid_) return absl::OkStatus();
      const std::string owner = OwnerUid(*existing);
      failed = absl::AlreadyExistsError(
          absl::StrCat(resource->plural, "/", name, " exists and is not this job's (uid ", uid_,
                       "): ", owner.empty() ? "it has no owner" : "its owner is uid " + owner));
    }
    // A replica's pod or Service refused: the job's condition names the
    // replica. (A refused output claim stays in the operator's log and the
    // retries, as before.)
    const int code = HttpCode(failed);
    std::optional<core::ReplicaKey> replica = ReplicaOf(creation);
    if (replica && (code == 400 || code == 403 || code == 422)) {
      absl::MutexLock lock(&refused_lock_);
      refused_.push_back({.name = name, .key = *replica, .message = ServerMessage(failed)});
    }
    return failed;
  }
  static std::optional<core::ReplicaKey> ReplicaOf(const core::Creation& creation) {
    if (auto* c = std::get_if<core::CreateReplica>(&creation)) return c->replica.key;
    if (auto* c = std::get_if<core::CreateService>(&creation)) return c->replica.key;
    return std::nullopt;
  }
  static std::pair<const Resource*, std::string> Target(const core::Creation& creation) {
    if (auto* c = std::get_if<core::CreateReplica>(&creation)) return {&kPods, c->replica.name};
    if (auto* c = std::get_if<core::CreateService>(&creation)) {
      return {&kServices, c->replica.name};
    }
    return {&kPersistentVolumeClaims, std::get<core::CreateClaim>(creation).name};
  }

  Controller* const c_;
  const v1::TrainingJob& job_;
  const json& object_;
  const std::string ns_;
  const std::string uid_;
  const absl::Time now_;
  bool ended_early_ = false;
  bool status_conflicted_ = false;
  bool job_gone_ = false;
  bool attempted_creates_ = false;
  absl::Mutex refused_lock_;  // the batches add to refused_ concurrently
  std::vector<core::RefusedCreation> refused_ ABSL_GUARDED_BY(refused_lock_);
};

absl::Status Controller::SyncJob(const std::string& key, bool* requeued) {
  ++syncs_;
  const absl::Time now = options_.clock();
  ObjectPtr job_object = jobs_->cache().Get(key);
  if (job_object == nullptr) {  // deleted (see the jobs informer)
    SetRefusedCreations(key, {});
    return absl::OkStatus();
  }
  const std::string uid = MetaString(*job_object, "uid");
  if (!expectations_.Satisfied(uid, now)) {
    // Our own creates/deletes are not in the cache yet; their events requeue
    // the job. The timeout guards against a lost event.
    queue_.AddAfter(key, options_.expectations_timeout);
    return absl::OkStatus();
  }
  const std::string ns = MetaString(*job_object, "namespace");
  auto job = JobFromObject(*job_object);
  if (!job.ok()) {
    // A document the schema cannot hold is terminal, like an invalid spec.
    v1::TrainingJobStatus failed;
    failed.set_state(v1::FAILED);
    failed.set_error_message(std::string(job.status().message()));
    json current = job_object->value("status", json::object());
    if (current.value("state", "") == "FAILED") return absl::OkStatus();
    recorder_.Record(*job_object, EventRecorder::Type::kWarning, "InvalidSpec",
                     std::string(job.status().message()));
    return WriteStatus(*job_object, failed);
  }

  core::Observed observed;
  for (const ObjectPtr& pod : Owned(pods_->cache(), *job_object)) {
    auto replica = core::ParsePod(*pod);
    if (replica.ok()) observed.replicas.push_back(*std::move(replica));
  }
  for (const ObjectPtr& service : Owned(services_->cache(), *job_object)) {
    auto parsed = core::ParseService(*service);
    if (parsed.ok()) observed.services.push_back(*std::move(parsed));
  }
  for (const ObjectPtr& claim : Owned(claims_->cache(), *job_object)) {
    observed.claims.push_back(MetaString(*claim, "name"));
  }
  for (core::RefusedCreation& refused : RefusedCreations(key, uid)) {
    // One created since (the cause went away) is no longer refused.
    if (std::none_of(observed.replicas.begin(), observed.replicas.end(),
                     [&](const core::ObservedReplica& r) { return r.name == refused.name; })) {
      observed.refused_creations.push_back(std::move(refused));
    }
  }
  if (studies_ != nullptr) observed.trial_metrics = studies_->TrialMetrics(uid);
  if (admission_ != nullptr) observed.admission = admission_->VerdictFor(uid);
  // Every trial ever started is in status or archived.
  auto archived_count = [](const v1::TrainingJob& j) {
    const v1::TrainingOutput& out = j.status().training_output();
    return static_cast<size_t>(std::max<int64_t>(0, out.total_trial_count() - out.trials_size()));
  };
  auto archived_trials = [&](const v1::TrainingJob& j) {
    return archive_.Trials(j, archived_count(j));
  };
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> archived = archived_trials(*job);
  if (!archived.ok()) return archived.status();
  observed.archived_trials = *std::move(archived);
  // The study this one continues: the earlier TrainingJob of the same
  // namespace, from the cache.
  absl::StatusOr<core::PreviousStudy> previous = core::FindPreviousStudy(
      *job,
      {.find_job = [&](const std::string& name) -> absl::StatusOr<std::optional<v1::TrainingJob>> {
         // A Cloud ML name ("fmnist_hptuning") names the object "fmnist-hptuning".
         ObjectPtr object = jobs_->cache().Get(absl::StrCat(ns, "/", api::KubernetesName(name)));
         if (object == nullptr) return std::nullopt;
         absl::StatusOr<v1::TrainingJob> parsed = JobFromObject(*object);
         if (parsed.ok()) return *std::move(parsed);
         // One the schema cannot read is found but empty (so it is
         // reported as no tuning job).
         v1::TrainingJob unreadable;
         unreadable.mutable_metadata()->set_name(MetaString(*object, "name"));
         return unreadable;
       },
       .archived_trials = archived_trials});
  if (!previous.ok()) return previous.status();
  observed.previous_study = *std::move(previous);

  const core::ReconcileOptions reconcile = ReconcileOptionsFor(ns);
  core::ReconcileResult result = core::Reconcile(*job, observed, now, reconcile);

  // A stale cache entry is not acted on. The job cache may still hold a job
  // that was deleted (and perhaps created again under its name: another
  // uid) while the replica caches already show its pods gone; its
  // reconcile would create replicas owned by a uid that no longer exists,
  // whose names the current job then cannot take. Before writing objects,
  // one uncached read confirms that this uid is still the job of this name
  // (kubernetes' RecheckDeletionTimestamp before adoption); when it is not,
  // the jobs informer's delete event requeues the key. A status write that
  // comes before every other write (no trial to archive first) confirms it
  // as well: it carries the cached resourceVersion, which another uid never
  // has (409, and the conflict path below re-reads), and a job that is gone
  // answers 404, which ends the carry-out before anything is created.
  const bool writes_objects =
      result.delete_job ||
      std::any_of(result.actions.begin(), result.actions.end(), [](const core::Action& action) {
        return !std::holds_alternative<core::EmitEvent>(action);
      });
  const bool status_write_comes_first =
      result.status_changed && !result.delete_job &&
      std::none_of(result.actions.begin(), result.actions.end(), [](const core::Action& action) {
        return std::holds_alternative<core::ArchiveTrial>(action);
      });
  if (writes_objects && !status_write_comes_first) {
    auto current = client_->Get(kTrainingJobs, ns, MetaString(*job_object, "name"));
    if (current.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    if (!current.ok()) return current.status();
    if (MetaString(*current, "uid") != uid) return absl::OkStatus();
  }

  // Carry it out in the core's order (core::CarryOut).
  JobSink sink(this, *job, *job_object, now);
  absl::Status carried = core::CarryOut(result, sink);
  if (sink.attempted_creates()) SetRefusedCreations(key, {uid, sink.refused_creations()});
  if (sink.status_conflicted()) {
    // Someone changed the job since our cache saw it (nothing after the
    // status write has happened): re-read, reconcile against the fresh
    // object, carry that out.
    auto fresh = client_->Get(kTrainingJobs, ns, MetaString(*job_object, "name"));
    if (!fresh.ok()) return fresh.status();
    // Another uid is another job: what we observed (replicas owned by
    // this uid) is not its; its own events bring it to a sync.
    if (MetaString(*fresh, "uid") != uid) return absl::OkStatus();
    auto fresh_job = JobFromObject(*fresh);
    if (!fresh_job.ok()) return fresh_job.status();
    result = core::Reconcile(*fresh_job, observed, now, reconcile);
    JobSink fresh_sink(this, *fresh_job, *fresh, now);
    carried = core::CarryOut(result, fresh_sink);
    if (fresh_sink.attempted_creates()) {
      SetRefusedCreations(key, {uid, fresh_sink.refused_creations()});
    }
    if (fresh_sink.ended_early()) return carried;
  } else if (sink.ended_early()) {
    // A job deleted since the cache saw it answers its status write 404:
    // nothing was written, and its delete event forgets the key.
    if (sink.job_gone()) return absl::OkStatus();
    return carried;
  }

  if (result.delete_job) {
    absl::Status status = client_->Delete(kTrainingJobs, ns, MetaString(*job_object, "name"));
    if (!status.ok() && status.code() != absl::StatusCode::kNotFound) return status;
    if (studies_ != nullptr) studies_->ForgetJob(uid);
    return carried;
  }
  if (result.requeue_after) {
    queue_.AddAfter(key, *result.requeue_after);
    if (requeued != nullptr) *requeued = true;
  }
  return carried;
}

}  // namespace kubetrain::kube
