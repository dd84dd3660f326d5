#pragma once

#include <cstdint>
#include <string_view>

namespace kubetrain {

// 64-bit FNV-1a of `text`: the same in every process, build and platform
// (std::hash and absl::Hash are not), for what two processes or two versions
// must compute alike: name suffixes, a study's seed, model and cluster
// fingerprints.
inline uint64_t StableHash(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace kubetrain
