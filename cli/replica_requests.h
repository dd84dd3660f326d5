#pragma once

// What `kubetrain render` prints before the objects: each replica's resource
// requests, read from the Pods as rendered (so template overrides count), and
// what a node must have for the largest of them. Pure.

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kubetrain::cli {

// YAML comment lines ("# ..."), so the output still applies with
// `kubectl apply -f -`. Objects that are not Pods are skipped; a quantity
// this cannot read is shown as written and left out of the sums.
std::string ReplicaRequestsComment(const std::vector<nlohmann::json>& objects);

}  // namespace kubetrain::cli
