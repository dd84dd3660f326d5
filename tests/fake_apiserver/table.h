#pragma once

// Server-side printing for the fake API server: the meta.k8s.io/v1 Table that
// kubectl asks for (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`)
// and prints as `kubectl get`'s columns, computed from a custom resource's
// additionalPrinterColumns the way the apiextensions apiserver does
// (k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor):
//
//  - the first column is Name (type string, format name);
//  - each printer column's jsonPath is evaluated on the object; a path that
//    selects nothing gives a null cell;
//  - the cell has the column's type: string (a string as it is, anything
//    else printed as JSON text), integer and number (from a JSON number,
//    else null), boolean, and date (an RFC 3339 string shown as the age
//    since then, "5m", "3h10m", "12d", or "<invalid>");
//  - each row carries the object's metadata (includeObject=Metadata, the
//    default) or the whole object (includeObject=Object), or nothing (None).
//
// Only the simple paths a CRD's printer columns may use are evaluated
// (".status.state", ".status.conditions[0].type"); anything else is an error.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace kubetrain::fake_apiserver {

// Whether an Accept header asks for a meta.k8s.io/v1 Table (first choice or
// not; kubectl lists Table first and plain JSON as the fallback).
bool AcceptsTable(absl::string_view accept);

// Whether an Accept header takes plain JSON (application/json without `as=`,
// or */*): the fallback for a resource the fake cannot print as a Table.
bool AcceptsPlainJson(absl::string_view accept);

// The value `path` selects in `object`, or nullptr when it selects nothing
// (a missing field, an index past the end). InvalidArgument for a path that
// is not a simple JSON path.
absl::StatusOr<const nlohmann::json*> SelectSimpleJsonPath(const nlohmann::json& object,
                                                           absl::string_view path);

// Kubernetes' duration.HumanDuration: "45s", "5m3s", "3h10m", "12d", "2y3d".
std::string HumanDuration(absl::Duration d);

// The Table of `objects` for `printer_columns` (a CRD version's
// additionalPrinterColumns). `include_object`: "None", "Metadata" or "Object".
// `now` ages date columns.
absl::StatusOr<nlohmann::json> ToTable(const std::vector<nlohmann::json>& objects,
                                       const nlohmann::json& printer_columns,
                                       const std::string& resource_version,
                                       const std::string& include_object, absl::Time now);

}  // namespace kubetrain::fake_apiserver
