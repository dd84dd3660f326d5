#pragma once

// Error checking for CUDA, cuBLAS and NCCL calls. Each macro evaluates a
// call once and, when it fails, returns from the enclosing function an
// absl::Status that names the call, the library's error text, the source
// file and line, and the rank of the calling thread, e.g.
//   "CUDA error 2 (out of memory) in cudaMalloc(&p, bytes) at
//    trainer-runtime/cuda/cuda_device.cc:41 on rank 3"
// The enclosing function must return absl::Status or absl::StatusOr<T>.
// Nothing here aborts: a failed call is an error for the caller to handle.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"

namespace kubetrain::runtime::cuda {

// The rank (replica or task index) that error messages name for the calling
// thread; -1 (the default) when none was set. Thread-local: each replica's
// thread sets its own.
int CurrentRank();
void SetCurrentRank(int rank);

// Sets the calling thread's rank for its lifetime, restoring the previous one.
class ScopedRank {
 public:
  explicit ScopedRank(int rank) : previous_(CurrentRank()) { SetCurrentRank(rank); }
  ~ScopedRank() { SetCurrentRank(previous_); }
  ScopedRank(const ScopedRank&) = delete;
  ScopedRank& operator=(const ScopedRank&) = delete;

 private:
  int previous_;
};

namespace internal {
// Out of memory maps to ResourceExhausted, a missing device or driver to
// FailedPrecondition, everything else to Internal.
absl::Status CudaStatus(cudaError_t error, const char* expr, const char* file, int line);
absl::Status CublasStatus(cublasStatus_t status, const char* expr, const char* file, int line);
absl::Status NcclStatus(ncclResult_t result, const char* expr, const char* file, int line);
}  // namespace internal

}  // namespace kubetrain::runtime::cuda

#define CUDA_CHECK(expr)                                                                    \
  do {                                                                                      \
    cudaError_t kubetrain_cuda_error_ = (expr);                                             \
    if (kubetrain_cuda_error_ != cudaSuccess) {                                             \
      return ::kubetrain::runtime::cuda::internal::CudaStatus(kubetrain_cuda_error_, #expr, \
                                                              __FILE__, __LINE__);          \
    }                                                                                       \
  } while (false)

#define CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                           \
    cublasStatus_t kubetrain_cublas_status_ = (expr);                                            \
    if (kubetrain_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                     \
      return ::kubetrain::runtime::cuda::internal::CublasStatus(kubetrain_cublas_status_, #expr, \
                                                                __FILE__, __LINE__);             \
    }                                                                                            \
  } while (false)

#define NCCL_CHECK(expr)                                                                     \
  do {                                                                                       \
    ncclResult_t kubetrain_nccl_result_ = (expr);                                            \
    if (kubetrain_nccl_result_ != ncclSuccess) {                                             \
      return ::kubetrain::runtime::cuda::internal::NcclStatus(kubetrain_nccl_result_, #expr, \
                                                              __FILE__, __LINE__);           \
    }                                                                                        \
  } while (false)
