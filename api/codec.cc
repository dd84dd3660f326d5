#include "api/codec.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "nlohmann/json.hpp"

namespace kubetrain::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// yaml-cpp marks are 0-based; users count from 1.
FieldError ErrorAtMark(const YAML::Mark& mark, std::string path, std::string reason) {
  FieldError error{std::move(path), std::move(reason)};
  if (mark.line >= 0) {
    error.line = mark.line + 1;
    error.column = mark.column + 1;
  }
  return error;
}

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

// A plain (unquoted) scalar: YAML may read it as a number, bool or null. A
// quoted one is always a string.
bool IsPlainScalar(const YAML::Node& node) { return node.Tag() != "!"; }

bool IsNullScalar(const YAML::Node& node) {
  if (node.IsNull()) return true;
  if (!node.IsScalar() || !IsPlainScalar(node)) return false;
  const std::string& s = node.Scalar();
  return s == "~" || s == "null" || s == "Null" || s == "NULL";
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

std::optional<bool> ParseBool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
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
          return Fail(
              node, path,
              "unknown value \"" + text + "\"; expected one of " + absl::StrJoin(names, ", "));
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

// Returns the byte offset of the first invalid UTF-8 sequence, or npos.
size_t FindInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t code_point = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2;
      code_point = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3;
      code_point = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4;
      code_point = c & 0x07;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return i;
      code_point = (code_point << 6) | (next & 0x3F);
    }
    const bool overlong = (length == 2 && code_point < 0x80) ||
                          (length == 3 && code_point < 0x800) ||
                          (length == 4 && code_point < 0x10000);
    if (overlong || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

FieldError PositionedError(std::string_view text, size_t offset, std::string reason) {
  FieldError error{"", std::move(reason), 1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++error.line;
      error.column = 1;
    } else {
      ++error.column;
    }
  }
  return error;
}

// Limits that keep hostile input from exhausting the stack or memory: a job
// spec is a few kilobytes and a handful of levels deep.
constexpr size_t kMaxInputBytes = 4 << 20;
constexpr int kMaxNesting = 64;

// An upper bound on the nesting of flow collections ("[[[...") and block
// sequences started on one line ("- - - ..."), checked before yaml-cpp's
// recursive parser sees the text. Indentation nesting is bounded by line
// length and needs no check here.
int ApproximateNesting(std::string_view text) {
  int flow = 0, deepest = 0, dashes = 0;
  char quote = 0;
  bool line_start = true;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      if (c == '\n') line_start = true;
      continue;
    }
    if (c == '\n') {
      line_start = true;
      dashes = 0;
      continue;
    }
    if (line_start && c == '-') {
      ++dashes;
    } else if (line_start && c != ' ') {
      line_start = false;
    }
    if (c == '"' || c == '\'') quote = c;
    if (c == '[' || c == '{') ++flow;
    if ((c == ']' || c == '}') && flow > 0) --flow;
    deepest = std::max({deepest, flow, dashes});
  }
  return deepest;
}

// yaml-cpp 0.7 loops forever, allocating, when a ',' starts a token outside
// any flow collection at document level ("[a] ,", "- a\n,", "&x ,"). A plain
// scalar never starts with ',', so a ',' that starts a token in block context
// is an error anyway: find it before yaml-cpp does. Returns the byte offset of
// such a ',', or npos.
size_t FindStrayFlowEntry(std::string_view text) {
  int flow = 0;
  char quote = 0;
  size_t line_start = 0;
  int block_scalar_parent = -1;  // indentation of a `key: |` line, while its body lasts
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    const std::string_view line = text.substr(line_start, line_end - line_start);
    const size_t first = line.find_first_not_of(' ');
    const int indent = first == std::string_view::npos ? -1 : static_cast<int>(first);
    if (block_scalar_parent >= 0 && quote == 0) {
      if (indent < 0 || indent > block_scalar_parent) {
        line_start = line_end + 1;
        continue;
      }
      block_scalar_parent = -1;
    }
    std::string_view previous_word;  // the token before the current position
    char previous = 0;               // last non-space character on this line
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quote != 0) {
        if (quote == '"' && c == '\\') {
          ++i;  // an escaped character, possibly a quote
        } else if (c == quote) {
          quote = 0;
          previous = c;
        }
        continue;
      }
      if (c == ' ' || c == '\t') continue;
      if (c == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) break;
      if (c == '"' || c == '\'') {
        if (flow > 0 || previous == 0 || previous == ':' || previous == '-' || previous == '?' ||
            previous == ',' || previous == '[' || previous == '{') {
          quote = c;
          continue;
        }
      }
      if (c == '[' || c == '{') ++flow;
      if ((c == ']' || c == '}') && flow > 0) --flow;
      if (c == ',' && flow == 0) {
        const bool token_start = i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t';
        const bool after_terminator =
            previous == 0 || previous == ']' || previous == '}' || previous == '"' ||
            previous == '\'' || previous_word == ":" || previous_word == "-" ||
            previous_word == "?" || previous_word == "---" || previous_word == "..." ||
            (!previous_word.empty() &&
             (previous_word[0] == '&' || previous_word[0] == '!' || previous_word[0] == '*'));
        if (token_start && after_terminator) return line_start + i;
      }
      // Track the whitespace-delimited word that ends here.
      size_t word_end = i;
      while (word_end + 1 < line.size() && line[word_end + 1] != ' ' &&
             line[word_end + 1] != '\t' && flow == 0 && line[word_end + 1] != ',') {
        ++word_end;
      }
      if (flow == 0 && (word_end == i || line[i - (i > 0 ? 1 : 0)] == ' ' || i == 0)) {
        previous_word = line.substr(i, word_end - i + 1);
        previous = line[word_end];
        // A block scalar header ends its line: `key: |`, `- >-`.
        if ((previous_word[0] == '|' || previous_word[0] == '>') &&
            line.find_first_not_of(' ', word_end + 1) == std::string_view::npos) {
          block_scalar_parent = indent;
        }
        i = word_end;
        continue;
      }
      previous = c;
    }
    line_start = line_end + 1;
  }
  return std::string_view::npos;
}

// Counts the documents in a YAML stream through yaml-cpp's event parser, with
// limits. yaml-cpp 0.7's LoadAll loops for ever on some malformed streams (a
// stray '}' followed by an anchor yields endless empty documents), so the
// stream is walked here first, bounded, and only the first document is ever
// loaded as a tree.
class DocumentCounter : public YAML::EventHandler {
 public:
  // Every event but the closing ones consumes input, so a well-formed stream
  // has far fewer events than this; more means the parser is not advancing.
  explicit DocumentCounter(size_t input_bytes) : event_budget_(4 * input_bytes + 1024) {}

  struct NoProgress {
    YAML::Mark mark;
  };

  int documents() const { return documents_; }
  // Where the second document's content starts (for the "one document" error).
  const YAML::Mark& second_document() const { return second_document_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents_;
    Step(mark);
  }
  void OnDocumentEnd() override { Step(last_); }
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnSequenceEnd() override { Step(last_); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnMapEnd() override { Step(last_); }

 private:
  void Node(const YAML::Mark& mark) {
    if (documents_ == 2 && !second_seen_) {
      second_document_ = mark;
      second_seen_ = true;
    }
    Step(mark);
  }
  void Step(const YAML::Mark& mark) {
    last_ = mark;
    if (++events_ > event_budget_) throw NoProgress{mark};
  }

  size_t event_budget_;
  size_t events_ = 0;
  int documents_ = 0;
  bool second_seen_ = false;
  YAML::Mark second_document_ = YAML::Mark::null_mark();
  YAML::Mark last_ = YAML::Mark::null_mark();
};

// Parses exactly one YAML document, or reports why not.
std::optional<YAML::Node> ParseSingleDocument(std::string_view text,
                                              std::vector<FieldError>* errors) {
  if (text.size() > kMaxInputBytes) {
    errors->push_back({"", "input is " + std::to_string(text.size()) + " bytes; at most " +
                               std::to_string(kMaxInputBytes) + " are accepted"});
    return std::nullopt;
  }
  if (ApproximateNesting(text) > kMaxNesting) {
    errors->push_back({"", "input nests deeper than " + std::to_string(kMaxNesting) + " levels"});
    return std::nullopt;
  }
  if (size_t comma = FindStrayFlowEntry(text); comma != std::string_view::npos) {
    errors->push_back(PositionedError(
        text, comma,
        "unexpected ',' outside a [...] or {...} list (quote the value if it is text)"));
    return std::nullopt;
  }
  if (size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    errors->push_back(PositionedError(
        text, bad, "input is not valid UTF-8 (byte offset " + std::to_string(bad) + ")"));
    return std::nullopt;
  }
  if (text.find('\0') != std::string_view::npos) {
    errors->push_back(PositionedError(text, text.find('\0'), "input contains a NUL byte"));
    return std::nullopt;
  }
  // More documents than this are not counted one by one.
  constexpr int kMaxDocumentsCounted = 64;
  const std::string owned(text);
  DocumentCounter counter(text.size());
  try {
    std::istringstream stream(owned);
    YAML::Parser parser(stream);
    while (counter.documents() <= kMaxDocumentsCounted && parser.HandleNextDocument(counter)) {
    }
  } catch (const YAML::Exception& e) {
    errors->push_back(ErrorAtMark(e.mark, "", e.msg));
    return std::nullopt;
  } catch (const DocumentCounter::NoProgress& stuck) {
    errors->push_back(
        ErrorAtMark(stuck.mark, "", "malformed YAML: the parser stopped advancing here"));
    return std::nullopt;
  }
  if (counter.documents() > 1) {
    const std::string found = counter.documents() > kMaxDocumentsCounted
                                  ? "more than " + std::to_string(kMaxDocumentsCounted)
                                  : std::to_string(counter.documents());
    errors->push_back(
        ErrorAtMark(counter.second_document(), "",
                    "expected one YAML document, found " + found + " (split them into files)"));
    return std::nullopt;
  }
  YAML::Node document;
  if (counter.documents() == 1) {
    try {
      document = YAML::Load(owned);
    } catch (const YAML::Exception& e) {
      errors->push_back(ErrorAtMark(e.mark, "", e.msg));
      return std::nullopt;
    }
  }
  if (counter.documents() == 0 || IsNullScalar(document)) {
    errors->push_back(
        {"", "the file is empty: expected a TrainingJob or a config with trainingInput"});
    return std::nullopt;
  }
  return document;
}

// --- YAML output ------------------------------------------------------------

// True when a plain scalar with this text would be read back as something
// other than this string (a number, bool, null) or would not parse.
bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  if (ParseDouble(s) || ParseBool(s) || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    return true;
  }
  static const std::string kSpecialFirst = "!&*?:,[]{}#|>@`\"'%= ";
  if (kSpecialFirst.find(s.front()) != std::string::npos) return true;
  // "-x" and "--flag" are plain scalars; "-", "- x" and "---" are not.
  if (s.front() == '-' && (s.size() == 1 || s[1] == ' ' || s.rfind("---", 0) == 0)) return true;
  if (s.back() == ' ' || s.back() == ':') return true;
  if (s.find(": ") != std::string::npos || s.find(" #") != std::string::npos) return true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) return true;
  }
  const std::string lower = absl::AsciiStrToLower(s);
  return lower == "yes" || lower == "no" || lower == "on" || lower == "off" || lower == "y" ||
         lower == "n" || lower == ".inf" || lower == ".nan";
}

std::string QuoteScalar(const std::string& s) {
  bool control = false;
  for (char c : s) control |= static_cast<unsigned char>(c) < 0x20;
  if (control) return nlohmann::json(s).dump();  // double-quoted with escapes
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else
      out += c;
  }
  return out + "'";
}

std::string ScalarText(const nlohmann::json& value) {
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    return NeedsQuotes(s) ? QuoteScalar(s) : s;
  }
  if (value.is_null()) return "null";
  return value.dump();
}

void EmitYaml(const nlohmann::json& value, int indent, std::string* out);

// `indent` is the indentation of the parent key; mappings nest two deeper,
// lists sit at the key's own level, as gcloud prints them.
void EmitYamlChild(const nlohmann::json& value, int indent, std::string* out) {
  if (value.is_object() && !value.empty()) {
    *out += "\n";
    EmitYaml(value, indent + 2, out);
  } else if (value.is_array() && !value.empty()) {
    *out += "\n";
    EmitYaml(value, indent, out);
  } else if (value.is_object()) {
    *out += " {}\n";
  } else if (value.is_array()) {
    *out += " []\n";
  } else {
    *out += " " + ScalarText(value) + "\n";
  }
}

void EmitYaml(const nlohmann::json& value, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {  // nlohmann::json keeps keys sorted
      *out += pad + (NeedsQuotes(key) ? QuoteScalar(key) : key) + ":";
      EmitYamlChild(child, indent, out);
    }
  } else if (value.is_array()) {
    for (const auto& child : value) {
      if (child.is_object() && !child.empty()) {
        // "- key: value" with the following keys aligned under the first.
        std::string nested;
        EmitYaml(child, indent + 2, &nested);
        *out += pad + "- " + nested.substr(indent + 2);
      } else if (child.is_array() && !child.empty()) {
        *out += pad + "-\n";
        EmitYaml(child, indent + 2, out);
      } else {
        *out += pad + "-";
        EmitYamlChild(child, indent + 2, out);  // only scalars and empty containers get here
      }
    }
  } else {
    *out += pad + ScalarText(value) + "\n";
  }
}

}  // namespace

std::vector<FieldError> DecodeMessage(std::string_view text, google::protobuf::Message* message,
                                      const std::string& path_prefix) {
  std::vector<FieldError> errors;
  std::optional<YAML::Node> root = ParseSingleDocument(text, &errors);
  if (!root) return errors;
  Decoder(&errors).DecodeMessage(*root, message, path_prefix);
  return errors;
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

std::string EncodeJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  std::string out;
  // Printing a message we built cannot fail for these types.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

namespace {

bool IsInt64(const FieldDescriptor* field) {
  return field->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
         field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
}

// One int64 value printed as a string back to a number (left alone if it is
// not one, which protobuf's printer never produces).
void Int64ToNumber(const FieldDescriptor* field, nlohmann::json* value) {
  if (!value->is_string()) return;
  const std::string& text = value->get_ref<const std::string&>();
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
    uint64_t n = 0;
    if (absl::SimpleAtoi(text, &n)) *value = n;
  } else {
    int64_t n = 0;
    if (absl::SimpleAtoi(text, &n)) *value = n;
  }
}

// Walks `object` (the JSON of a `descriptor` message) turning int64 fields into
// numbers. Well-known types hold none that the schema shows as integers.
void Int64FieldsToNumbers(const Descriptor* descriptor, nlohmann::json* object) {
  if (!object->is_object() || descriptor->file()->package() == "google.protobuf") return;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    auto it = object->find(field->json_name());
    if (it == object->end()) continue;
    if (field->is_map()) {
      const FieldDescriptor* value_field = field->message_type()->map_value();
      for (auto& [key, value] : it->items()) {
        if (IsInt64(value_field)) Int64ToNumber(value_field, &value);
        if (value_field->message_type() != nullptr) {
          Int64FieldsToNumbers(value_field->message_type(), &value);
        }
      }
    } else if (field->is_repeated() && it->is_array()) {
      for (nlohmann::json& value : *it) {
        if (IsInt64(field)) Int64ToNumber(field, &value);
        if (field->message_type() != nullptr) Int64FieldsToNumbers(field->message_type(), &value);
      }
    } else if (IsInt64(field)) {
      Int64ToNumber(field, &*it);
    } else if (field->message_type() != nullptr) {
      Int64FieldsToNumbers(field->message_type(), &*it);
    }
  }
}

}  // namespace

nlohmann::json EncodeKubernetesJson(const google::protobuf::Message& message) {
  nlohmann::json value = nlohmann::json::parse(EncodeJson(message), nullptr, false);
  Int64FieldsToNumbers(message.GetDescriptor(), &value);
  return value;
}

std::string EncodeYaml(const google::protobuf::Message& message) {
  const nlohmann::json value = nlohmann::json::parse(EncodeJson(message));
  if (value.empty()) return "{}\n";
  std::string out;
  EmitYaml(value, 0, &out);
  return out;
}

std::string EncodeYaml(const nlohmann::json& value) {
  if (value.is_object() && value.empty()) return "{}\n";
  std::string out;
  EmitYaml(value, 0, &out);
  return out;
}

}  // namespace kubetrain::api
