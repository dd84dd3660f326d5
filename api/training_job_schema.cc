#include "api/training_job_schema.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "api/structural_schema.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::SourceLocation;

bool IsInt64(const FieldDescriptor* field) {
  return field->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
         field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
}

constexpr char kInt64Note[] = " Takes a number or a string of digits (\"2\").";

// An int64 field takes a number or a string of digits. Cloud ML's API (and
// protobuf's JSON mapping) writes int64 as strings, and Cloud ML users copy
// `workerCount: '2'` from `gcloud ... describe` into configs; a plain
// `type: integer` would make the API server refuse what those users have.
// int-or-string is the one structural-schema type that takes both (a
// structural schema may not give it a `type`, so `kubectl explain` labels it
// <Object>: the description carries the type instead); the pattern keeps the
// string form to digits (the server checks a pattern on strings only).
nlohmann::json Int64Schema(bool unsigned_only) {
  nlohmann::json schema = {
      {"x-kubernetes-int-or-string", true},
      {"anyOf", {{{"type", "integer"}}, {{"type", "string"}}}},
      {"pattern", unsigned_only ? "^[0-9]+$" : "^-?[0-9]+$"},
  };
  if (unsigned_only) schema["minimum"] = 0;
  return schema;
}

// A proto comment as description text: each paragraph's lines joined by
// spaces (proto comments wrap at 80 columns; kubectl wraps again), paragraphs
// kept apart by a blank line.
std::string CommentText(const SourceLocation& location) {
  std::vector<std::string> paragraphs;
  std::string current;
  for (const std::string& raw : {location.leading_comments, location.trailing_comments}) {
    for (absl::string_view line : absl::StrSplit(raw, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty()) {
        if (!current.empty()) paragraphs.push_back(std::move(current));
        current.clear();
        continue;
      }
      if (!current.empty()) current += ' ';
      current.append(line.data(), line.size());
    }
    if (!current.empty()) paragraphs.push_back(std::move(current));
    current.clear();
  }
  return absl::StrJoin(paragraphs, "\n\n");
}

template <typename D>
std::string Comment(const D* descriptor) {
  SourceLocation location;
  if (!descriptor->GetSourceLocation(&location)) return "";
  return CommentText(location);
}

// An enum field's description: what the field is, then one line per value,
// "- NAME: what it means", since OpenAPI has no place for value descriptions.
std::string EnumDescription(const std::string& field_comment, const EnumDescriptor* type) {
  std::string text = field_comment.empty() ? Comment(type) : field_comment;
  std::vector<std::string> values;
  for (int i = 0; i < type->value_count(); ++i) {
    std::string value_comment = Comment(type->value(i));
    absl::StrReplaceAll({{"\n\n", " "}}, &value_comment);
    values.push_back(value_comment.empty() ? "- " + type->value(i)->name()
                                           : "- " + type->value(i)->name() + ": " + value_comment);
  }
  if (!text.empty()) text += "\n\n";
  return text + absl::StrJoin(values, "\n");
}

nlohmann::json MessageSchema(const Descriptor* descriptor);

nlohmann::json ValueSchema(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return {{"type", "string"}};
    case FieldDescriptor::CPPTYPE_BOOL:
      return {{"type", "boolean"}};
    case FieldDescriptor::CPPTYPE_INT32:
      return {{"type", "integer"}, {"format", "int32"}};
    case FieldDescriptor::CPPTYPE_UINT32:
      return {{"type", "integer"}, {"format", "int32"}, {"minimum", 0}};
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT64:
      return Int64Schema(field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64);
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return {{"type", "number"}};
    case FieldDescriptor::CPPTYPE_ENUM: {
      nlohmann::json names = nlohmann::json::array();
      for (int i = 0; i < field->enum_type()->value_count(); ++i) {
        names.push_back(field->enum_type()->value(i)->name());
      }
      return {{"type", "string"}, {"enum", names}};
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageSchema(field->message_type());
  }
  return {{"type", "string"}};
}

nlohmann::json FieldSchema(const FieldDescriptor* field) {
  nlohmann::json schema;
  if (field->is_map()) {
    schema = {{"type", "object"},
              {"additionalProperties", ValueSchema(field->message_type()->map_value())}};
  } else if (field->is_repeated()) {
    schema = {{"type", "array"}, {"items", ValueSchema(field)}};
  } else {
    schema = ValueSchema(field);
  }
  // The field's own comment; a field without one keeps its type's.
  std::string comment = Comment(field);
  if (!comment.empty() && IsInt64(field)) comment += kInt64Note;
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
    schema["description"] = EnumDescription(comment, field->enum_type());
  } else if (!comment.empty()) {
    schema["description"] = comment;
  }
  return schema;
}

nlohmann::json MessageSchema(const Descriptor* descriptor) {
  const std::string& name = descriptor->full_name();
  if (name == "google.protobuf.Struct") {
    return {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
  }
  if (name == "google.protobuf.Timestamp") return {{"type", "string"}, {"format", "date-time"}};
  if (name == "google.protobuf.Duration") {
    return {{"type", "string"}, {"pattern", "^-?[0-9]+(\\.[0-9]{1,9})?s$"}};
  }
  if (name == "kubetrain.v1.ObjectMeta") return {{"type", "object"}};  // the API server's
  nlohmann::json properties = nlohmann::json::object();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    properties[field->json_name()] = FieldSchema(field);
  }
  nlohmann::json schema = {{"type", "object"}, {"properties", properties}};
  if (std::string comment = Comment(descriptor); !comment.empty()) {
    schema["description"] = comment;
  }
  return schema;
}

}  // namespace

nlohmann::json OpenApiSchemaOf(const Descriptor* descriptor) { return MessageSchema(descriptor); }

nlohmann::json ResourceSchemaOf(const Descriptor* descriptor) {
  nlohmann::json schema = MessageSchema(descriptor);
  // The API server rejects a CRD whose root `metadata` says anything but
  // `type: object` ("must not specify anything other than name and
  // generateName"), a description included; kubectl explains it from
  // ObjectMeta's own documentation.
  schema["properties"]["metadata"] = {{"type", "object"}};
  return schema;
}

const nlohmann::json& TrainingJobResourceSchema() {
  static const nlohmann::json* const schema =
      new nlohmann::json(ResourceSchemaOf(v1::TrainingJob::descriptor()));
  return *schema;
}

std::vector<FieldError> CheckAgainstCrdSchema(const nlohmann::json& manifest) {
  nlohmann::json object = manifest;
  SchemaCheck check = PruneAndValidate(TrainingJobResourceSchema(), &object);
  std::vector<FieldError> errors;
  for (SchemaViolation& violation : check.violations) {
    errors.push_back(
        FieldError{violation.field, "the API server refuses this: " + violation.detail});
  }
  return errors;
}

}  // namespace kubetrain::api
