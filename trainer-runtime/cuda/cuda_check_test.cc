// What the CUDA component does without a GPU: error statuses of the check
// macros, the id channel, size rounding, and a clean refusal to create a
// device when there is none. Runs in CI (label unit).
#include "trainer-runtime/cuda/cuda_check.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/cuda/cublas_library.h"
#include "trainer-runtime/cuda/cuda_device.h"
#include "trainer-runtime/cuda/nccl_communicator.h"

namespace kubetrain::runtime::cuda {
namespace {

using ::testing::HasSubstr;

int fail_cuda_line = 0;
absl::Status FailCuda(cudaError_t e) {
  fail_cuda_line = __LINE__ + 1;
  CUDA_CHECK(e);
  return absl::OkStatus();
}
absl::Status FailCublas(cublasStatus_t s) {
  CUBLAS_CHECK(s);
  return absl::OkStatus();
}
absl::Status FailNccl(ncclResult_t r) {
  NCCL_CHECK(r);
  return absl::OkStatus();
}

TEST(CudaCheckTest, SuccessIsOk) {
  EXPECT_TRUE(FailCuda(cudaSuccess).ok());
  EXPECT_TRUE(FailCublas(CUBLAS_STATUS_SUCCESS).ok());
  EXPECT_TRUE(FailNccl(ncclSuccess).ok());
}

TEST(CudaCheckTest, CudaErrorNamesCallFileLineAndRank) {
  ScopedRank rank(3);
  absl::Status s = FailCuda(cudaErrorMemoryAllocation);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("CUDA error 2"));
  EXPECT_THAT(s.message(), HasSubstr("in e at "));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("cuda_check_test.cc:", fail_cuda_line, " on")));
  EXPECT_THAT(s.message(), HasSubstr("on rank 3"));
}

TEST(CudaCheckTest, MissingDeviceIsFailedPrecondition) {
  EXPECT_EQ(FailCuda(cudaErrorNoDevice).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(FailCuda(cudaErrorInsufficientDriver).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(FailCuda(cudaErrorLaunchFailure).code(), absl::StatusCode::kInternal);
}

TEST(CudaCheckTest, RankIsUnknownUntilSetAndRestoredAfterScope) {
  std::thread([] {
    EXPECT_EQ(CurrentRank(), -1);
    EXPECT_THAT(FailCuda(cudaErrorLaunchFailure).message(), HasSubstr("on rank ?"));
    {
      ScopedRank outer(1);
      ScopedRank inner(2);
      EXPECT_EQ(CurrentRank(), 2);
    }
    EXPECT_EQ(CurrentRank(), -1);
  }).join();
}

TEST(CudaCheckTest, CublasAndNcclErrorsMapToCodes) {
  ScopedRank rank(0);
  absl::Status cublas = FailCublas(CUBLAS_STATUS_ALLOC_FAILED);
  EXPECT_EQ(cublas.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(cublas.message(), HasSubstr("cuBLAS error"));
  EXPECT_THAT(cublas.message(), HasSubstr("on rank 0"));
  EXPECT_EQ(FailCublas(CUBLAS_STATUS_EXECUTION_FAILED).code(), absl::StatusCode::kInternal);

  absl::Status nccl = FailNccl(ncclRemoteError);
  EXPECT_EQ(nccl.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(nccl.message(), HasSubstr("NCCL error"));
  EXPECT_EQ(FailNccl(ncclInvalidArgument).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FailNccl(ncclInternalError).code(), absl::StatusCode::kInternal);
}

TEST(CudaCachingAllocatorTest, RoundsToSizeClasses) {
  EXPECT_EQ(CudaCachingAllocator::RoundSize(0), 512u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CudaCachingAllocator::RoundSize((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(CudaCachingAllocator::RoundSize(1u << 20), 2u << 20);
  EXPECT_EQ(CudaCachingAllocator::RoundSize((2u << 20) + 1), 4u << 20);
}

TEST(InProcessIdChannelTest, ReceiverGetsPublishedId) {
  InProcessIdChannel channel;
  std::string id(NCCL_UNIQUE_ID_BYTES, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7);
  absl::StatusOr<std::string> received;
  std::thread receiver([&] { received = channel.Receive(); });
  ASSERT_TRUE(channel.Publish(id).ok());
  receiver.join();
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(*received, id);
  // Every later receiver gets the same id; a second publish is refused.
  EXPECT_EQ(*channel.Receive(), id);
  EXPECT_EQ(channel.Publish(id).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(InProcessIdChannelTest, ReceiveTimesOutWithoutPublisher) {
  InProcessIdChannel channel(std::chrono::milliseconds(1));
  EXPECT_EQ(channel.Receive().status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(CudaDeviceCreateTest, NoDeviceIsFailedPrecondition) {
  if (VisibleDeviceCount() > 0)
    GTEST_SKIP() << "a CUDA device is visible; covered by the gpu tests";
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create();
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaDevice::CreateAllVisible().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CreateDeviceForPlacementTest, CpuAutoGpuAndBadValues) {
  auto cpu = CreateDeviceForPlacement("cpu", 1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->type(), engine::DeviceType::kCpu);
  EXPECT_EQ(CreateDeviceForPlacement("tpu", 1).status().code(), absl::StatusCode::kInvalidArgument);
  auto automatic = CreateDeviceForPlacement("auto", 1);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  auto gpu = CreateDeviceForPlacement("gpu", 1);
  if (VisibleDeviceCount() == 0) {
    EXPECT_EQ((*automatic)->type(), engine::DeviceType::kCpu);
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(gpu.status().message(), HasSubstr("--device=gpu"));
  } else {
    EXPECT_EQ((*automatic)->type(), engine::DeviceType::kCuda);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ((*gpu)->type(), engine::DeviceType::kCuda);
  }
}

// cuBLAS is loaded at run time (cublas_library.h); the toolkit that built this
// test has it, GPU or not, and every entry point the device calls resolves.
TEST(CublasLibraryTest, LoadsWithEveryEntryPoint) {
  absl::StatusOr<const CublasApi*> api = Cublas();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_NE((*api)->create, nullptr);
  EXPECT_NE((*api)->destroy, nullptr);
  EXPECT_NE((*api)->set_stream, nullptr);
  EXPECT_NE((*api)->set_math_mode, nullptr);
  EXPECT_NE((*api)->sgemm, nullptr);
  // Loaded once: the same table every time.
  EXPECT_EQ(*Cublas(), *api);
}

TEST(CublasLibraryTest, StatusNamesNeedNoLibrary) {
  EXPECT_STREQ(CublasStatusName(CUBLAS_STATUS_ALLOC_FAILED), "CUBLAS_STATUS_ALLOC_FAILED");
  EXPECT_STREQ(CublasStatusName(static_cast<cublasStatus_t>(999)), "unknown cuBLAS status");
  EXPECT_THAT(FailCublas(CUBLAS_STATUS_EXECUTION_FAILED).message(),
              HasSubstr("CUBLAS_STATUS_EXECUTION_FAILED"));
}

}  // namespace
}  // namespace kubetrain::runtime::cuda
