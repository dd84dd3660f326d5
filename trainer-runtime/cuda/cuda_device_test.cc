// The CUDA device against the CPU device, op by op: every kernel's result
// (forward and, through autodiff, gradient kernels) must match the CPU's
// within a stated tolerance. Also the allocator, copies, label errors, the
// optimizers and a single-rank NCCL all-reduce. Every test needs a GPU and
// skips (GTEST_SKIP, reported as skipped) when cudaGetDeviceCount finds none.
//
// Tolerances: |gpu - cpu| <= atol + rtol * |cpu|.
// - elementwise, bias/activation, dropout, pooling: rtol 1e-5, atol 1e-6
//   (the same float formulas; only tanhf/expf differ by an ulp or two);
// - GEMM-based (MatMul, Conv2D and their gradients), reductions, softmax
//   cross-entropy: rtol 1e-4, atol 1e-5 (summation order differs between
//   cuBLAS and OpenBLAS, and between a tree and a sequential sum).
#include "trainer-runtime/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/cuda/cuda_kernels.h"
#include "trainer-runtime/cuda/nccl_communicator.h"
#include "trainer-runtime/engine/autodiff.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/ops.h"
#include "trainer-runtime/engine/optimizer.h"

namespace kubetrain::runtime::cuda {
namespace {

using engine::Executor;
using engine::Feed;
using engine::Graph;
using engine::Output;
using engine::RunContext;
using engine::Shape;
using engine::Tensor;
using engine::VariableStore;
namespace ops = engine::ops;

struct Tolerance {
  float rtol;
  float atol;
};
constexpr Tolerance kExact{1e-5f, 1e-6f};
constexpr Tolerance kSummed{1e-4f, 1e-5f};

Tensor Random(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::Host(shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data()[i] = dist(rng);
  return t;
}

Tensor Labels(int64_t n, int64_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::Host({n});
  for (int64_t i = 0; i < n; ++i) t.data()[i] = static_cast<float>(rng() % classes);
  return t;
}

bool HaveGpu(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    *why = e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices";
    return false;
  }
  return true;
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!HaveGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    auto device = CudaDevice::Create();
    ASSERT_TRUE(device.ok()) << device.status();
    gpu_ = *std::move(device);
  }

  Tensor ToGpu(const Tensor& host) {
    Tensor t = gpu_->Allocate(host.shape());
    EXPECT_TRUE(gpu_->CopyFromHost(host, t).ok());
    return t;
  }
  Tensor ToHost(const Tensor& device_tensor) {
    Tensor t = Tensor::Host(device_tensor.shape());
    absl::Status s = gpu_->CopyToHost(device_tensor, t);
    EXPECT_TRUE(s.ok()) << s;
    return t;
  }

  // Runs `fetches` of `graph` on both devices with the same feeds and
  // compares every fetched tensor.
  void ExpectSame(const Graph& graph, const std::vector<std::pair<Output, Tensor>>& feeds,
                  const std::vector<Output>& fetches, Tolerance tol, const RunContext& run = {}) {
    ASSERT_TRUE(graph.status().ok()) << graph.status();
    VariableStore cpu_vars, gpu_vars;
    std::vector<Feed> cpu_feeds, gpu_feeds;
    for (const auto& [output, value] : feeds) {
      cpu_feeds.push_back(Feed{output, value});
      gpu_feeds.push_back(Feed{output, ToGpu(value)});
    }
    Executor cpu_exec(graph, cpu_, cpu_vars);
    Executor gpu_exec(graph, *gpu_, gpu_vars);
    std::vector<Tensor> cpu_out, gpu_out;
    absl::Status cs = cpu_exec.Run(cpu_feeds, fetches, &cpu_out, run);
    ASSERT_TRUE(cs.ok()) << cs;
    absl::Status gs = gpu_exec.Run(gpu_feeds, fetches, &gpu_out, run);
    ASSERT_TRUE(gs.ok()) << gs;
    ASSERT_EQ(cpu_out.size(), gpu_out.size());
    for (size_t f = 0; f < fetches.size(); ++f) {
      const Tensor& c = cpu_out[f];
      ASSERT_EQ(gpu_out[f].device_type(), engine::DeviceType::kCuda);
      Tensor g = ToHost(gpu_out[f]);
      ASSERT_EQ(c.shape(), g.shape()) << graph.node(fetches[f].node).name;
      int mismatches = 0;
      for (int64_t i = 0; i < c.num_elements() && mismatches < 5; ++i) {
        float want = c.at(i), got = g.at(i);
        if (!(std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want))) {
          ADD_FAILURE() << graph.node(fetches[f].node).name << " ("
                        << graph.node(fetches[f].node).op << ") element " << i << ": gpu " << got
                        << ", cpu " << want;
          ++mismatches;
        }
      }
    }
  }

  // The op's output, and the gradients of sum(out * r) (r random) with
  // respect to each input, so that gradient kernels see a non-uniform dy.
  std::vector<Output> WithGradients(Graph& g, Output out, const std::vector<Output>& inputs,
                                    const Shape& out_shape,
                                    std::vector<std::pair<Output, Tensor>>& feeds) {
    Output r = ops::Placeholder(g, "r", out_shape);
    feeds.emplace_back(r, Random(out_shape, 99));
    Output loss = ops::Sum(g, ops::Mul(g, out, r));
    absl::StatusOr<std::vector<Output>> grads = engine::AddGradients(g, loss, inputs);
    EXPECT_TRUE(grads.ok()) << grads.status();
    std::vector<Output> fetches = {out, loss};
    if (grads.ok()) fetches.insert(fetches.end(), grads->begin(), grads->end());
    return fetches;
  }

  engine::CpuDevice cpu_{1};
  std::unique_ptr<CudaDevice> gpu_;
};

TEST_F(CudaDeviceTest, KernelTableCoversEveryCpuOp) {
  for (const auto& [op, kernel] : engine::CpuKernelTable()) {
    EXPECT_NE(gpu_->FindKernel(op), nullptr) << op;
  }
}

TEST_F(CudaDeviceTest, CopiesRoundTripPageableAndPinned) {
  Tensor host = Random({1000, 7}, 1);
  Tensor back = ToHost(ToGpu(host));
  EXPECT_EQ(back.ToVector(), host.ToVector());
  Tensor pinned = PinnedHostTensor({1000, 7});
  std::copy_n(host.data(), host.num_elements(), pinned.data());
  Tensor d = gpu_->Allocate(pinned.shape());
  ASSERT_TRUE(gpu_->CopyFromHost(pinned, d).ok());
  EXPECT_EQ(ToHost(d).ToVector(), host.ToVector());
  Tensor e = gpu_->Allocate(pinned.shape());
  ASSERT_TRUE(gpu_->CopyFromHostAsync(pinned, e).ok());
  ASSERT_TRUE(gpu_->WaitForUploads().ok());
  EXPECT_EQ(ToHost(e).ToVector(), host.ToVector());
  EXPECT_EQ(gpu_->CopyFromHostAsync(host, e).code(), absl::StatusCode::kInvalidArgument);
  Tensor wrong = Tensor::Host({7, 1000});
  EXPECT_EQ(gpu_->CopyToHost(d, wrong).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaDeviceTest, AllocatorReusesFreedBlocks) {
  CudaCachingAllocator& a = gpu_->caching_allocator();
  void* first = a.Allocate(3 << 20);
  int64_t mallocs = a.stats().cuda_malloc_calls;
  a.Deallocate(first);
  void* second = a.Allocate((3 << 20) - 100);  // same size class
  EXPECT_EQ(second, first);
  EXPECT_EQ(a.stats().cuda_malloc_calls, mallocs);
  a.Deallocate(second);
  EXPECT_GE(a.stats().bytes_cached, size_t{4} << 20);
  a.EmptyCache();
  EXPECT_EQ(a.stats().bytes_cached, 0u);
}

TEST_F(CudaDeviceTest, MatMulAllTransposes) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Graph g;
      Shape sa = ta ? Shape{53, 37} : Shape{37, 53};
      Shape sb = tb ? Shape{29, 53} : Shape{53, 29};
      Output a = ops::Placeholder(g, "a", sa), b = ops::Placeholder(g, "b", sb);
      std::vector<std::pair<Output, Tensor>> feeds = {{a, Random(sa, 2)}, {b, Random(sb, 3)}};
      auto fetches = WithGradients(g, ops::MatMul(g, a, b, ta, tb), {a, b}, {37, 29}, feeds);
      SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb);
      ExpectSame(g, feeds, fetches, kSummed);
    }
  }
}

TEST_F(CudaDeviceTest, BiasAndActivations) {
  for (std::string act : {"linear", "relu", "tanh", "sigmoid"}) {
    Graph g;
    Output x = ops::Placeholder(g, "x", {300, 70}), b = ops::Placeholder(g, "b", {70});
    std::vector<std::pair<Output, Tensor>> feeds = {{x, Random({300, 70}, 4)},
                                                    {b, Random({70}, 5)}};
    auto fetches = WithGradients(g, ops::BiasActivation(g, x, b, act), {x, b}, {300, 70}, feeds);
    SCOPED_TRACE(act);
    ExpectSame(g, feeds, fetches, kSummed);  // db sums 300 rows
  }
  // Many rows: the bias gradient is split over blocks (conv outputs).
  Graph g;
  Output x = ops::Placeholder(g, "x", {20000, 33}), b = ops::Placeholder(g, "b", {33});
  std::vector<std::pair<Output, Tensor>> feeds = {{x, Random({20000, 33}, 6)},
                                                  {b, Random({33}, 7)}};
  auto fetches = WithGradients(g, ops::BiasAdd(g, x, b), {x, b}, {20000, 33}, feeds);
  ExpectSame(g, feeds, fetches, Tolerance{1e-4f, 1e-3f});  // sums of 20000 terms of |x| < 1
}

TEST_F(CudaDeviceTest, ElementwiseOps) {
  using Unary = Output (*)(Graph&, Output);
  for (Unary f : {Unary(ops::Neg), Unary(ops::Relu), Unary(ops::Tanh), Unary(ops::Sigmoid)}) {
    Graph g;
    Output x = ops::Placeholder(g, "x", {1000, 3});
    std::vector<std::pair<Output, Tensor>> feeds = {{x, Random({1000, 3}, 8, -4, 4)}};
    ExpectSame(g, feeds, WithGradients(g, f(g, x), {x}, {1000, 3}, feeds), kExact);
  }
  using BinaryFn = Output (*)(Graph&, Output, Output);
  for (BinaryFn f : {BinaryFn(ops::Add), BinaryFn(ops::Sub), BinaryFn(ops::Mul)}) {
    for (int broadcast = 0; broadcast < 3; ++broadcast) {
      Graph g;
      Shape sa = broadcast == 1 ? Shape{} : Shape{64, 9};
      Shape sb = broadcast == 2 ? Shape{} : Shape{64, 9};
      Output a = ops::Placeholder(g, "a", sa), b = ops::Placeholder(g, "b", sb);
      std::vector<std::pair<Output, Tensor>> feeds = {{a, Random(sa, 9)}, {b, Random(sb, 10)}};
      SCOPED_TRACE(broadcast);
      ExpectSame(g, feeds, WithGradients(g, f(g, a, b), {a, b}, {64, 9}, feeds), kSummed);
    }
  }
}

TEST_F(CudaDeviceTest, Reductions) {
  Shape shape = {6, 7, 8};
  for (engine::IntList axes : {engine::IntList{}, engine::IntList{0}, engine::IntList{1},
                               engine::IntList{-1}, engine::IntList{0, 2}}) {
    for (bool mean : {false, true}) {
      Graph g;
      Output x = ops::Placeholder(g, "x", shape);
      Output y = mean ? ops::Mean(g, x, axes) : ops::Sum(g, x, axes);
      std::vector<std::pair<Output, Tensor>> feeds = {{x, Random(shape, 11)}};
      Shape out_shape;
      for (int d = 0; d < 3; ++d) {
        bool reduced = axes.empty();
        for (int64_t a : axes) reduced |= (a < 0 ? a + 3 : a) == d;
        if (!reduced) out_shape.push_back(shape[static_cast<size_t>(d)]);
      }
      SCOPED_TRACE(testing::Message() << "mean=" << mean << " axes=" << axes.size());
      ExpectSame(g, feeds, WithGradients(g, y, {x}, out_shape, feeds), kSummed);
    }
  }
}

TEST_F(CudaDeviceTest, SoftmaxCrossEntropyAccuracyAndSoftmax) {
  for (int64_t classes : {10, 47}) {  // fewer and more classes than a warp
    Graph g;
    Output logits = ops::Placeholder(g, "logits", {257, classes});
    Output labels = ops::Placeholder(g, "labels", {257});
    auto xent = ops::SoftmaxCrossEntropy(g, logits, labels);
    std::vector<std::pair<Output, Tensor>> feeds = {{logits, Random({257, classes}, 12, -5, 5)},
                                                    {labels, Labels(257, classes, 13)}};
    std::vector<Output> fetches = {xent.loss, xent.backprop, ops::Accuracy(g, logits, labels),
                                   ops::Softmax(g, logits)};
    auto grads = engine::AddGradients(g, xent.loss, std::vector<Output>{logits});
    ASSERT_TRUE(grads.ok()) << grads.status();
    fetches.push_back((*grads)[0]);
    ExpectSame(g, feeds, fetches, kSummed);
  }
}

TEST_F(CudaDeviceTest, BadLabelIsInvalidArgumentNamingTheExample) {
  Graph g;
  Output logits = ops::Placeholder(g, "logits", {4, 3});
  Output labels = ops::Placeholder(g, "labels", {4});
  auto xent = ops::SoftmaxCrossEntropy(g, logits, labels);
  VariableStore vars;
  Executor exec(g, *gpu_, vars);
  Tensor bad = *Tensor::FromVector({4}, {0, 1, 7, 2});
  std::vector<Feed> feeds = {{logits, ToGpu(Random({4, 3}, 14))}, {labels, ToGpu(bad)}};
  std::vector<Tensor> out;
  absl::Status s = exec.Run(feeds, std::vector<Output>{xent.loss}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), testing::HasSubstr("label 7 of example 2"));
  // The record is reset: a good batch afterwards runs.
  feeds[1].value = ToGpu(*Tensor::FromVector({4}, {0, 1, 2, 2}));
  EXPECT_TRUE(exec.Run(feeds, std::vector<Output>{xent.loss}, &out).ok());
}

TEST_F(CudaDeviceTest, DropoutMasksMatchTheCpu) {
  Graph g;
  Output x = ops::Placeholder(g, "x", {100, 50});
  Output y = ops::Dropout(g, x, 0.3);
  std::vector<std::pair<Output, Tensor>> feeds = {{x, Random({100, 50}, 15)}};
  auto fetches = WithGradients(g, y, {x}, {100, 50}, feeds);
  RunContext training{.training = true, .seed = 42, .step = 7};
  ExpectSame(g, feeds, fetches, kExact, training);
  ExpectSame(g, feeds, fetches, kExact, RunContext{});  // inference: identity
}

TEST_F(CudaDeviceTest, Conv2DAndGradients) {
  struct Case {
    Shape input, filter;
    int64_t stride;
    const char* padding;
  };
  for (const Case& c :
       {Case{{3, 9, 9, 2}, {3, 3, 2, 4}, 1, "SAME"}, Case{{2, 10, 11, 3}, {3, 3, 3, 5}, 2, "VALID"},
        Case{{2, 8, 8, 1}, {5, 5, 1, 3}, 2, "SAME"}}) {
    Graph g;
    Output x = ops::Placeholder(g, "x", c.input), f = ops::Placeholder(g, "f", c.filter);
    Output y = ops::Conv2D(g, x, f, c.stride, c.padding);
    std::vector<std::pair<Output, Tensor>> feeds = {{x, Random(c.input, 16)},
                                                    {f, Random(c.filter, 17)}};
    // The output shape from a CPU run of the forward op.
    VariableStore vars;
    Executor probe(g, cpu_, vars);
    std::vector<Tensor> out;
    ASSERT_TRUE(probe
                    .Run(std::vector<Feed>{{x, feeds[0].second}, {f, feeds[1].second}},
                         std::vector<Output>{y}, &out)
                    .ok());
    SCOPED_TRACE(c.padding);
    ExpectSame(g, feeds, WithGradients(g, y, {x, f}, out[0].shape(), feeds), kSummed);
  }
}

TEST_F(CudaDeviceTest, MaxPoolAndGradient) {
  struct Case {
    int64_t k, stride;
    const char* padding;
  };
  for (const Case& c : {Case{2, 2, "VALID"}, Case{3, 2, "SAME"}, Case{3, 1, "VALID"}}) {
    Graph g;
    Shape shape = {2, 9, 9, 3};
    Output x = ops::Placeholder(g, "x", shape);
    Output y = ops::MaxPool(g, x, c.k, c.stride, c.padding);
    std::vector<std::pair<Output, Tensor>> feeds = {{x, Random(shape, 18)}};
    VariableStore vars;
    Executor probe(g, cpu_, vars);
    std::vector<Tensor> out;
    ASSERT_TRUE(
        probe.Run(std::vector<Feed>{{x, feeds[0].second}}, std::vector<Output>{y}, &out).ok());
    SCOPED_TRACE(testing::Message() << c.k << "/" << c.stride << " " << c.padding);
    ExpectSame(g, feeds, WithGradients(g, y, {x}, out[0].shape(), feeds), kExact);
  }
}

TEST_F(CudaDeviceTest, OptimizersMatchTheCpuOverSteps) {
  for (std::string name : {"sgd", "momentum", "adagrad", "adam"}) {
    engine::OptimizerOptions options;
    options.learning_rate = 0.01;
    auto cpu_opt = engine::Optimizer::Create(name, options, cpu_);
    auto gpu_opt = engine::Optimizer::Create(name, options, *gpu_);
    ASSERT_TRUE(cpu_opt.ok() && gpu_opt.ok());
    VariableStore cpu_vars, gpu_vars;
    Tensor w = Random({40, 30}, 19);
    ASSERT_TRUE(cpu_vars.Create("w", w.Clone()).ok());
    ASSERT_TRUE(gpu_vars.Create("w", ToGpu(w)).ok());
    for (int step = 0; step < 3; ++step) {
      Tensor grad = Random({40, 30}, 20 + static_cast<uint32_t>(step));
      std::vector<engine::NamedGradient> cg = {{"w", grad}}, gg = {{"w", ToGpu(grad)}};
      ASSERT_TRUE((*cpu_opt)->Apply(cpu_vars, cg).ok());
      ASSERT_TRUE((*gpu_opt)->Apply(gpu_vars, gg).ok());
    }
    Tensor got = ToHost(*gpu_vars.Find("w"));
    const Tensor& want = *cpu_vars.Find("w");
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      ASSERT_NEAR(got.at(i), want.at(i), kExact.atol + kExact.rtol * std::fabs(want.at(i)))
          << name << " " << i;
    }
  }
}

TEST_F(CudaDeviceTest, HostTensorInAKernelIsAnErrorNotACrash) {
  Graph g;
  Output a = ops::Placeholder(g, "a", {2, 2});
  Output y = ops::Relu(g, a);
  VariableStore vars;
  Executor exec(g, *gpu_, vars);
  std::vector<Tensor> out;
  absl::Status s =
      exec.Run(std::vector<Feed>{{a, Random({2, 2}, 21)}}, std::vector<Output>{y}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), testing::HasSubstr("host memory"));
}

TEST_F(CudaDeviceTest, SingleRankNcclAllReduce) {
  InProcessIdChannel channel;
  auto comm = NcclCommunicator::Create(*gpu_, 0, 1, channel);
  ASSERT_TRUE(comm.ok()) << comm.status();
  Tensor host = Random({1 << 20}, 22);
  std::vector<Tensor> tensors = {ToGpu(host), ToGpu(Random({3}, 23))};
  ASSERT_TRUE((*comm)->AllReduceSum(tensors).ok());
  ASSERT_TRUE((*comm)->AllReduceMean(tensors).ok());
  // One rank: the sum and the mean are the input.
  EXPECT_EQ(ToHost(tensors[0]).ToVector(), host.ToVector());
  EXPECT_EQ(NcclCommunicator::Create(*gpu_, 1, 1, channel).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain::runtime::cuda
