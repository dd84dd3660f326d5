#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace kubetrain::api {

// The replica roles of a training job. The order is the order replicas are
// created and listed in.
enum class Role { kMaster, kWorker, kParameterServer, kEvaluator };

inline constexpr std::array<Role, 4> kAllRoles = {Role::kMaster, Role::kWorker,
                                                  Role::kParameterServer, Role::kEvaluator};

// "master", "worker", "ps", "evaluator": the names used in pod names, labels,
// TF_CONFIG (where the master may be renamed "chief") and log task names.
// The TrainingInput field of the role's ReplicaConfig ("masterConfig", ...).
constexpr std::string_view ReplicaConfigField(Role role) {
  switch (role) {
    case Role::kMaster:
      return "masterConfig";
    case Role::kWorker:
      return "workerConfig";
    case Role::kParameterServer:
      return "parameterServerConfig";
    case Role::kEvaluator:
      return "evaluatorConfig";
  }
  return "masterConfig";
}

constexpr std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kMaster:
      return "master";
    case Role::kWorker:
      return "worker";
    case Role::kParameterServer:
      return "ps";
    case Role::kEvaluator:
      return "evaluator";
  }
  return "unknown";
}

// Accepts "chief" as the master.
inline std::optional<Role> RoleFromName(std::string_view name) {
  if (name == "master" || name == "chief") return Role::kMaster;
  if (name == "worker") return Role::kWorker;
  if (name == "ps") return Role::kParameterServer;
  if (name == "evaluator") return Role::kEvaluator;
  return std::nullopt;
}

}  // namespace kubetrain::api
