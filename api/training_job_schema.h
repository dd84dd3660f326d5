#pragma once

#include <vector>

#include "api/field_error.h"
#include "google/protobuf/descriptor.h"
#include "nlohmann/json.hpp"

namespace kubetrain::api {

// The OpenAPI v3 structural schema of proto messages, as the TrainingJob CRD
// declares them (crd.h): int64 fields as int-or-string (a number, or the
// string of digits Cloud ML's API printed), enums listing their names,
// google.protobuf.Struct preserving unknown fields, Timestamp as a date-time
// string. Descriptions come from the descriptor's comments, so only a pool
// built with source info (the CRD generator's) gives them; the generated
// pool's descriptors give the same schema without descriptions.
nlohmann::json OpenApiSchemaOf(const google::protobuf::Descriptor* descriptor);

// OpenApiSchemaOf a resource's message, with the root `metadata` reduced to
// `type: object`, as the API server requires of a CRD.
nlohmann::json ResourceSchemaOf(const google::protobuf::Descriptor* descriptor);

// The TrainingJob CRD's openAPIV3Schema without descriptions: what the API
// server checks every TrainingJob against. Built once; thread-safe.
const nlohmann::json& TrainingJobResourceSchema();

// What the API server would refuse of `manifest` (a TrainingJob as JSON, as
// `kubectl apply` sends it) under the CRD's schema (structural_schema.h):
// each error names the field and says the server refuses it, with the
// server's words. Fields the server would prune are not errors here: the
// decoder refuses unknown fields itself, with their line.
std::vector<FieldError> CheckAgainstCrdSchema(const nlohmann::json& manifest);

}  // namespace kubetrain::api
