#include "operator/kube/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kubetrain::kube {
namespace {

// The entry named `name` of a kubeconfig list such as `clusters:`, or an
// error naming what is missing.
absl::StatusOr<YAML::Node> FindNamed(const YAML::Node& root, const std::string& list,
                                     const std::string& name, const std::string& inner) {
  YAML::Node entries = root[list];
  if (!entries || !entries.IsSequence()) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig: ", list, ": missing"));
  }
  for (const YAML::Node& entry : entries) {
    if (!entry.IsMap() || !entry["name"] || !entry["name"].IsScalar()) continue;
    if (entry["name"].as<std::string>() != name) continue;
    YAML::Node body = entry[inner];
    if (!body || !body.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat("kubeconfig: ", list, "[", name, "].", inner, ": missing"));
    }
    return body;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("kubeconfig: ", list, "[", name, "]: no such entry"));
}

// A scalar field as a string; "" when absent; error when not a scalar.
absl::StatusOr<std::string> Scalar(const YAML::Node& map, const char* key,
                                   const std::string& path) {
  YAML::Node v = map[key];
  if (!v || v.IsNull()) return std::string();
  if (!v.IsScalar()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig: ", path, ".", key, ": must be a string"));
  }
  return v.Scalar();
}

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return absl::StrCat(base_dir, "/", path);
}

// Inline `<key>-data` (base64) wins over the file `<key>`.
absl::StatusOr<std::string> DataOrFile(const YAML::Node& map, const std::string& key,
                                       const std::string& path, const std::string& base_dir,
                                       const FileReader& read_file) {
  auto data = Scalar(map, (key + "-data").c_str(), path);
  if (!data.ok()) return data.status();
  if (!data->empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(*data, &decoded)) {
      return absl::InvalidArgumentError(
          absl::StrCat("kubeconfig: ", path, ".", key, "-data: not valid base64"));
    }
    return decoded;
  }
  auto file = Scalar(map, key.c_str(), path);
  if (!file.ok()) return file.status();
  if (file->empty()) return std::string();
  auto contents = read_file(Resolve(base_dir, *file));
  if (!contents.ok()) {
    return absl::Status(contents.status().code(), absl::StrCat("kubeconfig: ", path, ".", key, ": ",
                                                               contents.status().message()));
  }
  return contents;
}

absl::StatusOr<ClusterConfig> ParseNode(const YAML::Node& root, const std::string& base_dir,
                                        const FileReader& read_file, std::string context_name) {
  if (!root.IsMap()) return absl::InvalidArgumentError("kubeconfig: not a YAML mapping");
  if (context_name.empty()) {
    auto current = Scalar(root, "current-context", "");
    if (!current.ok()) return current.status();
    context_name = *current;
  }
  if (context_name.empty()) {
    return absl::InvalidArgumentError("kubeconfig: current-context: not set and no context given");
  }
  auto context = FindNamed(root, "contexts", context_name, "context");
  if (!context.ok()) return context.status();
  std::string ctx_path = absl::StrCat("contexts[", context_name, "].context");
  auto cluster_name = Scalar(*context, "cluster", ctx_path);
  auto user_name = Scalar(*context, "user", ctx_path);
  auto ns = Scalar(*context, "namespace", ctx_path);
  for (const auto* s : {&cluster_name, &user_name, &ns}) {
    if (!s->ok()) return s->status();
  }
  if (cluster_name->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig: ", ctx_path, ".cluster: missing"));
  }

  ClusterConfig config;
  if (!ns->empty()) config.namespace_name = *ns;
  config.context_name = context_name;

  auto cluster = FindNamed(root, "clusters", *cluster_name, "cluster");
  if (!cluster.ok()) return cluster.status();
  std::string cluster_path = absl::StrCat("clusters[", *cluster_name, "].cluster");
  auto server = Scalar(*cluster, "server", cluster_path);
  if (!server.ok()) return server.status();
  if (server->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig: ", cluster_path, ".server: missing"));
  }
  if (!absl::StartsWith(*server, "https://") && !absl::StartsWith(*server, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig: ", cluster_path, ".server: must start with https:// or http://"));
  }
  config.server = std::string(absl::StripSuffix(*server, "/"));
  auto insecure = Scalar(*cluster, "insecure-skip-tls-verify", cluster_path);
  if (!insecure.ok()) return insecure.status();
  if (*insecure == "true") {
    config.insecure_skip_tls_verify = true;
  } else if (!insecure->empty() && *insecure != "false") {
    return absl::InvalidArgumentError(absl::StrCat(
        "kubeconfig: ", cluster_path, ".insecure-skip-tls-verify: must be true or false"));
  }
  auto server_name = Scalar(*cluster, "tls-server-name", cluster_path);
  if (!server_name.ok()) return server_name.status();
  config.tls_server_name = *server_name;
  auto ca = DataOrFile(*cluster, "certificate-authority", cluster_path, base_dir, read_file);
  if (!ca.ok()) return ca.status();
  config.ca_pem = *ca;

  if (user_name->empty()) return config;  // anonymous
  auto user = FindNamed(root, "users", *user_name, "user");
  if (!user.ok()) return user.status();
  std::string user_path = absl::StrCat("users[", *user_name, "].user");
  for (const char* unsupported : {"exec", "auth-provider"}) {
    if ((*user)[unsupported]) {
      return absl::UnimplementedError(absl::StrCat("kubeconfig: ", user_path, ".", unsupported,
                                                   ": credential plugins are not supported; use "
                                                   "a token or a client certificate"));
    }
  }
  auto token = Scalar(*user, "token", user_path);
  if (!token.ok()) return token.status();
  config.bearer_token = *token;
  if (config.bearer_token.empty()) {
    auto token_file = Scalar(*user, "tokenFile", user_path);
    if (!token_file.ok()) return token_file.status();
    if (!token_file->empty()) {
      auto contents = read_file(Resolve(base_dir, *token_file));
      if (!contents.ok()) {
        return absl::Status(
            contents.status().code(),
            absl::StrCat("kubeconfig: ", user_path, ".tokenFile: ", contents.status().message()));
      }
      config.bearer_token = std::string(absl::StripAsciiWhitespace(*contents));
    }
  }
  auto cert = DataOrFile(*user, "client-certificate", user_path, base_dir, read_file);
  if (!cert.ok()) return cert.status();
  auto key = DataOrFile(*user, "client-key", user_path, base_dir, read_file);
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kubeconfig: ", user_path, ": client-certificate and client-key must come together"));
  }
  config.client_certificate_pem = *cert;
  config.client_key_pem = *key;
  auto username = Scalar(*user, "username", user_path);
  auto password = Scalar(*user, "password", user_path);
  if (!username.ok()) return username.status();
  if (!password.ok()) return password.status();
  config.username = *username;
  config.password = *password;
  return config;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    std::string message = absl::StrCat(path, ": ", std::strerror(err));
    return err == EACCES ? absl::PermissionDeniedError(message) : absl::NotFoundError(message);
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

absl::StatusOr<ClusterConfig> ParseKubeconfig(absl::string_view yaml, const std::string& base_dir,
                                              const FileReader& read_file,
                                              const std::string& context) {
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    return ParseNode(root, base_dir, read_file, context);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig: line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  }
}

absl::StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::string base_dir;
  size_t slash = path.rfind('/');
  if (slash != std::string::npos) base_dir = path.substr(0, slash);
  auto config = ParseKubeconfig(*text, base_dir, ReadFileToString, context);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

namespace {

// Makes the relative file paths of one cluster or user entry absolute
// against `base_dir`, so entries from several files can be merged.
void ResolveEntryPaths(YAML::Node body, const std::string& base_dir,
                       std::initializer_list<const char*> keys) {
  if (!body || !body.IsMap()) return;
  for (const char* key : keys) {
    YAML::Node value = body[key];
    if (value && value.IsScalar() && !value.Scalar().empty()) {
      body[key] = Resolve(base_dir, value.Scalar());
    }
  }
}

}  // namespace

absl::StatusOr<ClusterConfig> LoadKubeconfigFiles(const std::vector<std::string>& paths,
                                                  const std::string& context) {
  if (paths.size() == 1) return LoadKubeconfig(paths[0], context);
  YAML::Node merged(YAML::NodeType::Map);
  std::string current_context;
  std::map<std::string, std::set<std::string>> names;  // list -> names taken
  std::vector<std::string> read;
  for (const std::string& path : paths) {
    auto text = ReadFileToString(path);
    if (text.status().code() == absl::StatusCode::kNotFound) continue;
    if (!text.ok()) return text.status();
    read.push_back(path);
    const size_t slash = path.rfind('/');
    const std::string base_dir = slash == std::string::npos ? "" : path.substr(0, slash);
    YAML::Node root;
    try {
      root = YAML::Load(*text);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": kubeconfig: line ", e.mark.line + 1,
                                                     ", column ", e.mark.column + 1, ": ", e.msg));
    }
    if (root.IsNull()) continue;  // an empty file adds nothing
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": kubeconfig: not a YAML mapping"));
    }
    if (current_context.empty()) {
      auto current = Scalar(root, "current-context", "");
      if (!current.ok()) {
        return absl::Status(current.status().code(),
                            absl::StrCat(path, ": ", current.status().message()));
      }
      current_context = *current;
    }
    static constexpr std::pair<const char*, const char*> kLists[] = {
        {"clusters", "cluster"}, {"contexts", "context"}, {"users", "user"}};
    for (const auto& [list, inner] : kLists) {
      YAML::Node entries = root[list];
      if (!entries || !entries.IsSequence()) continue;
      for (const YAML::Node& entry : entries) {
        if (!entry.IsMap() || !entry["name"] || !entry["name"].IsScalar()) continue;
        if (!names[list].insert(entry["name"].Scalar()).second) continue;  // the first one wins
        YAML::Node copy = YAML::Clone(entry);
        if (std::string(list) == "clusters") {
          ResolveEntryPaths(copy[inner], base_dir, {"certificate-authority"});
        } else if (std::string(list) == "users") {
          ResolveEntryPaths(copy[inner], base_dir,
                            {"client-certificate", "client-key", "tokenFile"});
        }
        merged[list].push_back(copy);
      }
    }
  }
  if (read.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no kubeconfig file found (looked for ", absl::StrJoin(paths, ", "), ")"));
  }
  if (!current_context.empty()) merged["current-context"] = current_context;
  auto config = ParseNode(merged, "", ReadFileToString, context);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(absl::StrJoin(read, ":"), ": ", config.status().message()));
  }
  return config;
}

std::vector<std::string> KubeconfigPaths(const std::string& kubeconfig_env,
                                         const std::string& home) {
  std::vector<std::string> paths;
  for (absl::string_view path : absl::StrSplit(kubeconfig_env, ':', absl::SkipEmpty())) {
    paths.emplace_back(path);
  }
  if (paths.empty() && !home.empty()) paths.push_back(absl::StrCat(home, "/.kube/config"));
  return paths;
}

absl::StatusOr<ClusterConfig> LoadInCluster(const std::string& service_account_dir,
                                            const std::function<const char*(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string {
    const char* v = getenv ? getenv(name) : std::getenv(name);
    return v == nullptr ? "" : v;
  };
  std::string host = env("KUBERNETES_SERVICE_HOST");
  std::string port = env("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return absl::FailedPreconditionError(
        "not running in a cluster: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are unset");
  }
  ClusterConfig config;
  // An IPv6 service address needs brackets in a URL.
  if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
  config.server = absl::StrCat("https://", host, ":", port);
  auto token = ReadFileToString(service_account_dir + "/token");
  if (!token.ok()) return token.status();
  config.bearer_token = std::string(absl::StripAsciiWhitespace(*token));
  auto ca = ReadFileToString(service_account_dir + "/ca.crt");
  if (!ca.ok()) return ca.status();
  config.ca_pem = *ca;
  auto ns = ReadFileToString(service_account_dir + "/namespace");
  if (ns.ok()) {
    std::string trimmed(absl::StripAsciiWhitespace(*ns));
    if (!trimmed.empty()) config.namespace_name = trimmed;
  }
  return config;
}

}  // namespace kubetrain::kube
