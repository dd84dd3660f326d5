// libFuzzer target for the tf.train.Example decoder and the TFRecord dataset
// parser built on it.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainer-runtime/data/example_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto example = kubetrain::runtime::data::DecodeExample(bytes);
  if (example.ok() && (example->features.empty() || example->label.size() != 1)) __builtin_trap();
  auto dataset = kubetrain::runtime::data::ParseExampleTFRecord(bytes, "fuzz");
  if (dataset.ok() && dataset->features.size() !=
                          static_cast<size_t>(dataset->num_examples * dataset->example_size())) {
    __builtin_trap();
  }
  return 0;
}
