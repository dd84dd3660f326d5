#include "operator/core/gang_admission.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/core/reconcile_pass.h"

namespace kubetrain::core {

using nlohmann::json;

namespace {

constexpr char kPods[] = "pods";

// value * 10^exp10 * 2^exp2, as numerator/denominator of a multiplier.
struct Multiplier {
  __int128 numerator = 1;
  __int128 denominator = 1;
};

std::optional<Multiplier> SuffixMultiplier(absl::string_view suffix) {
  auto pow = [](__int128 base, int n) {
    __int128 r = 1;
    for (int i = 0; i < n; ++i) r *= base;
    return r;
  };
  static constexpr std::pair<absl::string_view, int> kBinary[] = {
      {"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60}};
  for (auto [name, bits] : kBinary) {
    if (suffix == name) return Multiplier{pow(2, bits), 1};
  }
  static constexpr std::pair<absl::string_view, int> kDecimal[] = {
      {"n", -9}, {"u", -6}, {"m", -3}, {"", 0},   {"k", 3},
      {"M", 6},  {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18}};
  for (auto [name, exponent] : kDecimal) {
    if (suffix == name) {
      return exponent >= 0 ? Multiplier{pow(10, exponent), 1} : Multiplier{1, pow(10, -exponent)};
    }
  }
  if (suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    int exponent = 0;
    if (!absl::SimpleAtoi(suffix.substr(1), &exponent) || exponent < -18 || exponent > 18) {
      return std::nullopt;
    }
    return exponent >= 0 ? Multiplier{pow(10, exponent), 1} : Multiplier{1, pow(10, -exponent)};
  }
  return std::nullopt;
}

absl::Status BadQuantity(absl::string_view quantity, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("quantity \"", quantity, "\": ", why));
}

// A quantity field that may be a JSON number or a string.
absl::StatusOr<int64_t> QuantityField(const json& value, const std::string& where) {
  absl::StatusOr<int64_t> parsed = absl::InvalidArgumentError("not a quantity");
  if (value.is_string()) {
    parsed = ParseQuantityMilli(value.get<std::string>());
  } else if (value.is_number()) {
    parsed = ParseQuantityMilli(value.dump());
  }
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
  }
  return parsed;
}

absl::StatusOr<ResourceAmounts> ResourceList(const json& list, const std::string& where) {
  ResourceAmounts out;
  if (list.is_null()) return out;
  if (!list.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not an object"));
  for (auto it = list.begin(); it != list.end(); ++it) {
    absl::StatusOr<int64_t> amount = QuantityField(it.value(), absl::StrCat(where, ".", it.key()));
    if (!amount.ok()) return amount.status();
    out[it.key()] = *amount;
  }
  return out;
}

const json& JsonMember(const json& object, const char* name) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(name);
  return it == object.end() ? kNull : *it;
}

std::string JsonString(const json& object, const char* name) {
  const json& value = JsonMember(object, name);
  return value.is_string() ? value.get<std::string>() : "";
}

std::map<std::string, std::string> JsonStringMap(const json& object) {
  std::map<std::string, std::string> out;
  if (!object.is_object()) return out;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

// A container's requests, with its limits standing in for what it does not request.
absl::StatusOr<ResourceAmounts> ContainerRequests(const json& container, const std::string& where) {
  const json& resources = JsonMember(container, "resources");
  absl::StatusOr<ResourceAmounts> requests =
      ResourceList(JsonMember(resources, "requests"), where + ".resources.requests");
  if (!requests.ok()) return requests.status();
  absl::StatusOr<ResourceAmounts> limits =
      ResourceList(JsonMember(resources, "limits"), where + ".resources.limits");
  if (!limits.ok()) return limits.status();
  for (const auto& [resource, amount] : *limits) requests->emplace(resource, amount);
  return requests;
}

absl::StatusOr<std::vector<NodeSelectorRequirement>> Requirements(const json& list,
                                                                  const std::string& key_override,
                                                                  const std::string& where) {
  std::vector<NodeSelectorRequirement> out;
  if (list.is_null()) return out;
  if (!list.is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a list"));
  for (size_t i = 0; i < list.size(); ++i) {
    const json& item = list[i];
    NodeSelectorRequirement r;
    r.key = JsonString(item, "key");
    if (!key_override.empty()) {
      if (r.key != key_override) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "[", i, "].key: only ", key_override, " is a node field"));
      }
    }
    r.op = JsonString(item, "operator");
    static const std::set<std::string> kOps = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"};
    if (kOps.count(r.op) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "[", i, "].operator: \"", r.op, "\" is not one of ", absl::StrJoin(kOps, ", ")));
    }
    for (const json& v : JsonMember(item, "values")) {
      if (v.is_string()) r.values.push_back(v.get<std::string>());
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool RequirementHolds(const NodeSelectorRequirement& r, const NodeCapacity& node) {
  std::optional<std::string> value;
  if (r.key == "metadata.name") {
    value = node.name;
  } else if (auto it = node.labels.find(r.key); it != node.labels.end()) {
    value = it->second;
  }
  const bool listed =
      value && std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
  if (r.op == "In") return listed;
  if (r.op == "NotIn") return !listed;
  if (r.op == "Exists") return value.has_value();
  if (r.op == "DoesNotExist") return !value.has_value();
  int64_t have = 0, bound = 0;
  if (!value || r.values.size() != 1 || !absl::SimpleAtoi(*value, &have) ||
      !absl::SimpleAtoi(r.values[0], &bound)) {
    return false;
  }
  return r.op == "Gt" ? have > bound : have < bound;
}

bool Tolerates(const std::vector<Toleration>& tolerations, const Taint& taint) {
  for (const Toleration& t : tolerations) {
    if (!t.effect.empty() && t.effect != taint.effect) continue;
    if (t.op == "Exists") {
      if (t.key.empty() || t.key == taint.key) return true;
    } else if (t.key == taint.key && t.value == taint.value) {
      return true;
    }
  }
  return false;
}

// Whether the node accepts the pod at all, whatever is bound there.
bool Accepts(const NodeCapacity& node, const PodPlacement& pod) {
  if (node.unschedulable) return false;
  for (const Taint& taint : node.taints) {
    if (taint.effect == "PreferNoSchedule") continue;
    if (!Tolerates(pod.tolerations, taint)) return false;
  }
  for (const auto& [key, value] : pod.node_selector) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return false;
  }
  if (pod.required_terms.empty()) return true;
  for (const std::vector<NodeSelectorRequirement>& term : pod.required_terms) {
    if (std::all_of(term.begin(), term.end(),
                    [&](const NodeSelectorRequirement& r) { return RequirementHolds(r, node); })) {
      return true;
    }
  }
  return false;
}

int64_t Amount(const ResourceAmounts& amounts, const std::string& resource) {
  auto it = amounts.find(resource);
  return it == amounts.end() ? 0 : it->second;
}

// Nodes and what is placed on them, for one simulation. Amounts are kept
// per node in a vector indexed by resource (those the nodes have), and a
// pod's requests are looked up once per pod, not once per node: a pass
// places thousands of pods on a hundred nodes.
class Placer {
 public:
  explicit Placer(const std::vector<NodeCapacity>& nodes) : nodes_(&nodes) {
    for (const NodeCapacity& node : nodes) {
      for (const auto& [resource, amount] : node.allocatable) {
        resource_index_.emplace(resource, resource_index_.size());
      }
    }
    allocatable_.assign(nodes.size(), std::vector<int64_t>(resource_index_.size(), 0));
    used_ = allocatable_;
    counts_pods_.assign(nodes.size(), false);
    for (size_t i = 0; i < nodes.size(); ++i) {
      node_index_.emplace(nodes[i].name, i);
      for (const auto& [resource, amount] : nodes[i].allocatable) {
        allocatable_[i][resource_index_[resource]] = amount;
      }
      counts_pods_[i] = nodes[i].allocatable.count(kPods) > 0;
    }
    cpu_ = IndexOf("cpu");
    memory_ = IndexOf("memory");
    pods_ = IndexOf(kPods);
  }

  // Counts a pod that is bound already.
  void Bind(const PodPlacement& pod) {
    if (auto it = node_index_.find(pod.node); it != node_index_.end()) {
      Add(it->second, DemandOf(pod.requests), 1);
    }
  }

  // The node the pod goes to: of those that accept it and have room, the one
  // it leaves the least cpu free on (then memory, then name). nullopt: none.
  std::optional<size_t> Choose(const PodPlacement& pod) const {
    const Demand demand = DemandOf(pod.requests);
    if (demand.nowhere) return std::nullopt;
    std::optional<size_t> best;
    std::pair<int64_t, int64_t> best_free;
    for (size_t i = 0; i < nodes_->size(); ++i) {
      if (!Fits(i, demand) || !Accepts((*nodes_)[i], pod)) continue;
      std::pair<int64_t, int64_t> free = {Free(i, cpu_) - demand.cpu,
                                          Free(i, memory_) - demand.memory};
      if (!best || free < best_free) {
        best = i;
        best_free = free;
      }
    }
    return best;
  }

  // Whether the pod fits node `i` as it is now (accepted there or not).
  bool Fits(size_t i, const PodPlacement& pod) const {
    const Demand demand = DemandOf(pod.requests);
    return !demand.nowhere && Fits(i, demand);
  }

  bool Place(const PodPlacement& pod) { return PlaceOn(pod).has_value(); }

  // Where the pod went; nullopt when nowhere.
  std::optional<size_t> PlaceOn(const PodPlacement& pod) {
    std::optional<size_t> node = Choose(pod);
    if (node) Add(*node, DemandOf(pod.requests), 1);
    return node;
  }

  // Takes back a pod placed on node `i`.
  void Remove(size_t i, const ResourceAmounts& requests) { Add(i, DemandOf(requests), -1); }

 private:
  // A pod's requests in this placer's terms.
  struct Demand {
    std::vector<std::pair<size_t, int64_t>> amounts;  // (resource index, amount > 0)
    bool nowhere = false;                             // it asks for a resource no node has
    int64_t cpu = 0, memory = 0;
  };

  static constexpr size_t kNone = std::numeric_limits<size_t>::max();

  size_t IndexOf(const std::string& resource) const {
    auto it = resource_index_.find(resource);
    return it == resource_index_.end() ? kNone : it->second;
  }

  Demand DemandOf(const ResourceAmounts& requests) const {
    Demand demand;
    for (const auto& [resource, amount] : requests) {
      if (amount <= 0) continue;
      const size_t index = IndexOf(resource);
      // A node that does not count pods (not a real kubelet's) holds any number.
      if (index == kNone) {
        if (resource != kPods) demand.nowhere = true;
        continue;
      }
      demand.amounts.emplace_back(index, amount);
      if (index == cpu_) demand.cpu = amount;
      if (index == memory_) demand.memory = amount;
    }
    return demand;
  }

  bool Fits(size_t i, const Demand& demand) const {
    for (const auto& [resource, amount] : demand.amounts) {
      if (resource == pods_ && !counts_pods_[i]) continue;
      if (used_[i][resource] + amount > allocatable_[i][resource]) return false;
    }
    return true;
  }

  int64_t Free(size_t i, size_t resource) const {
    return resource == kNone ? 0 : allocatable_[i][resource] - used_[i][resource];
  }

  void Add(size_t i, const Demand& demand, int64_t sign) {
    for (const auto& [resource, amount] : demand.amounts) used_[i][resource] += sign * amount;
  }

  const std::vector<NodeCapacity>* nodes_;
  std::map<std::string, size_t> resource_index_;
  std::map<std::string, size_t, std::less<>> node_index_;
  std::vector<std::vector<int64_t>> allocatable_, used_;  // [node][resource]
  std::vector<bool> counts_pods_;                         // allocatable names "pods"
  size_t cpu_ = kNone, memory_ = kNone, pods_ = kNone;
};

// Largest first, so the big pods find their nodes before the small ones fill them.
std::vector<const PodPlacement*> PlacementOrder(std::vector<const PodPlacement*> order) {
  // Each pod's size read once, not once per comparison.
  using Size = std::tuple<int64_t, int64_t, int64_t>;
  std::vector<std::pair<Size, const PodPlacement*>> sized;
  sized.reserve(order.size());
  for (const PodPlacement* p : order) {
    sized.emplace_back(Size(Amount(p->requests, "nvidia.com/gpu"), Amount(p->requests, "cpu"),
                            Amount(p->requests, "memory")),
                       p);
  }
  std::stable_sort(sized.begin(), sized.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < sized.size(); ++i) order[i] = sized[i].second;
  return order;
}
std::vector<const PodPlacement*> PlacementOrder(const std::vector<PodPlacement>& pods) {
  std::vector<const PodPlacement*> order;
  for (const PodPlacement& pod : pods) order.push_back(&pod);
  return PlacementOrder(std::move(order));
}

// Places every pod, or none: true when all of them fit (and are then counted).
// (What is placed is taken back on the way out, rather than the placer
// copied: a pass tries a thousand gangs on a hundred nodes.)
bool PlaceAll(Placer& placer, const std::vector<const PodPlacement*>& pods) {
  std::vector<std::pair<size_t, const PodPlacement*>> placed;
  for (const PodPlacement* pod : pods) {
    std::optional<size_t> node = placer.PlaceOn(*pod);
    if (!node) {
      for (const auto& [i, p] : placed) placer.Remove(i, p->requests);
      return false;
    }
    placed.emplace_back(*node, pod);
  }
  return true;
}

// How many of the pods fit now, one after another (the ones that do not are skipped).
int CountPlaceable(Placer& placer, const std::vector<const PodPlacement*>& pods) {
  std::vector<std::pair<size_t, const PodPlacement*>> placed;
  for (const PodPlacement* pod : pods) {
    if (std::optional<size_t> node = placer.PlaceOn(*pod)) placed.emplace_back(*node, pod);
  }
  for (const auto& [i, p] : placed) placer.Remove(i, p->requests);
  return static_cast<int>(placed.size());
}

// What placing a gang depends on, as text: gangs of one shape fare alike.
std::string Shape(const std::vector<const PodPlacement*>& ordered) {
  std::string shape;
  for (const PodPlacement* pod : ordered) {
    for (const auto& [resource, amount] : pod->requests)
      absl::StrAppend(&shape, resource, "=", amount, ",");
    for (const auto& [key, value] : pod->node_selector)
      absl::StrAppend(&shape, "s:", key, "=", value, ",");
    for (const Toleration& t : pod->tolerations) {
      absl::StrAppend(&shape, "t:", t.key, "/", t.op, "/", t.value, "/", t.effect, ",");
    }
    for (const auto& term : pod->required_terms) {
      absl::StrAppend(&shape, "a:");
      for (const NodeSelectorRequirement& r : term) {
        absl::StrAppend(&shape, r.key, " ", r.op, " ", absl::StrJoin(r.values, "|"), ";");
      }
    }
    shape += "\n";
  }
  return shape;
}

// "4 pods of cpu 4, memory 15Gi", or "3 pods (1 of cpu 8, memory 30Gi; 2 of cpu 4, memory 15Gi)".
std::string DescribePods(const std::vector<PodPlacement>& pods) {
  std::vector<std::pair<std::string, int>> groups;
  for (const PodPlacement& pod : pods) {
    std::string amounts = FormatAmounts(pod.requests);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == amounts; });
    if (it == groups.end()) {
      groups.emplace_back(amounts, 1);
    } else {
      ++it->second;
    }
  }
  std::string count = absl::StrCat(pods.size(), pods.size() == 1 ? " pod" : " pods");
  if (groups.size() == 1) return absl::StrCat(count, " of ", groups[0].first);
  std::vector<std::string> parts;
  for (const auto& [amounts, n] : groups) parts.push_back(absl::StrCat(n, " of ", amounts));
  return absl::StrCat(count, " (", absl::StrJoin(parts, "; "), ")");
}

// Why the gang cannot be placed even on the empty cluster.
std::string NeverFitsMessage(const std::vector<NodeCapacity>& nodes, const Gang& gang) {
  const std::string needs = absl::StrCat("needs ", DescribePods(gang.Pods()), "; ");
  if (nodes.empty()) return needs + "the cluster has no nodes";
  for (const PodPlacement& pod : gang.Pods()) {
    const NodeCapacity* largest = nullptr;
    Placer empty(nodes);
    bool fits_alone = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!Accepts(nodes[i], pod)) continue;
      if (empty.Fits(i, pod)) fits_alone = true;
      auto size = [](const NodeCapacity& n) {
        return std::make_pair(Amount(n.allocatable, "cpu"), Amount(n.allocatable, "memory"));
      };
      if (largest == nullptr || size(nodes[i]) > size(*largest)) largest = &nodes[i];
    }
    if (largest == nullptr) {
      return absl::StrCat(needs, "no node accepts pod ", pod.name,
                          " (node selector, tolerations of the nodes' taints, node affinity, "
                          "or the node is cordoned)");
    }
    if (!fits_alone) {
      ResourceAmounts shown = largest->allocatable;
      for (auto it = shown.begin(); it != shown.end();) {
        it = pod.requests.count(it->first) ? std::next(it) : shown.erase(it);
      }
      return absl::StrCat(needs, "pod ", pod.name, " needs ", FormatAmounts(pod.requests),
                          " and the largest node that accepts it, ", largest->name, ", has ",
                          FormatAmounts(shown), " allocatable");
    }
  }
  ResourceAmounts total, allocatable;
  for (const PodPlacement& pod : gang.Pods()) {
    for (const auto& [resource, amount] : pod.requests) total[resource] += amount;
  }
  for (const NodeCapacity& node : nodes) {
    if (node.unschedulable) continue;
    for (const auto& [resource, amount] : node.allocatable) {
      if (total.count(resource)) allocatable[resource] += amount;
    }
  }
  return absl::StrCat(needs, "together they ask for ", FormatAmounts(total),
                      ", more than the cluster's nodes can hold at once even empty (",
                      FormatAmounts(allocatable), " allocatable in all)");
}

// The pod resource a quota key counts; "" for keys admission does not read.
std::string QuotaResource(const std::string& key) {
  if (key == "count/pods" || key == kPods) return kPods;
  if (key == "cpu" || key == "memory") return key;
  if (absl::StartsWith(key, "requests.")) return key.substr(std::string("requests.").size());
  return "";
}

}  // namespace

std::string JobsAhead(int n) {
  if (n == 0) return "no job ahead of it";
  return absl::StrCat(n, n == 1 ? " job" : " jobs", " ahead of it");
}

absl::StatusOr<int64_t> ParseQuantityMilli(absl::string_view quantity) {
  absl::string_view text = absl::StripAsciiWhitespace(quantity);
  if (text.empty()) return BadQuantity(quantity, "empty");
  size_t i = 0;
  if (text[0] == '+') {
    i = 1;
  } else if (text[0] == '-') {
    return BadQuantity(quantity, "negative");
  }
  __int128 digits = 0;
  __int128 scale = 1;  // 10^(digits after the point)
  bool any_digit = false, point = false;
  for (; i < text.size(); ++i) {
    char ch = text[i];
    if (ch == '.' && !point) {
      point = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(ch))) break;
    any_digit = true;
    if (digits > (__int128(1) << 100)) return BadQuantity(quantity, "too large");
    digits = digits * 10 + (ch - '0');
    if (point) scale *= 10;
  }
  if (!any_digit) return BadQuantity(quantity, "no number");
  std::optional<Multiplier> multiplier = SuffixMultiplier(text.substr(i));
  if (!multiplier) {
    return BadQuantity(quantity, absl::StrCat("unknown suffix \"", text.substr(i),
                                              "\" (expected one of Ki Mi Gi Ti Pi Ei, n u m k M "
                                              "G T P E, or an exponent e<n>)"));
  }
  __int128 numerator = digits * multiplier->numerator * 1000;
  __int128 denominator = scale * multiplier->denominator;
  __int128 milli = (numerator + denominator - 1) / denominator;  // rounded up
  if (milli > std::numeric_limits<int64_t>::max()) return BadQuantity(quantity, "too large");
  return static_cast<int64_t>(milli);
}

std::string FormatQuantity(absl::string_view resource, int64_t milli) {
  if (resource == "memory" || resource == "ephemeral-storage") {
    int64_t bytes = (milli + 999) / 1000;
    static constexpr std::pair<const char*, int> kUnits[] = {{"Ei", 60}, {"Pi", 50}, {"Ti", 40},
                                                             {"Gi", 30}, {"Mi", 20}, {"Ki", 10}};
    for (auto [unit, bits] : kUnits) {
      int64_t size = int64_t{1} << bits;
      if (bytes != 0 && bytes % size == 0) return absl::StrCat(bytes / size, unit);
    }
    return absl::StrCat(bytes);
  }
  if (milli % 1000 == 0) return absl::StrCat(milli / 1000);
  return absl::StrCat(milli, "m");
}

std::string FormatAmounts(const ResourceAmounts& amounts) {
  std::vector<std::string> parts;
  // cpu and memory first, as people list them; then the rest by name.
  for (const char* first : {"cpu", "memory"}) {
    if (auto it = amounts.find(first); it != amounts.end()) {
      parts.push_back(absl::StrCat(first, " ", FormatQuantity(first, it->second)));
    }
  }
  for (const auto& [resource, amount] : amounts) {
    if (resource == "cpu" || resource == "memory" || resource == kPods) continue;
    parts.push_back(absl::StrCat(resource, " ", FormatQuantity(resource, amount)));
  }
  if (parts.empty()) return "no resources";
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<PodPlacement> ParsePodPlacement(const json& pod) {
  PodPlacement out;
  const json& metadata = JsonMember(pod, "metadata");
  const json& spec = JsonMember(pod, "spec");
  out.name = JsonString(metadata, "name");
  out.ns = JsonString(metadata, "namespace");
  out.node = JsonString(spec, "nodeName");
  out.priority_class = JsonString(spec, "priorityClassName");
  // Containers run together: their requests add up, and so do sidecars'
  // (init containers with restartPolicy Always, which keep running). Other
  // init containers run one at a time, before them: the largest counts,
  // when it is larger.
  for (const bool init : {false, true}) {
    const char* list = init ? "initContainers" : "containers";
    const json& containers = JsonMember(spec, list);
    if (!containers.is_array()) continue;
    for (size_t i = 0; i < containers.size(); ++i) {
      absl::StatusOr<ResourceAmounts> requests =
          ContainerRequests(containers[i], absl::StrCat("spec.", list, "[", i, "]"));
      if (!requests.ok()) return requests.status();
      const bool runs_along = !init || JsonString(containers[i], "restartPolicy") == "Always";
      for (const auto& [resource, amount] : *requests) {
        int64_t& total = out.requests[resource];
        total = runs_along ? total + amount : std::max(total, amount);
      }
    }
  }
  out.requests[kPods] = 1000;
  out.node_selector = JsonStringMap(JsonMember(spec, "nodeSelector"));
  const json& tolerations = JsonMember(spec, "tolerations");
  if (tolerations.is_array()) {
    for (const json& t : tolerations) {
      Toleration toleration;
      toleration.key = JsonString(t, "key");
      toleration.op = JsonString(t, "operator");
      if (toleration.op.empty()) toleration.op = "Equal";
      toleration.value = JsonString(t, "value");
      toleration.effect = JsonString(t, "effect");
      out.tolerations.push_back(std::move(toleration));
    }
  }
  const json& terms =
      JsonMember(JsonMember(JsonMember(JsonMember(spec, "affinity"), "nodeAffinity"),
                            "requiredDuringSchedulingIgnoredDuringExecution"),
                 "nodeSelectorTerms");
  if (terms.is_array()) {
    for (size_t i = 0; i < terms.size(); ++i) {
      const std::string where = absl::StrCat(
          "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
          "nodeSelectorTerms[",
          i, "]");
      absl::StatusOr<std::vector<NodeSelectorRequirement>> expressions =
          Requirements(JsonMember(terms[i], "matchExpressions"), "", where + ".matchExpressions");
      if (!expressions.ok()) return expressions.status();
      absl::StatusOr<std::vector<NodeSelectorRequirement>> fields = Requirements(
          JsonMember(terms[i], "matchFields"), "metadata.name", where + ".matchFields");
      if (!fields.ok()) return fields.status();
      expressions->insert(expressions->end(), fields->begin(), fields->end());
      out.required_terms.push_back(*std::move(expressions));
    }
  }
  return out;
}

absl::StatusOr<NodeCapacity> ParseNode(const json& node) {
  NodeCapacity out;
  out.name = JsonString(JsonMember(node, "metadata"), "name");
  out.labels = JsonStringMap(JsonMember(JsonMember(node, "metadata"), "labels"));
  const json& spec = JsonMember(node, "spec");
  out.unschedulable =
      JsonMember(spec, "unschedulable").is_boolean() && spec["unschedulable"].get<bool>();
  const json& taints = JsonMember(spec, "taints");
  if (taints.is_array()) {
    for (const json& t : taints) {
      out.taints.push_back({JsonString(t, "key"), JsonString(t, "value"), JsonString(t, "effect")});
    }
  }
  absl::StatusOr<ResourceAmounts> allocatable =
      ResourceList(JsonMember(JsonMember(node, "status"), "allocatable"),
                   absl::StrCat("node ", out.name, ": status.allocatable"));
  if (!allocatable.ok()) return allocatable.status();
  out.allocatable = *std::move(allocatable);
  return out;
}

absl::StatusOr<NamespaceQuota> ParseResourceQuota(const json& quota) {
  NamespaceQuota out;
  out.name = JsonString(JsonMember(quota, "metadata"), "name");
  out.ns = JsonString(JsonMember(quota, "metadata"), "namespace");
  absl::StatusOr<ResourceAmounts> hard =
      ResourceList(JsonMember(JsonMember(quota, "spec"), "hard"),
                   absl::StrCat("ResourceQuota ", out.ns, "/", out.name, ": spec.hard"));
  if (!hard.ok()) return hard.status();
  out.hard = *std::move(hard);
  return out;
}

const v1::Condition* FindAdmittedCondition(const v1::TrainingJobStatus& status) {
  for (const v1::Condition& c : status.conditions()) {
    if (c.type() == kAdmittedCondition) return &c;
  }
  return nullptr;
}

void SetAdmittedCondition(v1::TrainingJobStatus* status, bool admitted, const std::string& reason,
                          const std::string& message, absl::Time now) {
  v1::Condition* condition = nullptr;
  for (v1::Condition& c : *status->mutable_conditions()) {
    if (c.type() == kAdmittedCondition) condition = &c;
  }
  if (condition == nullptr) {
    condition = status->add_conditions();
    condition->set_type(kAdmittedCondition);
  }
  const std::string value = admitted ? "True" : "False";
  if (condition->status() != value || !condition->has_last_transition_time()) {
    internal::ToProto(now, condition->mutable_last_transition_time());
  }
  condition->set_status(value);
  condition->set_reason(reason);
  condition->set_message(message);
  internal::ToProto(now, condition->mutable_last_update_time());
}

bool AdmitsTrialsOneByOne(const v1::TrainingJobStatus& status) {
  const v1::Condition* admitted = FindAdmittedCondition(status);
  return admitted != nullptr && admitted->status() == "True" &&
         admitted->reason() == kAdmittedReason;
}

std::string AdmittedElsewhere(const v1::TrainingJob& job) {
  if (job.metadata().labels().count(kKueueQueueLabel) > 0) return "Kueue";
  auto scheduler = [](const google::protobuf::Struct& pod_template) -> std::string {
    auto spec = pod_template.fields().find("spec");
    if (spec == pod_template.fields().end() || !spec->second.has_struct_value()) return "";
    const auto& fields = spec->second.struct_value().fields();
    auto name = fields.find("schedulerName");
    if (name == fields.end() || name->second.string_value() == "default-scheduler") return "";
    return name->second.string_value();
  };
  std::string name = scheduler(job.spec().template_());
  for (const auto& [role, pod_template] : job.spec().replica_templates()) {
    if (name.empty()) name = scheduler(pod_template);
  }
  return name.empty() ? "" : "scheduler " + name;
}

bool AdmitsBefore(const Gang& a, const Gang& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.created != b.created) return a.created < b.created;
  if (a.uid != b.uid) return a.uid < b.uid;
  if (a.trial != b.trial) return a.trial < b.trial;
  return a.key < b.key;
}

std::vector<AdmissionDecision> PlanAdmission(const ClusterState& cluster,
                                             const std::vector<Gang>& gangs, absl::Time now,
                                             const AdmissionPolicy& policy) {
  std::vector<const Gang*> order;
  for (const Gang& gang : gangs) order.push_back(&gang);
  std::stable_sort(order.begin(), order.end(),
                   [](const Gang* a, const Gang* b) { return AdmitsBefore(*a, *b); });

  // What is bound, and what each namespace's quotas count already. Pods are
  // known by (namespace, name), views into `cluster` and `gangs`.
  using PodKey = std::pair<absl::string_view, absl::string_view>;
  Placer placer(cluster.nodes);
  absl::flat_hash_set<PodKey> existing;  // every pod there is
  absl::flat_hash_set<PodKey> bound;
  std::map<std::string, ResourceAmounts, std::less<>> namespace_used;
  auto count_in_quota = [&](absl::string_view ns, const ResourceAmounts& requests) {
    auto it = namespace_used.find(ns);
    if (it == namespace_used.end())
      it = namespace_used.emplace(std::string(ns), ResourceAmounts()).first;
    for (const auto& [resource, amount] : requests) it->second[resource] += amount;
  };
  existing.reserve(cluster.pods.size() + cluster.pod_views.size());
  auto observe = [&](const PodPlacement& pod) {
    existing.insert({pod.ns, pod.name});
    count_in_quota(pod.ns, pod.requests);
    if (pod.node.empty()) return;
    placer.Bind(pod);
    bound.insert({pod.ns, pod.name});
  };
  for (const PodPlacement& pod : cluster.pods) observe(pod);
  for (const PodPlacement* pod : cluster.pod_views) observe(*pod);
  // The pods of a gang that are not there yet (a quota counts them once created).
  auto missing = [&](const Gang& gang) {
    std::vector<const PodPlacement*> out;
    for (const PodPlacement& pod : gang.Pods()) {
      if (!existing.contains(PodKey(gang.ns, pod.name))) out.push_back(&pod);
    }
    return out;
  };
  // Admitted gangs' pods still to be placed take their room first.
  for (const Gang* gang : order) {
    if (!gang->admitted) continue;
    std::vector<const PodPlacement*> unbound;
    for (const PodPlacement& pod : gang->Pods()) {
      if (!bound.contains(PodKey(gang->ns, pod.name))) unbound.push_back(&pod);
    }
    for (const PodPlacement* pod : PlacementOrder(std::move(unbound))) placer.Place(*pod);
    for (const PodPlacement* pod : missing(*gang)) count_in_quota(gang->ns, pod->requests);
  }

  std::vector<AdmissionDecision> decisions;
  int waiting = 0;
  // The head of the queue, once it has waited past the backfill limit.
  const Gang* holding = nullptr;
  // Per shape (Shape): whether the empty cluster holds it, and, until the
  // next admission (what is free only shrinks in between), how many of its
  // pods fit now when it does not fit whole.
  std::map<std::string, bool> never_fits;
  std::map<std::string, int> does_not_fit_now;
  std::map<std::string, std::string> described;  // DescribePods by shape
  for (const Gang* gang : order) {
    if (gang->admitted) continue;
    AdmissionDecision decision{gang->key, "", 0, ""};
    const std::vector<const PodPlacement*> pods = PlacementOrder(gang->Pods());
    const std::string shape = Shape(pods);
    auto never = never_fits.find(shape);
    if (never == never_fits.end()) {
      Placer empty(cluster.nodes);
      never = never_fits.emplace(shape, !PlaceAll(empty, pods)).first;
    }
    if (never->second) {
      decision.reason = kNeverFitsReason;
      decision.message = NeverFitsMessage(cluster.nodes, *gang);  // names the gang's own pods
      decisions.push_back(std::move(decision));
      continue;
    }
    // Quotas: what the gang's missing pods add to what the namespace counts.
    ResourceAmounts adds;
    for (const PodPlacement* pod : missing(*gang)) {
      for (const auto& [resource, amount] : pod->requests) adds[resource] += amount;
    }
    std::string quota_message;
    for (const NamespaceQuota& quota : cluster.quotas) {
      if (quota.ns != gang->ns || !quota_message.empty()) continue;
      for (const auto& [key, hard] : quota.hard) {
        const std::string resource = QuotaResource(key);
        if (resource.empty() || Amount(adds, resource) == 0) continue;
        const int64_t used = Amount(namespace_used[gang->ns], resource);
        if (used + Amount(adds, resource) <= hard) continue;
        quota_message = absl::StrCat(
            "ResourceQuota ", quota.name, " in namespace ", quota.ns, ": ", key, " ",
            FormatQuantity(resource, used), " of ", FormatQuantity(resource, hard),
            " used, and the job asks for ", FormatQuantity(resource, Amount(adds, resource)),
            Amount(adds, resource) > hard ? " (more than the quota allows at all)" : "");
        break;
      }
    }
    if (!quota_message.empty()) {
      decision.reason = kQuotaExceededReason;
      decision.position = ++waiting;
      decision.message = absl::StrCat(quota_message, "; ", JobsAhead(decision.position - 1));
      decisions.push_back(std::move(decision));
      continue;
    }
    auto known_misfit = does_not_fit_now.find(shape);
    if (holding == nullptr && known_misfit == does_not_fit_now.end() && PlaceAll(placer, pods)) {
      does_not_fit_now.clear();
      for (const PodPlacement* pod : missing(*gang)) {
        for (const auto& [resource, amount] : pod->requests) {
          namespace_used[gang->ns][resource] += amount;
        }
      }
      decision.reason = kAdmittedReason;
      decision.message = absl::StrCat("its ", DescribePods(gang->Pods()), " fit the cluster now");
      decisions.push_back(std::move(decision));
      continue;
    }
    decision.reason = kWaitingForCapacityReason;
    decision.position = ++waiting;
    if (known_misfit == does_not_fit_now.end()) {
      known_misfit = does_not_fit_now.emplace(shape, CountPlaceable(placer, pods)).first;
    }
    auto description = described.find(shape);
    if (description == described.end()) {
      description = described.emplace(shape, DescribePods(gang->Pods())).first;
    }
    decision.message =
        absl::StrCat("needs ", description->second, "; the cluster can place ",
                     known_misfit->second, " of them now; ", JobsAhead(decision.position - 1));
    if (holding != nullptr) {
      absl::StrAppend(&decision.message, "; jobs behind ", holding->key,
                      " wait for it: it has waited longer than ",
                      absl::FormatDuration(policy.backfill_limit));
    } else if (now - gang->waiting_since >= policy.backfill_limit) {
      holding = gang;
    }
    decisions.push_back(std::move(decision));
  }
  return decisions;
}

}  // namespace kubetrain::core
