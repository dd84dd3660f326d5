// libFuzzer target for the IDX parser: the input is split into an images
// buffer and a labels buffer (first byte: where, as a fraction of the rest),
// each possibly gzip-compressed, and parsed in memory.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainer-runtime/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = rest.size() * data[0] / 255;
  kubetrain::runtime::data::ParseLimits limits;
  limits.max_decompressed_bytes = size_t{16} << 20;  // stay inside libFuzzer's memory limit
  auto dataset = kubetrain::runtime::data::ParseIdx(rest.substr(0, split), "images",
                                                    rest.substr(split), "labels", limits);
  if (dataset.ok()) {
    // The invariants the loader promises.
    const auto& d = *dataset;
    if (d.features.size() != static_cast<size_t>(d.num_examples * d.example_size()) ||
        d.labels.size() != static_cast<size_t>(d.num_examples)) {
      __builtin_trap();
    }
    for (float f : d.features) {
      if (!(f >= 0.0f && f <= 1.0f)) __builtin_trap();
    }
    for (int32_t label : d.labels) {
      if (label < 0 || label >= d.num_classes) __builtin_trap();
    }
  }
  return 0;
}
