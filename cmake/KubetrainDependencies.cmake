# Every third-party dependency is a Debian package (scripts/install-deps.sh);
# nothing is fetched at configure or build time.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(cpprestsdk CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(ZLIB REQUIRED)
# Flags of the three binaries (header-only; common/flags).
find_package(CLI11 CONFIG REQUIRED)
find_package(GTest REQUIRED)
if(KUBETRAIN_BENCH)
  find_package(benchmark REQUIRED)
endif()
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)

find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# oneDNN (libdnnl-dev) is optional: AUTO builds the CPU device's oneDNN
# kernels when it is found; without it the CPU device has its BLAS kernels
# only. Found by hand: Debian's dnnl-config.cmake insists on the OpenCL
# headers for the library's GPU runtime, which the CPU kernels never use.
set(KUBETRAIN_HAVE_ONEDNN OFF)
if(NOT KUBETRAIN_ONEDNN STREQUAL "OFF")
  find_path(DNNL_INCLUDE_DIR dnnl.hpp PATH_SUFFIXES oneapi/dnnl)
  find_library(DNNL_LIBRARY dnnl)
  # Debian's oneDNN runs on OpenMP; the kernels' own loops share its pool.
  find_package(OpenMP COMPONENTS CXX)
  if(DNNL_INCLUDE_DIR AND DNNL_LIBRARY AND OpenMP_CXX_FOUND)
    set(KUBETRAIN_HAVE_ONEDNN ON)
    add_library(kubetrain_dnnl INTERFACE)
    target_include_directories(kubetrain_dnnl SYSTEM INTERFACE ${DNNL_INCLUDE_DIR})
    target_link_libraries(kubetrain_dnnl INTERFACE ${DNNL_LIBRARY} OpenMP::OpenMP_CXX)
  elseif(KUBETRAIN_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "KUBETRAIN_ONEDNN=ON but oneDNN (libdnnl-dev) or OpenMP was not found")
  endif()
endif()
message(STATUS "kubetrain: oneDNN CPU kernels ${KUBETRAIN_HAVE_ONEDNN}")

# CUDA is optional: AUTO builds the CUDA device when the toolkit is found.
set(KUBETRAIN_HAVE_CUDA OFF)
if(NOT KUBETRAIN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_90 machine code plus PTX so newer GPUs can JIT it. Set before
    # enable_language, which would otherwise cache the toolkit's default.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual CACHE STRING "CUDA architectures")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(KUBETRAIN_HAVE_CUDA ON)
  elseif(KUBETRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KUBETRAIN_CUDA=ON but no CUDA toolkit was found (looked for /usr/local/cuda/bin/nvcc)")
  endif()
endif()
message(STATUS "kubetrain: CUDA device ${KUBETRAIN_HAVE_CUDA}")
