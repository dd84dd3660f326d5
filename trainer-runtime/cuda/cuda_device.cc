#include "trainer-runtime/cuda/cuda_device.h"

#include <climits>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/cuda/cuda_check.h"
#include "trainer-runtime/cuda/cuda_kernels.h"

namespace kubetrain::runtime::cuda {

using engine::Shape;
using engine::Tensor;

int VisibleDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // No driver or no device: clear the sticky error so later calls in this
    // thread do not report it again.
    cudaGetLastError();
    return 0;
  }
  return count;
}

// ---- CudaCachingAllocator

CudaCachingAllocator::CudaCachingAllocator(int ordinal) : ordinal_(ordinal) {}

CudaCachingAllocator::~CudaCachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked();
  // Blocks still in use at destruction belong to tensors that outlived the
  // device; the driver reclaims them with the context.
}

size_t CudaCachingAllocator::RoundSize(size_t bytes) {
  constexpr size_t kSmall = 512;
  constexpr size_t kLarge = size_t{2} << 20;
  if (bytes == 0) return kSmall;
  if (bytes < (size_t{1} << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void* CudaCachingAllocator::Allocate(size_t bytes) {
  size_t rounded = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  // Exact size class only: handing a 64 MiB block to a 2 MiB request would
  // pin memory the next large tensor needs.
  auto it = free_.find(rounded);
  if (it != free_.end()) {
    void* p = it->second;
    free_.erase(it);
    stats_.bytes_cached -= rounded;
    stats_.bytes_in_use += rounded;
    ++stats_.cache_hits;
    in_use_[p] = rounded;
    return p;
  }
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != ordinal_) cudaSetDevice(ordinal_);
  void* p = nullptr;
  cudaError_t error = cudaMalloc(&p, rounded);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    EmptyCacheLocked();
    error = cudaMalloc(&p, rounded);
  }
  if (previous != ordinal_) cudaSetDevice(previous);
  if (error != cudaSuccess) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  ++stats_.cuda_malloc_calls;
  stats_.bytes_in_use += rounded;
  in_use_[p] = rounded;
  return p;
}

void CudaCachingAllocator::Deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) return;  // not ours; never free foreign memory
  size_t rounded = it->second;
  in_use_.erase(it);
  stats_.bytes_in_use -= rounded;
  stats_.bytes_cached += rounded;
  free_.emplace(rounded, ptr);
}

void CudaCachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked();
}

void CudaCachingAllocator::EmptyCacheLocked() {
  if (free_.empty()) return;
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != ordinal_) cudaSetDevice(ordinal_);
  // cudaFree waits for the device, so blocks still read by queued kernels
  // are not released under them.
  for (const auto& [size, p] : free_) cudaFree(p);
  if (previous != ordinal_) cudaSetDevice(previous);
  free_.clear();
  stats_.bytes_cached = 0;
}

CudaCachingAllocator::Stats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// ---- Pinned host memory

void* PinnedHostAllocator::Allocate(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes == 0 ? kAlignment : bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  return p;  // page-aligned, so kAlignment holds
}

void PinnedHostAllocator::Deallocate(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

PinnedHostAllocator* PinnedAllocator() {
  static auto* allocator = new PinnedHostAllocator();
  return allocator;
}

Tensor PinnedHostTensor(const Shape& shape) {
  auto buffer = std::make_shared<engine::Buffer>(
      PinnedAllocator(), static_cast<size_t>(engine::NumElements(shape)) * sizeof(float));
  return Tensor(shape, std::move(buffer));
}

// ---- CudaDevice

CudaDevice::CudaDevice(const CudaDeviceOptions& options) : options_(options) {
  if (options_.rank < 0) options_.rank = options_.ordinal;
  name_ = absl::StrCat("/device:GPU:", options_.ordinal);
  allocator_ = std::make_unique<CudaCachingAllocator>(options_.ordinal);
  for (const auto& [op, kernel] : CudaKernelTable()) RegisterKernel(op, kernel);
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(const CudaDeviceOptions& options) {
  int count = VisibleDeviceCount();
  if (options.ordinal < 0 || options.ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", options.ordinal, " (", count, " visible)"));
  }
  std::unique_ptr<CudaDevice> device(new CudaDevice(options));
  if (absl::Status s = device->Init(); !s.ok()) return s;
  return device;
}

absl::StatusOr<std::vector<std::unique_ptr<CudaDevice>>> CudaDevice::CreateAllVisible(
    bool allow_tf32) {
  int count = VisibleDeviceCount();
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible");
  std::vector<std::unique_ptr<CudaDevice>> devices;
  for (int i = 0; i < count; ++i) {
    CudaDeviceOptions options;
    options.ordinal = i;
    options.rank = i;
    options.allow_tf32 = allow_tf32;
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = Create(options);
    if (!device.ok()) return device.status();
    devices.push_back(*std::move(device));
  }
  return devices;
}

absl::Status CudaDevice::MakeCurrent() const {
  SetCurrentRank(options_.rank);
  CUDA_CHECK(cudaSetDevice(options_.ordinal));
  return absl::OkStatus();
}

absl::Status CudaDevice::Init() {
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
  for (Staging& s : staging_)
    CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
  absl::StatusOr<const CublasApi*> cublas_api = Cublas();
  if (!cublas_api.ok()) return cublas_api.status();
  cublas_api_ = *cublas_api;
  CUBLAS_CHECK(cublas_api_->create(&cublas_));
  CUBLAS_CHECK(cublas_api_->set_stream(cublas_, compute_stream_));
  CUBLAS_CHECK(cublas_api_->set_math_mode(
      cublas_, options_.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_error_), sizeof(ErrorRecord)));
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_error_), sizeof(ErrorRecord),
                           cudaHostAllocDefault));
  return absl::OkStatus();
}

CudaDevice::~CudaDevice() {
  // Best effort: a destructor cannot report, and the context outlives us.
  cudaSetDevice(options_.ordinal);
  if (compute_stream_ != nullptr) cudaStreamSynchronize(compute_stream_);
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  scratch_.reset();
  if (cublas_ != nullptr) cublas_api_->destroy(cublas_);
  for (Staging& s : staging_) {
    if (s.data != nullptr) cudaFreeHost(s.data);
    if (s.copied != nullptr) cudaEventDestroy(s.copied);
  }
  if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
  if (device_error_ != nullptr) cudaFree(device_error_);
  if (host_error_ != nullptr) cudaFreeHost(host_error_);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (compute_stream_ != nullptr) cudaStreamDestroy(compute_stream_);
  allocator_->EmptyCache();
}

namespace {
absl::Status CheckCopy(const Tensor& from, const Tensor& to, absl::string_view direction) {
  if (from.shape() != to.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("copy ", direction, " between shapes ",
                                                   engine::ShapeString(from.shape()), " and ",
                                                   engine::ShapeString(to.shape())));
  }
  return absl::OkStatus();
}
}  // namespace

bool CudaDevice::IsPinned(const void* host) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

absl::Status CudaDevice::CopyFromHost(const Tensor& host, Tensor& device_tensor) {
  if (absl::Status s = CheckCopy(host, device_tensor, "to device"); !s.ok()) return s;
  if (device_tensor.device_type() != engine::DeviceType::kCuda ||
      host.device_type() != engine::DeviceType::kCpu) {
    return absl::InvalidArgumentError("CopyFromHost wants a host source and a CUDA destination");
  }
  size_t bytes = static_cast<size_t>(host.num_elements()) * sizeof(float);
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  // The destination may still be read by kernels queued earlier (last
  // step's input): the copy waits for them.
  CUDA_CHECK(cudaEventRecord(compute_done_, compute_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  // Always through a staging buffer, even from pinned memory: waiting for a
  // direct DMA would also wait for every kernel queued before it (the copy
  // is ordered after them), draining the pipeline once per batch.
  Staging& s = staging_[next_staging_];
  next_staging_ = (next_staging_ + 1) % kStagingBuffers;
  CUDA_CHECK(cudaEventSynchronize(s.copied));  // its previous DMA is done
  if (s.bytes < bytes) {
    if (s.data != nullptr) CUDA_CHECK(cudaFreeHost(s.data));
    s.data = nullptr;
    s.bytes = 0;
    CUDA_CHECK(cudaHostAlloc(&s.data, bytes, cudaHostAllocDefault));
    s.bytes = bytes;
  }
  std::memcpy(s.data, host.data(), bytes);
  CUDA_CHECK(
      cudaMemcpyAsync(device_tensor.data(), s.data, bytes, cudaMemcpyHostToDevice, copy_stream_));
  CUDA_CHECK(cudaEventRecord(s.copied, copy_stream_));
  // Kernels queued from now on see the data.
  CUDA_CHECK(cudaEventRecord(compute_done_, copy_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, compute_done_, 0));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyFromHostAsync(const Tensor& host, Tensor& device_tensor) {
  if (absl::Status s = CheckCopy(host, device_tensor, "to device"); !s.ok()) return s;
  if (device_tensor.device_type() != engine::DeviceType::kCuda || !IsPinned(host.data())) {
    return absl::InvalidArgumentError(
        "CopyFromHostAsync wants a pinned host source and a CUDA destination");
  }
  size_t bytes = static_cast<size_t>(host.num_elements()) * sizeof(float);
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  CUDA_CHECK(cudaEventRecord(compute_done_, compute_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  CUDA_CHECK(cudaMemcpyAsync(device_tensor.data(), host.data(), bytes, cudaMemcpyHostToDevice,
                             copy_stream_));
  CUDA_CHECK(cudaEventRecord(compute_done_, copy_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, compute_done_, 0));
  return absl::OkStatus();
}

absl::Status CudaDevice::WaitForUploads() {
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyToHost(const Tensor& device_tensor, Tensor& host) {
  if (absl::Status s = CheckCopy(device_tensor, host, "to host"); !s.ok()) return s;
  if (device_tensor.device_type() != engine::DeviceType::kCuda ||
      host.device_type() != engine::DeviceType::kCpu) {
    return absl::InvalidArgumentError("CopyToHost wants a CUDA source and a host destination");
  }
  size_t bytes = static_cast<size_t>(host.num_elements()) * sizeof(float);
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  // On the compute stream: the result of the kernels queued before it is
  // what the caller asked for, and the call waits anyway.
  CUDA_CHECK(cudaMemcpyAsync(host.data(), device_tensor.data(), bytes, cudaMemcpyDeviceToHost,
                             compute_stream_));
  CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
  return absl::OkStatus();
}

absl::Status CudaDevice::Synchronize() {
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
  return absl::OkStatus();
}

absl::StatusOr<float*> CudaDevice::Scratch(size_t floats) {
  size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
  if (scratch_ == nullptr || scratch_->size() < bytes) {
    scratch_.reset();  // back to the cache first: the new block may reuse it
    try {
      scratch_ = std::make_shared<engine::Buffer>(allocator_.get(), bytes);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat(name_, ": cannot allocate ", bytes, " bytes of kernel scratch"));
    }
  }
  return static_cast<float*>(scratch_->data());
}

absl::Status CudaDevice::ResetErrorRecord() {
  ErrorRecord none{INT32_MAX};
  *host_error_ = none;
  CUDA_CHECK(cudaMemcpyAsync(device_error_, host_error_, sizeof(ErrorRecord),
                             cudaMemcpyHostToDevice, compute_stream_));
  return absl::OkStatus();
}

absl::StatusOr<CudaDevice::ErrorRecord> CudaDevice::ReadErrorRecord() {
  CUDA_CHECK(cudaMemcpyAsync(host_error_, device_error_, sizeof(ErrorRecord),
                             cudaMemcpyDeviceToHost, compute_stream_));
  CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
  return *host_error_;
}

absl::StatusOr<std::unique_ptr<engine::Device>> CreateDeviceForPlacement(
    absl::string_view placement, int cpu_threads, bool allow_tf32) {
  if (placement == "cpu" || (placement == "auto" && VisibleDeviceCount() == 0)) {
    return std::make_unique<engine::CpuDevice>(cpu_threads);
  }
  if (placement == "gpu" || placement == "auto") {
    CudaDeviceOptions options;
    options.allow_tf32 = allow_tf32;
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(options);
    if (!device.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=", placement, ": ", device.status().message()));
    }
    return std::unique_ptr<engine::Device>(*std::move(device));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device must be cpu, gpu or auto, got '", placement, "'"));
}

}  // namespace kubetrain::runtime::cuda
