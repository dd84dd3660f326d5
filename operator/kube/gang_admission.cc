#include "operator/kube/gang_admission.h"

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/validation.h"
#include "operator/core/kube_objects.h"
#include "operator/core/reconcile_pass.h"
#include "operator/kube/api_status.h"
#include "operator/kube/controller.h"

namespace kubetrain::kube {

using nlohmann::json;

namespace {

// The all-pods cache keeps what placement reads: at 10,000 pods their
// environments and labels would dominate the operator's memory.
void StripPodForAdmission(json& pod) {
  json kept = json::object();
  if (auto md = pod.find("metadata"); md != pod.end() && md->is_object()) {
    for (const char* field : {"name", "namespace"}) {
      if (auto value = md->find(field); value != md->end()) kept["metadata"][field] = *value;
    }
  }
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    if (auto node = spec->find("nodeName"); node != spec->end()) kept["spec"]["nodeName"] = *node;
    for (const char* list : {"containers", "initContainers"}) {
      auto containers = spec->find(list);
      if (containers == spec->end() || !containers->is_array()) continue;
      json resources = json::array();
      for (const json& container : *containers) {
        resources.push_back(
            {{"resources", container.is_object() ? container.value("resources", json::object())
                                                 : json::object()}});
      }
      kept["spec"][list] = std::move(resources);
    }
  }
  if (auto status = pod.find("status"); status != pod.end() && status->is_object()) {
    if (auto phase = status->find("phase"); phase != status->end()) {
      kept["status"]["phase"] = *phase;
    }
  }
  pod = std::move(kept);
}

// Status writes a pass has in flight at once.
constexpr size_t kConcurrentWrites = 8;

// A trial's gang is keyed "namespace/name#trial".
constexpr char kTrialKeySeparator[] = "#";

bool Terminal(const json& pod) {
  const std::string phase = pod.value("/status/phase"_json_pointer, std::string());
  return phase == "Succeeded" || phase == "Failed";
}

absl::Time ParseTimestamp(const std::string& text, absl::Time otherwise) {
  absl::Time t;
  std::string error;
  return !text.empty() && absl::ParseTime(absl::RFC3339_full, text, &t, &error) ? t : otherwise;
}

// Which writes go first when a pass has more to write than it may.
int WriteRank(const std::string& reason, const v1::Condition* current) {
  if (reason == core::kAdmittedReason) return 0;
  if (current == nullptr || current->reason() != reason) return 1;
  return 2;
}

}  // namespace

GangAdmission::GangAdmission(ClusterClient* client, const ObjectCache* jobs,
                             GangAdmissionOptions options,
                             std::function<core::ReconcileOptions(const std::string& ns)> reconcile,
                             EventRecorder* recorder)
    : client_(client),
      jobs_(jobs),
      options_(std::move(options)),
      reconcile_(std::move(reconcile)),
      recorder_(recorder) {
  auto poke = InformerHandlers{.on_add = [this](const ObjectPtr&) { Poke(); },
                               .on_update = [this](const ObjectPtr&, const ObjectPtr&) { Poke(); },
                               .on_delete = [this](const ObjectPtr&) { Poke(); }};
  nodes_ = std::make_unique<Informer>(client_, InformerOptions{.resource = kNodes}, poke);
  pods_ = std::make_unique<Informer>(
      client_, InformerOptions{.resource = kPods, .transform = StripPodForAdmission},
      InformerHandlers{.on_add = [this](const ObjectPtr&) { Poke(); },
                       // Only what frees or takes room: a binding, an end.
                       .on_update =
                           [this](const ObjectPtr& before, const ObjectPtr& after) {
                             if (Terminal(*before) != Terminal(*after) ||
                                 before->value("/spec/nodeName"_json_pointer, std::string()) !=
                                     after->value("/spec/nodeName"_json_pointer, std::string())) {
                               Poke();
                             }
                           },
                       .on_delete = [this](const ObjectPtr&) { Poke(); }});
  quotas_ = std::make_unique<Informer>(
      client_, InformerOptions{.resource = kResourceQuotas, .ns = options_.ns}, poke);
  priority_classes_ =
      std::make_unique<Informer>(client_, InformerOptions{.resource = kPriorityClasses}, poke);
}

GangAdmission::~GangAdmission() { Stop(); }

bool GangAdmission::Start(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (Informer* informer : {nodes_.get(), pods_.get(), quotas_.get(), priority_classes_.get()}) {
    informer->Start();
  }
  for (Informer* informer : {nodes_.get(), pods_.get(), quotas_.get(), priority_classes_.get()}) {
    if (!informer->WaitForSync(deadline - absl::Now())) return false;
  }
  thread_ = std::thread([this] { Loop(); });
  return true;
}

void GangAdmission::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Informer* informer : {nodes_.get(), pods_.get(), quotas_.get(), priority_classes_.get()}) {
    informer->Stop();
  }
}

void GangAdmission::Poke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    dirty_ = true;
  }
  wake_.notify_all();
}

void GangAdmission::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, absl::ToChronoNanoseconds(options_.period),
                     [this] { return dirty_ || stopping_; });
      if (stopping_) return;
      dirty_ = false;
    }
    if (absl::Status status = RunPass(); !status.ok()) {
      std::cerr << "kubetrain-operator: admission pass: " << status << "\n";
    }
    std::unique_lock<std::mutex> lock(mu_);
    // Changes that come meanwhile wait for the next pass together.
    wake_.wait_for(lock, absl::ToChronoNanoseconds(options_.min_interval),
                   [this] { return stopping_; });
    if (stopping_) return;
  }
}

std::vector<core::PodPlacement> GangAdmission::GangPods(const v1::TrainingJob& job,
                                                        const std::string& trial) {
  Rendered& rendered = rendered_[absl::StrCat(job.metadata().uid(), "/", trial)];
  if (rendered.generation == job.metadata().generation() && !rendered.pods.empty()) {
    return rendered.pods;
  }
  const std::string& ns = job.metadata().namespace_();
  rendered.pods.clear();
  for (const core::DesiredReplica& replica :
       core::DesiredReplicas(job, trial, {}, reconcile_(ns))) {
    absl::StatusOr<core::PodPlacement> pod =
        core::ParsePodPlacement(core::RenderPod(job, ns, replica));
    if (!pod.ok()) {
      // The API server would refuse this pod too; the controller says so
      // when it creates it. Here it asks for nothing it can name.
      std::cerr << "kubetrain-operator: admission: " << ns << "/" << job.metadata().name() << ": "
                << pod.status() << "\n";
      continue;
    }
    pod->ns = ns;
    rendered.pods.push_back(*std::move(pod));
  }
  rendered.generation = job.metadata().generation();
  return rendered.pods;
}

absl::Status GangAdmission::RunPass() {
  std::lock_guard<std::mutex> pass_lock(pass_mu_);
  const absl::Time pass_start = absl::Now();
  const absl::Time now = options_.clock();
  core::ClusterState cluster;
  for (const ObjectPtr& node : nodes_->cache().List()) {
    absl::StatusOr<core::NodeCapacity> parsed = core::ParseNode(*node);
    if (parsed.ok()) cluster.nodes.push_back(*std::move(parsed));
  }
  for (const ObjectPtr& pod : pods_->cache().List()) {
    if (Terminal(*pod)) continue;
    absl::StatusOr<core::PodPlacement> parsed = core::ParsePodPlacement(*pod);
    if (parsed.ok()) cluster.pods.push_back(*std::move(parsed));
  }
  for (const ObjectPtr& quota : quotas_->cache().List()) {
    absl::StatusOr<core::NamespaceQuota> parsed = core::ParseResourceQuota(*quota);
    if (parsed.ok()) cluster.quotas.push_back(*std::move(parsed));
  }
  std::map<std::string, int32_t> priorities;
  for (const ObjectPtr& pc : priority_classes_->cache().List()) {
    if (pc->contains("value") && (*pc)["value"].is_number_integer()) {
      priorities[MetaString(*pc, "name")] = (*pc)["value"].get<int32_t>();
    }
  }

  std::vector<core::Gang> gangs;
  std::map<std::string, std::pair<ObjectPtr, std::shared_ptr<const v1::TrainingJob>>> jobs;
  std::set<std::string> live_uids;
  for (const ObjectPtr& object : jobs_->List()) {
    // Read (and checked) once per version of the job, not once per pass.
    const std::string uid = MetaString(*object, "uid");
    live_uids.insert(uid);
    ParsedJob& parsed = parsed_[uid];
    if (parsed.resource_version != MetaString(*object, "resourceVersion")) {
      parsed.resource_version = MetaString(*object, "resourceVersion");
      absl::StatusOr<v1::TrainingJob> read = JobFromObject(*object);
      parsed.job = read.ok() ? std::make_shared<const v1::TrainingJob>(*std::move(read)) : nullptr;
      parsed.valid.reset();
    }
    if (parsed.job == nullptr) continue;  // the controller fails it
    const std::shared_ptr<const v1::TrainingJob> job = parsed.job;
    const v1::TrainingJobStatus& status = job->status();
    if (core::IsTerminal(status.state()) || status.state() == v1::CANCELLING ||
        job->spec().cancel() || job->spec().run_policy().suspend() ||
        !core::AdmittedElsewhere(*job).empty()) {
      continue;
    }
    if (!parsed.valid) {
      const core::ReconcileOptions reconcile = reconcile_(job->metadata().namespace_());
      parsed.valid = api::Validate(*job, {.runtimes = &core::Runtimes(reconcile)}).empty();
    }
    if (!*parsed.valid) continue;
    const v1::Condition* condition = core::FindAdmittedCondition(status);
    // A job the reconciler has not seen yet (it writes Admitted=False,
    // Queued first) waits for that write: deciding before it would only
    // race it (a 409, and the write again).
    if (condition == nullptr && status.state() == v1::STATE_UNSPECIFIED) continue;
    core::Gang gang;
    gang.key = ObjectKey(*object);
    gang.ns = job->metadata().namespace_();
    gang.uid = job->metadata().uid();
    gang.created = ParseTimestamp(job->metadata().creation_timestamp(), now);
    gang.admitted = (condition != nullptr && condition->status() == "True") ||
                    (status.state() != v1::QUEUED && status.state() != v1::STATE_UNSPECIFIED);
    if (condition != nullptr && condition->status() == "False" &&
        condition->has_last_transition_time()) {
      gang.waiting_since = core::internal::FromProto(condition->last_transition_time());
    } else {
      gang.waiting_since = now;
    }
    const bool study = core::internal::IsStudy(*job);
    // A queued study waits for its first trial's gang.
    gang.pods = GangPods(*job, study ? "1" : "");
    // The pods' PriorityClass, else Kubeflow's schedulingPolicy.priorityClass.
    std::string priority_class = gang.pods.empty() ? "" : gang.pods.front().priority_class;
    if (priority_class.empty()) {
      priority_class = job->spec().run_policy().scheduling_policy().priority_class();
    }
    if (auto priority = priorities.find(priority_class); priority != priorities.end()) {
      gang.priority = priority->second;
    }
    if (study && core::AdmitsTrialsOneByOne(status)) {
      // Each trial is a gang: those running (their pods not yet bound keep
      // their room), those admitted but not started, and as many more as the
      // study would start now, queued one after another.
      const v1::TrainingJob normalized = core::Normalize(*job);
      const v1::HyperparameterSpec& hp = normalized.spec().training_input().hyperparameters();
      const int64_t started = status.training_output().total_trial_count();
      const int64_t unused = std::max<int64_t>(0, status.admitted_trial_count() - started);
      int64_t active = 0;
      auto trial_gang = [&](const std::string& trial, bool admitted) {
        core::Gang t = gang;
        t.key = absl::StrCat(gang.key, kTrialKeySeparator, trial);
        t.pods = GangPods(*job, trial);
        t.admitted = admitted;
        return t;
      };
      for (const v1::HyperparameterOutput& trial : status.training_output().trials()) {
        if (core::IsTerminal(trial.state())) continue;
        ++active;
        gangs.push_back(trial_gang(trial.trial_id(), true));
      }
      for (int64_t k = 1; k <= unused; ++k) {
        gangs.push_back(trial_gang(std::to_string(started + k), true));
      }
      const int64_t wanted = std::min<int64_t>(hp.max_parallel_trials() - active - unused,
                                               hp.max_trials() - started - unused);
      for (int64_t k = 1; k <= wanted; ++k) {
        gangs.push_back(trial_gang(std::to_string(started + unused + k), false));
      }
      jobs[gang.key] = {object, job};
      continue;
    }
    jobs[gang.key] = {object, job};
    gangs.push_back(std::move(gang));
  }
  std::erase_if(parsed_, [&](const auto& entry) { return live_uids.count(entry.first) == 0; });
  std::erase_if(rendered_, [&](const auto& entry) {
    return live_uids.count(entry.first.substr(0, entry.first.find('/'))) == 0;
  });

  std::vector<core::AdmissionDecision> decisions =
      core::PlanAdmission(cluster, gangs, now, options_.policy);
  // Trials of admitted studies: how many more each may start.
  std::map<std::string, int64_t> trials_admitted;
  std::erase_if(decisions, [&](const core::AdmissionDecision& d) {
    const size_t at = d.key.find(kTrialKeySeparator);
    if (at == std::string::npos) return false;
    if (d.reason == core::kAdmittedReason) ++trials_admitted[d.key.substr(0, at)];
    return true;
  });
  // The status writes of this pass, made a few at once (each is a round
  // trip: 1,000 admissions one after another would take seconds).
  struct Write {
    std::string key;
    json updated;
    EventRecorder::Type event_type = EventRecorder::Type::kNormal;
    std::string event_reason;  // "": no event
    std::string event_message;
    std::optional<double> waited_seconds;  // an admission: since the job's creation
  };
  std::vector<Write> writes;
  bool more = false;
  for (const auto& [key, count] : trials_admitted) {
    auto& [object, job] = jobs[key];
    v1::TrainingJobStatus status = job->status();
    status.set_admitted_trial_count(
        std::max(status.admitted_trial_count(), status.training_output().total_trial_count()) +
        count);
    json updated = *object;
    updated["status"] = StatusToJson(status);
    writes.push_back({key, std::move(updated), EventRecorder::Type::kNormal, "TrialsAdmitted",
                      absl::StrCat(count, count == 1 ? " trial" : " trials",
                                   " admitted: all of their pods can be placed now")});
  }
  std::stable_sort(decisions.begin(), decisions.end(), [&](const auto& a, const auto& b) {
    return WriteRank(a.reason, core::FindAdmittedCondition(jobs[a.key].second->status())) <
           WriteRank(b.reason, core::FindAdmittedCondition(jobs[b.key].second->status()));
  });
  int informing = 0;  // writes that are not admissions
  for (const core::AdmissionDecision& decision : decisions) {
    auto& [object, job] = jobs[decision.key];
    const v1::Condition* current = core::FindAdmittedCondition(job->status());
    const bool admitted = decision.reason == core::kAdmittedReason;
    if (current != nullptr && current->reason() == decision.reason &&
        current->message() == decision.message &&
        job->status().queue_position() == decision.position) {
      continue;
    }
    // Admissions are never held back; what only informs waits its turn.
    if (!admitted && ++informing > options_.max_writes_per_pass) {
      more = true;
      continue;
    }
    v1::TrainingJobStatus status = job->status();
    core::SetAdmittedCondition(&status, admitted, decision.reason, decision.message, now);
    if (status.state() == v1::STATE_UNSPECIFIED) status.set_state(v1::QUEUED);
    status.set_queue_position(decision.position);
    // A study is admitted with its first trial; the next ones, one gang each.
    if (admitted && core::internal::IsStudy(*job)) {
      status.set_admitted_trial_count(std::max<int64_t>(
          status.admitted_trial_count(), 1 + status.training_output().total_trial_count()));
    }
    Write write;
    write.key = decision.key;
    write.updated = *object;
    write.updated["status"] = StatusToJson(status);
    const bool reason_changed = current == nullptr || current->reason() != decision.reason;
    if (reason_changed && admitted) {
      write.event_reason = "Admitted";
      write.waited_seconds =
          absl::ToDoubleSeconds(now - ParseTimestamp(job->metadata().creation_timestamp(), now));
    } else if (reason_changed && (decision.reason == core::kNeverFitsReason ||
                                  decision.reason == core::kQuotaExceededReason)) {
      write.event_type = EventRecorder::Type::kWarning;
      write.event_reason = decision.reason;
    }
    write.event_message = decision.message;
    writes.push_back(std::move(write));
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto writer = [&] {
    for (size_t i = next++; i < writes.size(); i = next++) {
      const Write& write = writes[i];
      absl::StatusOr<json> written = client_->Update(
          kTrainingJobs, MetaString(write.updated, "namespace"), write.updated, true);
      if (!written.ok()) {
        // A 409 (the job changed) or a job gone: the next pass sees it anew.
        if (!IsConflict(written.status()) && HttpCode(written.status()) != 404) {
          std::cerr << "kubetrain-operator: admission: " << write.key << ": " << written.status()
                    << "\n";
        }
        failed = true;
        continue;
      }
      if (write.waited_seconds && options_.metrics != nullptr) {
        options_.metrics->ObserveAdmission(*write.waited_seconds);
      }
      if (!write.event_reason.empty() && recorder_ != nullptr) {
        recorder_->Record(*written, write.event_type, write.event_reason, write.event_message);
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t concurrent = std::min<size_t>(writes.size(), kConcurrentWrites);
  for (size_t t = 1; t < concurrent; ++t) threads.emplace_back(writer);
  writer();
  for (std::thread& t : threads) t.join();
  more = more || failed;
  if (options_.metrics != nullptr) {
    int64_t queued = 0;
    for (const core::AdmissionDecision& decision : decisions) {
      queued += decision.reason == core::kAdmittedReason ? 0 : 1;
    }
    options_.metrics->SetQueuedJobs(queued);
    options_.metrics->ObserveAdmissionPass(absl::ToDoubleSeconds(absl::Now() - pass_start));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (more) dirty_ = true;
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::kube
