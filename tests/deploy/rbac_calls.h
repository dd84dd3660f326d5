#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::deploy_testing {

// An RBAC permission: (verb, "group/resource[/subresource]"), group "" for the
// core API, e.g. ("update", "kubetrain.io/trainingjobs/status"),
// ("create", "/pods").
using Permission = std::pair<std::string, std::string>;

// Where a ClusterClient call was found, for messages.
struct CallSite {
  std::string file;
  int line = 0;
  std::string text;
};

// Parses `inline const Resource kPods{"api/v1", "pods", ...}` constants from
// cluster_client.h: name -> "group/plural".
absl::StatusOr<std::map<std::string, std::string>> ParseResourceConstants(
    const std::string& header_text);

// The permissions the ClusterClient calls in `sources` (file name -> text)
// need. A call is `<...client...>->Get|List|Watch|Create|Update|MergePatch|
// Delete(resource, ...)`; the resource is a named constant, or a pointer set
// from constants in the same function (`resource = &kPods`), or, for the
// informer's `options_.resource`, the constants the informers are built with
// (statements that mention `Informer` and a constant). Update/MergePatch with
// a literal `true` last argument write the status subresource. A call whose
// resource or subresource cannot be told is an error naming the call site:
// the RBAC cannot be checked against code it does not understand.
absl::StatusOr<std::map<Permission, std::vector<CallSite>>> ExtractPermissions(
    const std::map<std::string, std::string>& sources,
    const std::map<std::string, std::string>& resources);

// The permissions an RBAC rules list (YAML, the `rules:` sequence of a Role or
// ClusterRole) grants, one per (verb, apiGroup, resource). Errors on rules
// with wildcards, resourceNames or nonResourceURLs (never needed here).
absl::StatusOr<std::set<Permission>> GrantedPermissions(const std::string& rules_yaml);

}  // namespace kubetrain::deploy_testing
