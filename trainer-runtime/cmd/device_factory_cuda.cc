#include "absl/strings/str_cat.h"
#include "trainer-runtime/cmd/device_factory.h"
#include "trainer-runtime/cuda/cuda_device.h"
#include "trainer-runtime/exit_codes.h"

// The build with trainer-runtime/cuda; device_factory_cpu.cc is the build
// without it (trainer-runtime/cmd/CMakeLists.txt picks one).

namespace kubetrain::runtime::cmd {

bool BuiltWithCuda() { return true; }

int VisibleGpuCount() { return cuda::VisibleDeviceCount(); }

absl::StatusOr<std::unique_ptr<engine::Device>> CreateTrainerDevice(
    const engine::TrainerOptions& options) {
  if (absl::Status s = engine::CheckDevicePlacement(options.device); !s.ok()) return s;
  if (options.device == "cpu")
    return std::make_unique<engine::CpuDevice>(options.threads, options.cpu_kernels);
  if (VisibleGpuCount() == 0) {
    if (options.device == "auto")
      return std::make_unique<engine::CpuDevice>(options.threads, options.cpu_kernels);
    return WithExitCode(
        absl::FailedPreconditionError(
            "--device=gpu: no CUDA device is visible to this process (cudaGetDeviceCount found "
            "none: no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them); use --device=cpu or "
            "--device=auto"),
        kExitUsage);
  }
  absl::StatusOr<std::unique_ptr<engine::Device>> device =
      cuda::CreateDeviceForPlacement(options.device, options.threads);
  // A visible GPU that cannot be opened (a driver fault) is not a usage
  // error; its status keeps CUDA's message.
  return device;
}

}  // namespace kubetrain::runtime::cmd
