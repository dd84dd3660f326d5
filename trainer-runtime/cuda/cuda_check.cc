#include "trainer-runtime/cuda/cuda_check.h"

#include "absl/strings/str_cat.h"
#include "trainer-runtime/cuda/cublas_library.h"

namespace kubetrain::runtime::cuda {

namespace {
thread_local int current_rank = -1;

std::string Where(const char* file, int line) {
  std::string rank = current_rank >= 0 ? absl::StrCat(current_rank) : std::string("?");
  return absl::StrCat(" at ", file, ":", line, " on rank ", rank);
}
}  // namespace

int CurrentRank() { return current_rank; }
void SetCurrentRank(int rank) { current_rank = rank; }

namespace internal {

absl::Status CudaStatus(cudaError_t error, const char* expr, const char* file, int line) {
  std::string message = absl::StrCat("CUDA error ", static_cast<int>(error), " (",
                                     cudaGetErrorString(error), ") in ", expr, Where(file, line));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasStatus(cublasStatus_t status, const char* expr, const char* file, int line) {
  std::string message = absl::StrCat("cuBLAS error ", static_cast<int>(status), " (",
                                     CublasStatusName(status), ") in ", expr, Where(file, line));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (status == CUBLAS_STATUS_NOT_INITIALIZED) return absl::FailedPreconditionError(message);
  return absl::InternalError(message);
}

absl::Status NcclStatus(ncclResult_t result, const char* expr, const char* file, int line) {
  std::string message = absl::StrCat("NCCL error ", static_cast<int>(result), " (",
                                     ncclGetErrorString(result), ") in ", expr, Where(file, line));
  // A peer that went away or a network failure is worth a retry of the task;
  // a bad argument is a bug.
  if (result == ncclRemoteError || result == ncclSystemError)
    return absl::UnavailableError(message);
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

}  // namespace internal
}  // namespace kubetrain::runtime::cuda
