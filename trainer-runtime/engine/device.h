#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

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
// function inferred, row-major; kernels may overwrite them completely. Only
// a kernel that may keep an output in a device layout replaces that output's
// tensor (same shape, possibly a larger buffer). Inputs are read-only.
struct KernelContext {
  const Node& node;
  std::span<const Tensor* const> inputs;
  std::span<Tensor> outputs;
  Device& device;
  const RunContext& run;

  // Set when the executor runs this node fused with the node producing its
  // input 0 (see Device::FindFusedKernel): `node` is then the consumer and
  // `producer` the producer, whose output is never materialised.
  const Node* producer = nullptr;
  // Bit i set: output i is read in this run only by kernels of this device
  // that take tensors in its own layouts (Device::TakesDeviceLayouts), and
  // is neither fetched nor viewed, so the kernel may leave it in a device
  // layout (Tensor::layout()). Clear: it must be row-major.
  uint32_t device_layout_outputs = 0;

  const Tensor& input(int i) const { return *inputs[static_cast<size_t>(i)]; }
  Tensor& output(int i) const { return outputs[static_cast<size_t>(i)]; }
  bool MayKeepDeviceLayout(int i) const { return ((device_layout_outputs >> i) & 1u) != 0; }
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
  // Whether op's kernel reads inputs held in this device's own layouts
  // (Tensor::layout()) as well as row-major ones.
  bool TakesDeviceLayouts(absl::string_view op) const;

  // A kernel that runs two nodes as one: `producer`, whose only output is
  // read only by `consumer`, as the consumer's input 0 (a convolution or
  // matrix product and the bias and activation after it). Its context's
  // inputs are the producer's inputs followed by the consumer's inputs
  // 1..n-1, its outputs the consumer's; KernelContext::producer is set.
  struct FusedKernel {
    Kernel kernel = nullptr;
    bool takes_device_layouts = false;
  };
  // The fused kernel for the pair, or null (then each node runs alone).
  const FusedKernel* FindFusedKernel(absl::string_view producer, absl::string_view consumer) const;

 protected:
  void RegisterKernel(std::string op, Kernel kernel, bool takes_device_layouts = false) {
    kernels_[std::move(op)] = {kernel, takes_device_layouts};
  }
  void RegisterFusedKernel(std::string producer, std::string consumer, FusedKernel kernel) {
    fused_kernels_[{std::move(producer), std::move(consumer)}] = kernel;
  }

 private:
  struct KernelEntry {
    Kernel kernel = nullptr;
    bool takes_device_layouts = false;
  };
  std::map<std::string, KernelEntry, std::less<>> kernels_;
  std::map<std::pair<std::string, std::string>, FusedKernel> fused_kernels_;
};

// Which kernels the CPU device runs.
enum class CpuKernels {
  // oneDNN primitives for convolutions and their gradients and matrix
  // products (bias and activation fused in where the graph allows), with
  // activations kept in oneDNN's blocked layout between those kernels;
  // pooling, bias and activation loops that read that layout; the rest as
  // kBlas. Only in builds with oneDNN (OneDnnAvailable()).
  kOneDnn,
  // OpenBLAS sgemm (im2col for convolutions) and plain loops: the reference.
  kBlas,
};
// "onednn" or "blas".
absl::string_view CpuKernelsName(CpuKernels kernels);
// Whether this build has the oneDNN kernels (libdnnl-dev found at configure time).
bool OneDnnAvailable();
// The faster kernels this build has: kOneDnn when available, else kBlas.
CpuKernels DefaultCpuKernels();
// "onednn" or "blas"; InvalidArgument for another name, and for "onednn" in
// a build without oneDNN.
absl::StatusOr<CpuKernels> ParseCpuKernels(absl::string_view name);

class OneDnnContext;

// The CPU device. num_threads <= 0 means all cores.
//
// Threads: kBlas sets OpenBLAS's thread count to `num_threads` (a
// process-wide setting; kernels start no threads of their own, so BLAS
// threads are the only pool). kOneDnn runs oneDNN's primitives and its own
// loops on one OpenMP pool, the one oneDNN is built with, of `num_threads`
// threads (set on the calling thread before each kernel), and never calls
// BLAS, so OpenBLAS's threads stay asleep.
class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int num_threads = 0, CpuKernels kernels = DefaultCpuKernels());
  DeviceType type() const override { return DeviceType::kCpu; }
  absl::string_view name() const override { return "/device:CPU:0"; }
  Allocator* allocator() override { return HostAllocator(); }
  int num_threads() const override { return num_threads_; }
  absl::Status CopyFromHost(const Tensor& host, Tensor& device_tensor) override;
  absl::Status CopyToHost(const Tensor& device_tensor, Tensor& host) override;

  CpuKernels kernels() const { return kernels_; }
  // oneDNN's engine and this device's primitive cache; null for kBlas.
  OneDnnContext* onednn() const { return onednn_.get(); }

 private:
  int num_threads_;
  CpuKernels kernels_;
  std::shared_ptr<OneDnnContext> onednn_;
};

// The reference CPU kernel table (kBlas), op name -> kernel (defined in
// cpu_kernels.cc).
const std::map<std::string, Kernel, std::less<>>& CpuKernelTable();

}  // namespace kubetrain::runtime::engine
