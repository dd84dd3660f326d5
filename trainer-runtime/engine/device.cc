#include "trainer-runtime/engine/device.h"

#include <cblas.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#if KUBETRAIN_WITH_ONEDNN
#include "trainer-runtime/engine/onednn_kernels.h"
#endif

namespace kubetrain::runtime::engine {

Tensor Device::Allocate(const Shape& shape) {
  auto buffer = std::make_shared<Buffer>(allocator(),
                                         static_cast<size_t>(NumElements(shape)) * sizeof(float));
  return Tensor(shape, std::move(buffer));
}

Kernel Device::FindKernel(absl::string_view op) const {
  auto it = kernels_.find(op);
  return it == kernels_.end() ? nullptr : it->second.kernel;
}

bool Device::TakesDeviceLayouts(absl::string_view op) const {
  auto it = kernels_.find(op);
  return it != kernels_.end() && it->second.takes_device_layouts;
}

const Device::FusedKernel* Device::FindFusedKernel(absl::string_view producer,
                                                   absl::string_view consumer) const {
  auto it = fused_kernels_.find({std::string(producer), std::string(consumer)});
  return it == fused_kernels_.end() ? nullptr : &it->second;
}

absl::string_view CpuKernelsName(CpuKernels kernels) {
  return kernels == CpuKernels::kOneDnn ? "onednn" : "blas";
}

bool OneDnnAvailable() { return KUBETRAIN_WITH_ONEDNN != 0; }

CpuKernels DefaultCpuKernels() {
  return OneDnnAvailable() ? CpuKernels::kOneDnn : CpuKernels::kBlas;
}

absl::StatusOr<CpuKernels> ParseCpuKernels(absl::string_view name) {
  if (name == "blas") return CpuKernels::kBlas;
  if (name == "onednn") {
    if (!OneDnnAvailable()) {
      return absl::InvalidArgumentError(
          "'onednn': this build has no oneDNN kernels (libdnnl-dev was not found when it was "
          "configured); use 'blas'");
    }
    return CpuKernels::kOneDnn;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not a CPU kernel set (want onednn or blas)"));
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

CpuDevice::CpuDevice(int num_threads, CpuKernels kernels) : kernels_(kernels) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  for (const auto& [op, kernel] : CpuKernelTable()) RegisterKernel(op, kernel);
#if KUBETRAIN_WITH_ONEDNN
  if (kernels_ == CpuKernels::kOneDnn) {
    onednn_ = NewOneDnnContext();
    for (const OneDnnKernelDef& def : OneDnnKernels()) {
      RegisterKernel(def.op, def.kernel, def.takes_device_layouts);
    }
    for (const OneDnnFusedKernelDef& def : OneDnnFusedKernels()) {
      RegisterFusedKernel(def.producer, def.consumer, {def.kernel, def.takes_device_layouts});
    }
    return;
  }
#endif
  // Only a build without oneDNN gets here for kOneDnn, through a caller
  // that did not go through ParseCpuKernels: it runs the reference kernels.
  kernels_ = CpuKernels::kBlas;
  openblas_set_num_threads(num_threads_);
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
