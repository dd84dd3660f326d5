// libFuzzer target: TF_CONFIG comes from the environment of a pod, so any
// bytes must give either a spec or an InvalidArgument, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainer-runtime/dist/cluster_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = kubetrain::dist::ClusterSpec::FromTfConfig(text);
  if (spec.ok()) {
    // Exercise the accessors: they must hold for whatever parsed.
    (void)spec->ReplicaRank();
    (void)spec->ReplicaAddresses();
    (void)spec->TaskName();
    (void)spec->IsChief();
    (void)spec->Address(spec->task());
  } else if (spec.status().code() != absl::StatusCode::kInvalidArgument) {
    __builtin_trap();
  }
  return 0;
}
