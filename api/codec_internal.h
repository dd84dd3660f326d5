#pragma once

// What the codec's files share (codec.cc: decoding into the schema;
// codec_yaml_guard.cc: the checks that run before yaml-cpp sees the text;
// codec_encode.cc: JSON and YAML output). Internal to api/: the contract is
// codec.h.

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/field_error.h"

namespace kubetrain::api::internal {

// An error at a yaml-cpp mark (0-based), reported 1-based as users count.
FieldError ErrorAtMark(const YAML::Mark& mark, std::string path, std::string reason);

// A plain (unquoted) scalar: YAML may read it as a number, bool or null. A
// quoted one is always a string.
bool IsPlainScalar(const YAML::Node& node);

// A null node, or a plain scalar YAML reads as null ("~", "null").
bool IsNullScalar(const YAML::Node& node);

// YAML's booleans and numbers as a plain scalar spells them.
std::optional<bool> ParseBool(const std::string& s);
std::optional<double> ParseDouble(const std::string& s);

// Parses exactly one YAML document, or appends why not to `errors`: input
// over the size or nesting limit, a stray ',' yaml-cpp would loop on, bytes
// that are not UTF-8, a NUL, a syntax error, several documents, an empty
// file. Every error carries the line and column where it can.
std::optional<YAML::Node> ParseSingleDocument(std::string_view text,
                                              std::vector<FieldError>* errors);

}  // namespace kubetrain::api::internal
