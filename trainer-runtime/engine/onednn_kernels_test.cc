// The oneDNN kernels (--cpu_kernels=onednn) against the reference kernels
// (--cpu_kernels=blas) on random shapes: odd sizes, channel counts that
// leave padding lanes in oneDNN's channel blocks, every kernel size, stride
// and padding the model language allows; forward values and every
// gradient, with activations kept in oneDNN's layouts between kernels and
// converted where they leave them.
//
// Tolerance: each element within kRelativeTolerance of the largest
// magnitude of its tensor (float32 sums in another order, oneDNN's own
// tanh and sigmoid). The gradient checks by finite differences of both
// paths are in gradient_test.cc.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer-runtime/engine/autodiff.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/ops.h"

namespace kubetrain::runtime::engine {
namespace {

constexpr double kRelativeTolerance = 5e-5;

class OneDnnKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OneDnnAvailable()) GTEST_SKIP() << "this build has no oneDNN kernels";
  }

  // A variable of `shape` with values uniform in [-1, 1].
  Output Random(const Shape& shape) {
    std::string name = absl::StrCat("v", variables_.size());
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(NumElements(shape)));
    for (float& v : values) v = u(rng_);
    EXPECT_TRUE(store_.Create(name, *Tensor::FromVector(shape, values)).ok());
    Output v = ops::Variable(graph_, name, shape);
    variables_.push_back(v);
    return v;
  }

  // Fetches `outputs` and the gradients of sum(outputs[0] * random weights)
  // with respect to every variable, on both paths, and compares them.
  void ExpectPathsAgree(std::vector<Output> outputs, const std::string& what) {
    ASSERT_TRUE(graph_.status().ok()) << graph_.status();
    std::vector<Output> fetches = outputs;
    if (want_gradients_) {
      CpuDevice probe(1, CpuKernels::kBlas);
      Executor shape_run(graph_, probe, store_);
      std::vector<Tensor> y;
      const std::vector<Output> first = {outputs[0]};
      absl::Status s = shape_run.Run({}, first, &y);
      ASSERT_TRUE(s.ok()) << what << ": " << s;
      Output loss = ops::Sum(graph_, ops::Mul(graph_, outputs[0], Random(y[0].shape())));
      auto grads = AddGradients(graph_, loss, variables_);
      ASSERT_TRUE(grads.ok()) << grads.status();
      fetches.insert(fetches.end(), grads->begin(), grads->end());
    }
    CpuDevice reference(1, CpuKernels::kBlas);
    CpuDevice onednn(2, CpuKernels::kOneDnn);
    Executor ref_exec(graph_, reference, store_);
    Executor dnn_exec(graph_, onednn, store_);
    std::vector<Tensor> want, got;
    absl::Status ref_status = ref_exec.Run({}, fetches, &want, {true, 1, 1});
    ASSERT_TRUE(ref_status.ok()) << ref_status;
    // Twice: the second run reuses the cached primitives and buffers.
    for (int run = 0; run < 2; ++run) {
      absl::Status s = dnn_exec.Run({}, fetches, &got, {true, 1, 1});
      ASSERT_TRUE(s.ok()) << what << ": " << s;
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_TRUE(got[i].is_row_major()) << what << ": fetch " << i;
        ASSERT_EQ(got[i].shape(), want[i].shape()) << what << ": fetch " << i;
        std::vector<float> a = got[i].ToVector(), b = want[i].ToVector();
        double scale = 0;
        for (float v : b) scale = std::max(scale, static_cast<double>(std::abs(v)));
        const double tolerance = kRelativeTolerance * std::max(scale, 1.0);
        double worst = 0;
        size_t worst_at = 0;
        for (size_t j = 0; j < a.size(); ++j) {
          const double d = std::abs(static_cast<double>(a[j]) - b[j]);
          if (!(d <= worst)) worst = d, worst_at = j;
        }
        EXPECT_LE(worst, tolerance) << what << ": fetch " << i << " of shape "
                                    << ShapeString(want[i].shape()) << ", element " << worst_at
                                    << ": onednn " << a[worst_at] << ", reference " << b[worst_at];
        worst_ratio_ = std::max(worst_ratio_, worst / std::max(scale, 1.0));
      }
    }
  }

  int64_t Pick(std::initializer_list<int64_t> values) {
    std::vector<int64_t> v(values);
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng_)];
  }
  int64_t Between(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  std::string Activation() {
    static const char* kNames[] = {"relu", "tanh", "sigmoid", "linear"};
    return kNames[Between(0, 3)];
  }
  // A padding that fits a window of k on h x w (VALID needs k <= both).
  std::string Padding(int64_t k, int64_t h, int64_t w) {
    if (k > h || k > w) return "SAME";
    return Between(0, 1) ? "SAME" : "VALID";
  }

  void TearDown() override {
    if (worst_ratio_ > 0) std::cout << "largest relative difference: " << worst_ratio_ << "\n";
  }

  std::mt19937 rng_{20240611};
  Graph graph_;
  VariableStore store_;
  std::vector<Output> variables_;
  bool want_gradients_ = true;
  double worst_ratio_ = 0;
};

// Conv2D with its bias and activation fused, the output fetched (so it
// leaves oneDNN's layout), and all three gradients.
TEST_F(OneDnnKernelsTest, ConvolutionWithBiasActivationOnRandomShapes) {
  for (int i = 0; i < 40; ++i) {
    graph_ = Graph();
    variables_.clear();
    store_ = VariableStore();
    const int64_t n = Between(1, 3), h = Between(1, 12), w = Between(1, 12);
    const int64_t c = Pick({1, 2, 3, 5, 8, 16, 17, 33}), out = Pick({1, 3, 7, 16, 17, 32, 33});
    const int64_t k = Between(1, 5), stride = Between(1, 3);
    const std::string padding = Padding(k, h, w), act = Activation();
    const std::string what = absl::StrCat("x [", n, ",", h, ",", w, ",", c, "] filter ", k, "x", k,
                                          "x", out, " stride ", stride, " ", padding, " ", act);
    Output x = Random({n, h, w, c});
    Output y =
        ops::BiasActivation(graph_, ops::Conv2D(graph_, x, Random({k, k, c, out}), stride, padding),
                            Random({out}), act);
    ExpectPathsAgree({y}, what);
    if (HasFatalFailure()) return;
  }
}

// Conv -> bias/activation -> MaxPool: the activation between them stays
// channel-blocked (with padding lanes for odd channel counts), pooling and
// its gradient run on that layout, and the pooled output is converted.
TEST_F(OneDnnKernelsTest, PoolingOnBlockedActivationsOnRandomShapes) {
  for (int i = 0; i < 40; ++i) {
    graph_ = Graph();
    variables_.clear();
    store_ = VariableStore();
    const int64_t n = Between(1, 3), h = Between(2, 13), w = Between(2, 13);
    const int64_t c = Pick({1, 3, 4, 17}), out = Pick({1, 5, 8, 16, 17, 33});
    const int64_t k = Between(1, 3);
    const std::string act = Activation();
    const int64_t pool = Between(1, 3), pool_stride = Between(1, 3);
    const std::string conv_padding = Padding(k, h, w);
    const int64_t conv_h = conv_padding == "SAME" ? h : h - k + 1;
    const int64_t conv_w = conv_padding == "SAME" ? w : w - k + 1;
    const std::string pool_padding = Padding(pool, conv_h, conv_w);
    const std::string what = absl::StrCat("x [", n, ",", h, ",", w, ",", c, "] conv ", k, "x", k,
                                          "x", out, " ", conv_padding, " ", act, " pool ", pool,
                                          " stride ", pool_stride, " ", pool_padding);
    Output conv =
        ops::Conv2D(graph_, Random({n, h, w, c}), Random({k, k, c, out}), 1, conv_padding);
    Output y = ops::BiasActivation(graph_, conv, Random({out}), act);
    ExpectPathsAgree({ops::MaxPool(graph_, y, pool, pool_stride, pool_padding)}, what);
    if (HasFatalFailure()) return;
  }
}

// Windows that tile the image (the built-in cnn's 2x2 pooling) take the
// one-pass gradient: pooling and activation gradient together.
TEST_F(OneDnnKernelsTest, TilingPoolingAfterEachActivation) {
  for (const char* act : {"relu", "tanh", "sigmoid", "linear"}) {
    for (int64_t channels : {16, 21}) {
      graph_ = Graph();
      variables_.clear();
      store_ = VariableStore();
      Output conv =
          ops::Conv2D(graph_, Random({3, 8, 6, 2}), Random({3, 3, 2, channels}), 1, "SAME");
      Output y = ops::BiasActivation(graph_, conv, Random({channels}), act);
      ExpectPathsAgree({ops::MaxPool(graph_, y, 2, 2, "VALID")},
                       absl::StrCat(act, ", ", channels, " channels"));
      if (HasFatalFailure()) return;
    }
  }
}

// A conv output read by two kernels cannot be fused: it stays blocked, and
// BiasActivation and MaxPool each read that layout on their own.
TEST_F(OneDnnKernelsTest, UnfusedBiasActivationReadsTheBlockedLayout) {
  for (const char* act : {"relu", "tanh", "sigmoid", "linear"}) {
    graph_ = Graph();
    variables_.clear();
    store_ = VariableStore();
    Output z = ops::Conv2D(graph_, Random({2, 9, 7, 3}), Random({3, 3, 3, 21}), 1, "SAME");
    Output y = ops::BiasActivation(graph_, z, Random({21}), act);
    Output pooled = ops::MaxPool(graph_, z, 2, 2, "VALID");
    Output both = ops::Add(graph_,
                           ops::Sum(graph_, ops::Mul(graph_, ops::MaxPool(graph_, y, 3, 2, "SAME"),
                                                     Random({2, 5, 4, 21}))),
                           ops::Sum(graph_, ops::Mul(graph_, pooled, Random({2, 4, 3, 21}))));
    ExpectPathsAgree({both}, act);
    if (HasFatalFailure()) return;
  }
}

// The built-in cnn's layer stack (conv-pool-conv-pool-dense) at a small
// batch, as training runs it: only the loss and gradients are fetched.
TEST_F(OneDnnKernelsTest, CnnStack) {
  Output x = Random({5, 28, 28, 1});
  Output h = ops::BiasActivation(graph_, ops::Conv2D(graph_, x, Random({3, 3, 1, 32}), 1, "SAME"),
                                 Random({32}), "relu");
  h = ops::MaxPool(graph_, h, 2, 2, "VALID");
  h = ops::BiasActivation(graph_, ops::Conv2D(graph_, h, Random({3, 3, 32, 64}), 1, "SAME"),
                          Random({64}), "relu");
  h = ops::MaxPool(graph_, h, 2, 2, "VALID");
  h = ops::BiasActivation(graph_, ops::MatMul(graph_, ops::Flatten(graph_, h), Random({3136, 128})),
                          Random({128}), "relu");
  h = ops::Dropout(graph_, h, 0.25);
  h = ops::BiasActivation(graph_, ops::MatMul(graph_, h, Random({128, 10})), Random({10}),
                          "linear");
  ExpectPathsAgree({h}, "cnn");
}

TEST_F(OneDnnKernelsTest, MatMulWithBiasActivationOnRandomShapes) {
  for (int i = 0; i < 40; ++i) {
    graph_ = Graph();
    variables_.clear();
    store_ = VariableStore();
    const int64_t m = Between(1, 70), n = Between(1, 70), k = Between(1, 300);
    const bool ta = Between(0, 1), tb = Between(0, 1);
    const std::string act = Activation();
    const std::string what =
        absl::StrCat(m, "x", k, (ta ? "^T" : ""), " by ", k, "x", n, (tb ? "^T" : ""), " ", act);
    Output a = Random(ta ? Shape{k, m} : Shape{m, k});
    Output b = Random(tb ? Shape{n, k} : Shape{k, n});
    Output y = ops::BiasActivation(graph_, ops::MatMul(graph_, a, b, ta, tb), Random({n}), act);
    ExpectPathsAgree({y}, what);
    if (HasFatalFailure()) return;
  }
}

// Unfused BiasAdd and a MatMul whose output is fetched as well.
TEST_F(OneDnnKernelsTest, UnfusedMatMulAndBiasAdd) {
  Output z = ops::MatMul(graph_, Random({13, 31}), Random({31, 9}));
  Output y = ops::Relu(graph_, ops::BiasAdd(graph_, z, Random({9})));
  ExpectPathsAgree({y, z}, "matmul, bias_add, relu");
}

// Empty batches have no oneDNN primitive: the reference kernels run them.
TEST_F(OneDnnKernelsTest, EmptyBatch) {
  Output x = ops::Placeholder(graph_, "x", {-1, 6, 6, 3});
  Output f = Random({3, 3, 3, 17});
  Output y = ops::MaxPool(
      graph_,
      ops::BiasActivation(graph_, ops::Conv2D(graph_, x, f, 1, "SAME"), Random({17}), "relu"), 2, 2,
      "VALID");
  Output loss = ops::Sum(graph_, y);
  const std::vector<Output> wrt = {f};
  auto grads = AddGradients(graph_, loss, wrt);
  ASSERT_TRUE(grads.ok()) << grads.status();
  CpuDevice onednn(2, CpuKernels::kOneDnn);
  Executor exec(graph_, onednn, store_);
  std::vector<Tensor> out;
  Feed feed{x, Tensor::Zeros({0, 6, 6, 3})};
  const std::vector<Output> fetches = {y, (*grads)[0]};
  absl::Status s = exec.Run({&feed, 1}, fetches, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out[0].shape(), (Shape{0, 3, 3, 17}));
  for (float v : out[1].ToVector()) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace kubetrain::runtime::engine
