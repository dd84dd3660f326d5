#pragma once

// cuBLAS, loaded with dlopen on first use instead of being linked.
//
// libcublas depends on libcublasLt, which carries about 94 KiB of static
// thread-local storage: linked, it is carved out of the stack of every thread
// the process starts (gRPC's, OpenBLAS's, the metrics server's), and a thread
// started with a small stack fails to start at all. Loaded with dlopen, its
// thread-local storage is allocated per thread on first use, and a CPU-only
// run never maps the cuBLAS libraries.

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace kubetrain::runtime::cuda {

// The entry points the device uses. The pointers stay valid for the life of
// the process (the library is never unloaded).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
};

// Loads libcublas.so.<CUBLAS_VER_MAJOR> once (thread-safe): by soname first,
// then from the toolkit's library folder found at build time. The error names
// the library and carries dlerror()'s reason; it is returned on every call.
absl::StatusOr<const CublasApi*> Cublas();

// The name of a cuBLAS status ("CUBLAS_STATUS_ALLOC_FAILED"), without
// loading the library.
const char* CublasStatusName(cublasStatus_t status);

}  // namespace kubetrain::runtime::cuda
