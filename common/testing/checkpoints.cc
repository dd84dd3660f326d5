#include "common/testing/checkpoints.h"

#include "absl/strings/numbers.h"
#include "common/testing/temp_dir.h"

namespace kubetrain::test_support {

int64_t LatestCheckpointStep(const std::string& dir) {
  const std::string index = ReadFile(dir + "/checkpoint");
  const std::string key = "model_checkpoint_path: \"model.ckpt-";
  const size_t at = index.find(key);
  if (at == std::string::npos) return -1;
  const size_t start = at + key.size();
  int64_t step = -1;
  return absl::SimpleAtoi(index.substr(start, index.find('"', start) - start), &step) ? step : -1;
}

}  // namespace kubetrain::test_support
