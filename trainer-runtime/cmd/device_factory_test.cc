#include "trainer-runtime/cmd/device_factory.h"

#include "gtest/gtest.h"
#include "trainer-runtime/engine/trainer_flags.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::cmd {
namespace {

bool GpuAvailable() { return BuiltWithCuda() && VisibleGpuCount() > 0; }

engine::TrainerOptions Options(const std::string& device_flag) {
  absl::StatusOr<engine::TrainerOptions> o =
      engine::ParseTrainerFlags({"--device=" + device_flag, "--threads=1"});
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : engine::TrainerOptions{};
}

TEST(RuntimeCliDeviceTest, CpuPlacementGivesCpuDevice) {
  engine::TrainerOptions o = Options("cpu");
  EXPECT_EQ(o.device, "cpu");
  auto device = CreateTrainerDevice(o);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->type(), engine::DeviceType::kCpu);
  EXPECT_EQ((*device)->num_threads(), 1);
}

TEST(RuntimeCliDeviceTest, AutoPicksGpuOnlyWhenOneIsVisible) {
  engine::TrainerOptions o = Options("auto");
  auto device = CreateTrainerDevice(o);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->type(),
            GpuAvailable() ? engine::DeviceType::kCuda : engine::DeviceType::kCpu);
}

TEST(RuntimeCliDeviceTest, GpuWithoutDeviceIsUsageErrorNamingTheFlag) {
  if (GpuAvailable()) GTEST_SKIP() << "a GPU is visible: --device=gpu is valid here";
  auto device = CreateTrainerDevice(Options("gpu"));
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(ExitCodeFor(device.status()), kExitUsage) << device.status();
  EXPECT_NE(device.status().message().find("--device=gpu"), std::string::npos) << device.status();
}

TEST(RuntimeCliDeviceTest, GpuPlacementGivesCudaDevice) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA build or no visible GPU";
  auto device = CreateTrainerDevice(Options("gpu"));
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->type(), engine::DeviceType::kCuda);
}

TEST(RuntimeCliDeviceTest, OtherPlacementIsUsageError) {
  engine::TrainerOptions o;
  o.device = "tpu";
  auto device = CreateTrainerDevice(o);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(ExitCodeFor(device.status()), kExitUsage);
  EXPECT_NE(device.status().message().find("--device"), std::string::npos) << device.status();
}

TEST(RuntimeCliDeviceTest, CudaBuildReportsItself) {
#if defined(KUBETRAIN_TEST_EXPECT_CUDA)
  EXPECT_EQ(BuiltWithCuda(), KUBETRAIN_TEST_EXPECT_CUDA != 0);
#else
  GTEST_SKIP() << "the build did not say whether it has CUDA";
#endif
}

}  // namespace
}  // namespace kubetrain::runtime::cmd
