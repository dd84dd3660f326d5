#pragma once

#include <string>

#include "absl/status/status.h"
#include "operator/kube/cluster_client.h"

namespace kubetrain::kube {

// The label that marks the operator pod holding the leader lease. The Service
// trials report metrics to selects it, so reports reach the one replica whose
// controller is running (a standby answers UNAVAILABLE, and reporters retry).
inline constexpr char kLabelMetricsLeader[] = "kubetrain.io/metrics-leader";

// Sets and clears kLabelMetricsLeader on the operator's own pod with merge
// patches. Thread-compatible; the client must outlive it.
class LeaderPodLabel {
 public:
  LeaderPodLabel(ClusterClient* client, std::string ns, std::string pod_name)
      : client_(client), ns_(std::move(ns)), pod_name_(std::move(pod_name)) {}

  // Removes the label from this pod: a replica that restarts after losing the
  // lease keeps its pod, and the label with it.
  absl::Status Release();
  // Labels this pod, then removes the label from every other pod in the
  // namespace that has it (an earlier leader that died holding it). Errors
  // name the pod and the call.
  absl::Status Claim();

 private:
  absl::Status Set(const std::string& pod, bool leader);

  ClusterClient* const client_;
  const std::string ns_;
  const std::string pod_name_;
};

}  // namespace kubetrain::kube
