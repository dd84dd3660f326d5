// How the executor plans kernels on a device that offers more than one
// kernel per op: fused producer/consumer pairs (Device::FindFusedKernel),
// and which outputs may stay in the device's own layout
// (KernelContext::device_layout_outputs). A recording device runs the
// reference CPU kernels and notes every call.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/ops.h"

namespace kubetrain::runtime::engine {
namespace {

struct Call {
  std::string op;
  std::string producer;  // empty unless fused
  uint32_t device_layout_outputs = 0;
};
std::vector<Call> calls;

absl::Status Recording(KernelContext& c) {
  calls.push_back({c.node.op, "", c.device_layout_outputs});
  return CpuKernelTable().at(c.node.op)(c);
}

// MatMul then BiasActivation, through a temporary.
absl::Status RecordingMatMulBiasActivation(KernelContext& c) {
  calls.push_back({c.node.op, c.producer->op, c.device_layout_outputs});
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  std::vector<Tensor> product = {Tensor::Host({a.dim(0), b.dim(1)})};
  std::vector<const Tensor*> matmul_inputs = {&a, &b};
  KernelContext matmul{*c.producer, matmul_inputs, product, c.device, c.run};
  if (absl::Status s = CpuKernelTable().at("MatMul")(matmul); !s.ok()) return s;
  std::vector<const Tensor*> bias_inputs = {&product[0], &c.input(2)};
  KernelContext bias{c.node, bias_inputs, c.outputs, c.device, c.run};
  return CpuKernelTable().at(c.node.op)(bias);
}

// Relu and Neg take the device's layouts; nothing else does.
class RecordingDevice final : public Device {
 public:
  RecordingDevice() {
    for (const auto& [op, kernel] : CpuKernelTable()) {
      RegisterKernel(op, Recording, op == "Relu" || op == "Neg");
    }
    RegisterFusedKernel("MatMul", "BiasActivation", {RecordingMatMulBiasActivation, false});
  }
  DeviceType type() const override { return DeviceType::kCpu; }
  absl::string_view name() const override { return "/device:RECORDING:0"; }
  Allocator* allocator() override { return HostAllocator(); }
  int num_threads() const override { return 1; }
  absl::Status CopyFromHost(const Tensor& host, Tensor& device_tensor) override {
    return absl::UnimplementedError("not used");
  }
  absl::Status CopyToHost(const Tensor& device_tensor, Tensor& host) override {
    return absl::UnimplementedError("not used");
  }
};

class ExecutorKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    calls.clear();
    x_ = ops::Placeholder(graph_, "x", {-1, 3});
    ASSERT_TRUE(store_.Create("w", *Tensor::FromVector({3, 2}, {1, -2, 3, 4, -5, 6})).ok());
    ASSERT_TRUE(store_.Create("b", *Tensor::FromVector({2}, {10, -20})).ok());
    w_ = ops::Variable(graph_, "w", {3, 2});
    b_ = ops::Variable(graph_, "b", {2});
  }

  std::vector<Tensor> Run(const std::vector<Output>& fetches) {
    Executor exec(graph_, device_, store_);
    std::vector<Feed> feeds = {{x_, *Tensor::FromVector({2, 3}, {1, 2, 3, -1, 0, 2})}};
    std::vector<Tensor> out;
    absl::Status s = exec.Run(feeds, fetches, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  const Call* Find(const std::string& op) {
    for (const Call& c : calls) {
      if (c.op == op) return &c;
    }
    return nullptr;
  }

  Graph graph_;
  VariableStore store_;
  RecordingDevice device_;
  Output x_, w_, b_;
};

TEST_F(ExecutorKernelsTest, FusesAProductReadOnlyByItsBiasActivation) {
  Output z = ops::MatMul(graph_, x_, w_);
  Output y = ops::BiasActivation(graph_, z, b_, "relu");
  std::vector<Tensor> out = Run({y});
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].op, "BiasActivation");
  EXPECT_EQ(calls[0].producer, "MatMul");
  // x w = [[-8, 24], [-11, 14]]; relu(x w + [10, -20]).
  EXPECT_EQ(out[0].ToVector(), (std::vector<float>{2, 4, 0, 0}));
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
}

TEST_F(ExecutorKernelsTest, FusedResultEqualsTheTwoKernels) {
  Output y = ops::BiasActivation(graph_, ops::MatMul(graph_, x_, w_), b_, "linear");
  std::vector<Tensor> fused = Run({y});
  ASSERT_EQ(calls.size(), 1u);
  calls.clear();
  CpuDevice reference(1, CpuKernels::kBlas);
  Executor exec(graph_, reference, store_);
  std::vector<Feed> feeds = {{x_, *Tensor::FromVector({2, 3}, {1, 2, 3, -1, 0, 2})}};
  std::vector<Tensor> out;
  ASSERT_TRUE(exec.Run(feeds, {{y}}, &out).ok());
  EXPECT_EQ(fused[0].ToVector(), out[0].ToVector());
}

TEST_F(ExecutorKernelsTest, DoesNotFuseAFetchedProduct) {
  Output z = ops::MatMul(graph_, x_, w_);
  Output y = ops::BiasActivation(graph_, z, b_, "relu");
  std::vector<Tensor> out = Run({y, z});
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].op, "MatMul");
  EXPECT_EQ(calls[1].producer, "");
  EXPECT_EQ(out[1].ToVector(), (std::vector<float>{-8, 24, -11, 14}));
}

TEST_F(ExecutorKernelsTest, DoesNotFuseAProductReadTwice) {
  Output z = ops::MatMul(graph_, x_, w_);
  Output y = ops::Add(graph_, ops::BiasActivation(graph_, z, b_, "relu"), ops::Neg(graph_, z));
  Run({y});
  ASSERT_NE(Find("MatMul"), nullptr);
  EXPECT_EQ(Find("BiasActivation")->producer, "");
}

TEST_F(ExecutorKernelsTest, DeviceLayoutOnlyBetweenKernelsThatTakeIt) {
  // neg1 is read by relu only (takes layouts): may keep one. relu is read
  // by neg2 (takes) and tanh (does not): row-major. neg2 is read by a view
  // (Reshape): row-major. neg3 is fetched: row-major.
  Output neg1 = ops::Neg(graph_, x_);
  Output relu = ops::Relu(graph_, neg1);
  Output neg2 = ops::Neg(graph_, relu);
  Output tanh = ops::Tanh(graph_, relu);
  Output reshaped = ops::Reshape(graph_, neg2, {-1});
  Output neg3 = ops::Neg(graph_, ops::Relu(graph_, reshaped));
  Output sum = ops::Add(graph_, ops::Sum(graph_, tanh), ops::Sum(graph_, neg3));
  Run({sum, neg3});
  std::vector<uint32_t> neg_bits;
  for (const Call& c : calls) {
    if (c.op == "Neg") neg_bits.push_back(c.device_layout_outputs);
  }
  ASSERT_EQ(neg_bits.size(), 3u);
  EXPECT_EQ(neg_bits[0], 1u);  // neg1
  EXPECT_EQ(neg_bits[1], 0u);  // neg2, viewed
  EXPECT_EQ(neg_bits[2], 0u);  // neg3, fetched
  uint32_t relu_bits = ~0u;
  for (const Call& c : calls) {
    if (c.op == "Relu") {
      relu_bits = c.device_layout_outputs;
      break;
    }
  }
  EXPECT_EQ(relu_bits, 0u);  // read by tanh
}

}  // namespace
}  // namespace kubetrain::runtime::engine
