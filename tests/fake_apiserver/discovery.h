#pragma once

// API discovery and OpenAPI v3 for the fake API server, so that kubectl
// itself can talk to it (`kubectl get tj`, `kubectl get kubetrain`,
// `kubectl explain trainingjob.spec...`):
//
//  - /version (as a 1.32 server);
//  - legacy discovery: /api (APIVersions), /api/v1 and /apis/GROUP/VERSION
//    (APIResourceList), /apis (APIGroupList). kubectl asks for aggregated
//    discovery first and, given plain JSON, falls back to these, as it does
//    with servers older than 1.26;
//  - /openapi/v3 and /openapi/v3/apis/GROUP/VERSION for the group of a
//    served CRD, built from the CRD's schema as the apiextensions apiserver
//    publishes it: the schema under components.schemas with its
//    x-kubernetes-group-version-kind and paths that carry the same (metadata
//    stays the CRD's plain object; the real server refers it to ObjectMeta).
//
// Not implemented: aggregated discovery (apidiscovery.k8s.io), OpenAPI v2,
// OpenAPI for built-in resources.

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kubetrain::fake_apiserver {

// One resource the server stores, for discovery.
struct DiscoveredResource {
  std::string plural, singular, kind;
  std::string group_version;  // "v1", "kubetrain.io/v1"
  bool has_status = false;
  bool namespaced = true;
  std::vector<std::string> short_names, categories;
};

// The discovery or OpenAPI document at `path` (no query), or nullopt when
// `path` is not one. `crds` are the served CRDs (for OpenAPI); `host` is the
// server's "127.0.0.1:PORT".
std::optional<nlohmann::json> DiscoveryDocument(const std::string& path,
                                                const std::vector<DiscoveredResource>& resources,
                                                const std::vector<nlohmann::json>& crds,
                                                const std::string& host);

}  // namespace kubetrain::fake_apiserver
