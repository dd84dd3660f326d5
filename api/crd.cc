#include "api/crd.h"

#include <cstdlib>
#include <iostream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"

namespace kubetrain::api {

// The descriptor set of proto/kubetrain/v1/training_job.proto with its
// imports and comments, embedded by the build (api/CMakeLists.txt).
extern const unsigned char kTrainingJobDescriptorSet[];
extern const size_t kTrainingJobDescriptorSetSize;

namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptorSet;
using google::protobuf::SourceLocation;

// The schema's descriptors with their comments. The generated pool's
// descriptors carry none (protoc leaves source info out of generated code),
// so the generator reads the descriptor set protoc wrote with
// --include_source_info. The set is built with the binary: failing to read
// it is a broken build, not an input error.
const DescriptorPool& SourcePool() {
  static const DescriptorPool* const pool = [] {
    auto* built = new DescriptorPool();
    FileDescriptorSet set;
    if (!set.ParseFromArray(kTrainingJobDescriptorSet,
                            static_cast<int>(kTrainingJobDescriptorSetSize))) {
      std::cerr << "kubetrain: the embedded TrainingJob descriptor set is unreadable\n";
      std::abort();
    }
    // --include_imports lists dependencies before the files that use them.
    for (const auto& file : set.file()) {
      if (built->BuildFile(file) == nullptr) {
        std::cerr << "kubetrain: the embedded descriptor of " << file.name() << " does not build\n";
        std::abort();
      }
    }
    return built;
  }();
  return *pool;
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
      // An integer, so that `kubectl explain` shows its type (an
      // int-or-string field shows as <Object>). Cloud ML printed int64 as
      // strings; what kubetrain sends the API server is a number
      // (EncodeKubernetesJson), and its own decoders take both.
      return {{"type", "integer"}, {"format", "int64"}};
    case FieldDescriptor::CPPTYPE_UINT64:
      return {{"type", "integer"}, {"format", "int64"}, {"minimum", 0}};
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
  const std::string comment = Comment(field);
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

// The first sentence of the description at `path` ("status.state") of
// `schema`: a printer column's description.
std::string FirstSentence(const nlohmann::json& schema, const std::string& path) {
  const nlohmann::json* node = &schema;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    auto properties = node->find("properties");
    if (properties == node->end()) return "";
    auto next = properties->find(std::string(part));
    if (next == properties->end()) return "";
    node = &*next;
  }
  std::string text = node->value("description", std::string());
  text = text.substr(0, text.find("\n\n"));  // the first paragraph (not an enum's value list)
  const size_t end = text.find(". ");
  return end == std::string::npos ? text : text.substr(0, end + 1);
}

}  // namespace

nlohmann::json SchemaOf(const std::string& message_full_name) {
  const Descriptor* descriptor = SourcePool().FindMessageTypeByName(message_full_name);
  return descriptor == nullptr ? nlohmann::json() : MessageSchema(descriptor);
}

nlohmann::json TrainingJobCrd() {
  nlohmann::json schema = SchemaOf("kubetrain.v1.TrainingJob");
  // The API server rejects a CRD whose root `metadata` says anything but
  // `type: object` ("must not specify anything other than name and
  // generateName"), a description included; kubectl explains it from
  // ObjectMeta's own documentation.
  schema["properties"]["metadata"] = {{"type", "object"}};
  auto column = [&](const std::string& name, const std::string& type, const std::string& path) {
    return nlohmann::json{{"name", name},
                          {"type", type},
                          {"jsonPath", "." + path},
                          {"description", FirstSentence(schema, path)}};
  };
  nlohmann::json best = column("Best", "number", "status.bestObjectiveValue");
  best["priority"] = 1;  // -o wide
  const nlohmann::json version = {
      {"name", "v1"},
      {"served", true},
      {"storage", true},
      {"schema", {{"openAPIV3Schema", schema}}},
      {"subresources", {{"status", nlohmann::json::object()}}},
      {"additionalPrinterColumns",
       {
           column("State", "string", "status.state"),
           column("Trials", "string", "status.trialProgress"),
           best,
           {{"name", "Age"},
            {"type", "date"},
            {"jsonPath", ".metadata.creationTimestamp"},
            {"description", "How long ago the job was created."}},
       }},
  };
  return {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", "trainingjobs.kubetrain.io"}}},
      {"spec",
       {{"group", "kubetrain.io"},
        {"scope", "Namespaced"},
        {"names",
         {{"kind", kKind},
          {"listKind", "TrainingJobList"},
          {"plural", "trainingjobs"},
          {"singular", "trainingjob"},
          {"shortNames", {"tj"}},
          // `kubectl get kubetrain` lists TrainingJobs and whatever kind
          // kubetrain adds to the category later.
          {"categories", {"kubetrain"}}}},
        {"versions", {version}}}},
  };
}

std::string TrainingJobCrdYaml() {
  return "# Generated by kubetrain-crdgen from proto/kubetrain/v1/training_job.proto.\n"
         "# Do not edit: run `cmake --build build --target crds`.\n" +
         EncodeYaml(TrainingJobCrd());
}

}  // namespace kubetrain::api
