#pragma once

#include <atomic>
#include <string>

#include "nlohmann/json.hpp"
#include "operator/kube/cluster_client.h"

namespace kubetrain::kube {

// Writes core/v1 Events about an object (a TrainingJob), so `kubectl describe
// tj NAME` tells its story. Best effort: a failed write is logged and dropped,
// never retried, never fails the caller. Thread-safe.
class EventRecorder {
 public:
  EventRecorder(ClusterClient* client, std::string component);

  enum class Type { kNormal, kWarning };
  // `involved` is the object as read from the API (kind, apiVersion, metadata
  // name/namespace/uid/resourceVersion are copied into involvedObject).
  void Record(const nlohmann::json& involved, Type type, const std::string& reason,
              const std::string& message);

  int64_t recorded() const { return recorded_.load(); }

 private:
  ClusterClient* const client_;
  const std::string component_;
  std::atomic<uint64_t> sequence_{0};
  std::atomic<int64_t> recorded_{0};
};

}  // namespace kubetrain::kube
