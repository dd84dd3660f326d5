#include "tests/fake_apiserver/discovery.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;

const std::vector<std::string>& Verbs() {
  static const auto* verbs =
      new std::vector<std::string>{"create", "delete", "get", "list", "patch", "update", "watch"};
  return *verbs;
}

json ResourceList(const std::string& group_version,
                  const std::vector<DiscoveredResource>& resources) {
  json list = json::array();
  for (const DiscoveredResource& r : resources) {
    if (r.group_version != group_version) continue;
    json entry = {{"name", r.plural},
                  {"singularName", r.singular},
                  {"namespaced", r.namespaced},
                  {"kind", r.kind},
                  {"verbs", Verbs()}};
    if (!r.short_names.empty()) entry["shortNames"] = r.short_names;
    if (!r.categories.empty()) entry["categories"] = r.categories;
    list.push_back(entry);
    if (r.has_status) {
      list.push_back({{"name", r.plural + "/status"},
                      {"singularName", ""},
                      {"namespaced", r.namespaced},
                      {"kind", r.kind},
                      {"verbs", {"get", "patch", "update"}}});
    }
  }
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", group_version},
          {"resources", list}};
}

// "kubetrain.io" -> "io.kubetrain", as the apiserver names CRD schemas.
std::string ReversedGroup(const std::string& group) {
  std::vector<std::string> parts = absl::StrSplit(group, '.');
  return absl::StrJoin(parts.rbegin(), parts.rend(), ".");
}

// The OpenAPI v3 document of one CRD's group/version, as the apiserver
// publishes it (paths and the schema carry the group/version/kind).
std::optional<json> CrdOpenApi(const json& crd, const std::string& group,
                               const std::string& version) {
  if (crd.value("/spec/group"_json_pointer, std::string()) != group) return std::nullopt;
  for (const json& v : crd.value("/spec/versions"_json_pointer, json::array())) {
    if (v.value("name", "") != version) continue;
    const std::string kind = crd.value("/spec/names/kind"_json_pointer, std::string());
    const std::string plural = crd.value("/spec/names/plural"_json_pointer, std::string());
    const json gvk = {{"group", group}, {"version", version}, {"kind", kind}};
    json schema = v.value("/schema/openAPIV3Schema"_json_pointer, json::object());
    schema["x-kubernetes-group-version-kind"] = json::array({gvk});
    json operation = {{"x-kubernetes-group-version-kind", gvk}};
    const std::string base =
        absl::StrCat("/apis/", group, "/", version, "/namespaces/{namespace}/", plural);
    return json{
        {"openapi", "3.0.0"},
        {"info", {{"title", "Kubernetes CRD Swagger"}, {"version", "v0.1.0"}}},
        {"paths",
         {{base, {{"get", operation}, {"post", operation}}},
          {base + "/{name}",
           {{"get", operation}, {"put", operation}, {"patch", operation}, {"delete", operation}}}}},
        {"components",
         {{"schemas", {{absl::StrCat(ReversedGroup(group), ".", version, ".", kind), schema}}}}}};
  }
  return std::nullopt;
}

}  // namespace

std::optional<json> DiscoveryDocument(const std::string& path,
                                      const std::vector<DiscoveredResource>& resources,
                                      const std::vector<json>& crds, const std::string& host) {
  if (path == "/version") {  // kubectl (and gcloud's kubectl dispatcher) ask first
    return json{{"major", "1"},
                {"minor", "32"},
                {"gitVersion", "v1.32.0-kubetrain-fake"},
                {"platform", "linux/amd64"}};
  }
  if (path == "/api" || path == "/api/") {
    return json{
        {"kind", "APIVersions"},
        {"versions", {"v1"}},
        {"serverAddressByClientCIDRs", {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", host}}}}};
  }
  if (path == "/api/v1" || path == "/api/v1/") return ResourceList("v1", resources);
  std::map<std::string, std::set<std::string>> groups;  // group -> versions
  for (const DiscoveredResource& r : resources) {
    const size_t slash = r.group_version.find('/');
    if (slash != std::string::npos) {
      groups[r.group_version.substr(0, slash)].insert(r.group_version.substr(slash + 1));
    }
  }
  if (path == "/apis" || path == "/apis/") {
    json list = json::array();
    for (const auto& [group, versions] : groups) {
      json entries = json::array();
      for (const std::string& v : versions) {
        entries.push_back({{"groupVersion", group + "/" + v}, {"version", v}});
      }
      list.push_back({{"name", group}, {"versions", entries}, {"preferredVersion", entries[0]}});
    }
    return json{{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", list}};
  }
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (parts.size() == 3 && parts[0] == "apis" && groups.count(parts[1]) > 0 &&
      groups[parts[1]].count(parts[2]) > 0) {
    return ResourceList(parts[1] + "/" + parts[2], resources);
  }
  if (path == "/openapi/v3" || path == "/openapi/v3/") {
    json paths = json::object();
    for (const json& crd : crds) {
      for (const json& v : crd.value("/spec/versions"_json_pointer, json::array())) {
        const std::string group_version =
            absl::StrCat("apis/", crd.value("/spec/group"_json_pointer, std::string()), "/",
                         v.value("name", ""));
        paths[group_version] = {{"serverRelativeURL", "/openapi/v3/" + group_version}};
      }
    }
    return json{{"paths", paths}};
  }
  if (parts.size() == 5 && parts[0] == "openapi" && parts[1] == "v3" && parts[2] == "apis") {
    for (const json& crd : crds) {
      if (std::optional<json> document = CrdOpenApi(crd, parts[3], parts[4])) return document;
    }
  }
  return std::nullopt;
}

}  // namespace kubetrain::fake_apiserver
