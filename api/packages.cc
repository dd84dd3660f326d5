#include "api/packages.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/storage_uri.h"

namespace kubetrain::api {
namespace {

// A DNS-1123 subdomain, as Kubernetes names most objects: lowercase letters,
// digits, '-' and '.', at most 253, starting and ending with a letter or digit.
bool IsSubdomain(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && c != '.') return false;
  }
  return absl::ascii_isalnum(name.front()) && absl::ascii_isalnum(name.back());
}

}  // namespace

bool IsConfigMapKey(absl::string_view key) {
  if (key.empty() || key.size() > 253 || key == "." || key == "..") return false;
  for (char c : key) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

std::string ConfigMapPackageUri(absl::string_view config_map, absl::string_view file) {
  return absl::StrCat(kConfigMapPackageScheme, "://", config_map, "/", file);
}

absl::StatusOr<PackageSource> ParsePackageUri(absl::string_view uri) {
  PackageSource source;
  if (uri.empty()) return absl::InvalidArgumentError("must not be empty");
  const absl::string_view scheme = UriScheme(uri);
  if (scheme.empty()) return source;
  if (absl::EqualsIgnoreCase(scheme, "http") || absl::EqualsIgnoreCase(scheme, "https")) {
    source.kind = PackageSource::Kind::kUrl;
    return source;
  }
  if (absl::EqualsIgnoreCase(scheme, "file")) {
    return absl::InvalidArgumentError(UriNotSupported(uri));
  }
  if (scheme == kConfigMapPackageScheme) {
    const absl::string_view rest = uri.substr(scheme.size() + 3);
    const size_t slash = rest.find('/');
    source.kind = PackageSource::Kind::kConfigMap;
    if (slash != absl::string_view::npos) {
      source.config_map = std::string(rest.substr(0, slash));
      source.file = std::string(rest.substr(slash + 1));
    }
    if (!IsSubdomain(source.config_map) || !IsConfigMapKey(source.file)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", uri,
          "\" is not configmap://NAME/FILE: NAME a ConfigMap of the job's namespace (lowercase "
          "letters, digits, '-' and '.'), FILE its key holding the package (letters, digits, "
          "'-', '_' and '.', such as trainer-0.1.tar.gz)"));
    }
    return source;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", uri, "\" names object storage (", scheme,
      "://), which kubetrain cannot fetch packages from: give the package's local folder (jobs "
      "submit --package-path, which stores it in the cluster), an http(s):// URL, or a path in "
      "the replica's image or volumes"));
}

}  // namespace kubetrain::api
