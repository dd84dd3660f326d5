#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer-runtime/cuda/cublas_library.h"
#include "trainer-runtime/cuda/cuda_launch.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/tensor.h"

namespace kubetrain::runtime::cuda {

// Number of CUDA devices this process can use (CUDA_VISIBLE_DEVICES applies;
// in a pod, the GPUs the operator requested with nvidia.com/gpu). 0 when
// there is no device or no driver: that is not an error, the runtime then
// places everything on the CPU.
int VisibleDeviceCount();

// A caching allocator on cudaMalloc (never managed memory). Freed blocks go
// back to a per-size free list instead of cudaFree, so a training loop whose
// shapes are stable stops calling cudaMalloc after its first step (cudaMalloc
// and cudaFree synchronise the whole device).
//
// Reuse is safe without events because every kernel of one device runs on
// that device's compute stream, in order: a block freed on the host while a
// queued kernel still reads it can only be handed to work queued after that
// kernel. Tensors of one allocator must therefore not be used on another
// stream without that stream waiting for the compute stream first (the
// device's copy paths do).
//
// Sizes are rounded up (to 512 bytes below 1 MiB, to 2 MiB above) so that
// nearby sizes share blocks. A failed cudaMalloc first frees the cache and
// retries; if it fails again Allocate throws std::bad_alloc (the Allocator
// contract). Thread-safe.
class CudaCachingAllocator final : public engine::Allocator {
 public:
  explicit CudaCachingAllocator(int ordinal);
  ~CudaCachingAllocator() override;

  engine::DeviceType device_type() const override { return engine::DeviceType::kCuda; }
  void* Allocate(size_t bytes) override;
  void Deallocate(void* ptr) override;

  // Returns every cached (free) block to the driver.
  void EmptyCache();

  struct Stats {
    size_t bytes_in_use = 0;  // handed out, rounded sizes
    size_t bytes_cached = 0;  // free, kept for reuse
    int64_t cuda_malloc_calls = 0;
    int64_t cache_hits = 0;
  };
  Stats stats() const;

  static size_t RoundSize(size_t bytes);

 private:
  void EmptyCacheLocked();

  int ordinal_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // rounded size -> block
  std::map<void*, size_t> in_use_;     // block -> rounded size
  Stats stats_;
};

// Page-locked host memory (cudaHostAlloc) as an engine Allocator of host
// (kCpu) tensors: input batches built in it are copied to the device by DMA
// without a staging copy. Allocations are not cached (batches are reused by
// the caller). Thread-safe. Throws std::bad_alloc when pinning fails.
class PinnedHostAllocator final : public engine::Allocator {
 public:
  engine::DeviceType device_type() const override { return engine::DeviceType::kCpu; }
  void* Allocate(size_t bytes) override;
  void Deallocate(void* ptr) override;
};
// The process-wide pinned allocator; never null.
PinnedHostAllocator* PinnedAllocator();
// An uninitialised host tensor in pinned memory.
engine::Tensor PinnedHostTensor(const engine::Shape& shape);

struct CudaDeviceOptions {
  int ordinal = 0;  // which visible device
  int rank = -1;    // the replica/task index error messages name; -1: ordinal
  // Lets cuBLAS use TF32 tensor cores for float32 GEMMs (about 10 bits of
  // mantissa in the products): faster, not bit-comparable with the CPU.
  bool allow_tf32 = false;
};

// A CUDA Device: one GPU, one replica. Kernels (cuda_kernels.cc) are queued
// on this device's compute stream; uploads go through a separate copy
// stream ordered against it with events: CopyFromHost through a ring of
// pinned staging buffers, CopyFromHostAsync straight from the caller's
// pinned buffer.
//
// Semantics seen by callers (the same as the CPU device's):
// - CopyFromHost returns once the host memory has been read, so the caller
//   may reuse it; later kernels see the data.
// - CopyToHost returns with the data in host memory (it waits for the
//   kernels queued before it).
// - Kernel errors that depend on data (a label out of range) are found by a
//   device-side check and reported by the kernel call itself, which then
//   waits for the stream.
//
// Thread-safety: as engine::Device: one executor at a time runs kernels;
// separate CudaDevice objects (replicas) may be used from separate threads.
class CudaDevice final : public engine::Device {
 public:
  // FailedPrecondition when there is no such device (or no driver).
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(const CudaDeviceOptions& options = {});
  // One device per visible GPU, for mirrored replicas (replica i on GPU i,
  // rank i). FailedPrecondition when none is visible.
  static absl::StatusOr<std::vector<std::unique_ptr<CudaDevice>>> CreateAllVisible(
      bool allow_tf32 = false);
  ~CudaDevice() override;

  engine::DeviceType type() const override { return engine::DeviceType::kCuda; }
  absl::string_view name() const override { return name_; }
  engine::Allocator* allocator() override { return allocator_.get(); }
  int num_threads() const override { return 1; }
  absl::Status CopyFromHost(const engine::Tensor& host, engine::Tensor& device_tensor) override;
  absl::Status CopyToHost(const engine::Tensor& device_tensor, engine::Tensor& host) override;
  absl::Status Synchronize() override;

  // Upload from pinned host memory (PinnedHostTensor) by DMA, without the
  // staging copy and without waiting: the host buffer must stay unchanged
  // until WaitForUploads() (or Synchronize()) returns, so an input pipeline
  // alternates two pinned batches. InvalidArgument for pageable memory.
  absl::Status CopyFromHostAsync(const engine::Tensor& pinned_host, engine::Tensor& device_tensor);
  absl::Status WaitForUploads();

  // Kernels' view of the device. The current CUDA device of the calling
  // thread is set to this one by every public entry point that queues work.
  int ordinal() const { return options_.ordinal; }
  int rank() const { return options_.rank; }
  bool allow_tf32() const { return options_.allow_tf32; }
  cudaStream_t compute_stream() const { return compute_stream_; }
  cudaStream_t copy_stream() const { return copy_stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  // The cuBLAS entry points (loaded at Init; see cublas_library.h).
  const CublasApi& cublas_api() const { return *cublas_api_; }
  CudaCachingAllocator& caching_allocator() { return *allocator_; }
  // Makes this device current for the calling thread and sets the thread's
  // error rank.
  absl::Status MakeCurrent() const;

  // Device scratch reused across kernel calls (im2col columns, per-row
  // losses), grown on demand; valid until the next call on this device's
  // stream that asks for scratch. Not for use across kernel calls.
  absl::StatusOr<float*> Scratch(size_t floats);

  // A small device-side error record kernels may write (the first bad row
  // and its value) and a way to read it back: ResetErrorRecord before the
  // kernels, ReadErrorRecord after (it waits for the compute stream).
  // The record holds the first bad row (INT32_MAX: none).
  using ErrorRecord = KernelErrorRecord;
  ErrorRecord* device_error_record() const { return device_error_; }
  absl::Status ResetErrorRecord();
  absl::StatusOr<ErrorRecord> ReadErrorRecord();

 private:
  explicit CudaDevice(const CudaDeviceOptions& options);
  absl::Status Init();
  // Host memory is pinned when the driver knows it as host-registered.
  static bool IsPinned(const void* host);

  CudaDeviceOptions options_;
  std::string name_;
  std::unique_ptr<CudaCachingAllocator> allocator_;
  cudaStream_t compute_stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  const CublasApi* cublas_api_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;  // recorded on compute, waited by copy
  // Pinned staging buffers used in turn, so the host memcpy of one upload
  // overlaps the DMA of earlier ones; four covers a step's features and
  // labels with one step of slack.
  static constexpr int kStagingBuffers = 4;
  struct Staging {
    void* data = nullptr;
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // the DMA out of it has finished
  };
  Staging staging_[kStagingBuffers];
  int next_staging_ = 0;
  std::shared_ptr<engine::Buffer> scratch_;
  ErrorRecord* device_error_ = nullptr;
  ErrorRecord* host_error_ = nullptr;  // pinned
};

// The device for a `--device` placement: "cpu" (a CpuDevice with
// `cpu_threads`), "gpu" (CUDA device 0; FailedPrecondition when none is
// visible) or "auto" (the GPU when one is visible, else the CPU).
// InvalidArgument for another value. The entry point for the runtime's
// --device flag in builds with CUDA.
absl::StatusOr<std::unique_ptr<engine::Device>> CreateDeviceForPlacement(
    absl::string_view placement, int cpu_threads, bool allow_tf32 = false);

}  // namespace kubetrain::runtime::cuda
