#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kubetrain::api {

// What kube-apiserver does to a custom resource before it stores it, given
// the openAPIV3Schema of the CRD's version (a structural schema): it prunes
// the fields the schema does not declare, drops nulls where the schema does
// not say `nullable: true`, then validates what is left. kubetrain runs the
// same check where a user's TrainingJob manifest enters (`kubetrain
// validate`, `jobs submit`), and the fake API server runs it on every write of
// a custom resource, so that what one accepts the other does.
//
// Implemented, as the real server does them for structural schemas:
// - pruning: keys not in `properties` (unless
//   `x-kubernetes-preserve-unknown-fields: true`); an object schema with
//   neither `properties` nor `additionalProperties` keeps nothing unless it
//   preserves unknown fields; the root's apiVersion, kind and metadata are
//   never pruned (the server handles ObjectMeta itself);
// - `type` (object, array, string, integer, number, boolean; a number with a
//   fraction or an exponent is not an integer, as Go's decoding reads it),
//   `x-kubernetes-int-or-string`, `nullable`, `enum`, `required`, `pattern`
//   (ECMA-262 as std::regex reads it), `minimum`/`maximum`,
//   `minLength`/`maxLength`, `minItems`/`maxItems`, and the formats
//   `date-time`, `int32` and `int64`.
// Not implemented: `default`, CEL rules (`x-kubernetes-validations`),
// `oneOf`/`allOf`/`not`, list types and map keys, `multipleOf`,
// `uniqueItems`, formats other than those three.
//
// Messages are the server's, so tests and users read what kubectl prints:
//   spec.x: Invalid value: "string": spec.x in body must be of type integer: "string"
//   spec.x: Unsupported value: "FOO": supported values: "A", "B"
//   spec.x: Required value

struct SchemaViolation {
  std::string field;    // "spec.trainingInput.hyperparameters.params[0].minValue"
  std::string reason;   // the Status cause's reason: FieldValueTypeInvalid,
                        // FieldValueNotSupported, FieldValueRequired, FieldValueInvalid
  std::string message;  // the whole line, starting with the field
  std::string detail;   // the message after "field: " (for errors that name the field apart)
};

struct SchemaCheck {
  std::vector<SchemaViolation> violations;  // of the pruned object
  std::vector<std::string> pruned;          // paths of the fields pruning removed
  bool ok() const { return violations.empty(); }
};

// Prunes `object` in place, then validates it against `schema`. `root`: the
// object is a whole resource (its apiVersion, kind and metadata are the
// server's, not the schema's).
SchemaCheck PruneAndValidate(const nlohmann::json& schema, nlohmann::json* object,
                             bool root = true);

}  // namespace kubetrain::api
