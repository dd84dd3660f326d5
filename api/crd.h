#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace kubetrain::api {

// The CustomResourceDefinition of TrainingJob, derived from the descriptors of
// proto/kubetrain/v1/training_job.proto: an OpenAPI v3 structural schema
// (int64 fields accept numbers or strings, enums list their names,
// pod-template overrides preserve unknown fields), the status subresource,
// short name `tj` and printer columns State, Trials, Age.
nlohmann::json TrainingJobCrd();

// TrainingJobCrd() as the YAML checked in at deploy/crds/kubetrain.io_trainingjobs.yaml.
std::string TrainingJobCrdYaml();

// The OpenAPI schema of one message type, by full name
// ("kubetrain.v1.TrainingJobSpec"). Exposed for tests.
nlohmann::json SchemaOf(const std::string& message_full_name);

}  // namespace kubetrain::api
