#pragma once

#include <cstdint>
#include <string>

namespace kubetrain::test_support {

// The step of the latest checkpoint in the output folder `dir`, from the
// index kubetrain-runtime writes there (`checkpoint`: model_checkpoint_path:
// "model.ckpt-200"); -1 when there is none.
int64_t LatestCheckpointStep(const std::string& dir);

}  // namespace kubetrain::test_support
