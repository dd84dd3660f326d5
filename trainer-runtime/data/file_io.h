#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::runtime::data {

// absl::string_view is not std::string_view in the Debian build of absl;
// absl::StrCat and friends need this conversion.
inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// Reads the whole file at `path`. Errors: NOT_FOUND when it does not exist,
// FAILED_PRECONDITION when it is a directory, INTERNAL/DATA_LOSS for read
// failures; every message names the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// True when `bytes` starts with the gzip magic (1f 8b).
bool LooksGzipped(std::string_view bytes);

// Inflates a gzip stream (one or more concatenated members, as `cat a.gz b.gz`
// produces). `name` is only used in error messages. The output is capped at
// `max_output_bytes` so that a small hostile input cannot exhaust memory.
// Errors: DATA_LOSS for a corrupt or truncated stream, RESOURCE_EXHAUSTED
// past the cap.
absl::StatusOr<std::string> Gunzip(std::string_view compressed, std::string_view name,
                                   size_t max_output_bytes);

// Gunzip when `bytes` looks gzipped, otherwise a copy of `bytes`.
absl::StatusOr<std::string> MaybeGunzip(std::string_view bytes, std::string_view name,
                                        size_t max_output_bytes);

}  // namespace kubetrain::runtime::data
