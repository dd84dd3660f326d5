#include "tests/fake_apiserver/scheduler.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;

const json& FieldAt(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string FieldText(const json& object, const char* key) {
  const json& value = FieldAt(object, key);
  return value.is_string() ? value.get<std::string>() : "";
}

std::map<std::string, int64_t> Amounts(const json& list) {
  std::map<std::string, int64_t> out;
  if (!list.is_object()) return out;
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (std::optional<int64_t> milli = QuantityMilli(it.value())) out[it.key()] = *milli;
  }
  return out;
}

std::map<std::string, int64_t> ContainerRequests(const json& container) {
  std::map<std::string, int64_t> requests =
      Amounts(FieldAt(FieldAt(container, "resources"), "requests"));
  for (const auto& [resource, amount] :
       Amounts(FieldAt(FieldAt(container, "resources"), "limits"))) {
    requests.emplace(resource, amount);
  }
  return requests;
}

int64_t AmountOf(const std::map<std::string, int64_t>& amounts, const std::string& key) {
  auto it = amounts.find(key);
  return it == amounts.end() ? 0 : it->second;
}

bool Tolerated(const json& pod, const json& taint) {
  for (const json& t : FieldAt(FieldAt(pod, "spec"), "tolerations")) {
    const std::string effect = FieldText(t, "effect");
    if (!effect.empty() && effect != FieldText(taint, "effect")) continue;
    const std::string key = FieldText(t, "key");
    if (FieldText(t, "operator") == "Exists") {
      if (key.empty() || key == FieldText(taint, "key")) return true;
    } else if (key == FieldText(taint, "key") &&
               FieldText(t, "value") == FieldText(taint, "value")) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::optional<int64_t> QuantityMilli(const json& quantity) {
  std::string text;
  if (quantity.is_number()) {
    text = quantity.dump();
  } else if (quantity.is_string()) {
    text = quantity.get<std::string>();
  } else {
    return std::nullopt;
  }
  static const std::pair<const char*, double> kSuffixes[] = {
      {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
      {"m", 0.001},   {"k", 1e3},        {"M", 1e6},           {"G", 1e9},
      {"T", 1e12}};
  double multiplier = 1;
  for (const auto& [suffix, factor] : kSuffixes) {
    const std::string s = suffix;
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      text.resize(text.size() - s.size());
      multiplier = factor;
      break;
    }
  }
  double number = 0;
  if (!absl::SimpleAtod(text, &number) || number < 0) return std::nullopt;
  // Rounded up to a whole thousandth, as the API server rounds requests.
  const double milli = number * multiplier * 1000;
  int64_t whole = static_cast<int64_t>(milli);
  if (static_cast<double>(whole) < milli - 1e-6) ++whole;
  return whole;
}

std::map<std::string, int64_t> PodRequests(const json& pod) {
  std::map<std::string, int64_t> total;
  const json& spec = FieldAt(pod, "spec");
  for (const json& container : FieldAt(spec, "containers")) {
    for (const auto& [resource, amount] : ContainerRequests(container)) total[resource] += amount;
  }
  // Sidecars (init containers that keep running, restartPolicy Always) run
  // beside the containers; other init containers one at a time, before.
  for (const json& container : FieldAt(spec, "initContainers")) {
    const bool sidecar = FieldText(container, "restartPolicy") == "Always";
    for (const auto& [resource, amount] : ContainerRequests(container)) {
      total[resource] = sidecar ? total[resource] + amount : std::max(total[resource], amount);
    }
  }
  total["pods"] = 1000;
  return total;
}

bool PodHoldsResources(const json& pod) {
  const std::string phase = FieldText(FieldAt(pod, "status"), "phase");
  return phase != "Succeeded" && phase != "Failed";
}

std::vector<SchedulingDecision> SchedulePods(const std::vector<json>& nodes,
                                             const std::vector<json>& pods) {
  std::vector<std::map<std::string, int64_t>> free(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    free[n] = Amounts(FieldAt(FieldAt(nodes[n], "status"), "allocatable"));
  }
  auto node_index = [&](const std::string& name) -> std::optional<size_t> {
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (FieldText(FieldAt(nodes[n], "metadata"), "name") == name) return n;
    }
    return std::nullopt;
  };
  for (const json& pod : pods) {
    const std::string node = FieldText(FieldAt(pod, "spec"), "nodeName");
    if (node.empty() || !PodHoldsResources(pod)) continue;
    if (std::optional<size_t> n = node_index(node)) {
      for (const auto& [resource, amount] : PodRequests(pod)) free[*n][resource] -= amount;
    }
  }

  std::vector<SchedulingDecision> decisions;
  for (size_t p = 0; p < pods.size(); ++p) {
    const json& pod = pods[p];
    if (!FieldText(FieldAt(pod, "spec"), "nodeName").empty() || !PodHoldsResources(pod)) continue;
    // Another scheduler's pod (Volcano, coscheduling): not this one's to place.
    if (const std::string scheduler = FieldText(FieldAt(pod, "spec"), "schedulerName");
        !scheduler.empty() && scheduler != "default-scheduler") {
      continue;
    }
    const std::map<std::string, int64_t> requests = PodRequests(pod);
    std::map<std::string, int> reasons;  // why nodes were passed over, counted
    std::optional<size_t> best;
    for (size_t n = 0; n < nodes.size(); ++n) {
      const json& spec = FieldAt(nodes[n], "spec");
      if (FieldAt(spec, "unschedulable").is_boolean() && spec["unschedulable"].get<bool>()) {
        ++reasons["node(s) were unschedulable"];
        continue;
      }
      bool selected = true;
      const json& selector = FieldAt(FieldAt(pod, "spec"), "nodeSelector");
      if (selector.is_object()) {
        const json& labels = FieldAt(FieldAt(nodes[n], "metadata"), "labels");
        for (auto it = selector.begin(); it != selector.end(); ++it) {
          if (FieldText(labels, it.key().c_str()) != it.value()) selected = false;
        }
      }
      if (!selected) {
        ++reasons["node(s) didn't match Pod's node affinity/selector"];
        continue;
      }
      bool tainted = false;
      for (const json& taint : FieldAt(spec, "taints")) {
        const std::string effect = FieldText(taint, "effect");
        if ((effect == "NoSchedule" || effect == "NoExecute") && !Tolerated(pod, taint)) {
          tainted = true;
        }
      }
      if (tainted) {
        ++reasons["node(s) had untolerated taint"];
        continue;
      }
      bool fits = true;
      for (const auto& [resource, amount] : requests) {
        if (amount <= 0) continue;
        if (resource == "pods" && free[n].count("pods") == 0) continue;  // not counted there
        if (AmountOf(free[n], resource) < amount) {
          ++reasons[absl::StrCat("Insufficient ", resource)];
          fits = false;
        }
      }
      if (!fits) continue;
      if (!best || AmountOf(free[n], "cpu") > AmountOf(free[*best], "cpu")) best = n;
    }
    SchedulingDecision decision{p, "", ""};
    if (best) {
      decision.node = FieldText(FieldAt(nodes[*best], "metadata"), "name");
      for (const auto& [resource, amount] : requests) free[*best][resource] -= amount;
    } else {
      std::vector<std::string> parts;
      for (const auto& [reason, count] : reasons) parts.push_back(absl::StrCat(count, " ", reason));
      decision.message = absl::StrCat("0/", nodes.size(), " nodes are available",
                                      parts.empty() ? "" : ": ", absl::StrJoin(parts, ", "), ".");
    }
    decisions.push_back(std::move(decision));
  }
  return decisions;
}

}  // namespace kubetrain::fake_apiserver
