#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer-runtime/engine/graph.h"
#include "trainer-runtime/engine/tensor.h"

namespace kubetrain::runtime::engine {

// Per-run facts a kernel may need: whether this is a training run (Dropout
// is the identity otherwise) and the (seed, step) pair from which stochastic
// kernels derive their random streams, so a run is reproducible from a
// checkpoint.
struct RunContext {
  bool training = false;
  uint64_t seed = 0;
  int64_t step = 0;
};

class Device;

// What a kernel sees. Outputs arrive allocated with the shapes the op's shape
// function inferred (kernels never allocate their outputs); kernels may
// overwrite them completely. Inputs are read-only.
struct KernelContext {
  const Node& node;
  std::span<const Tensor* const> inputs;
  std::span<Tensor> outputs;
  Device& device;
  const RunContext& run;

  const Tensor& input(int i) const { return *inputs[static_cast<size_t>(i)]; }
  Tensor& output(int i) const { return outputs[static_cast<size_t>(i)]; }
};

// A kernel: the implementation of one op on one device. Errors are
// InvalidArgument for bad data (e.g. a label out of range), naming the node.
using Kernel = absl::Status (*)(KernelContext& ctx);

// Where kernels run and tensors live. Everything above the kernel layer
// (executor, autodiff, optimizers, training loop) talks to a Device and never
// to a particular implementation: the CPU device is here, a CUDA device adds
// its own kernel table in trainer-runtime/cuda/.
//
// Thread-safety: FindKernel and allocator() are safe from many threads; one
// executor at a time should run kernels on a device (kernels themselves use
// the device's thread budget).
class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceType type() const = 0;
  virtual absl::string_view name() const = 0;
  virtual Allocator* allocator() = 0;
  // Threads kernels may use (BLAS included).
  virtual int num_threads() const = 0;

  // Moves data between host memory and this device (memcpy on the CPU).
  // Shapes must match; otherwise InvalidArgument.
  virtual absl::Status CopyFromHost(const Tensor& host, Tensor& device_tensor) = 0;
  virtual absl::Status CopyToHost(const Tensor& device_tensor, Tensor& host) = 0;
  // Waits for queued work (a no-op on the CPU).
  virtual absl::Status Synchronize() { return absl::OkStatus(); }

  // Transfers for code above the kernel layer, which must never read or
  // write a tensor's data() unless the tensor is in host memory. On the CPU
  // device they share the tensor instead of copying it, so the CPU path
  // neither allocates nor copies.
  //
  // `host`'s values in this device's memory: `host` itself (shared) when
  // this device's memory is host memory, else a new tensor copied from it.
  // InvalidArgument when `host` is not in host memory.
  absl::StatusOr<Tensor> FromHost(const Tensor& host);
  // `tensor`'s values in host memory: `tensor` itself (shared) when it
  // already is in host memory, else a new host tensor copied through this
  // device (which waits for the kernels that produce it).
  absl::StatusOr<Tensor> ToHost(const Tensor& tensor);
  // The value of a one-element tensor (a loss, an accuracy), read through
  // this device; InvalidArgument for another element count.
  absl::StatusOr<float> ReadScalar(const Tensor& tensor);

  // Uninitialised tensor in this device's memory.
  Tensor Allocate(const Shape& shape);

  // The kernel for `op`, or null when this device has none.
  Kernel FindKernel(absl::string_view op) const;

 protected:
  void RegisterKernel(std::string op, Kernel kernel) { kernels_[std::move(op)] = kernel; }

 private:
  std::map<std::string, Kernel, std::less<>> kernels_;
};

// The CPU device: kernels on OpenBLAS (sgemm) and plain loops. Construction
// sets OpenBLAS's thread count to `num_threads` (the process-wide setting:
// kernels do not start threads of their own, so BLAS threads are the only
// pool and there is no oversubscription). num_threads <= 0 means all cores.
class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int num_threads = 0);
  DeviceType type() const override { return DeviceType::kCpu; }
  absl::string_view name() const override { return "/device:CPU:0"; }
  Allocator* allocator() override { return HostAllocator(); }
  int num_threads() const override { return num_threads_; }
  absl::Status CopyFromHost(const Tensor& host, Tensor& device_tensor) override;
  absl::Status CopyToHost(const Tensor& device_tensor, Tensor& host) override;

 private:
  int num_threads_;
};

// The CPU kernel table, op name -> kernel (defined in cpu_kernels.cc).
const std::map<std::string, Kernel, std::less<>>& CpuKernelTable();

}  // namespace kubetrain::runtime::engine
