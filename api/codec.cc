#include "api/codec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/codec_internal.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "nlohmann/json.hpp"

// Decoding YAML/JSON into the schema: field names, types, enum values and
// the positions of errors. The text is parsed by ParseSingleDocument
// (codec_yaml_guard.cc) first.

namespace kubetrain::api {
namespace internal {

// yaml-cpp marks are 0-based; users count from 1.
FieldError ErrorAtMark(const YAML::Mark& mark, std::string path, std::string reason) {
  FieldError error{std::move(path), std::move(reason)};
  if (mark.line >= 0) {
    error.line = mark.line + 1;
    error.column = mark.column + 1;
  }
  return error;
}

// A plain (unquoted) scalar: YAML may read it as a number, bool or null. A
// quoted one is always a string.
bool IsPlainScalar(const YAML::Node& node) { return node.Tag() != "!"; }

bool IsNullScalar(const YAML::Node& node) {
  if (node.IsNull()) return true;
  if (!node.IsScalar() || !IsPlainScalar(node)) return false;
  const std::string& s = node.Scalar();
  return s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> ParseBool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

std::optional<double> ParseDouble(const std::string& s) {
  if (s.empty()) return std::nullopt;
  double value = 0;
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (*begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

}  // namespace internal

namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using internal::ErrorAtMark;
using internal::IsNullScalar;
using internal::IsPlainScalar;
using internal::ParseBool;
using internal::ParseDouble;
using internal::ParseSingleDocument;

FieldError ErrorAt(const YAML::Node& node, std::string path, std::string reason) {
  return ErrorAtMark(node.Mark(), std::move(path), std::move(reason));
}

std::string KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "\"" + node.Scalar() + "\"";
    case YAML::NodeType::Null:
      return "null";
    default:
      return "nothing";
  }
}

// Levenshtein distance, for "did you mean" hints on misspelt field names.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const bool same = absl::ascii_tolower(a[i - 1]) == absl::ascii_tolower(b[j - 1]);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string UnknownFieldReason(const std::string& key, const Descriptor* descriptor) {
  std::string reason = "unknown field \"" + key + "\"";
  const FieldDescriptor* best = nullptr;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    size_t distance = EditDistance(key, field->json_name());
    if (key == field->name()) distance = 0;  // snake_case spelling of a real field
    if (distance < best_distance) {
      best_distance = distance;
      best = field;
    }
  }
  if (best != nullptr && best_distance <= std::max<size_t>(2, key.size() / 4)) {
    absl::StrAppend(&reason, "; did you mean \"", best->json_name(), "\"?");
  }
  return reason;
}

template <typename Int>
std::optional<Int> ParseInteger(const std::string& s) {
  Int value{};
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end) return std::nullopt;
  return value;
}

class Decoder {
 public:
  explicit Decoder(std::vector<FieldError>* errors,
                   std::map<std::string, std::pair<int, int>>* positions = nullptr)
      : errors_(errors), positions_(positions) {}

  void DecodeMessage(const YAML::Node& node, Message* message, const std::string& path) {
    if (IsNullScalar(node)) return;
    if (!Spend(node, path)) return;
    const Descriptor* descriptor = message->GetDescriptor();
    if (descriptor->full_name() == "google.protobuf.Struct") {
      DecodeStruct(node, static_cast<google::protobuf::Struct*>(message), path);
      return;
    }
    if (descriptor->full_name() == "google.protobuf.Timestamp" ||
        descriptor->full_name() == "google.protobuf.Duration") {
      DecodeTime(node, message, path);
      return;
    }
    if (!node.IsMap()) {
      Fail(node, path, "expected a mapping, got " + KindName(node));
      return;
    }
    std::set<std::string> seen;
    for (const auto& entry : node) {
      const YAML::Node& key_node = entry.first;
      if (!key_node.IsScalar()) {
        Fail(key_node, path, "keys must be plain strings");
        continue;
      }
      const std::string key = key_node.Scalar();
      const std::string field_path = path.empty() ? key : path + "." + key;
      if (!seen.insert(key).second) {
        Fail(key_node, field_path, "duplicate key");
        continue;
      }
      Remember(key_node, field_path);
      const FieldDescriptor* field = FindField(descriptor, key);
      if (field == nullptr) {
        Fail(key_node, field_path, UnknownFieldReason(key, descriptor));
        continue;
      }
      DecodeField(entry.second, message, field, field_path);
    }
  }

 private:
  static const FieldDescriptor* FindField(const Descriptor* descriptor, const std::string& key) {
    for (int i = 0; i < descriptor->field_count(); ++i) {
      if (descriptor->field(i)->json_name() == key) return descriptor->field(i);
    }
    return nullptr;
  }

  // YAML aliases let a small text name a huge tree ("billion laughs"); every
  // message decoded spends from a budget far above any real job.
  bool Spend(const YAML::Node& node, const std::string& path) {
    if (++visited_ <= kMaxMessages) return true;
    if (visited_ == kMaxMessages + 1) {
      Fail(node, path, "input expands to more than " + std::to_string(kMaxMessages) + " objects");
    }
    return false;
  }

  void Remember(const YAML::Node& node, const std::string& path) {
    if (positions_ == nullptr || node.Mark().line < 0) return;
    positions_->emplace(path, std::make_pair(node.Mark().line + 1, node.Mark().column + 1));
  }

  void Fail(const YAML::Node& node, const std::string& path, std::string reason) {
    errors_->push_back(ErrorAt(node, path, std::move(reason)));
  }

  void DecodeField(const YAML::Node& node, Message* message, const FieldDescriptor* field,
                   const std::string& path) {
    if (IsNullScalar(node)) return;  // as in protobuf's JSON mapping: null leaves a field unset
    if (field->is_map()) {
      DecodeMap(node, message, field, path);
    } else if (field->is_repeated()) {
      if (!node.IsSequence()) {
        Fail(node, path, "expected a list, got " + KindName(node));
        return;
      }
      for (size_t i = 0; i < node.size(); ++i) {
        const std::string element_path = absl::StrCat(path, "[", i, "]");
        Remember(node[i], element_path);
        DecodeValue(node[i], message, field, element_path);
      }
    } else {
      DecodeValue(node, message, field, path);
    }
  }

  void DecodeMap(const YAML::Node& node, Message* message, const FieldDescriptor* field,
                 const std::string& path) {
    if (!node.IsMap()) {
      Fail(node, path, "expected a mapping, got " + KindName(node));
      return;
    }
    const Reflection* reflection = message->GetReflection();
    const FieldDescriptor* key_field = field->message_type()->map_key();
    const FieldDescriptor* value_field = field->message_type()->map_value();
    std::set<std::string> seen;
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) {
        Fail(entry.first, path, "keys must be plain strings");
        continue;
      }
      const std::string key = entry.first.Scalar();
      const std::string entry_path = path + "[" + key + "]";
      if (!seen.insert(key).second) {
        Fail(entry.first, entry_path, "duplicate key");
        continue;
      }
      Message* map_entry = reflection->AddMessage(message, field);
      map_entry->GetReflection()->SetString(map_entry, key_field, key);
      if (IsNullScalar(entry.second) &&
          value_field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
        continue;  // `key:` with no value is the empty string
      }
      DecodeValue(entry.second, map_entry, value_field, entry_path);
    }
  }

  // Decodes one value (a singular field, one list element or one map value).
  void DecodeValue(const YAML::Node& node, Message* message, const FieldDescriptor* field,
                   const std::string& path) {
    const Reflection* reflection = message->GetReflection();
    const bool repeated = field->is_repeated();
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* child = repeated ? reflection->AddMessage(message, field)
                                : reflection->MutableMessage(message, field);
      DecodeMessage(node, child, path);
      return;
    }
    if (!node.IsScalar()) {
      Fail(node, path, "expected " + ScalarKind(field) + ", got " + KindName(node));
      return;
    }
    const std::string& text = node.Scalar();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        repeated ? reflection->AddString(message, field, text)
                 : reflection->SetString(message, field, text);
        return;
      case FieldDescriptor::CPPTYPE_BOOL: {
        std::optional<bool> value = IsPlainScalar(node) ? ParseBool(text) : std::nullopt;
        if (!value) return Fail(node, path, "expected true or false, got " + KindName(node));
        repeated ? reflection->AddBool(message, field, *value)
                 : reflection->SetBool(message, field, *value);
        return;
      }
      case FieldDescriptor::CPPTYPE_INT32: {
        std::optional<int32_t> value = ParseInteger<int32_t>(text);
        if (!value) return Fail(node, path, "expected a 32-bit integer, got " + KindName(node));
        repeated ? reflection->AddInt32(message, field, *value)
                 : reflection->SetInt32(message, field, *value);
        return;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        // int64 is a string in protobuf's JSON mapping: accept both forms.
        std::optional<int64_t> value = ParseInteger<int64_t>(text);
        if (!value) return Fail(node, path, "expected an integer, got " + KindName(node));
        repeated ? reflection->AddInt64(message, field, *value)
                 : reflection->SetInt64(message, field, *value);
        return;
      }
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64: {
        std::optional<uint64_t> value = ParseInteger<uint64_t>(text);
        if (!value)
          return Fail(node, path, "expected a non-negative integer, got " + KindName(node));
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) {
          if (*value > std::numeric_limits<uint32_t>::max()) {
            return Fail(node, path, "out of range for a 32-bit integer");
          }
          repeated ? reflection->AddUInt32(message, field, *value)
                   : reflection->SetUInt32(message, field, *value);
        } else {
          repeated ? reflection->AddUInt64(message, field, *value)
                   : reflection->SetUInt64(message, field, *value);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        std::optional<double> value = ParseDouble(text);
        if (!value) return Fail(node, path, "expected a number, got " + KindName(node));
        if (!std::isfinite(*value)) return Fail(node, path, "must be a finite number");
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
          repeated ? reflection->AddDouble(message, field, *value)
                   : reflection->SetDouble(message, field, *value);
        } else {
          repeated ? reflection->AddFloat(message, field, static_cast<float>(*value))
                   : reflection->SetFloat(message, field, static_cast<float>(*value));
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const EnumDescriptor* type = field->enum_type();
        const auto* value = type->FindValueByName(text);
        if (value == nullptr) {
          std::vector<std::string> names;
          for (int i = 0; i < type->value_count(); ++i) {
            if (type->value(i)->number() != 0) names.push_back(type->value(i)->name());
          }
          // Cloud ML's TPU accelerators (TPU_V2, TPU_V3): say why, as the
          // TPU tiers and machine types do.
          const bool tpu = type == v1::AcceleratorConfig::AcceleratorType_descriptor() &&
                           absl::StartsWith(text, "TPU_");
          return Fail(node, path,
                      tpu ? "\"" + text + "\" is not supported: kubetrain has no TPUs"
                          : "unknown value \"" + text + "\"; expected one of " +
                                absl::StrJoin(names, ", "));
        }
        repeated ? reflection->AddEnumValue(message, field, value->number())
                 : reflection->SetEnumValue(message, field, value->number());
        return;
      }
      default:
        return Fail(node, path, "unsupported field type");
    }
  }

  static std::string ScalarKind(const FieldDescriptor* field) {
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        return "a string";
      case FieldDescriptor::CPPTYPE_BOOL:
        return "true or false";
      case FieldDescriptor::CPPTYPE_ENUM:
        return "one of the " + field->enum_type()->name() + " names";
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
        return "a number";
      default:
        return "an integer";
    }
  }

  void DecodeTime(const YAML::Node& node, Message* message, const std::string& path) {
    using google::protobuf::util::TimeUtil;
    if (!node.IsScalar()) {
      Fail(node, path, "expected a string, got " + KindName(node));
      return;
    }
    const std::string& text = node.Scalar();
    if (auto* timestamp = dynamic_cast<google::protobuf::Timestamp*>(message)) {
      if (!TimeUtil::FromString(text, timestamp)) {
        Fail(node, path,
             "expected an RFC 3339 time such as \"2026-01-02T15:04:05Z\", got " + KindName(node));
      }
    } else if (auto* duration = dynamic_cast<google::protobuf::Duration*>(message)) {
      if (!TimeUtil::FromString(text, duration)) {
        Fail(node, path, "expected a duration in seconds such as \"3600s\", got " + KindName(node));
      }
    }
  }

  // Free-form objects (pod-template overrides): YAML types as YAML reads them.
  void DecodeStruct(const YAML::Node& node, google::protobuf::Struct* out,
                    const std::string& path) {
    if (!node.IsMap()) {
      Fail(node, path, "expected a mapping, got " + KindName(node));
      return;
    }
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) {
        Fail(entry.first, path, "keys must be plain strings");
        continue;
      }
      const std::string key = entry.first.Scalar();
      const std::string key_path = path.empty() ? key : path + "." + key;
      Remember(entry.first, key_path);
      DecodeStructValue(entry.second, &(*out->mutable_fields())[key], key_path);
    }
  }

  void DecodeStructValue(const YAML::Node& node, google::protobuf::Value* out,
                         const std::string& path) {
    if (!Spend(node, path)) return;
    if (IsNullScalar(node)) {
      out->set_null_value(google::protobuf::NULL_VALUE);
    } else if (node.IsMap()) {
      DecodeStruct(node, out->mutable_struct_value(), path);
    } else if (node.IsSequence()) {
      auto* list = out->mutable_list_value();
      for (size_t i = 0; i < node.size(); ++i) {
        const std::string element_path = absl::StrCat(path, "[", i, "]");
        Remember(node[i], element_path);
        DecodeStructValue(node[i], list->add_values(), element_path);
      }
    } else {
      const std::string& text = node.Scalar();
      if (IsPlainScalar(node)) {
        if (std::optional<bool> b = ParseBool(text)) return out->set_bool_value(*b);
        if (std::optional<double> d = ParseDouble(text); d && std::isfinite(*d)) {
          return out->set_number_value(*d);
        }
      }
      out->set_string_value(text);
    }
  }

  static constexpr int kMaxMessages = 100000;
  std::vector<FieldError>* errors_;
  std::map<std::string, std::pair<int, int>>* positions_;
  int visited_ = 0;
};

}  // namespace

std::vector<FieldError> DecodeMessage(std::string_view text, google::protobuf::Message* message,
                                      const std::string& path_prefix) {
  std::vector<FieldError> errors;
  std::optional<YAML::Node> root = ParseSingleDocument(text, &errors);
  if (!root) return errors;
  Decoder(&errors).DecodeMessage(*root, message, path_prefix);
  return errors;
}

std::vector<YamlDocumentText> SplitYamlDocuments(std::string_view text) {
  std::vector<YamlDocumentText> documents;
  // A marker: the characters at the start of a line, then the line's end,
  // a blank or a tab.
  auto is_marker = [](std::string_view line, std::string_view marker) {
    return line.substr(0, marker.size()) == marker &&
           (line.size() == marker.size() || line[marker.size()] == ' ' ||
            line[marker.size()] == '\t' || line[marker.size()] == '\r');
  };
  auto is_empty = [](std::string_view line) {
    const size_t first = line.find_first_not_of(" \t\r");
    return first == std::string_view::npos || line[first] == '#';
  };
  size_t start = 0;  // of the document being read
  int start_line = 1;
  bool empty = true;
  auto close = [&](size_t end) {
    if (end > start) documents.push_back({text.substr(start, end - start), start_line, empty});
  };
  size_t at = 0;
  int line_number = 1;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    const size_t next = end == std::string_view::npos ? text.size() : end + 1;
    std::string_view line =
        text.substr(at, (end == std::string_view::npos ? text.size() : end) - at);
    if (is_marker(line, "---") || is_marker(line, "...")) {
      close(at);
      // What follows `---` on its line is the new document's ("--- {a: 1}").
      const bool content_follows = is_marker(line, "---") && !is_empty(line.substr(3));
      start = content_follows ? at : next;
      start_line = content_follows ? line_number : line_number + 1;
      empty = !content_follows;
    } else if (!is_empty(line) && line.front() != '%') {
      empty = false;
    }
    at = next;
    ++line_number;
  }
  close(text.size());
  return documents;
}

DecodedDocument DecodeDocument(std::string_view text) {
  DecodedDocument result;
  std::optional<YAML::Node> root = ParseSingleDocument(text, &result.errors);
  if (!root) return result;
  if (!root->IsMap()) {
    result.errors.push_back(ErrorAt(*root, "", "expected a mapping, got " + KindName(*root)));
    return result;
  }
  google::protobuf::Struct decoded;
  Decoder(&result.errors, &result.positions).DecodeMessage(*root, &decoded, "");
  if (!result.errors.empty()) return result;
  result.value = nlohmann::json::parse(EncodeJson(decoded), nullptr, /*allow_exceptions=*/false);
  if (!result.value.is_object()) result.value = nlohmann::json::object();
  return result;
}

DecodeResult DecodeTrainingJob(std::string_view text) {
  DecodeResult result;
  std::optional<YAML::Node> root = ParseSingleDocument(text, &result.errors);
  if (!root) return result;
  if (!root->IsMap()) {
    result.errors.push_back(ErrorAt(*root, "",
                                    "expected a TrainingJob or a config with "
                                    "trainingInput, got " +
                                        KindName(*root)));
    return result;
  }
  Decoder decoder(&result.errors, &result.positions);
  const bool bare_config = (*root)["trainingInput"].IsDefined() && !(*root)["spec"].IsDefined() &&
                           !(*root)["kind"].IsDefined() && !(*root)["apiVersion"].IsDefined();
  if (!bare_config) {
    decoder.DecodeMessage(*root, &result.job, "");
    return result;
  }
  // A Cloud ML config.yaml: trainingInput, and optionally the job's labels
  // and jobId as `gcloud ... jobs submit training --config` accepted them.
  result.bare_config = true;
  for (const auto& entry : *root) {
    const std::string key = entry.first.Scalar();
    if (entry.first.Mark().line >= 0) {
      result.positions.emplace(
          key, std::make_pair(entry.first.Mark().line + 1, entry.first.Mark().column + 1));
    }
    if (key == "trainingInput") {
      decoder.DecodeMessage(entry.second, result.job.mutable_spec()->mutable_training_input(),
                            "trainingInput");
    } else if (key == "labels") {
      v1::ObjectMeta labels_only;
      YAML::Node wrapper;
      wrapper["labels"] = entry.second;
      Decoder(&result.errors).DecodeMessage(wrapper, &labels_only, "");
      result.job.mutable_metadata()->mutable_labels()->insert(labels_only.labels().begin(),
                                                              labels_only.labels().end());
    } else if (key == "jobId") {
      if (!entry.second.IsScalar()) {
        result.errors.push_back(ErrorAt(entry.second, "jobId", "expected a string"));
      } else {
        result.job.mutable_metadata()->set_name(entry.second.Scalar());
      }
    } else {
      result.errors.push_back(
          ErrorAt(entry.first, key,
                  "unknown field \"" + key +
                      "\"; a Cloud ML config holds trainingInput, labels and jobId"));
    }
  }
  return result;
}

void DecodeResult::Locate(std::vector<FieldError>* located) const {
  for (FieldError& error : *located) {
    if (error.line > 0) continue;
    std::string path = error.path;
    while (!path.empty()) {
      if (auto it = positions.find(path); it != positions.end()) {
        error.line = it->second.first;
        error.column = it->second.second;
        break;
      }
      const size_t cut = path.find_last_of(".[");
      if (cut == std::string::npos) break;
      path.resize(cut);
    }
  }
}

}  // namespace kubetrain::api
