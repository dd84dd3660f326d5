#include "api/structural_schema.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

bool Flag(const json& schema, const char* key) {
  auto it = schema.find(key);
  return it != schema.end() && it->is_boolean() && it->get<bool>();
}

std::string Child(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

// The JSON type of a value as the server names it in "must be of type"
// messages: Go's decoding makes a number without fraction or exponent an
// integer.
std::string TypeName(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    default:
      return "number";
  }
}

bool HasType(const json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "integer") return value.is_number_integer();
  if (type == "number") return value.is_number();
  return true;  // an unknown type name validates nothing, as go-openapi
}

// The value as the server quotes it after "Invalid value: ".
std::string Quoted(const json& value) {
  if (value.is_string() || value.is_number() || value.is_boolean()) return value.dump();
  return absl::StrCat("\"", TypeName(value), "\"");
}

class Checker {
 public:
  Checker(SchemaCheck* out, bool root) : out_(out), root_(root) {}

  void Prune(const json& schema, json* value, const std::string& path) {
    if (Flag(schema, "x-kubernetes-preserve-unknown-fields") && !schema.contains("properties") &&
        !schema.contains("additionalProperties") && !schema.contains("items")) {
      return;
    }
    if (value->is_object()) {
      auto properties = schema.find("properties");
      auto additional = schema.find("additionalProperties");
      const bool has_properties = properties != schema.end() && properties->is_object();
      const bool has_additional = additional != schema.end() && additional->is_object();
      const bool preserve = Flag(schema, "x-kubernetes-preserve-unknown-fields");
      std::vector<std::string> doomed;
      for (auto it = value->begin(); it != value->end(); ++it) {
        const std::string& key = it.key();
        if (IsServersField(path, key)) continue;
        const json* child_schema = nullptr;
        if (has_properties) {
          if (auto p = properties->find(key); p != properties->end()) child_schema = &*p;
        }
        if (child_schema == nullptr && has_additional) child_schema = &*additional;
        if (child_schema == nullptr) {
          if (!preserve) doomed.push_back(key);
          continue;
        }
        if (it.value().is_null() && !Flag(*child_schema, "nullable")) {
          doomed.push_back(key);
          continue;
        }
        Prune(*child_schema, &it.value(),
              has_additional && !has_properties ? absl::StrCat(path, "[", key, "]")
                                                : Child(path, key));
      }
      for (const std::string& key : doomed) {
        if (!(*value)[key].is_null()) out_->pruned.push_back(Child(path, key));
        value->erase(key);
      }
    } else if (value->is_array()) {
      auto items = schema.find("items");
      if (items == schema.end() || !items->is_object()) return;
      for (size_t i = 0; i < value->size(); ++i) {
        Prune(*items, &(*value)[i], absl::StrCat(path, "[", i, "]"));
      }
    }
  }

  void Validate(const json& schema, const json& value, const std::string& path) {
    if (value.is_null()) {
      if (!Flag(schema, "nullable")) TypeError(schema, value, path);
      return;
    }
    if (Flag(schema, "x-kubernetes-int-or-string")) {
      if (!value.is_number_integer() && !value.is_string()) {
        Add(path, "FieldValueTypeInvalid", Quoted(value),
            absl::StrCat(path, " in body must be of type integer,string: ", Quoted(value)));
        return;
      }
    } else if (auto type = schema.find("type"); type != schema.end() && type->is_string()) {
      if (!HasType(value, type->get<std::string>())) {
        TypeError(schema, value, path);
        return;
      }
    }
    if (!CheckEnum(schema, value, path)) return;
    CheckFormat(schema, value, path);
    if (value.is_string()) CheckString(schema, value.get_ref<const std::string&>(), path);
    if (value.is_number()) CheckNumber(schema, value, path);
    if (value.is_array()) {
      CheckCount(schema, value.size(), "minItems", "maxItems", "items", path, value);
      if (auto items = schema.find("items"); items != schema.end() && items->is_object()) {
        for (size_t i = 0; i < value.size(); ++i) {
          Validate(*items, value[i], absl::StrCat(path, "[", i, "]"));
        }
      }
    }
    if (value.is_object()) ValidateObject(schema, value, path);
  }

 private:
  void Add(const std::string& path, const std::string& reason, const std::string& shown,
           const std::string& detail) {
    std::string message;
    if (reason == "FieldValueRequired") {
      message = "Required value";
    } else if (reason == "FieldValueNotSupported") {
      message = absl::StrCat("Unsupported value: ", shown, ": ", detail);
    } else {
      message = absl::StrCat("Invalid value: ", shown, ": ", detail);
    }
    out_->violations.push_back(
        SchemaViolation{path, reason, absl::StrCat(path, ": ", message), std::move(message)});
  }

  void TypeError(const json& schema, const json& value, const std::string& path) {
    Add(path, "FieldValueTypeInvalid", absl::StrCat("\"", TypeName(value), "\""),
        absl::StrCat(path, " in body must be of type ", schema.value("type", std::string()), ": \"",
                     TypeName(value), "\""));
  }

  bool CheckEnum(const json& schema, const json& value, const std::string& path) {
    auto values = schema.find("enum");
    if (values == schema.end() || !values->is_array()) return true;
    for (const json& allowed : *values) {
      if (allowed == value) return true;
    }
    std::vector<std::string> shown;
    for (const json& allowed : *values) shown.push_back(allowed.dump());
    Add(path, "FieldValueNotSupported", Quoted(value),
        absl::StrCat("supported values: ", absl::StrJoin(shown, ", ")));
    return false;
  }

  void CheckFormat(const json& schema, const json& value, const std::string& path) {
    const std::string format = schema.value("format", std::string());
    if (format == "date-time" && value.is_string()) {
      absl::Time parsed;
      std::string error;
      if (!absl::ParseTime(absl::RFC3339_full, value.get<std::string>(), &parsed, &error)) {
        Add(path, "FieldValueInvalid", Quoted(value),
            absl::StrCat(path, " in body must be of type date-time: ", Quoted(value)));
      }
      return;
    }
    if ((format == "int32" || format == "int64") && value.is_number_integer()) {
      const bool in_range =
          format == "int64" ? !value.is_number_unsigned() ||
                                  value.get<uint64_t>() <=
                                      static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
          : !value.is_number_unsigned()
              ? value.get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                    value.get<int64_t>() <= std::numeric_limits<int32_t>::max()
              : value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
      if (!in_range) {
        Add(path, "FieldValueInvalid", Quoted(value),
            absl::StrCat(path, " in body must be of type ", format, ": ", Quoted(value)));
      }
    }
  }

  void CheckString(const json& schema, const std::string& text, const std::string& path) {
    if (auto pattern = schema.find("pattern"); pattern != schema.end() && pattern->is_string()) {
      bool matches = false;
      try {
        matches = std::regex_search(
            text, std::regex(pattern->get<std::string>(), std::regex::ECMAScript));
      } catch (const std::regex_error&) {
        matches = false;  // the real server refuses such a CRD; nothing can match it
      }
      if (!matches) {
        Add(path, "FieldValueInvalid", json(text).dump(),
            absl::StrCat(path, " in body should match '", pattern->get<std::string>(), "'"));
      }
    }
    // Lengths count characters (code points), as Go's utf8.RuneCountInString.
    size_t length = 0;
    for (unsigned char c : text) length += (c & 0xC0) != 0x80;
    CheckCount(schema, length, "minLength", "maxLength", "chars", path, json(text));
  }

  void CheckNumber(const json& schema, const json& value, const std::string& path) {
    const double number = value.get<double>();
    if (auto min = schema.find("minimum"); min != schema.end() && min->is_number()) {
      if (number < min->get<double>()) {
        Add(path, "FieldValueInvalid", Quoted(value),
            absl::StrCat(path, " in body should be greater than or equal to ", min->dump()));
      }
    }
    if (auto max = schema.find("maximum"); max != schema.end() && max->is_number()) {
      if (number > max->get<double>()) {
        Add(path, "FieldValueInvalid", Quoted(value),
            absl::StrCat(path, " in body should be less than or equal to ", max->dump()));
      }
    }
  }

  void CheckCount(const json& schema, size_t count, const char* min_key, const char* max_key,
                  const char* unit, const std::string& path, const json& value) {
    if (auto min = schema.find(min_key); min != schema.end() && min->is_number_integer()) {
      if (static_cast<int64_t>(count) < min->get<int64_t>()) {
        Add(path, "FieldValueInvalid", Quoted(value),
            absl::StrCat(path, " in body should have at least ", min->dump(), " ", unit));
      }
    }
    if (auto max = schema.find(max_key); max != schema.end() && max->is_number_integer()) {
      if (static_cast<int64_t>(count) > max->get<int64_t>()) {
        Add(path, "FieldValueInvalid", Quoted(value),
            absl::StrCat(path, " in body should have at most ", max->dump(), " ", unit));
      }
    }
  }

  void ValidateObject(const json& schema, const json& value, const std::string& path) {
    if (auto required = schema.find("required"); required != schema.end() && required->is_array()) {
      for (const json& name : *required) {
        if (name.is_string() && !value.contains(name.get<std::string>())) {
          Add(Child(path, name.get<std::string>()), "FieldValueRequired", "", "");
        }
      }
    }
    auto properties = schema.find("properties");
    auto additional = schema.find("additionalProperties");
    const bool has_properties = properties != schema.end() && properties->is_object();
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (IsServersField(path, it.key())) continue;
      if (has_properties) {
        if (auto p = properties->find(it.key()); p != properties->end()) {
          Validate(*p, it.value(), Child(path, it.key()));
          continue;
        }
      }
      if (additional != schema.end() && additional->is_object()) {
        Validate(*additional, it.value(), absl::StrCat(path, "[", it.key(), "]"));
      }
    }
  }

  // The root's apiVersion, kind and metadata belong to the server: never
  // pruned, and ObjectMeta is validated by its own rules, not the CRD's.
  bool IsServersField(const std::string& path, const std::string& key) const {
    return root_ && path.empty() && (key == "apiVersion" || key == "kind" || key == "metadata");
  }

  SchemaCheck* out_;
  const bool root_;
};

}  // namespace

SchemaCheck PruneAndValidate(const json& schema, json* object, bool root) {
  SchemaCheck result;
  Checker checker(&result, root);
  checker.Prune(schema, object, "");
  checker.Validate(schema, *object, "");
  return result;
}

}  // namespace kubetrain::api
