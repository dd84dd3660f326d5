#include "trainer-runtime/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::runtime::cuda {
namespace {

// Looks `symbol` up into `out`; a missing one is appended to `missing`.
template <typename Fn>
void Resolve(void* library, const char* symbol, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*out == nullptr) {
    const char* reason = dlerror();
    absl::StrAppend(missing, symbol, ": ", reason != nullptr ? reason : "not found", "; ");
  }
}

absl::StatusOr<CublasApi> Load() {
  const std::string soname = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  std::string tried;
  void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    absl::StrAppend(&tried, soname, " (", reason != nullptr ? reason : "not found", ")");
#ifdef KUBETRAIN_CUBLAS_LIBRARY_DIR
    const std::string path = absl::StrCat(KUBETRAIN_CUBLAS_LIBRARY_DIR, "/", soname);
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      reason = dlerror();
      absl::StrAppend(&tried, ", ", path, " (", reason != nullptr ? reason : "not found", ")");
    }
#endif
  }
  if (library == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load cuBLAS: tried ", tried,
        "; install the CUDA toolkit's libcublas or add its folder to LD_LIBRARY_PATH"));
  }
  CublasApi api;
  std::string missing;
  Resolve(library, "cublasCreate_v2", &api.create, &missing);
  Resolve(library, "cublasDestroy_v2", &api.destroy, &missing);
  Resolve(library, "cublasSetStream_v2", &api.set_stream, &missing);
  Resolve(library, "cublasSetMathMode", &api.set_math_mode, &missing);
  Resolve(library, "cublasSgemm_v2", &api.sgemm, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLAS (", soname, ") lacks entry points this build needs: ", missing));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  static const absl::StatusOr<CublasApi>* const loaded = new absl::StatusOr<CublasApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

const char* CublasStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

}  // namespace kubetrain::runtime::cuda
