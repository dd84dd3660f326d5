#include "operator/kube/trial_archive_format.h"

#include <google/protobuf/util/json_util.h>

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/codec.h"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"

namespace kubetrain::kube {

using nlohmann::json;

namespace {

constexpr char kKeyPrefix[] = "trial-";
constexpr char kKeySuffix[] = ".json";

}  // namespace

std::string ArchiveJobLabel(const v1::TrainingJob& job) {
  return core::ReplicaLabels(core::JobObjectName(job), core::ReplicaKey{}).at(core::kLabelJobName);
}

bool OwnedByUid(const json& object, const std::string& uid) {
  auto md = object.find("metadata");
  if (md == object.end() || !md->is_object()) return false;
  auto refs = md->find("ownerReferences");
  if (refs == md->end() || !refs->is_array()) return false;
  for (const json& ref : *refs) {
    if (ref.is_object() && ref.value("uid", "") == uid) return true;
  }
  return false;
}

std::string ArchiveName(const std::string& job_object_name, const std::string& trial_id) {
  int64_t number = 0;
  int64_t chunk = 0;
  if (absl::SimpleAtoi(trial_id, &number) && number > 0)
    chunk = (number - 1) / kTrialsPerArchive + 1;
  return absl::StrCat(job_object_name, "-trials-", chunk);
}

std::string ArchiveKey(const std::string& trial_id) {
  return absl::StrCat(kKeyPrefix, trial_id, kKeySuffix);
}

json NewArchive(const v1::TrainingJob& job, const std::string& ns, const std::string& name) {
  return {
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata",
       {{"name", name},
        {"namespace", ns},
        {"labels", {{core::kLabelJobName, ArchiveJobLabel(job)}, {kLabelArchivedTrials, "true"}}},
        {"ownerReferences", json::array({core::OwnerReference(job)})}}},
      {"data", json::object()}};
}

void AddToArchive(json& config_map, const v1::HyperparameterOutput& trial) {
  if (!config_map.contains("data") || !config_map["data"].is_object()) {
    config_map["data"] = json::object();
  }
  config_map["data"][ArchiveKey(trial.trial_id())] = api::EncodeJson(trial);
}

std::vector<v1::HyperparameterOutput> TrialsInArchive(const json& config_map, size_t* skipped) {
  std::vector<v1::HyperparameterOutput> trials;
  size_t bad = 0;
  auto data = config_map.find("data");
  if (data != config_map.end() && data->is_object()) {
    for (auto it = data->begin(); it != data->end(); ++it) {
      if (!absl::StartsWith(it.key(), kKeyPrefix) || !absl::EndsWith(it.key(), kKeySuffix)) {
        continue;
      }
      v1::HyperparameterOutput trial;
      google::protobuf::util::JsonParseOptions options;
      options.ignore_unknown_fields = true;
      if (!it.value().is_string() || !google::protobuf::util::JsonStringToMessage(
                                          it.value().get<std::string>(), &trial, options)
                                          .ok()) {
        ++bad;
        continue;
      }
      trials.push_back(std::move(trial));
    }
  }
  if (skipped != nullptr) *skipped = bad;
  return trials;
}

std::string ArchiveSelector(const v1::TrainingJob& job) {
  return absl::StrCat(kLabelArchivedTrials, ",", core::kLabelJobName, "=", ArchiveJobLabel(job));
}

std::vector<v1::HyperparameterOutput> ArchivedTrialsOf(const v1::TrainingJob& job,
                                                       const std::vector<json>& config_maps) {
  std::map<std::string, v1::HyperparameterOutput> found;
  for (const json& cm : config_maps) {
    if (!OwnedByUid(cm, job.metadata().uid())) continue;
    for (v1::HyperparameterOutput& t : TrialsInArchive(cm)) found[t.trial_id()] = std::move(t);
  }
  std::vector<v1::HyperparameterOutput> trials;
  for (auto& [id, t] : found) trials.push_back(std::move(t));
  return trials;
}

}  // namespace kubetrain::kube
