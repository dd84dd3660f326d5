#include "trainer-runtime/engine/device.h"

#include <cblas.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kubetrain::runtime::engine {

Tensor Device::Allocate(const Shape& shape) {
  auto buffer = std::make_shared<Buffer>(allocator(),
                                         static_cast<size_t>(NumElements(shape)) * sizeof(float));
  return Tensor(shape, std::move(buffer));
}

Kernel Device::FindKernel(absl::string_view op) const {
  auto it = kernels_.find(op);
  return it == kernels_.end() ? nullptr : it->second;
}

CpuDevice::CpuDevice(int num_threads) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  openblas_set_num_threads(num_threads_);
  for (const auto& [op, kernel] : CpuKernelTable()) RegisterKernel(op, kernel);
}

namespace {
absl::Status CheckSameShape(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("copy between shapes ", ShapeString(a.shape()),
                                                   " and ", ShapeString(b.shape())));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status CpuDevice::CopyFromHost(const Tensor& host, Tensor& device_tensor) {
  if (absl::Status s = CheckSameShape(host, device_tensor); !s.ok()) return s;
  if (host.num_elements() > 0) {
    std::memcpy(device_tensor.data(), host.data(),
                sizeof(float) * static_cast<size_t>(host.num_elements()));
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyToHost(const Tensor& device_tensor, Tensor& host) {
  return CopyFromHost(device_tensor, host);
}

}  // namespace kubetrain::runtime::engine
