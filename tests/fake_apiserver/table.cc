#include "tests/fake_apiserver/table.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;

// The media ranges of an Accept header, each split into its type and
// parameters: "application/json;as=Table;v=v1;g=meta.k8s.io".
std::vector<std::vector<std::string>> MediaRanges(absl::string_view accept) {
  std::vector<std::vector<std::string>> ranges;
  for (absl::string_view range : absl::StrSplit(accept, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts;
    for (absl::string_view part : absl::StrSplit(range, ';')) {
      parts.push_back(absl::AsciiStrToLower(absl::StripAsciiWhitespace(part)));
    }
    ranges.push_back(std::move(parts));
  }
  return ranges;
}

bool HasParameter(const std::vector<std::string>& range, const std::string& parameter) {
  for (size_t i = 1; i < range.size(); ++i) {
    if (range[i] == parameter) return true;
  }
  return false;
}

// The description the apiserver gives the Name column.
constexpr char kNameDescription[] =
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

json Cell(const std::string& type, const json* value, absl::Time now) {
  if (value == nullptr || value->is_null()) return nullptr;
  if (type == "string") return value->is_string() ? *value : json(value->dump());
  if (type == "integer") {
    if (value->is_number_integer()) return *value;
    if (value->is_number_float()) return static_cast<int64_t>(value->get<double>());
    return nullptr;
  }
  if (type == "number") return value->is_number() ? json(value->get<double>()) : json(nullptr);
  if (type == "boolean") return value->is_boolean() ? *value : json(nullptr);
  if (type == "date") {
    if (!value->is_string()) return nullptr;
    absl::Time t;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, value->get<std::string>(), &t, &error)) {
      return "<invalid>";
    }
    return HumanDuration(now - t);
  }
  return nullptr;
}

}  // namespace

bool AcceptsTable(absl::string_view accept) {
  for (const std::vector<std::string>& range : MediaRanges(accept)) {
    if (range[0] == "application/json" && HasParameter(range, "as=table") &&
        HasParameter(range, "g=meta.k8s.io") && HasParameter(range, "v=v1")) {
      return true;
    }
  }
  return false;
}

bool AcceptsPlainJson(absl::string_view accept) {
  if (accept.empty()) return true;
  for (const std::vector<std::string>& range : MediaRanges(accept)) {
    if (range[0] == "*/*" || range[0] == "application/*") return true;
    if (range[0] == "application/json") {
      bool as = false;
      for (size_t i = 1; i < range.size(); ++i) as = as || absl::StartsWith(range[i], "as=");
      if (!as) return true;
    }
  }
  return false;
}

absl::StatusOr<const json*> SelectSimpleJsonPath(const json& object, absl::string_view path) {
  if (path.empty() || path[0] != '.') {
    return absl::InvalidArgumentError(absl::StrCat("not a simple JSON path: \"", path, "\""));
  }
  const json* node = &object;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      size_t end = i + 1;
      while (end < path.size() && path[end] != '.' && path[end] != '[') ++end;
      const std::string field(path.substr(i + 1, end - i - 1));
      if (field.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("not a simple JSON path: \"", path, "\""));
      }
      if (node != nullptr) {
        auto it = node->is_object() ? node->find(field) : node->end();
        node = node->is_object() && it != node->end() ? &*it : nullptr;
      }
      i = end;
    } else if (path[i] == '[') {
      const size_t close = path.find(']', i);
      size_t index = 0;
      if (close == absl::string_view::npos ||
          !absl::SimpleAtoi(path.substr(i + 1, close - i - 1), &index)) {
        return absl::InvalidArgumentError(absl::StrCat("not a simple JSON path: \"", path, "\""));
      }
      if (node != nullptr)
        node = node->is_array() && index < node->size() ? &(*node)[index] : nullptr;
      i = close + 1;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("not a simple JSON path: \"", path, "\""));
    }
  }
  return node;
}

std::string HumanDuration(absl::Duration d) {
  const int64_t seconds = absl::ToInt64Seconds(d);
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return absl::StrCat(seconds, "s");
  const int64_t minutes = seconds / 60;
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return s == 0 ? absl::StrCat(minutes, "m") : absl::StrCat(minutes, "m", s, "s");
  }
  if (minutes < 60 * 3) return absl::StrCat(minutes, "m");
  const int64_t hours = minutes / 60;
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return m == 0 ? absl::StrCat(hours, "h") : absl::StrCat(hours, "h", m, "m");
  }
  if (hours < 48) return absl::StrCat(hours, "h");
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return h == 0 ? absl::StrCat(hours / 24, "d") : absl::StrCat(hours / 24, "d", h, "h");
  }
  if (hours < 24 * 365 * 2) return absl::StrCat(hours / 24, "d");
  if (hours < 24 * 365 * 8) {
    const int64_t days = (hours / 24) % 365;
    return days == 0 ? absl::StrCat(hours / 24 / 365, "y")
                     : absl::StrCat(hours / 24 / 365, "y", days, "d");
  }
  return absl::StrCat(hours / 24 / 365, "y");
}

absl::StatusOr<json> ToTable(const std::vector<json>& objects, const json& printer_columns,
                             const std::string& resource_version, const std::string& include_object,
                             absl::Time now) {
  if (include_object != "None" && include_object != "Metadata" && include_object != "Object") {
    return absl::InvalidArgumentError(absl::StrCat(
        "includeObject: must be None, Metadata or Object, got \"", include_object, "\""));
  }
  json columns = json::array({{{"name", "Name"},
                               {"type", "string"},
                               {"format", "name"},
                               {"description", kNameDescription},
                               {"priority", 0}}});
  for (const json& c : printer_columns) {
    columns.push_back({{"name", c.value("name", "")},
                       {"type", c.value("type", "")},
                       {"format", c.value("format", "")},
                       {"description", c.value("description", "")},
                       {"priority", c.value("priority", 0)}});
  }
  json rows = json::array();
  for (const json& object : objects) {
    json cells = json::array({object["metadata"].value("name", "")});
    for (const json& c : printer_columns) {
      absl::StatusOr<const json*> value = SelectSimpleJsonPath(object, c.value("jsonPath", ""));
      if (!value.ok()) return value.status();
      cells.push_back(Cell(c.value("type", ""), *value, now));
    }
    json row = {{"cells", std::move(cells)}};
    if (include_object == "Metadata") {
      row["object"] = {{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", object["metadata"]}};
    } else if (include_object == "Object") {
      row["object"] = object;
    }
    rows.push_back(std::move(row));
  }
  return json{{"kind", "Table"},
              {"apiVersion", "meta.k8s.io/v1"},
              {"metadata", {{"resourceVersion", resource_version}}},
              {"columnDefinitions", std::move(columns)},
              {"rows", std::move(rows)}};
}

}  // namespace kubetrain::fake_apiserver
