#pragma once

// Template placeholders left in a file that was meant to be filled in first:
// envsubst's `$NAME` and `${NAME}`, kustomize vars' `$(name)`, ksonnet's
// `%name%`, Helm's `{{ ... }}` and the `<your-value>` of documentation. Such
// a file is refused naming the placeholder, rather than with whatever its
// value breaks further on (a count that is not a number, a name that does not
// start with a letter, YAML that does not parse).

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/field_error.h"
#include "nlohmann/json.hpp"

namespace kubetrain::api {

// `value` when the whole of it is a placeholder (or it holds a Helm
// `{{ ... }}`); nullopt otherwise.
std::optional<std::string> WholeValuePlaceholder(std::string_view value);

// The first placeholder in a line of text (`%name%`, `{{ ... }}`, `${NAME}`),
// for a line YAML could not parse; nullopt when there is none.
std::optional<std::string> PlaceholderInLine(std::string_view line);

// "\"<p>\" is a template placeholder left in the file: fill it in first
// (envsubst, kustomize or helm template), or write the value".
std::string PlaceholderReason(const std::string& placeholder);

// The placeholders a decoded Kubeflow manifest holds where Kubernetes would
// take them literally: every string value that is one, except in a
// container's `command`, `args` and `env` (where `$(NAME)` is Kubernetes'
// own reference to a variable, and a shell may expand the rest). Each error
// is at its field's path, in the file's order; `positions` (DecodedDocument's)
// gives the line and column.
std::vector<FieldError> ManifestPlaceholders(
    const nlohmann::json& document, const std::map<std::string, std::pair<int, int>>& positions);

}  // namespace kubetrain::api
