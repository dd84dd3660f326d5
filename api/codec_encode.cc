#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "api/codec.h"
#include "api/codec_internal.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

// Output: protobuf's JSON mapping, the Kubernetes form of it, and YAML.

namespace kubetrain::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using internal::ParseBool;
using internal::ParseDouble;

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
  // YAML 1.1's base-60 numbers ("1:4" reads as 64 in PyYAML): digits with
  // colons, as in torchrun's PET_NNODES "min:max".
  const size_t digits_from = s.front() == '-' || s.front() == '+' ? 1 : 0;
  if (s.find(':') != std::string::npos && digits_from < s.size() &&
      absl::ascii_isdigit(s[digits_from]) &&
      s.find_first_not_of("0123456789_:.", digits_from) == std::string::npos) {
    return true;
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

std::string EncodeJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  std::string out;
  // Printing a message we built cannot fail for these types.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

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
