#include "operator/kube/leader_pod_label.h"

#include "absl/strings/str_cat.h"

namespace kubetrain::kube {

absl::Status LeaderPodLabel::Set(const std::string& pod, bool leader) {
  // null removes the key (JSON merge patch, RFC 7386).
  nlohmann::json value = leader ? nlohmann::json("true") : nlohmann::json(nullptr);
  nlohmann::json patch = {{"metadata", {{"labels", {{kLabelMetricsLeader, value}}}}}};
  absl::StatusOr<nlohmann::json> patched =
      client_->MergePatch(kPods, ns_, pod, patch, /*status=*/false);
  if (patched.ok()) return absl::OkStatus();
  return absl::Status(
      patched.status().code(),
      absl::StrCat(leader ? "labelling" : "unlabelling", " operator pod ", ns_, "/", pod, " (",
                   kLabelMetricsLeader, "): ", patched.status().message()));
}

absl::Status LeaderPodLabel::Release() { return Set(pod_name_, false); }

absl::Status LeaderPodLabel::Claim() {
  if (absl::Status s = Set(pod_name_, true); !s.ok()) return s;
  absl::StatusOr<nlohmann::json> labelled = client_->List(
      kPods, ns_, ListOptions{.label_selector = absl::StrCat(kLabelMetricsLeader, "=true")});
  if (!labelled.ok()) {
    return absl::Status(labelled.status().code(),
                        absl::StrCat("listing pods labelled ", kLabelMetricsLeader, " in ", ns_,
                                     ": ", labelled.status().message()));
  }
  for (const nlohmann::json& pod : labelled->value("items", nlohmann::json::array())) {
    const std::string name = pod.value("metadata", nlohmann::json::object()).value("name", "");
    if (name.empty() || name == pod_name_) continue;
    absl::Status s = Set(name, false);
    // Deleted meanwhile: nothing left to unlabel.
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::kube
