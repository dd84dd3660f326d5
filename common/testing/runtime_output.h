#pragma once

// What kubetrain-runtime leaves behind that tests read: its checkpoint index
// and its last metrics line.

#include <cstdint>
#include <optional>
#include <string>

namespace kubetrain::test_support {

// The step of the latest checkpoint in the output folder `dir`, from the
// index kubetrain-runtime writes there (`checkpoint`: model_checkpoint_path:
// "model.ckpt-200"); -1 when there is none.
int64_t LatestCheckpointStep(const std::string& dir);

// The chief's last "Final metrics after N steps, loss: L, accuracy: A" line
// in `log` (a replica's output, or several replicas' together: only a chief
// prints it); nullopt when there is none.
struct FinalMetrics {
  int64_t step = 0;
  double loss = 0;
  double accuracy = 0;
};
std::optional<FinalMetrics> LastFinalMetrics(const std::string& log);

}  // namespace kubetrain::test_support
