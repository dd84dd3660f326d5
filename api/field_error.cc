#include "api/field_error.h"

namespace kubetrain::api {

std::string FieldError::ToString() const {
  std::string out;
  if (line > 0) out += std::to_string(line) + ":" + std::to_string(column) + ": ";
  if (!path.empty()) out += path + ": ";
  out += reason;
  return out;
}

std::string FormatErrors(const std::vector<FieldError>& errors, const std::string& source) {
  std::string out;
  for (const FieldError& error : errors) {
    if (!source.empty()) out += source + ":";
    if (!source.empty() && error.line > 0) {
      out += std::to_string(error.line) + ":" + std::to_string(error.column) + ": ";
      if (!error.path.empty()) out += error.path + ": ";
      out += error.reason;
    } else {
      if (!source.empty()) out += " ";
      out += error.ToString();
    }
    out += "\n";
  }
  return out;
}

}  // namespace kubetrain::api
