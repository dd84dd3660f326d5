#include "cli/replica_requests.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace kubetrain::cli {
namespace {

using nlohmann::json;

// The resources a node must offer, in the order printed.
constexpr const char* kResources[] = {"cpu", "memory", "nvidia.com/gpu"};

// A Kubernetes quantity in base units (cores, bytes, devices): a decimal
// number and a suffix (m, k M G T P E, Ki Mi Gi Ti Pi Ei). nullopt otherwise.
std::optional<double> ParseQuantity(absl::string_view text) {
  static constexpr std::pair<const char*, double> kSuffixes[] = {
      {"Ki", 1024.0},
      {"Mi", 1024.0 * 1024},
      {"Gi", 1024.0 * 1024 * 1024},
      {"Ti", 1024.0 * 1024 * 1024 * 1024},
      {"Pi", 1024.0 * 1024 * 1024 * 1024 * 1024},
      {"Ei", 1024.0 * 1024 * 1024 * 1024 * 1024 * 1024},
      {"m", 1e-3},
      {"k", 1e3},
      {"M", 1e6},
      {"G", 1e9},
      {"T", 1e12},
      {"P", 1e15},
      {"E", 1e18}};
  double scale = 1;
  for (const auto& [suffix, factor] : kSuffixes) {
    if (absl::ConsumeSuffix(&text, suffix)) {
      scale = factor;
      break;
    }
  }
  double value = 0;
  if (text.empty() || !absl::SimpleAtod(text, &value) || !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  return value * scale;
}

// Sums as the renderer writes them: cores as a plain number, memory in Mi
// (Ki when not whole Mi), devices as a count.
std::string FormatQuantity(const std::string& resource, double value) {
  if (resource == "memory") {
    const double mib = value / (1024.0 * 1024);
    if (std::fabs(mib - std::round(mib)) < 1e-9) return absl::StrCat(std::llround(mib), "Mi");
    return absl::StrCat(std::llround(value / 1024.0), "Ki");
  }
  if (std::fabs(value - std::round(value)) < 1e-9) return absl::StrCat(std::llround(value));
  return absl::StrCat(std::llround(value * 1000), "m");
}

const json* TrainingContainer(const json& pod) {
  if (!pod.contains("spec") || !pod["spec"].is_object()) return nullptr;
  const json& spec = pod["spec"];
  if (!spec.contains("containers") || !spec["containers"].is_array()) return nullptr;
  for (const json& c : spec["containers"]) {
    if (c.is_object() && c.value("name", json()) == "kubetrain") return &c;
  }
  return spec["containers"].empty() ? nullptr : &spec["containers"][0];
}

// requests[resource], else limits[resource] (what a GPU is asked by).
std::string Requested(const json& container, const std::string& resource) {
  for (const char* kind : {"requests", "limits"}) {
    const json* resources = container.contains("resources") ? &container["resources"] : nullptr;
    if (resources == nullptr || !resources->is_object() || !resources->contains(kind)) continue;
    const json& values = (*resources)[kind];
    if (values.is_object() && values.contains(resource) && values[resource].is_string()) {
      return values[resource].get<std::string>();
    }
  }
  return "";
}

}  // namespace

std::string ReplicaRequestsComment(const std::vector<json>& objects) {
  struct Row {
    std::string pod;
    std::vector<std::string> values;  // per kResources, "" when not requested
  };
  std::vector<Row> rows;
  for (const json& object : objects) {
    if (!object.is_object() || object.value("kind", json()) != "Pod") continue;
    const json* container = TrainingContainer(object);
    Row row{object["metadata"].value("name", ""), {}};
    for (const char* resource : kResources) {
      row.values.push_back(container == nullptr ? "" : Requested(*container, resource));
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return "";

  size_t width = 0;
  for (const Row& row : rows) width = std::max(width, row.pod.size());
  std::string out =
      "# What each pod requests; it is scheduled only on a node with that much allocatable "
      "left:\n";
  std::vector<double> largest(std::size(kResources), 0), total(std::size(kResources), 0);
  std::vector<bool> readable(std::size(kResources), true);
  for (const Row& row : rows) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < row.values.size(); ++i) {
      if (row.values[i].empty()) continue;
      parts.push_back(absl::StrCat(kResources[i], " ", row.values[i]));
      std::optional<double> value = ParseQuantity(row.values[i]);
      if (!value) {
        readable[i] = false;
        continue;
      }
      largest[i] = std::max(largest[i], *value);
      total[i] += *value;
    }
    absl::StrAppend(&out, "#   ", row.pod, std::string(width - row.pod.size() + 2, ' '),
                    parts.empty() ? "no requests" : absl::StrJoin(parts, ", "), "\n");
  }
  std::vector<std::string> node, all;
  for (size_t i = 0; i < std::size(kResources); ++i) {
    if (!readable[i] || total[i] <= 0) continue;
    node.push_back(absl::StrCat(kResources[i], " ", FormatQuantity(kResources[i], largest[i])));
    all.push_back(absl::StrCat(kResources[i], " ", FormatQuantity(kResources[i], total[i])));
  }
  if (!node.empty()) {
    absl::StrAppend(&out, "# The largest pod needs a node with ", absl::StrJoin(node, ", "),
                    " allocatable; all ", rows.size(),
                    rows.size() == 1 ? " pod requests " : " pods request ",
                    absl::StrJoin(all, ", "), ".\n");
  }
  return out;
}

}  // namespace kubetrain::cli
