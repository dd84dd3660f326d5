#include "api/template_placeholder.h"

#include <algorithm>
#include <regex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::api {
namespace {

// The forms a whole value takes. `<...>` holds no spaces: "<a> and <b>" is
// prose, and "<namespace>" or "<dockerimage:tag>" are not.
const std::regex& WholeValueForms() {
  static const std::regex* forms = new std::regex(
      R"(\$[A-Za-z_][A-Za-z0-9_]*|\$\{[^{}\s]+\}|\$\([^()\s]+\)|%[A-Za-z_][A-Za-z0-9_.]*%|<[^<>\s]+>)");
  return *forms;
}

const std::regex& InLineForms() {
  static const std::regex* forms =
      new std::regex(R"(\{\{[^}]*\}\}|%[A-Za-z_][A-Za-z0-9_.]*%|\$\{[A-Za-z_][A-Za-z0-9_]*\})");
  return *forms;
}

// Where a container's fields may hold `$(NAME)` and shell text.
bool ExpandedByKubernetesOrAShell(const std::string& key, bool in_container) {
  return in_container && (key == "command" || key == "args" || key == "env");
}

void Walk(const nlohmann::json& node, const std::string& path, bool in_container,
          const std::map<std::string, std::pair<int, int>>& positions,
          std::vector<FieldError>* errors) {
  if (node.is_string()) {
    if (std::optional<std::string> placeholder = WholeValuePlaceholder(node.get<std::string>())) {
      FieldError error{path, PlaceholderReason(*placeholder)};
      if (auto it = positions.find(path); it != positions.end()) {
        error.line = it->second.first;
        error.column = it->second.second;
      }
      errors->push_back(std::move(error));
    }
  } else if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (ExpandedByKubernetesOrAShell(key, in_container)) continue;
      const bool containers =
          key == "containers" || key == "initContainers" || key == "ephemeralContainers";
      Walk(value, path.empty() ? key : absl::StrCat(path, ".", key), containers, positions, errors);
    }
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) {
      // A list's elements are containers when the list is.
      Walk(node[i], absl::StrCat(path, "[", i, "]"), in_container, positions, errors);
    }
  }
}

}  // namespace

std::optional<std::string> WholeValuePlaceholder(std::string_view value) {
  const std::string text(value);
  if (std::regex_match(text, WholeValueForms())) return text;
  if (absl::StrContains(text, "{{") && absl::StrContains(text, "}}")) return text;
  return std::nullopt;
}

std::optional<std::string> PlaceholderInLine(std::string_view line) {
  const std::string text(line);
  std::smatch match;
  if (std::regex_search(text, match, InLineForms())) return match.str(0);
  return std::nullopt;
}

std::string PlaceholderReason(const std::string& placeholder) {
  return absl::StrCat("\"", placeholder,
                      "\" is a template placeholder left in the file: fill it in first (envsubst, "
                      "kustomize or helm template), or write the value");
}

std::vector<FieldError> ManifestPlaceholders(
    const nlohmann::json& document, const std::map<std::string, std::pair<int, int>>& positions) {
  std::vector<FieldError> errors;
  Walk(document, "", /*in_container=*/false, positions, &errors);
  // The walk goes by key; a reader goes down the file.
  std::stable_sort(errors.begin(), errors.end(), [](const FieldError& a, const FieldError& b) {
    return std::make_pair(a.line, a.column) < std::make_pair(b.line, b.column);
  });
  return errors;
}

}  // namespace kubetrain::api
