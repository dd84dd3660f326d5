#pragma once

// trainingInput.packageUris: where a pythonModule job's trainer packages come
// from. Each is made importable in every replica before the module starts
// (kubetrain-runtime exec --package): a file (an sdist or wheel) or an
// http(s):// URL is installed with pip, a folder goes on the module search
// path as it is. Shared by validation (which refuses what no replica could
// fetch, naming the field), the reconciler (which mounts stored packages into
// the pods) and the runtime.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::api {

// The scheme of a package stored in the cluster: configmap://NAME/FILE is key
// FILE of ConfigMap NAME in the job's namespace (what `jobs submit training
// --package-path` makes on Kubernetes). The operator mounts it into every
// replica as a file named FILE.
inline constexpr char kConfigMapPackageScheme[] = "configmap";

// The largest ConfigMap the API server stores: its data and binaryData values
// together (Kubernetes' validation limit).
inline constexpr size_t kMaxConfigMapBytes = 1024 * 1024;

struct PackageSource {
  enum class Kind {
    kPath,       // a path inside the replica: its image or a volume
    kUrl,        // http:// or https://, fetched by pip in the replica
    kConfigMap,  // configmap://NAME/FILE
  };
  Kind kind = Kind::kPath;
  std::string config_map;  // kConfigMap: the ConfigMap's name
  std::string file;        // kConfigMap: its key, also the mounted file's name
};

// Reads one packageUris entry. InvalidArgument with the reason (to follow the
// field path or flag) for an empty entry, a scheme kubetrain cannot fetch
// (gs://, s3://, ...; a file:// URI is told to give its path) and a malformed
// configmap:// URI (NAME must be a DNS-1123 subdomain, FILE a ConfigMap key).
absl::StatusOr<PackageSource> ParsePackageUri(absl::string_view uri);

// "configmap://NAME/FILE".
std::string ConfigMapPackageUri(absl::string_view config_map, absl::string_view file);

// Whether `key` may name an entry of a ConfigMap: 1 to 253 characters of
// [-._a-zA-Z0-9], not "." or "..".
bool IsConfigMapKey(absl::string_view key);

}  // namespace kubetrain::api
