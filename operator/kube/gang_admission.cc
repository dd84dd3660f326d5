#include "operator/kube/gang_admission.h"

#include <time.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/validation.h"
#include "operator/core/admission_queue.h"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"
#include "operator/core/reconcile_pass.h"
#include "operator/core/reconciler.h"
#include "operator/kube/api_status.h"
#include "operator/kube/controller.h"

namespace kubetrain::kube {

using nlohmann::json;

void GangAdmission::KeepForPlacement(const json& pod, json& kept) {
  if (auto md = pod.find("metadata"); md != pod.end() && md->is_object()) {
    for (const char* field : {"name", "namespace"}) {
      if (auto value = md->find(field); value != md->end()) kept["metadata"][field] = *value;
    }
    const auto job_label = json::json_pointer("/labels") / core::kLabelJobName;
    if (md->contains(job_label)) kept["metadata"]["labels"][core::kLabelJobName] = (*md)[job_label];
  }
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    if (auto node = spec->find("nodeName"); node != spec->end()) kept["spec"]["nodeName"] = *node;
    for (const char* list : {"containers", "initContainers"}) {
      auto containers = spec->find(list);
      if (containers == spec->end() || !containers->is_array()) continue;
      json& into = kept["spec"][list];
      if (!into.is_array()) into = json::array();
      for (const json& container : *containers) {
        json entry = {{"resources", container.is_object()
                                        ? container.value("resources", json::object())
                                        : json::object()}};
        // A sidecar's (restartPolicy Always) requests add to the containers'.
        if (container.is_object() && container.contains("restartPolicy")) {
          entry["restartPolicy"] = container["restartPolicy"];
        }
        into.push_back(std::move(entry));
      }
    }
  }
  if (auto status = pod.find("status"); status != pod.end() && status->is_object()) {
    if (auto phase = status->find("phase"); phase != status->end()) {
      kept["status"]["phase"] = *phase;
    }
  }
}

void GangAdmission::StripForPlacement(json& pod) {
  json kept = json::object();
  KeepForPlacement(pod, kept);
  pod = std::move(kept);
}

namespace {

// CPU time the calling thread has used.
absl::Duration ThreadCpuTime() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return absl::DurationFromTimespec(now);
}

// Whether `name`, a State as the status spells it, is one a job or a trial
// ends in (core::IsTerminal).
bool EndState(const std::string& name) {
  v1::State state;
  return v1::State_Parse(name, &state) && core::IsTerminal(state);
}

bool Terminal(const json& pod) {
  const std::string phase = pod.value("/status/phase"_json_pointer, std::string());
  return phase == "Succeeded" || phase == "Failed";
}

}  // namespace

GangAdmission::GangAdmission(ClusterClient* client, const ObjectCache* jobs,
                             const ObjectCache* pods, GangAdmissionOptions options,
                             std::function<core::ReconcileOptions(const std::string& ns)> reconcile,
                             std::function<void(const std::string& job_key)> on_verdict)
    : client_(client),
      jobs_(jobs),
      options_(std::move(options)),
      reconcile_(std::move(reconcile)),
      on_verdict_(std::move(on_verdict)),
      pods_(pods) {
  auto poke = InformerHandlers{.on_add = [this](const ObjectPtr&) { Poke(); },
                               .on_update = [this](const ObjectPtr&, const ObjectPtr&) { Poke(); },
                               .on_delete = [this](const ObjectPtr&) { Poke(); }};
  nodes_ = std::make_unique<Informer>(client_, InformerOptions{.resource = kNodes}, poke);
  quotas_ = std::make_unique<Informer>(
      client_, InformerOptions{.resource = kResourceQuotas, .ns = options_.ns}, poke);
  priority_classes_ =
      std::make_unique<Informer>(client_, InformerOptions{.resource = kPriorityClasses}, poke);
}

void GangAdmission::OnPodChange(const ObjectPtr& before, const ObjectPtr& after) {
  // Only what frees room (a pod that ends or goes), or takes room admission
  // did not set aside: a new or newly bound pod of another owner. (A job's
  // pods were set aside when it was admitted; a pass for each of its 8,000
  // pods would only find the same.)
  if (after == nullptr || (before != nullptr && Terminal(*before) != Terminal(*after))) {
    Poke();
    return;
  }
  const auto job_label = json::json_pointer("/metadata/labels") / core::kLabelJobName;
  if (after->contains(job_label)) return;
  if (before == nullptr || before->value("/spec/nodeName"_json_pointer, std::string()) !=
                               after->value("/spec/nodeName"_json_pointer, std::string())) {
    Poke();
  }
}

void GangAdmission::OnJobChange(const ObjectPtr& before, const ObjectPtr& after) {
  const auto generation = "/metadata/generation"_json_pointer;
  const auto state = "/status/state"_json_pointer;
  const std::string was = before->value(state, std::string());
  const std::string is = after->value(state, std::string());
  // A job that ends, is cancelled or released frees the room set aside for
  // it; one that is queued (its first status) or starts changes nothing.
  const bool frees = EndState(is) || is == "CANCELLING" ||
                     (is == "QUEUED" && (was == "PREPARING" || was == "RUNNING"));
  if (before->value(generation, int64_t{0}) != after->value(generation, int64_t{0}) ||
      (was != is && frees)) {
    Poke();
    return;
  }
  // A study's trials the same: one that ends frees a parallel slot, one
  // released waits to be admitted again.
  auto trials_view = [](const json& job) {
    std::pair<int, std::set<std::string>> ended_and_released;
    const auto trials = "/status/trainingOutput/trials"_json_pointer;
    if (!job.contains(trials) || !job[trials].is_array()) return ended_and_released;
    for (const json& trial : job[trials]) {
      if (!trial.is_object()) continue;
      if (EndState(trial.value("state", ""))) ++ended_and_released.first;
      if (trial.value("awaitingAdmission", false)) {
        ended_and_released.second.insert(trial.value("trialId", ""));
      }
    }
    return ended_and_released;
  };
  if (trials_view(*before) != trials_view(*after)) Poke();
}

std::vector<Informer*> GangAdmission::OwnInformers() {
  return {nodes_.get(), quotas_.get(), priority_classes_.get()};
}

GangAdmission::~GangAdmission() { Stop(); }

bool GangAdmission::Start(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (Informer* informer : OwnInformers()) informer->Start();
  for (Informer* informer : OwnInformers()) {
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
  for (Informer* informer : OwnInformers()) informer->Stop();
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
    const absl::Duration start = ThreadCpuTime();
    if (absl::Status status = RunPass(); !status.ok()) {
      std::cerr << "kubetrain-operator: admission pass: " << status << "\n";
    }
    // Changes that come meanwhile wait for the next pass together; a pass
    // that took much CPU (a busy cluster) is followed by a longer rest, so
    // passes never take more than a third of a core from the controller.
    // (CPU, not wall time: on a loaded machine a pass waits for a core too,
    // and resting for that wait would only delay admissions.)
    const absl::Duration rest = std::max(options_.min_interval, 2 * (ThreadCpuTime() - start));
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, absl::ToChronoNanoseconds(rest), [this] { return stopping_; });
    if (stopping_) return;
  }
}

const std::vector<core::PodPlacement>& GangAdmission::GangPods(const v1::TrainingJob& job,
                                                               const std::string& trial) {
  Rendered& rendered = rendered_[absl::StrCat(job.metadata().uid(), "/", trial)];
  if (rendered.generation == job.metadata().generation() && !rendered.pods.empty()) {
    return rendered.pods;
  }
  const std::string& ns = job.metadata().namespace_();
  std::vector<absl::Status> errors;
  rendered.pods = core::GangPlacements(job, ns, trial, reconcile_(ns), &errors);
  // The API server would refuse such a pod too; the controller says so when
  // it creates it. Here it asks for nothing it can name.
  for (const absl::Status& error : errors) {
    std::cerr << "kubetrain-operator: admission: " << ns << "/" << job.metadata().name() << ": "
              << error << "\n";
  }
  rendered.generation = job.metadata().generation();
  return rendered.pods;
}

std::optional<core::AdmissionVerdict> GangAdmission::VerdictFor(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(verdicts_mu_);
  auto it = verdicts_.find(uid);
  if (it == verdicts_.end()) return std::nullopt;
  return it->second;
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
  // Each pod read once per version of it (the cache's objects are
  // immutable: a changed pod is a new object).
  std::unordered_map<const json*, ParsedPod> pods;
  const std::vector<ObjectPtr> listed = pods_->List();
  pods.reserve(listed.size());
  for (const ObjectPtr& pod : listed) {
    auto known = parsed_pods_.find(pod.get());
    const bool fresh = known == parsed_pods_.end();
    ParsedPod& parsed = fresh ? pods.emplace(pod.get(), ParsedPod{.object = pod,
                                                                  .terminal = Terminal(*pod),
                                                                  .placement = std::nullopt})
                                    .first->second
                              : pods.insert(parsed_pods_.extract(known)).position->second;
    if (parsed.terminal) continue;
    if (fresh) {
      absl::StatusOr<core::PodPlacement> placement = core::ParsePodPlacement(*pod);
      if (placement.ok()) parsed.placement = *std::move(placement);
    }
    if (parsed.placement) cluster.pod_views.push_back(&*parsed.placement);
  }
  parsed_pods_ = std::move(pods);
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
  const std::map<std::string, core::AdmissionVerdict> earlier = [&] {
    std::lock_guard<std::mutex> lock(verdicts_mu_);
    return verdicts_;
  }();

  std::vector<core::JobToAdmit> jobs;
  std::map<std::string, std::shared_ptr<const v1::TrainingJob>> by_key;
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
      // Validity is the spec's: a status write keeps it.
      if (parsed.job == nullptr || parsed.job->metadata().generation() != parsed.generation) {
        parsed.valid.reset();
      }
      if (parsed.job != nullptr) parsed.generation = parsed.job->metadata().generation();
    }
    if (parsed.job == nullptr) continue;  // the controller fails it
    const std::shared_ptr<const v1::TrainingJob> job = parsed.job;
    if (!core::TakesPartInAdmission(*job)) continue;
    if (!parsed.valid) {
      const core::ReconcileOptions reconcile = reconcile_(job->metadata().namespace_());
      parsed.valid = api::Validate(*job, {.runtimes = &core::Runtimes(reconcile)}).empty();
    }
    if (!*parsed.valid) continue;  // the controller fails it
    core::JobToAdmit entry;
    entry.key = ObjectKey(*object);
    entry.job = job.get();
    entry.pods_of = [this,
                     job](const std::string& trial) -> const std::vector<core::PodPlacement>& {
      return GangPods(*job, trial);
    };
    // The queue's order: the pods' PriorityClass, else Kubeflow's
    // schedulingPolicy.priorityClass. (An admitted job's order matters no
    // more, and its pods need not be rendered for it.)
    if (!core::AdmittedByStatus(job->status())) {
      const std::vector<core::PodPlacement>& first =
          GangPods(*job, core::internal::IsStudy(*job) ? "1" : "");
      std::string priority_class = first.empty() ? "" : first.front().priority_class;
      if (priority_class.empty()) {
        priority_class = job->spec().run_policy().scheduling_policy().priority_class();
      }
      if (auto priority = priorities.find(priority_class); priority != priorities.end()) {
        entry.priority = priority->second;
      }
    }
    // A verdict the reconciler has not written yet still stands.
    if (auto it = earlier.find(uid);
        it != earlier.end() && !core::StatusShows(job->status(), it->second)) {
      entry.pending = it->second;
    }
    by_key[entry.key] = job;
    jobs.push_back(std::move(entry));
  }
  std::erase_if(parsed_, [&](const auto& entry) { return live_uids.count(entry.first) == 0; });
  std::erase_if(rendered_, [&](const auto& entry) {
    return live_uids.count(entry.first.substr(0, entry.first.find('/'))) == 0;
  });

  const std::map<std::string, core::AdmissionVerdict> planned =
      core::PlanJobs(cluster, jobs, now, options_.policy);
  // The jobs whose status does not show their verdict yet sync now: each
  // admission at once; what only informs (a reason or a queue position that
  // moved) at most max_writes_per_pass a pass, changed reasons first, so
  // 1,000 positions moving at once do not hold the API server.
  std::map<std::string, core::AdmissionVerdict> verdicts;
  std::vector<std::pair<int, std::string>> informing;  // (rank, key)
  std::vector<std::string> admitting;
  // A study admitted now is planned with its first trial only; the next
  // pass, which counts this verdict, queues the trials beside it.
  bool study_admitted = false;
  int64_t queued = 0;
  for (const auto& [key, verdict] : planned) {
    const v1::TrainingJob& job = *by_key[key];
    verdicts[job.metadata().uid()] = verdict;
    if (!verdict.admitted()) ++queued;
    if (core::StatusShows(job.status(), verdict)) continue;
    if (verdict.admitted()) {
      admitting.push_back(key);
      study_admitted |= !core::AdmittedByStatus(job.status()) && core::internal::IsStudy(job);
      continue;
    }
    const v1::Condition* current = core::FindAdmittedCondition(job.status());
    informing.emplace_back(current == nullptr || current->reason() != verdict.reason ? 0 : 1, key);
  }
  {
    std::lock_guard<std::mutex> lock(verdicts_mu_);
    verdicts_ = std::move(verdicts);
  }
  std::stable_sort(informing.begin(), informing.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  bool more = false;
  if (static_cast<int>(informing.size()) > options_.max_writes_per_pass) {
    informing.resize(options_.max_writes_per_pass);
    more = true;
  }
  if (on_verdict_) {
    for (const std::string& key : admitting) on_verdict_(key);
    for (const auto& [rank, key] : informing) on_verdict_(key);
  }
  if (options_.metrics != nullptr) {
    options_.metrics->SetQueuedJobs(queued);
    options_.metrics->ObserveAdmissionPass(absl::ToDoubleSeconds(absl::Now() - pass_start));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (more || study_admitted) dirty_ = true;
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::kube
