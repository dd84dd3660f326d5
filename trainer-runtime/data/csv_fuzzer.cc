// libFuzzer target for the CSV dataset parser.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainer-runtime/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view content(reinterpret_cast<const char*>(data), size);
  auto dataset = kubetrain::runtime::data::ParseCsv(content, "fuzz.csv");
  if (dataset.ok()) {
    const auto& d = *dataset;
    if (d.features.size() != static_cast<size_t>(d.num_examples * d.example_size()) ||
        d.labels.size() != static_cast<size_t>(d.num_examples)) {
      __builtin_trap();
    }
    for (int32_t label : d.labels) {
      if (label < 0 || label >= d.num_classes) __builtin_trap();
    }
  }
  return 0;
}
