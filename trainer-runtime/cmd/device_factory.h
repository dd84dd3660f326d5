#pragma once

// The trainer's --device placement in the kubetrain-runtime binary: the
// engine knows only the CPU device; this adds the CUDA device when the
// binary is built with it (trainer-runtime/cuda, linked only when that
// target exists).

#include <memory>

#include "absl/status/statusor.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/trainer.h"

namespace kubetrain::runtime::cmd {

// Whether this binary has the CUDA device.
bool BuiltWithCuda();

// GPUs this process may use (cudaGetDeviceCount, which honours
// CUDA_VISIBLE_DEVICES); 0 without CUDA, a driver or a device.
int VisibleGpuCount();

// An engine::DeviceFactory for options.device:
//   cpu   a CpuDevice with options.threads and options.cpu_kernels
//   gpu   CUDA device 0; a usage error (exit code 2) naming --device when
//         the build has no CUDA or no device is visible
//   auto  the GPU when BuiltWithCuda() and VisibleGpuCount() > 0, else cpu
// Another value is a usage error naming --device.
absl::StatusOr<std::unique_ptr<engine::Device>> CreateTrainerDevice(
    const engine::TrainerOptions& options);

}  // namespace kubetrain::runtime::cmd
