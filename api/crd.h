#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace kubetrain::api {

// The CustomResourceDefinition of TrainingJob, derived from the descriptors of
// proto/kubetrain/v1/training_job.proto: an OpenAPI v3 structural schema
// whose descriptions are the proto's comments (what `kubectl explain`
// prints; an enum field's lists each value's comment as "- NAME: ..."),
// int64 fields as int-or-string (training_job_schema.h says why), enums listing their names,
// pod-template overrides preserving unknown fields; the status subresource; short name `tj`,
// category `kubetrain`; printer columns State, Trials, Best (priority 1: -o wide), Age.
nlohmann::json TrainingJobCrd();

// TrainingJobCrd() as the YAML checked in at deploy/crds/kubetrain.io_trainingjobs.yaml.
std::string TrainingJobCrdYaml();

// The OpenAPI schema of one message type, by full name
// ("kubetrain.v1.TrainingJobSpec"), with its descriptions; null for a name
// the schema does not have. Exposed for tests.
nlohmann::json SchemaOf(const std::string& message_full_name);

}  // namespace kubetrain::api
