#include "operator/kube/controller.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "api/validation.h"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"
#include "operator/core/tf_config.h"
#include "operator/kube/api_status.h"
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

// The replica caches keep what core::ParsePod / ParseService read: metadata
// (without managedFields and annotations) and status. Of the spec (container
// env with TF_CONFIG, resources: what we rendered, never read back) only the
// trial's metrics token stays, as containers[].env, for the Metrics service
// to check reports against (TrialPodHasToken).
void StripForCache(json& object) {
  json token_env = json::array();
  if (auto spec = object.find("spec"); spec != object.end() && spec->is_object()) {
    if (auto containers = spec->find("containers");
        containers != spec->end() && containers->is_array()) {
      for (const json& container : *containers) {
        if (!container.is_object() || !container.contains("env") ||
            !container["env"].is_array()) {
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
  object.erase("spec");
  if (!token_env.empty()) object["spec"]["containers"] = {{{"env", std::move(token_env)}}};
  if (object.contains("metadata") && object["metadata"].is_object()) {
    object["metadata"].erase("managedFields");
    object["metadata"].erase("annotations");
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
  jobs_ = std::make_unique<Informer>(
      client_, InformerOptions{.resource = kTrainingJobs, .ns = options_.ns},
      InformerHandlers{
          .on_add = enqueue_job,
          .on_update = [enqueue_job](const ObjectPtr&, const ObjectPtr& o) { enqueue_job(o); },
          .on_delete =
              [this, enqueue_job](const ObjectPtr& o) {
                // Its replicas go with it (the garbage collector); what it
                // expected to see will not come.
                expectations_.Forget(MetaString(*o, "uid"));
                enqueue_job(o);
              }});
  // Only our own replicas: everything we create carries the job-name label.
  auto replica_informer = [this](const Resource& resource, const std::string& kind) {
    return std::make_unique<Informer>(
        client_,
        InformerOptions{.resource = resource,
                        .ns = options_.ns,
                        .label_selector = core::kLabelJobName,
                        .index_label = core::kLabelJobName,
                        .transform = StripForCache},
        InformerHandlers{
            .on_add = [this, kind](const ObjectPtr& o) { OnReplicaEvent(o, true, false, kind); },
            .on_update = [this, kind](
                             const ObjectPtr&,
                             const ObjectPtr& o) { OnReplicaEvent(o, false, false, kind); },
            .on_delete = [this,
                          kind](const ObjectPtr& o) { OnReplicaEvent(o, false, true, kind); }});
  };
  pods_ = replica_informer(kPods, "pods");
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
  std::string name = absl::StrCat(kind, "/", MetaString(*object, "name"));
  if (added) expectations_.CreationObserved(owner_uid, name);
  if (deleted) expectations_.DeletionObserved(owner_uid, name);
  // The job of that name syncs either way: a replica of an earlier
  // incarnation that goes frees the name for the current one's replica.
  queue_.Add(job_key);
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
    const json* trial = labels ? member(*labels, core::kLabelTrialId, json::value_t::string) : nullptr;
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
  // The label value is the job's object name, shortened the way ReplicaLabels does.
  auto parsed = JobFromObject(job);
  std::string label;
  if (parsed.ok()) {
    label = core::ReplicaLabels(core::JobObjectName(*parsed), core::ReplicaKey{})
                .at(core::kLabelJobName);
  }
  std::vector<ObjectPtr> out;
  for (ObjectPtr& o : cache.ByIndex(ns, label)) {
    // Replicas of an earlier job of the same name are not ours (the garbage
    // collector removes them).
    if (OwnerUid(*o) == uid) out.push_back(std::move(o));
  }
  return out;
}

absl::Status Controller::WriteStatus(json job_object, const v1::TrainingJobStatus& status) {
  job_object["status"] = StatusToJson(status);
  return client_
      ->Update(kTrainingJobs, MetaString(job_object, "namespace"), job_object,
               /*status=*/true)
      .status();
}

absl::Status Controller::SyncJob(const std::string& key, bool* requeued) {
  ++syncs_;
  const absl::Time now = absl::Now();
  ObjectPtr job_object = jobs_->cache().Get(key);
  if (job_object == nullptr) return absl::OkStatus();  // deleted (see the jobs informer)
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
  if (studies_ != nullptr) observed.trial_metrics = studies_->TrialMetrics(uid);
  // Every trial ever started is in status or archived.
  auto archived_count = [](const v1::TrainingJob& j) {
    const v1::TrainingOutput& out = j.status().training_output();
    return static_cast<size_t>(std::max<int64_t>(0, out.total_trial_count() - out.trials_size()));
  };
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> archived =
      archive_.Trials(*job, archived_count(*job));
  if (!archived.ok()) return archived.status();
  observed.archived_trials = *std::move(archived);
  // The study this one continues: the earlier TrainingJob of the same
  // namespace, from the cache, with the trials it archived. A missing job
  // is for the reconciler to judge; one the schema cannot read is passed as
  // found but empty (so it is reported as no tuning job).
  const std::string& previous_name =
      job->spec().training_input().hyperparameters().resume_previous_job_id();
  if (!previous_name.empty() && !core::IsTerminal(job->status().state())) {
    // A Cloud ML name ("fmnist_hptuning") names the object "fmnist-hptuning".
    const std::string previous_key = absl::StrCat(ns, "/", api::KubernetesName(previous_name));
    if (ObjectPtr previous = jobs_->cache().Get(previous_key)) {
      observed.previous_study.found = true;
      auto parsed = JobFromObject(*previous);
      if (parsed.ok()) {
        observed.previous_study.job = *std::move(parsed);
        absl::StatusOr<std::vector<v1::HyperparameterOutput>> theirs = archive_.Trials(
            observed.previous_study.job, archived_count(observed.previous_study.job));
        if (!theirs.ok()) return theirs.status();
        observed.previous_study.archived_trials = *std::move(theirs);
      } else {
        observed.previous_study.job.mutable_metadata()->set_name(MetaString(*previous, "name"));
      }
    }
  }
  core::ReconcileOptions reconcile = options_.reconcile;
  reconcile.address = core::KubernetesAddresses(ns);
  reconcile.replicas_have_own_filesystems = true;  // pods: outputs need shared storage
  core::ReconcileResult result = core::Reconcile(*job, observed, now, reconcile);
  // The job the result is carried out for: what pods, services and claims
  // are rendered from (their owner), and what archived trials belong to.
  v1::TrainingJob acting = *job;

  // A stale cache entry is not acted on. The job cache may still hold a job
  // that was deleted (and perhaps created again under its name: another
  // uid) while the replica caches already show its pods gone; its
  // reconcile would create replicas owned by a uid that no longer exists,
  // whose names the current job then cannot take. Before writing objects,
  // one uncached read confirms that this uid is still the job of this name
  // (kubernetes' RecheckDeletionTimestamp before adoption); when it is not,
  // the jobs informer's delete event requeues the key.
  const bool writes_objects =
      result.delete_job ||
      std::any_of(result.actions.begin(), result.actions.end(), [](const core::Action& action) {
        return !std::holds_alternative<core::EmitEvent>(action);
      });
  if (writes_objects) {
    auto current = client_->Get(kTrainingJobs, ns, MetaString(*job_object, "name"));
    if (current.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    if (!current.ok()) return current.status();
    if (MetaString(*current, "uid") != uid) return absl::OkStatus();
  }

  // 1. Trials leaving status into their ConfigMaps, then the status (a new
  // trial must be on record before its pods exist).
  std::vector<v1::HyperparameterOutput> to_archive;
  for (const core::Action& action : result.actions) {
    if (auto* a = std::get_if<core::ArchiveTrial>(&action)) to_archive.push_back(a->trial);
  }
  if (!to_archive.empty()) {
    if (absl::Status s = archive_.Archive(*job, to_archive); !s.ok()) return s;
  }
  json written_job = *job_object;
  if (result.status_changed) {
    absl::Status status = WriteStatus(written_job, result.status);
    if (IsConflict(status)) {
      // Someone changed the job since our cache saw it: re-read, reconcile
      // against the fresh object, write once more.
      auto fresh = client_->Get(kTrainingJobs, ns, MetaString(*job_object, "name"));
      if (!fresh.ok()) return fresh.status();
      // Another uid is another job: what we observed (replicas owned by
      // this uid) is not its; its own events bring it to a sync.
      if (MetaString(*fresh, "uid") != uid) return absl::OkStatus();
      auto fresh_job = JobFromObject(*fresh);
      if (!fresh_job.ok()) return fresh_job.status();
      result = core::Reconcile(*fresh_job, observed, now, reconcile);
      acting = *fresh_job;
      written_job = *fresh;
      std::vector<v1::HyperparameterOutput> more;
      for (const core::Action& action : result.actions) {
        if (auto* a = std::get_if<core::ArchiveTrial>(&action)) more.push_back(a->trial);
      }
      if (!more.empty()) {
        if (absl::Status s = archive_.Archive(*fresh_job, more); !s.ok()) return s;
      }
      status = result.status_changed ? WriteStatus(written_job, result.status) : absl::OkStatus();
    }
    if (!status.ok()) return status;
  }

  // 2. Deletes, then 3. creates.
  std::vector<std::string> delete_names, create_names;
  for (const core::Action& action : result.actions) {
    if (auto* d = std::get_if<core::DeleteReplica>(&action)) {
      delete_names.push_back("pods/" + d->name);
    } else if (auto* d = std::get_if<core::DeleteService>(&action)) {
      delete_names.push_back("services/" + d->name);
    } else if (auto* c = std::get_if<core::CreateReplica>(&action)) {
      create_names.push_back("pods/" + c->replica.name);
    } else if (auto* c = std::get_if<core::CreateService>(&action)) {
      create_names.push_back("services/" + c->replica.name);
    } else if (auto* c = std::get_if<core::CreateClaim>(&action)) {
      create_names.push_back("persistentvolumeclaims/" + c->name);
    } else if (auto* d = std::get_if<core::DeleteClaim>(&action)) {
      delete_names.push_back("persistentvolumeclaims/" + d->name);
    }
  }
  expectations_.ExpectDeletions(uid, delete_names, now);
  absl::Status first_error;
  std::vector<std::string> deleted_pods;
  for (const core::Action& action : result.actions) {
    const Resource* resource = nullptr;
    std::string name;
    if (auto* d = std::get_if<core::DeleteReplica>(&action)) {
      resource = &kPods;
      name = d->name;
    } else if (auto* d = std::get_if<core::DeleteService>(&action)) {
      resource = &kServices;
      name = d->name;
    } else if (auto* d = std::get_if<core::DeleteClaim>(&action)) {
      resource = &kPersistentVolumeClaims;
      name = d->name;
    } else {
      continue;
    }
    absl::Status status = client_->Delete(*resource, ns, name);
    if (status.ok() && resource == &kPods) deleted_pods.push_back(name);
    if (status.ok() && resource == &kPersistentVolumeClaims) {
      recorder_.Record(written_job, EventRecorder::Type::kNormal, "SuccessfulDelete",
                       absl::StrCat("Deleted output claim ", name,
                                    " (spec.outputStorage.newClaim.deleteWhenFinished)"));
    }
    if (!status.ok()) {
      // Nothing will be observed for a failed call; NotFound is done already.
      expectations_.DeletionObserved(uid, absl::StrCat(resource->plural, "/", name));
      if (status.code() != absl::StatusCode::kNotFound && first_error.ok()) first_error = status;
    }
  }

  expectations_.ExpectCreations(uid, create_names, now);
  std::vector<std::string> created_pods;
  bool stop_creating = false;
  // The output claim first: the pods mount it.
  std::vector<const core::Action*> creates;
  for (const core::Action& action : result.actions) {
    if (std::holds_alternative<core::CreateClaim>(action)) creates.push_back(&action);
  }
  for (const core::Action& action : result.actions) {
    if (!std::holds_alternative<core::CreateClaim>(action)) creates.push_back(&action);
  }
  for (const core::Action* action : creates) {
    const Resource* resource;
    std::string name;
    const core::DesiredReplica* replica = nullptr;
    if (auto* c = std::get_if<core::CreateReplica>(action)) {
      resource = &kPods;
      replica = &c->replica;
      name = replica->name;
    } else if (auto* c = std::get_if<core::CreateService>(action)) {
      resource = &kServices;
      replica = &c->replica;
      name = replica->name;
    } else if (auto* c = std::get_if<core::CreateClaim>(action)) {
      resource = &kPersistentVolumeClaims;
      name = c->name;
    } else {
      continue;
    }
    std::string expectation = absl::StrCat(resource->plural, "/", name);
    if (stop_creating) {
      expectations_.CreationObserved(uid, expectation);  // not attempted
      continue;
    }
    json object = resource == &kPods       ? core::RenderPod(acting, ns, *replica)
                  : resource == &kServices ? core::RenderService(acting, ns, *replica)
                                           : core::RenderOutputClaim(acting, ns);
    auto created = client_->Create(*resource, ns, object);
    if (created.ok()) {
      if (resource == &kPods) created_pods.push_back(name);
      if (resource == &kPersistentVolumeClaims) {
        recorder_.Record(written_job, EventRecorder::Type::kNormal, "SuccessfulCreate",
                         absl::StrCat("Created output claim ", name, ", mounted at ",
                                      acting.spec().training_input().job_dir()));
      }
      continue;
    }
    expectations_.CreationObserved(uid, expectation);
    absl::Status failed = created.status();
    if (failed.code() == absl::StatusCode::kAlreadyExists) {
      // Ours (the cache has not shown it yet) is done; one another owner
      // holds (a replica of an earlier job of this name that the garbage
      // collector has not removed yet, or someone else's object with our
      // label) is not ours: this replica waits until the name is free.
      const ObjectCache& cache = resource == &kPods       ? pods_->cache()
                                 : resource == &kServices ? services_->cache()
                                                          : claims_->cache();
      ObjectPtr existing = cache.Get(absl::StrCat(ns, "/", name));
      if (existing == nullptr || OwnerUid(*existing) == uid) continue;
      const std::string owner = OwnerUid(*existing);
      failed = absl::AlreadyExistsError(
          absl::StrCat(resource->plural, "/", name, " exists and is not this job's (uid ", uid,
                       "): ", owner.empty() ? "it has no owner" : "its owner is uid " + owner));
    }
    first_error = first_error.ok() ? failed : first_error;
    // Stop at the first failure (quota, admission, outage): one failed call
    // rather than one per replica; the job is requeued with backoff.
    stop_creating = true;
  }

  // 4. Events: what the core reports, plus one summary per pass of what we created/deleted.
  if (!created_pods.empty()) {
    recorder_.Record(
        written_job, EventRecorder::Type::kNormal, "SuccessfulCreate",
        absl::StrCat("Created pods (and their services): ", absl::StrJoin(created_pods, ", ")));
  }
  if (!deleted_pods.empty()) {
    recorder_.Record(written_job, EventRecorder::Type::kNormal, "SuccessfulDelete",
                     absl::StrCat("Deleted pods: ", absl::StrJoin(deleted_pods, ", ")));
  }
  for (const core::Action& action : result.actions) {
    if (auto* e = std::get_if<core::EmitEvent>(&action)) {
      recorder_.Record(written_job,
                       e->type == core::EmitEvent::Type::kWarning ? EventRecorder::Type::kWarning
                                                                  : EventRecorder::Type::kNormal,
                       e->reason, e->message);
    }
  }

  if (result.delete_job) {
    absl::Status status = client_->Delete(kTrainingJobs, ns, MetaString(*job_object, "name"));
    if (!status.ok() && status.code() != absl::StatusCode::kNotFound) return status;
    if (studies_ != nullptr) studies_->ForgetJob(uid);
    return first_error;
  }
  if (result.requeue_after) {
    queue_.AddAfter(key, *result.requeue_after);
    if (requeued != nullptr) *requeued = true;
  }
  return first_error;
}

}  // namespace kubetrain::kube
