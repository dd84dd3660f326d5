#pragma once

// Paths that name object storage (gs://bucket/run1, s3://..., hdfs://...)
// rather than a folder. Cloud ML users give jobDir, --output_path and their
// data paths as gs:// URIs; kubetrain reads and writes local (or mounted)
// folders only, and a URI handed to the filesystem as a path would become a
// local folder literally named "gs:" that the user believes is the bucket. So
// every entry point refuses them, naming the flag or field: the runtime's
// flags (exit code 2) and api::Validate (jobDir, the path flags in args,
// packageUris). Header-only: the runtime and the API layer share it.

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace kubetrain::api {

// The scheme of `path` when it starts "<scheme>://", an RFC 3986 scheme (a
// letter, then letters, digits, '+', '-' or '.'); empty otherwise, so
// "/data/x", "data/x" and "C:\\x" have none.
inline absl::string_view UriScheme(absl::string_view path) {
  const size_t colon = path.find("://");
  if (colon == absl::string_view::npos || colon == 0 || !absl::ascii_isalpha(path[0])) return {};
  for (size_t i = 1; i < colon; ++i) {
    const char c = path[i];
    if (!absl::ascii_isalnum(c) && c != '+' && c != '-' && c != '.') return {};
  }
  return path.substr(0, colon);
}

// The first element of a comma-separated list of paths ("a,gs://b/c") that
// has a URI scheme; empty when none has. Cloud ML trainers take data paths
// as such lists.
inline absl::string_view FirstUri(absl::string_view paths) {
  for (absl::string_view element : absl::StrSplit(paths, ',')) {
    element = absl::StripAsciiWhitespace(element);
    if (!UriScheme(element).empty()) return element;
  }
  return {};
}

// Why `uri` is refused, for an error that follows the flag or field name:
// "\"gs://b/run1\" names object storage (gs://), which kubetrain does not
// support: it reads and writes local folders only; put the data on a volume
// and give the folder it is mounted at".
// A file:// URI is told to give its path instead.
inline std::string UriNotSupported(absl::string_view uri) {
  if (absl::EqualsIgnoreCase(UriScheme(uri), "file")) {
    return absl::StrCat("\"", uri, "\" is a file:// URI: give the path itself (", uri.substr(7),
                        ")");
  }
  return absl::StrCat("\"", uri, "\" names object storage (", UriScheme(uri),
                      "://), which kubetrain does not support: it reads and writes local folders "
                      "only; put the data on a volume and give the folder it is mounted at");
}

// The runtime's flags whose values are paths (either spelling, '-' or '_'):
// what api::Validate checks in args and containerArgs, and what
// kubetrain-runtime train refuses URIs for.
inline constexpr absl::string_view kPathFlags[] = {"train_data_paths", "eval_data_paths",
                                                   "output_path", "job_dir", "model"};

}  // namespace kubetrain::api
