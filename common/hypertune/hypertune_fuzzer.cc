// libFuzzer target for the hypertune metric file parser and follower: the
// input is two file versions separated by a NUL byte, polled in turn.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/hypertune/hypertune.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view first = input.substr(0, nul);
  const std::string_view second = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  kubetrain::hypertune::HypertuneFileFollower follower;
  const size_t n1 = follower.Poll(first).size();
  // Polling the same content again returns nothing new.
  if (!follower.Poll(first).empty()) __builtin_trap();
  const size_t n2 = follower.Poll(second).size();
  if (n1 + n2 > kubetrain::hypertune::ParseHypertuneFile(first).size() +
                    kubetrain::hypertune::ParseHypertuneFile(second).size()) {
    __builtin_trap();
  }
  return 0;
}
