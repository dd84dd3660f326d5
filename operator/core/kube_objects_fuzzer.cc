// Fuzzes the readers of Kubernetes API objects: any bytes that parse as JSON
// must yield a replica/service or an error, never a crash.
#include <cstddef>
#include <cstdint>

#include "nlohmann/json.hpp"
#include "operator/core/kube_objects.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json object = nlohmann::json::parse(data, data + size, nullptr,
                                                      /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;
  (void)kubetrain::core::ParsePod(object);
  (void)kubetrain::core::ParseService(object);
  return 0;
}
