#include "trainer-runtime/engine/optimizer.h"

#include <cmath>

#include "gtest/gtest.h"

namespace kubetrain::runtime::engine {
namespace {

// Reference updates in double precision, written from the textbook formulas.
struct Reference {
  std::string type;
  OptimizerOptions o;
  double w = 1.0, s1 = 0.0, s2 = 0.0;
  int t = 0;
  void Step(double g) {
    ++t;
    if (type == "sgd") w -= o.learning_rate * g;
    if (type == "momentum") {
      s1 = o.momentum * s1 + g;
      w -= o.learning_rate * s1;
    }
    if (type == "adagrad") {
      if (t == 1) s1 = o.initial_accumulator;
      s1 += g * g;
      w -= o.learning_rate * g / (std::sqrt(s1) + o.epsilon);
    }
    if (type == "adam") {
      s1 = o.beta1 * s1 + (1 - o.beta1) * g;
      s2 = o.beta2 * s2 + (1 - o.beta2) * g * g;
      double mhat = s1 / (1 - std::pow(o.beta1, t));
      double vhat = s2 / (1 - std::pow(o.beta2, t));
      w -= o.learning_rate * mhat / (std::sqrt(vhat) + o.epsilon);
    }
  }
};

class OptimizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerTest, MatchesReferenceAndResumesFromSavedState) {
  CpuDevice device(1);
  OptimizerOptions options;
  options.learning_rate = 0.1;
  auto opt = Optimizer::Create(GetParam(), options, device);
  ASSERT_TRUE(opt.ok()) << opt.status();
  VariableStore store;
  ASSERT_TRUE(store.Create("w", Tensor::Filled({2}, 1.0f)).ok());
  Reference ref{GetParam(), options};
  const double grads[] = {0.5, -0.3, 0.8, 0.1, -0.6};
  for (int i = 0; i < 3; ++i) {
    NamedGradient g{"w", Tensor::Filled({2}, static_cast<float>(grads[i]))};
    ASSERT_TRUE((*opt)->Apply(store, {&g, 1}).ok());
    ref.Step(grads[i]);
    EXPECT_NEAR(store.Find("w")->at(0), ref.w, 1e-5) << "step " << i;
  }
  // Save, restore into a fresh optimizer, and continue: same as continuing.
  v1::OptimizerState state;
  ASSERT_TRUE((*opt)->SaveState(&state).ok());
  auto resumed = Optimizer::Create(GetParam(), options, device);
  ASSERT_TRUE((*resumed)->RestoreState(state).ok());
  VariableStore store2;
  ASSERT_TRUE(store2.Assign("w", *store.Find("w")).ok());
  for (int i = 3; i < 5; ++i) {
    NamedGradient g{"w", Tensor::Filled({2}, static_cast<float>(grads[i]))};
    ASSERT_TRUE((*opt)->Apply(store, {&g, 1}).ok());
    ASSERT_TRUE((*resumed)->Apply(store2, {&g, 1}).ok());
    ref.Step(grads[i]);
  }
  EXPECT_EQ(store.Find("w")->ToVector(), store2.Find("w")->ToVector());
  EXPECT_NEAR(store.Find("w")->at(1), ref.w, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(All, OptimizerTest,
                         ::testing::Values("sgd", "momentum", "adagrad", "adam"));

TEST(OptimizerErrors, UnknownNameAndBadGradient) {
  CpuDevice device(1);
  EXPECT_FALSE(Optimizer::Create("rmsprop-ish", {}, device).ok());
  OptimizerOptions bad;
  bad.learning_rate = -1;
  EXPECT_FALSE(Optimizer::Create("sgd", bad, device).ok());
  auto opt = Optimizer::Create("adam", {}, device);
  VariableStore store;
  ASSERT_TRUE(store.Create("w", Tensor::Zeros({2})).ok());
  NamedGradient wrong_shape{"w", Tensor::Zeros({3})};
  EXPECT_EQ((*opt)->Apply(store, {&wrong_shape, 1}).code(), absl::StatusCode::kInvalidArgument);
  NamedGradient unknown{"v", Tensor::Zeros({2})};
  EXPECT_EQ((*opt)->Apply(store, {&unknown, 1}).code(), absl::StatusCode::kNotFound);
}

TEST(OptimizerErrors, RestoreRejectsOtherType) {
  CpuDevice device(1);
  auto adam = Optimizer::Create("adam", {}, device);
  auto sgd = Optimizer::Create("sgd", {}, device);
  v1::OptimizerState state;
  ASSERT_TRUE((*adam)->SaveState(&state).ok());
  EXPECT_FALSE((*sgd)->RestoreState(state).ok());
}

// Memory that claims to be a device's (kCuda), for checking that host-only
// paths refuse it. Host memory underneath, never read by these tests.
class DeviceTypedAllocator final : public Allocator {
 public:
  DeviceType device_type() const override { return DeviceType::kCuda; }
  void* Allocate(size_t bytes) override { return HostAllocator()->Allocate(bytes); }
  void Deallocate(void* ptr) override { HostAllocator()->Deallocate(ptr); }
};

TEST(TensorTransferTest, CpuDeviceSharesHostTensorsWithoutCopying) {
  CpuDevice device(1);
  Tensor host = *Tensor::FromVector({3}, {1, 2, 3});
  absl::StatusOr<Tensor> up = device.FromHost(host);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_TRUE(up->SharesStorageWith(host));
  absl::StatusOr<Tensor> down = device.ToHost(*up);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_TRUE(down->SharesStorageWith(host));
  absl::StatusOr<float> scalar = device.ReadScalar(Tensor::Scalar(2.5f));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(*scalar, 2.5f);
  EXPECT_EQ(device.ReadScalar(host).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTransferTest, HostPathsRefuseDeviceMemory) {
  CpuDevice device(1);
  DeviceTypedAllocator allocator;
  Tensor on_device({2}, std::make_shared<Buffer>(&allocator, 2 * sizeof(float)));
  EXPECT_EQ(device.FromHost(on_device).status().code(), absl::StatusCode::kInvalidArgument);
  VariableStore store;
  ASSERT_TRUE(store.Create("w", on_device).ok());
  // No device to copy through: an error, not a memcpy into device memory.
  EXPECT_EQ(store.Assign("w", Tensor::Zeros({2})).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.Assign("v", on_device).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTransferTest, StoreWithDeviceAssignsAndInitialisesThroughIt) {
  CpuDevice device(1);
  VariableStore store(&device);
  Tensor value = *Tensor::FromVector({2}, {4, 5});
  ASSERT_TRUE(store.Assign("w", value).ok());
  ASSERT_NE(store.Find("w"), nullptr);
  // A new variable is a copy: the caller keeps its tensor.
  EXPECT_FALSE(store.Find("w")->SharesStorageWith(value));
  ASSERT_TRUE(store.Assign("w", *Tensor::FromVector({2}, {6, 7})).ok());
  EXPECT_EQ(store.Find("w")->ToVector(), (std::vector<float>{6, 7}));
  EXPECT_EQ(store.Assign("w", Tensor::Zeros({3})).code(), absl::StatusCode::kInvalidArgument);
  v1::TensorProto proto;
  ASSERT_TRUE(TensorToProto(*store.Find("w"), device, &proto).ok());
  absl::StatusOr<Tensor> back = TensorFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToVector(), (std::vector<float>{6, 7}));
}

}  // namespace
}  // namespace kubetrain::runtime::engine
