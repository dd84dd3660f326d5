#pragma once

#include <string>
#include <vector>

namespace kubetrain::api {

// One problem with user input, located by a field path in the resource
// ("spec.trainingInput.hyperparameters.params[1].minValue") and, when it came
// from a file, a 1-based line and column.
struct FieldError {
  std::string path;
  std::string reason;
  int line = 0;
  int column = 0;

  // "path: reason", or "line:column: path: reason" when the position is known.
  std::string ToString() const;
  bool operator==(const FieldError&) const = default;
};

// Joins errors one per line, each prefixed with `source` ("config.yaml") when
// it is not empty.
std::string FormatErrors(const std::vector<FieldError>& errors, const std::string& source = "");

}  // namespace kubetrain::api
