#include "operator/core/naming.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "api/validation.h"

namespace kubetrain::core {
namespace {

// Keeps names within Kubernetes' 63-character limit: a prefix, '-', and 8 hex
// digits of the full name's hash. The prefix never ends in '-'.
std::string Shorten(std::string name) {
  if (name.size() <= kMaxObjectNameLength) return name;
  char suffix[16];
  std::snprintf(suffix, sizeof(suffix), "%08x", static_cast<unsigned>(StableHash(name)));
  std::string prefix = name.substr(0, kMaxObjectNameLength - 9);
  while (!prefix.empty() && prefix.back() == '-') prefix.pop_back();
  return prefix + "-" + suffix;
}

}  // namespace

std::string JobObjectName(const v1::TrainingJob& job) {
  return api::KubernetesName(job.metadata().name());
}

std::string ReplicaRoleName(api::Role role, bool use_chief) {
  if (role == api::Role::kMaster && use_chief) return "chief";
  return std::string(api::RoleName(role));
}

std::string ReplicaName(std::string_view job_object_name, const ReplicaKey& key, bool use_chief) {
  const std::string role = ReplicaRoleName(key.role, use_chief);
  if (key.trial_id.empty()) {
    return Shorten(std::string(job_object_name) + "-" + role + "-" + std::to_string(key.index));
  }
  return Shorten(std::string(job_object_name) + "-t" + key.trial_id + "-" + role + "-" +
                 std::to_string(key.index));
}

std::string OutputClaimName(std::string_view job_object_name) {
  return Shorten(std::string(job_object_name) + "-output");
}

std::string PodGroupName(std::string_view job_object_name, std::string_view trial_id) {
  if (trial_id.empty()) return Shorten(std::string(job_object_name));
  return Shorten(std::string(job_object_name) + "-t" + std::string(trial_id));
}

std::string TaskName(const ReplicaKey& key, bool use_chief) {
  std::string task = ReplicaRoleName(key.role, use_chief) + "-" + std::to_string(key.index);
  if (key.trial_id.empty()) return task;
  return "trial " + key.trial_id + " " + task;
}

std::map<std::string, std::string> ReplicaLabels(std::string_view job_object_name,
                                                 const ReplicaKey& key, bool use_chief) {
  std::map<std::string, std::string> labels = {
      {kLabelJobName, JobLabelValue(job_object_name)},
      {kLabelReplicaType, ReplicaRoleName(key.role, use_chief)},
      {kLabelReplicaIndex, std::to_string(key.index)},
  };
  if (!key.trial_id.empty()) labels[kLabelTrialId] = key.trial_id;
  return labels;
}

std::optional<ReplicaKey> ReplicaKeyFromLabels(const std::map<std::string, std::string>& labels) {
  auto type = labels.find(kLabelReplicaType);
  auto index = labels.find(kLabelReplicaIndex);
  if (type == labels.end() || index == labels.end()) return std::nullopt;
  std::optional<api::Role> role = api::RoleFromName(type->second);
  int64_t parsed_index = 0;
  if (!role || !absl::SimpleAtoi(index->second, &parsed_index) || parsed_index < 0) {
    return std::nullopt;
  }
  ReplicaKey key;
  key.role = *role;
  key.index = parsed_index;
  if (auto trial = labels.find(kLabelTrialId); trial != labels.end()) key.trial_id = trial->second;
  return key;
}

std::string JobSelector(std::string_view job_object_name) {
  return std::string(kLabelJobName) + "=" + JobLabelValue(job_object_name);
}

std::string JobLabelValue(std::string_view job_object_name) {
  return Shorten(std::string(job_object_name));
}

}  // namespace kubetrain::core
