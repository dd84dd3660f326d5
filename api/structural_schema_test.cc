#include "api/structural_schema.h"

#include <string>
#include <vector>

#include "api/job_file.h"
#include "api/training_job_schema.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

std::vector<std::string> Messages(const SchemaCheck& check) {
  std::vector<std::string> messages;
  for (const SchemaViolation& v : check.violations) messages.push_back(v.message);
  return messages;
}

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "spec": {
      "type": "object",
      "required": ["name"],
      "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
        "count": {"x-kubernetes-int-or-string": true,
                  "anyOf": [{"type": "integer"}, {"type": "string"}],
                  "pattern": "^-?[0-9]+$"},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "small": {"type": "integer", "format": "int32"},
        "tier": {"type": "string", "enum": ["BASIC", "CUSTOM"]},
        "when": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "opaque": {"type": "object"},
        "maybe": {"type": "string", "nullable": true}
      }
    }
  }
})");

TEST(StructuralSchemaTest, AValidObjectPassesUnchanged) {
  json object = json::parse(R"({
    "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a", "anything": 1},
    "spec": {"name": "abc", "count": 2, "ratio": 0.5, "small": 7, "tier": "BASIC",
             "when": "2026-12-05T06:00:00Z", "tags": ["a"], "labels": {"k": "v"},
             "free": {"deep": {"x": [1, "y"]}}, "maybe": null}
  })");
  const json before = object;
  SchemaCheck check = PruneAndValidate(kSchema, &object);
  EXPECT_THAT(Messages(check), IsEmpty());
  EXPECT_THAT(check.pruned, IsEmpty());
  EXPECT_EQ(object, before);
}

TEST(StructuralSchemaTest, IntOrStringTakesANumberOrAStringOfDigitsOnly) {
  for (const json& count : {json(2), json("2"), json("-3")}) {
    json object = {{"spec", {{"name", "a"}, {"count", count}}}};
    EXPECT_TRUE(PruneAndValidate(kSchema, &object).ok()) << count;
  }
  json object = {{"spec", {{"name", "a"}, {"count", "two"}}}};
  EXPECT_THAT(Messages(PruneAndValidate(kSchema, &object)),
              ElementsAre("spec.count: Invalid value: \"two\": spec.count in body should match "
                          "'^-?[0-9]+$'"));
  object = {{"spec", {{"name", "a"}, {"count", 2.5}}}};
  EXPECT_THAT(Messages(PruneAndValidate(kSchema, &object)),
              ElementsAre("spec.count: Invalid value: 2.5: spec.count in body must be of type "
                          "integer,string: 2.5"));
}

TEST(StructuralSchemaTest, WrongTypesAreRefusedInTheServersWords) {
  json object = json::parse(R"({"spec": {"name": "a", "ratio": "0.1", "tags": [1],
                                         "small": 1.0, "labels": {"k": 2}}})");
  SchemaCheck check = PruneAndValidate(kSchema, &object);
  EXPECT_THAT(
      Messages(check),
      ElementsAre(
          "spec.labels[k]: Invalid value: \"integer\": spec.labels[k] in body must be of type "
          "string: \"integer\"",
          "spec.ratio: Invalid value: \"string\": spec.ratio in body must be of type number: "
          "\"string\"",
          "spec.small: Invalid value: \"number\": spec.small in body must be of type integer: "
          "\"number\"",
          "spec.tags[0]: Invalid value: \"integer\": spec.tags[0] in body must be of type "
          "string: \"integer\""));
  EXPECT_EQ(check.violations[0].reason, "FieldValueTypeInvalid");
  EXPECT_EQ(check.violations[0].field, "spec.labels[k]");
}

TEST(StructuralSchemaTest, ValueValidations) {
  json object = json::parse(R"({"spec": {"name": "ABCDEF", "ratio": 1.5, "small": 4294967296,
                                         "tier": "PREMIUM", "when": "yesterday",
                                         "tags": ["a", "b", "c"]}})");
  EXPECT_THAT(
      Messages(PruneAndValidate(kSchema, &object)),
      ElementsAre(
          "spec.name: Invalid value: \"ABCDEF\": spec.name in body should match '^[a-z]+$'",
          "spec.name: Invalid value: \"ABCDEF\": spec.name in body should have at most 5 chars",
          "spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than or equal to 1",
          "spec.small: Invalid value: 4294967296: spec.small in body must be of type int32: "
          "4294967296",
          "spec.tags: Invalid value: \"array\": spec.tags in body should have at most 2 items",
          "spec.tier: Unsupported value: \"PREMIUM\": supported values: \"BASIC\", \"CUSTOM\"",
          "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type "
          "date-time: \"yesterday\""));
}

TEST(StructuralSchemaTest, RequiredFieldsAreNamed) {
  json object = {{"spec", {{"count", 1}}}};
  SchemaCheck check = PruneAndValidate(kSchema, &object);
  EXPECT_THAT(Messages(check), ElementsAre("spec.name: Required value"));
  EXPECT_EQ(check.violations[0].reason, "FieldValueRequired");
}

TEST(StructuralSchemaTest, UnknownFieldsAndNullsArePrunedNotRefused) {
  json object = json::parse(R"({
    "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
    "extra": true,
    "spec": {"name": "a", "typo": 3, "ratio": null, "opaque": {"gone": 1},
             "free": {"kept": 1}, "labels": {"k": "v"}}
  })");
  SchemaCheck check = PruneAndValidate(kSchema, &object);
  EXPECT_THAT(Messages(check), IsEmpty());
  EXPECT_THAT(check.pruned, UnorderedElementsAre("extra", "spec.opaque.gone", "spec.typo"));
  EXPECT_EQ(object, json::parse(R"({
    "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
    "spec": {"name": "a", "opaque": {}, "free": {"kept": 1}, "labels": {"k": "v"}}
  })"));
}

// The TrainingJob's own schema: int64 fields take both forms Cloud ML users
// have, and the fields whose type the API server checks are refused with it.
TEST(StructuralSchemaTest, TrainingJobSchemaTakesCloudMlInt64StringsAndRefusesWrongTypes) {
  json job = json::parse(R"({
    "apiVersion": "kubetrain.io/v1", "kind": "TrainingJob", "metadata": {"name": "j"},
    "spec": {"trainingInput": {
      "scaleTier": "CUSTOM", "masterType": "standard", "workerType": "standard",
      "workerCount": "2", "parameterServerCount": 1,
      "masterConfig": {"acceleratorConfig": {"count": "1", "type": "NVIDIA_TESLA_T4"}}}}
  })");
  EXPECT_THAT(Messages(PruneAndValidate(TrainingJobResourceSchema(), &job)), IsEmpty());

  job["spec"]["trainingInput"]["hyperparameters"] = json::parse(R"({
    "goal": "MAXIMIZE", "maxTrials": 4,
    "params": [{"parameterName": "lr", "type": "DOUBLE", "minValue": "0.1", "maxValue": 1},
               {"parameterName": "k", "type": "CATEGORICAL", "categoricalValues": [1, "b"]}]})");
  EXPECT_THAT(
      Messages(PruneAndValidate(TrainingJobResourceSchema(), &job)),
      ElementsAre("spec.trainingInput.hyperparameters.params[0].minValue: Invalid value: "
                  "\"string\": spec.trainingInput.hyperparameters.params[0].minValue in body "
                  "must be of type number: \"string\"",
                  "spec.trainingInput.hyperparameters.params[1].categoricalValues[0]: Invalid "
                  "value: \"integer\": "
                  "spec.trainingInput.hyperparameters.params[1].categoricalValues[0] in body "
                  "must be of type string: \"integer\""));
}

// Where a manifest enters (validate, render, submit), what the API server
// would refuse is refused, at its line; a bare Cloud ML config with the same
// values is taken, since kubetrain builds the TrainingJob from it itself.
TEST(StructuralSchemaTest, AManifestTheServerWouldRefuseIsRefusedAtItsLine) {
  const std::string manifest = R"(apiVersion: kubetrain.io/v1
kind: TrainingJob
metadata:
  name: j
spec:
  trainingInput:
    scaleTier: CUSTOM
    masterType: standard
    workerCount: '0'
    hyperparameters:
      goal: MAXIMIZE
      maxTrials: 2
      params:
        - parameterName: lr
          type: DOUBLE
          minValue: "0.1"
          maxValue: 0.5
        - parameterName: k
          type: CATEGORICAL
          categoricalValues: [1, 2]
)";
  CheckedJob checked = CheckTrainingJob(manifest);
  std::vector<std::string> errors;
  for (const FieldError& e : checked.errors) errors.push_back(e.ToString());
  EXPECT_THAT(
      errors,
      ElementsAre("16:11: spec.trainingInput.hyperparameters.params[0].minValue: the API server "
                  "refuses this: Invalid value: \"string\": "
                  "spec.trainingInput.hyperparameters.params[0].minValue in body must be of type "
                  "number: \"string\"",
                  "20:31: spec.trainingInput.hyperparameters.params[1].categoricalValues[0]: the "
                  "API server refuses this: Invalid value: \"integer\": "
                  "spec.trainingInput.hyperparameters.params[1].categoricalValues[0] in body must "
                  "be of type string: \"integer\"",
                  "20:34: spec.trainingInput.hyperparameters.params[1].categoricalValues[1]: the "
                  "API server refuses this: Invalid value: \"integer\": "
                  "spec.trainingInput.hyperparameters.params[1].categoricalValues[1] in body must "
                  "be of type string: \"integer\""));

  CheckedJob config = CheckTrainingJob(
      "trainingInput:\n  scaleTier: CUSTOM\n  masterType: standard\n  workerCount: '0'\n  "
      "hyperparameters:\n    goal: MAXIMIZE\n"
      "    maxTrials: 2\n    params:\n      - {parameterName: lr, type: DOUBLE, minValue: \"0.1\", "
      "maxValue: 0.5}\n      - {parameterName: k, type: CATEGORICAL, categoricalValues: [1, 2]}\n",
      /*require_name=*/false);
  EXPECT_TRUE(config.ok()) << FormatErrors(config.errors);
}

}  // namespace
}  // namespace kubetrain::api
