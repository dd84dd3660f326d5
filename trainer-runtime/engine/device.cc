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

absl::StatusOr<Tensor> Device::FromHost(const Tensor& host) {
  if (host.device_type() != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": FromHost of a tensor that is not in host memory"));
  }
  if (type() == DeviceType::kCpu) return host;
  Tensor on_device = Allocate(host.shape());
  if (absl::Status s = CopyFromHost(host, on_device); !s.ok()) return s;
  return on_device;
}

absl::StatusOr<Tensor> Device::ToHost(const Tensor& tensor) {
  if (tensor.device_type() == DeviceType::kCpu) return tensor;
  Tensor host = Tensor::Host(tensor.shape());
  if (absl::Status s = CopyToHost(tensor, host); !s.ok()) return s;
  return host;
}

absl::StatusOr<float> Device::ReadScalar(const Tensor& tensor) {
  if (tensor.num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": reading a scalar from a tensor of shape ", ShapeString(tensor.shape())));
  }
  if (tensor.device_type() == DeviceType::kCpu) return tensor.at(0);
  float value = 0;
  Tensor host = Tensor::WrapHost(tensor.shape(), &value, nullptr);
  if (absl::Status s = CopyToHost(tensor, host); !s.ok()) return s;
  return value;
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
