#include "operator/core/replica.h"

namespace kubetrain::core {

std::string DesiredReplica::Env(std::string_view name) const {
  for (const auto& [key, value] : env) {
    if (key == name) return value;
  }
  return "";
}

std::string_view PhaseName(ReplicaPhase phase) {
  switch (phase) {
    case ReplicaPhase::kPending:
      return "Pending";
    case ReplicaPhase::kRunning:
      return "Running";
    case ReplicaPhase::kSucceeded:
      return "Succeeded";
    case ReplicaPhase::kFailed:
      return "Failed";
    case ReplicaPhase::kUnknown:
      return "Unknown";
  }
  return "Unknown";
}

}  // namespace kubetrain::core
