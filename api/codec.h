#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "api/field_error.h"
#include "google/protobuf/message.h"
#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"

namespace kubetrain::api {

// Decoding user input (YAML or JSON; JSON is read as the YAML subset it is)
// into the schema of proto/kubetrain/v1/training_job.proto.
//
// Names are the JSON names (camelCase). Unknown fields, unknown enum values and
// wrong types are errors with the field path and the line/column. Nothing is
// defaulted or validated here: see defaults.h and validation.h.
struct DecodeResult {
  v1::TrainingJob job;
  std::vector<FieldError> errors;  // empty on success
  // The input was a bare Cloud ML config (top-level trainingInput), so its
  // paths start at "trainingInput" rather than "spec.trainingInput".
  bool bare_config = false;
  // Where each decoded field path starts in the text (1-based line, column),
  // so later validation errors can point into the file too.
  std::map<std::string, std::pair<int, int>> positions;
  bool ok() const { return errors.empty(); }

  // Fills line/column of errors that have none from `positions` (the longest
  // decoded prefix of the error's path).
  void Locate(std::vector<FieldError>* located) const;
};

// Accepts a full TrainingJob manifest (apiVersion/kind/metadata/spec) or a bare
// Cloud ML config.yaml (top-level `trainingInput:`, optionally `labels:` and
// `jobId:`), which becomes spec.trainingInput of an otherwise empty job.
// Rejects empty input, several YAML documents, non-UTF-8 bytes and YAML syntax
// errors (with their line and column).
DecodeResult DecodeTrainingJob(std::string_view text);

// Decodes any message from YAML/JSON text with the same rules, paths starting
// at `path_prefix`.
std::vector<FieldError> DecodeMessage(std::string_view text, google::protobuf::Message* message,
                                      const std::string& path_prefix = "");

// Any one YAML/JSON mapping (a manifest of another kind) as free-form JSON,
// with the same input limits as DecodeTrainingJob and YAML's scalar types as
// pod templates read them ("2" quoted is a string, 2 a number). `positions`
// holds where every key and list element starts, by path
// ("spec.template.spec.containers[0].image"), for errors found later.
struct DecodedDocument {
  nlohmann::json value;            // an object when errors is empty
  std::vector<FieldError> errors;  // syntax and shape, with line/column
  std::map<std::string, std::pair<int, int>> positions;
};
DecodedDocument DecodeDocument(std::string_view text);

// A file of several YAML documents (kubectl's `---`-separated manifests),
// each as written. A line that begins with `---` starts a document, and one
// that is `...` ends it (YAML reads them so wherever they stand, block
// scalars included). `first_line` is the document's first line in the file
// (1-based), to carry its errors' positions back into the file.
struct YamlDocumentText {
  std::string_view text;  // a view into the file's text
  int first_line = 1;
  // Only comments, blank lines and markers: nothing for a decoder.
  bool empty = true;
};
std::vector<YamlDocumentText> SplitYamlDocuments(std::string_view text);

// Protobuf's JSON mapping: camelCase names, enums as names, int64 as strings,
// keys in field order. `pretty` indents by two spaces.
std::string EncodeJson(const google::protobuf::Message& message, bool pretty = false);

// The message as the Kubernetes API takes it: protobuf's JSON mapping, except
// that int64 fields are JSON numbers, as the CRD's schema says (`type:
// integer`, so that `kubectl explain` shows their type). Cloud ML printed
// int64 as strings, which EncodeJson keeps for what kubetrain prints; every
// decoder here accepts both.
nlohmann::json EncodeKubernetesJson(const google::protobuf::Message& message);

// The same content as YAML with keys sorted, as `gcloud ... describe` prints:
// block style, strings quoted only where YAML would misread them.
std::string EncodeYaml(const google::protobuf::Message& message);
std::string EncodeYaml(const nlohmann::json& value);

}  // namespace kubetrain::api
