#include "operator/kube/trial_archive.h"

#include <google/protobuf/util/json_util.h>

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/codec.h"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"
#include "operator/kube/api_status.h"

namespace kubetrain::kube {

using nlohmann::json;

namespace {

// Writes of one ConfigMap that meet a newer version (another writer, a
// lagging read) before it is given up for this sync.
constexpr int kConflictRetries = 5;

}  // namespace

TrialArchive::TrialArchive(ClusterClient* client, const std::string& ns) : client_(client) {
  informer_ = std::make_unique<Informer>(client_,
                                         InformerOptions{.resource = kConfigMaps,
                                                         .ns = ns,
                                                         .label_selector = kLabelArchivedTrials,
                                                         .index_label = core::kLabelJobName},
                                         InformerHandlers{});
}

TrialArchive::~TrialArchive() { Stop(); }

void TrialArchive::Start() { informer_->Start(); }

bool TrialArchive::WaitForSync(absl::Duration timeout) { return informer_->WaitForSync(timeout); }

void TrialArchive::Stop() { informer_->Stop(); }

absl::Status TrialArchive::Archive(const v1::TrainingJob& job,
                                   const std::vector<v1::HyperparameterOutput>& trials) {
  const std::string& ns = job.metadata().namespace_();
  const std::string object_name = core::JobObjectName(job);
  std::map<std::string, std::vector<const v1::HyperparameterOutput*>> by_archive;
  for (const v1::HyperparameterOutput& t : trials) {
    by_archive[ArchiveName(object_name, t.trial_id())].push_back(&t);
  }
  for (const auto& [name, chunk] : by_archive) {
    absl::Status last;
    bool stored = false;
    for (int attempt = 0; attempt < kConflictRetries && !stored; ++attempt) {
      absl::StatusOr<json> current = client_->Get(kConfigMaps, ns, name);
      if (absl::IsNotFound(current.status())) {
        json fresh = NewArchive(job, ns, name);
        for (const v1::HyperparameterOutput* t : chunk) AddToArchive(fresh, *t);
        absl::StatusOr<json> created = client_->Create(kConfigMaps, ns, fresh);
        last = created.status();
        stored = created.ok();
        if (!stored && !absl::IsAlreadyExists(last)) break;
        continue;
      }
      if (!current.ok()) {
        last = current.status();
        break;
      }
      if (!OwnedByUid(*current, job.metadata().uid())) {
        // An earlier job of the same name whose archives the garbage
        // collector has not removed yet: not ours to write into.
        last = absl::UnavailableError(absl::StrCat(
            "ConfigMap ", ns, "/", name, " belongs to an earlier job named ", job.metadata().name(),
            " (waiting for the garbage collector to delete it)"));
        break;
      }
      json updated = *std::move(current);
      for (const v1::HyperparameterOutput* t : chunk) AddToArchive(updated, *t);
      absl::StatusOr<json> written = client_->Update(kConfigMaps, ns, updated, false);
      last = written.status();
      stored = written.ok();
      if (!stored && !IsConflict(last)) break;
    }
    if (!stored) {
      return absl::Status(last.code(), absl::StrCat("archiving trials of TrainingJob ", ns, "/",
                                                    job.metadata().name(), " in ConfigMap ", name,
                                                    ": ", last.message()));
    }
    absl::MutexLock lock(&mu_);
    for (const v1::HyperparameterOutput* t : chunk) {
      written_[job.metadata().uid()][t->trial_id()] = *t;
    }
  }
  return absl::OkStatus();
}

std::vector<v1::HyperparameterOutput> TrialArchive::FromObjects(
    const v1::TrainingJob& job, const std::vector<ObjectPtr>& objects) {
  const std::string& uid = job.metadata().uid();
  std::map<std::string, v1::HyperparameterOutput> found;
  for (const ObjectPtr& object : objects) {
    // An earlier job of the same name may still have archives (the garbage
    // collector is on its way): only this job's count.
    if (!OwnedByUid(*object, uid)) continue;
    for (v1::HyperparameterOutput& t : TrialsInArchive(*object)) {
      found[t.trial_id()] = std::move(t);
    }
  }
  absl::MutexLock lock(&mu_);
  auto mine = written_.find(uid);
  if (mine != written_.end()) {
    for (auto it = mine->second.begin(); it != mine->second.end();) {
      if (found.count(it->first) > 0) {
        it = mine->second.erase(it);  // the cache has caught up
      } else {
        found[it->first] = it->second;
        ++it;
      }
    }
    if (mine->second.empty()) written_.erase(mine);
  }
  std::vector<v1::HyperparameterOutput> trials;
  trials.reserve(found.size());
  for (auto& [id, t] : found) trials.push_back(std::move(t));
  return trials;
}

absl::StatusOr<std::vector<v1::HyperparameterOutput>> TrialArchive::Trials(
    const v1::TrainingJob& job, size_t expected) {
  const std::string& ns = job.metadata().namespace_();
  std::vector<v1::HyperparameterOutput> trials =
      FromObjects(job, informer_->cache().ByIndex(ns, ArchiveJobLabel(job)));
  if (trials.size() >= expected) return trials;
  // Fewer than status says left it: an archive written by an earlier leader
  // that this cache has not seen yet. The API server has it.
  ListOptions options;
  options.label_selector = ArchiveSelector(job);
  absl::StatusOr<json> list = client_->List(kConfigMaps, ns, options);
  if (!list.ok()) {
    return absl::Status(list.status().code(),
                        absl::StrCat("listing the archived trials of TrainingJob ", ns, "/",
                                     job.metadata().name(), ": ", list.status().message()));
  }
  std::vector<ObjectPtr> objects;
  if (list->contains("items") && (*list)["items"].is_array()) {
    for (const json& item : (*list)["items"]) objects.push_back(std::make_shared<const json>(item));
  }
  return FromObjects(job, objects);
}

}  // namespace kubetrain::kube
