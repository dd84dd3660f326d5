// libFuzzer target: arbitrary bytes through the path every user file takes
// (decode, validate, default, encode) must never crash, leak or hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/codec.h"
#include "api/defaults.h"
#include "api/job_file.h"
#include "api/scale_tiers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kubetrain::api::CheckedJob checked = kubetrain::api::CheckTrainingJob(text);
  (void)kubetrain::api::FormatErrors(checked.errors, "fuzz.yaml");
  if (!checked.ok()) return 0;
  kubetrain::api::ApplyDefaults(&checked.job);
  (void)kubetrain::api::ReplicaGroups(checked.job.spec().training_input());
  const std::string json = kubetrain::api::EncodeJson(checked.job);
  (void)kubetrain::api::EncodeYaml(checked.job);
  (void)kubetrain::api::DecodeTrainingJob(json);
  return 0;
}
