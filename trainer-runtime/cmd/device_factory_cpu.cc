#include "trainer-runtime/cmd/device_factory.h"

// The build without trainer-runtime/cuda; device_factory_cuda.cc is the build
// with it (trainer-runtime/cmd/CMakeLists.txt picks one).

namespace kubetrain::runtime::cmd {

bool BuiltWithCuda() { return false; }

int VisibleGpuCount() { return 0; }

absl::StatusOr<std::unique_ptr<engine::Device>> CreateTrainerDevice(
    const engine::TrainerOptions& options) {
  return engine::CreateCpuOnlyDevice(options);
}

}  // namespace kubetrain::runtime::cmd
