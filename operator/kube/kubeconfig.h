#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::kube {

// How to reach and authenticate to one API server: what a kubeconfig context
// or a pod's service account resolves to. PEM material is held inline (files
// are read when the config is loaded).
struct ClusterConfig {
  std::string server;  // "https://host:port" (or http:// for tests)
  std::string ca_pem;  // trusted CA bundle; empty: the system's
  bool insecure_skip_tls_verify = false;
  // Read but not applied: cpprest takes the TLS server name from the URL host.
  std::string tls_server_name;
  std::string bearer_token;
  std::string client_certificate_pem;
  std::string client_key_pem;
  std::string username, password;          // basic auth (old clusters)
  std::string namespace_name = "default";  // the context's namespace
  std::string context_name;                // the kubeconfig context used; "" in a pod
};

// Reads a file's bytes; NotFound/PermissionDenied naming the path on failure.
using FileReader = std::function<absl::StatusOr<std::string>(const std::string& path)>;
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Parses kubeconfig YAML: picks `context` (or current-context when empty),
// its cluster (server, certificate-authority[-data], insecure-skip-tls-verify,
// tls-server-name) and user (token, tokenFile, client-certificate[-data],
// client-key[-data], username/password) and the context's namespace.
// Relative file paths are resolved against `base_dir` (the kubeconfig's
// folder). `exec` and `auth-provider` users are not supported: an error says
// so. Errors are InvalidArgument naming the field ("users[alice].user.token"),
// never exceptions; any input is safe.
absl::StatusOr<ClusterConfig> ParseKubeconfig(absl::string_view yaml, const std::string& base_dir,
                                              const FileReader& read_file,
                                              const std::string& context = "");

// Loads the kubeconfig at `path` (files it names are read from disk).
absl::StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path,
                                             const std::string& context = "");

// Loads several kubeconfig files merged as kubectl merges $KUBECONFIG's list:
// the first file that sets current-context decides it, and the first file
// that defines a cluster, context or user of a name decides that entry;
// relative file paths in an entry resolve against its own file's folder.
// Files that do not exist are skipped (as kubectl does); NotFound when none
// does. Errors name the file they come from.
absl::StatusOr<ClusterConfig> LoadKubeconfigFiles(const std::vector<std::string>& paths,
                                                  const std::string& context = "");

// The kubeconfig files kubectl would read: the paths of `kubeconfig_env`
// ($KUBECONFIG, colon-separated, empty entries skipped), else `home`/.kube/config.
std::vector<std::string> KubeconfigPaths(const std::string& kubeconfig_env,
                                         const std::string& home);

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// In-cluster credentials: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
// `token`, `ca.crt` and `namespace` from `service_account_dir`. `getenv` is
// injectable for tests. FailedPrecondition when not running in a pod (the
// variables are unset).
absl::StatusOr<ClusterConfig> LoadInCluster(
    const std::string& service_account_dir = kServiceAccountDir,
    const std::function<const char*(const char*)>& getenv = nullptr);

}  // namespace kubetrain::kube
