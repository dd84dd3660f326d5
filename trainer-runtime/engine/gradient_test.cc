// Finite-difference checks of every op's gradient: the analytic gradient
// that AddGradients builds must match central differences of the forward
// kernels.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer-runtime/engine/autodiff.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/ops.h"

namespace kubetrain::runtime::engine {
namespace {

using BuildFn = std::function<Output(Graph&, const std::vector<Output>&)>;

struct Input {
  Shape shape;
  std::vector<float> values;
};

// Values in [-1, -0.1] u [0.1, 1], so ReLU-like kinks are at least 0.1 away,
// and pairwise distinct (no ties for MaxPool).
Input RandomInput(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  Input in{shape, {}};
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    float v = mag(rng) + 1e-4f * static_cast<float>(i % 97);
    in.values.push_back(rng() % 2 ? v : -v);
  }
  return in;
}

// Pairwise well-separated values (a shuffled ramp with step 0.05), for ops
// whose gradient switches where two inputs tie (MaxPool): the finite
// difference step must not reorder any two elements.
Input SpreadInput(Shape shape, uint32_t seed) {
  int64_t n = NumElements(shape);
  std::vector<float> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(0.05f * static_cast<float>(i - n / 2));
  std::shuffle(values.begin(), values.end(), std::mt19937(seed));
  return Input{shape, values};
}

class GradientChecker {
 public:
  GradientChecker(std::vector<Input> inputs, BuildFn build, bool training = false)
      : inputs_(std::move(inputs)), training_(training) {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      std::string name = "x" + std::to_string(i);
      xs_.push_back(ops::Variable(graph_, name, inputs_[i].shape));
      EXPECT_TRUE(
          store_.Create(name, *Tensor::FromVector(inputs_[i].shape, inputs_[i].values)).ok());
    }
    y_ = build(graph_, xs_);
  }

  void AddFeed(const std::string& placeholder, Tensor value) {
    feeds_.push_back({Output{*graph_.FindNode(placeholder), 0}, std::move(value)});
  }

  // On each CPU kernel path of this build: the reference (BLAS) kernels,
  // and oneDNN's when the build has them.
  void Check(double rtol = 1e-2, double atol = 2e-3) {
    ASSERT_TRUE(graph_.status().ok()) << graph_.status();
    std::vector<CpuKernels> paths = {CpuKernels::kBlas};
    if (OneDnnAvailable()) paths.push_back(CpuKernels::kOneDnn);
    for (CpuKernels path : paths) {
      SCOPED_TRACE(absl::StrCat("--cpu_kernels=", CpuKernelsName(path)));
      CpuDevice device(1, path);
      CheckOn(device, rtol, atol);
    }
  }

 private:
  void CheckOn(Device& device, double rtol, double atol) {
    // Weight the output by fixed random values so every element of the
    // gradient matters (a plain sum would hide a transposition).
    Executor probe(graph_, device, store_);
    std::vector<Tensor> out;
    ASSERT_TRUE(probe.Run(feeds_, {{y_}}, &out, Run()).ok());
    if (!loss_.valid()) {
      loss_ = y_;
      if (out[0].num_elements() != 1 || out[0].rank() != 0) {
        Input w = RandomInput(out[0].shape(), 99);
        weights_ = *Tensor::FromVector(w.shape, w.values);
        weights_node_ = ops::Placeholder(graph_, "weights", out[0].shape());
        loss_ = ops::Sum(graph_, ops::Mul(graph_, y_, weights_node_));
      }
      absl::StatusOr<std::vector<Output>> grads = AddGradients(graph_, loss_, xs_);
      ASSERT_TRUE(grads.ok()) << grads.status();
      grads_ = *std::move(grads);
    }
    const Output loss = loss_;
    Executor exec(graph_, device, store_);
    std::vector<Feed> feeds = feeds_;
    if (weights_.valid()) feeds.push_back({weights_node_, weights_});
    std::vector<Tensor> analytic;
    ASSERT_TRUE(exec.Run(feeds, grads_, &analytic, Run()).ok());
    std::vector<std::vector<float>> analytic_values;
    for (const Tensor& t : analytic) analytic_values.push_back(t.ToVector());

    auto eval_loss = [&]() {
      std::vector<Tensor> l;
      absl::Status s = exec.Run(feeds, {{loss}}, &l, Run());
      EXPECT_TRUE(s.ok()) << s;
      return static_cast<double>(l[0].at(0));
    };
    const float eps = 1e-2f;
    for (size_t i = 0; i < xs_.size(); ++i) {
      Tensor* x = store_.Find("x" + std::to_string(i));
      ASSERT_EQ(analytic_values[i].size(), static_cast<size_t>(x->num_elements()));
      for (int64_t j = 0; j < x->num_elements(); ++j) {
        float saved = x->data()[j];
        x->data()[j] = saved + eps;
        double plus = eval_loss();
        x->data()[j] = saved - eps;
        double minus = eval_loss();
        x->data()[j] = saved;
        double numeric = (plus - minus) / (2.0 * eps);
        double got = analytic_values[i][j];
        EXPECT_NEAR(got, numeric, atol + rtol * std::abs(numeric))
            << "input " << i << " element " << j;
      }
    }
  }

  RunContext Run() const { return RunContext{training_, 7, 3}; }

  std::vector<Input> inputs_;
  bool training_;
  Graph graph_;
  VariableStore store_;
  std::vector<Output> xs_;
  Output y_;
  Tensor weights_;
  Output weights_node_;
  Output loss_;
  std::vector<Output> grads_;
  std::vector<Feed> feeds_;
};

TEST(GradientTest, MatMul) {
  GradientChecker({RandomInput({3, 4}, 1), RandomInput({4, 5}, 2)}, [](Graph& g, const auto& x) {
    return ops::MatMul(g, x[0], x[1]);
  }).Check();
}

TEST(GradientTest, MatMulTransposeA) {
  GradientChecker({RandomInput({4, 3}, 1), RandomInput({4, 5}, 2)}, [](Graph& g, const auto& x) {
    return ops::MatMul(g, x[0], x[1], true, false);
  }).Check();
}

TEST(GradientTest, MatMulTransposeB) {
  GradientChecker({RandomInput({3, 4}, 1), RandomInput({5, 4}, 2)}, [](Graph& g, const auto& x) {
    return ops::MatMul(g, x[0], x[1], false, true);
  }).Check();
}

TEST(GradientTest, MatMulTransposeBoth) {
  GradientChecker({RandomInput({4, 3}, 1), RandomInput({5, 4}, 2)}, [](Graph& g, const auto& x) {
    return ops::MatMul(g, x[0], x[1], true, true);
  }).Check();
}

TEST(GradientTest, BiasAdd) {
  GradientChecker({RandomInput({3, 4}, 1), RandomInput({4}, 2)}, [](Graph& g, const auto& x) {
    return ops::BiasAdd(g, x[0], x[1]);
  }).Check();
}

class BiasActivationGradientTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BiasActivationGradientTest, Fused) {
  std::string act = GetParam();
  GradientChecker({RandomInput({3, 4}, 1), RandomInput({4}, 2)}, [act](Graph& g, const auto& x) {
    return ops::BiasActivation(g, x[0], x[1], act);
  }).Check();
}

INSTANTIATE_TEST_SUITE_P(Activations, BiasActivationGradientTest,
                         ::testing::Values("relu", "tanh", "sigmoid", "linear"));

TEST(GradientTest, Add) {
  GradientChecker({RandomInput({2, 3}, 1), RandomInput({2, 3}, 2)}, [](Graph& g, const auto& x) {
    return ops::Add(g, x[0], x[1]);
  }).Check();
}

TEST(GradientTest, SubWithScalar) {
  GradientChecker({RandomInput({2, 3}, 1), RandomInput({}, 2)}, [](Graph& g, const auto& x) {
    return ops::Sub(g, x[0], x[1]);
  }).Check();
}

TEST(GradientTest, Mul) {
  GradientChecker({RandomInput({2, 3}, 1), RandomInput({2, 3}, 2)}, [](Graph& g, const auto& x) {
    return ops::Mul(g, x[0], x[1]);
  }).Check();
}

TEST(GradientTest, MulScalarFirst) {
  GradientChecker({RandomInput({1}, 1), RandomInput({2, 3}, 2)}, [](Graph& g, const auto& x) {
    return ops::Mul(g, x[0], x[1]);
  }).Check();
}

TEST(GradientTest, Relu) {
  GradientChecker({RandomInput({2, 5}, 1)}, [](Graph& g, const auto& x) {
    return ops::Relu(g, x[0]);
  }).Check();
}

TEST(GradientTest, Tanh) {
  GradientChecker({RandomInput({2, 5}, 1)}, [](Graph& g, const auto& x) {
    return ops::Tanh(g, x[0]);
  }).Check();
}

TEST(GradientTest, Sigmoid) {
  GradientChecker({RandomInput({2, 5}, 1)}, [](Graph& g, const auto& x) {
    return ops::Sigmoid(g, x[0]);
  }).Check();
}

TEST(GradientTest, SoftmaxCrossEntropy) {
  GradientChecker checker({RandomInput({4, 5}, 1)}, [](Graph& g, const auto& x) {
    Output labels = ops::Placeholder(g, "labels", {4});
    return ops::SoftmaxCrossEntropy(g, x[0], labels).loss;
  });
  checker.AddFeed("labels", *Tensor::FromVector({4}, {0, 3, 4, 1}));
  checker.Check();
}

TEST(GradientTest, SumAll) {
  GradientChecker({RandomInput({2, 3, 4}, 1)}, [](Graph& g, const auto& x) {
    return ops::Sum(g, x[0]);
  }).Check();
}

TEST(GradientTest, SumAxis) {
  GradientChecker({RandomInput({2, 3, 4}, 1)}, [](Graph& g, const auto& x) {
    return ops::Sum(g, x[0], {1});
  }).Check();
}

TEST(GradientTest, MeanAxes) {
  GradientChecker({RandomInput({2, 3, 4}, 1)}, [](Graph& g, const auto& x) {
    return ops::Mean(g, x[0], {0, 2});
  }).Check();
}

TEST(GradientTest, Dropout) {
  GradientChecker(
      {RandomInput({4, 8}, 1)}, [](Graph& g, const auto& x) { return ops::Dropout(g, x[0], 0.5); },
      /*training=*/true)
      .Check();
}

TEST(GradientTest, Conv2DSame) {
  GradientChecker({RandomInput({2, 5, 5, 3}, 1), RandomInput({3, 3, 3, 4}, 2)}, [](Graph& g,
                                                                                   const auto& x) {
    return ops::Conv2D(g, x[0], x[1], 1, "SAME");
  }).Check();
}

TEST(GradientTest, Conv2DValidStride2) {
  GradientChecker({RandomInput({2, 6, 7, 2}, 1), RandomInput({3, 2, 2, 3}, 2)}, [](Graph& g,
                                                                                   const auto& x) {
    return ops::Conv2D(g, x[0], x[1], 2, "VALID");
  }).Check();
}

// A conv stack whose activations stay in oneDNN's blocked layout between
// kernels on that path, with channel counts that leave padding lanes in
// the blocks, and each conv fused with its bias and activation.
TEST(GradientTest, ConvStackWithFusedBiasActivations) {
  GradientChecker(
      {RandomInput({2, 7, 6, 3}, 1), RandomInput({3, 3, 3, 17}, 2), RandomInput({17}, 3),
       RandomInput({2, 2, 17, 5}, 4), RandomInput({5}, 5), RandomInput({30, 4}, 6),
       RandomInput({4}, 7)},
      [](Graph& g, const auto& x) {
        Output h = ops::BiasActivation(g, ops::Conv2D(g, x[0], x[1], 2, "SAME"), x[2], "tanh");
        h = ops::BiasActivation(g, ops::Conv2D(g, h, x[3], 1, "VALID"), x[4], "sigmoid");
        return ops::BiasActivation(g, ops::MatMul(g, ops::Flatten(g, h), x[5]), x[6], "linear");
      })
      .Check();
}

TEST(GradientTest, MaxPool) {
  GradientChecker({SpreadInput({2, 4, 6, 3}, 1)}, [](Graph& g, const auto& x) {
    return ops::MaxPool(g, x[0], 2, 2, "VALID");
  }).Check();
}

TEST(GradientTest, MaxPoolSameOverlapping) {
  GradientChecker({SpreadInput({1, 5, 5, 2}, 1)}, [](Graph& g, const auto& x) {
    return ops::MaxPool(g, x[0], 3, 2, "SAME");
  }).Check();
}

// Pooling after a bias and activation (whose gradients the oneDNN path
// computes in one fused kernel). tanh keeps each channel's order, so the
// spread input still has no ties within a finite-difference step.
TEST(GradientTest, MaxPoolAfterBiasActivation) {
  GradientChecker({SpreadInput({2, 6, 5, 19}, 1), RandomInput({19}, 2)}, [](Graph& g,
                                                                            const auto& x) {
    return ops::MaxPool(g, ops::BiasActivation(g, x[0], x[1], "tanh"), 3, 2, "SAME");
  }).Check();
}

TEST(GradientTest, Reshape) {
  GradientChecker({RandomInput({2, 3, 4}, 1)}, [](Graph& g, const auto& x) {
    return ops::Tanh(g, ops::Reshape(g, x[0], {4, -1}));
  }).Check();
}

TEST(GradientTest, Flatten) {
  GradientChecker({RandomInput({2, 3, 4}, 1)}, [](Graph& g, const auto& x) {
    return ops::Tanh(g, ops::Flatten(g, x[0]));
  }).Check();
}

TEST(GradientTest, SharedInputAccumulates) {
  // x is used twice: its gradient is the sum of both paths.
  GradientChecker({RandomInput({3, 3}, 1)}, [](Graph& g, const auto& x) {
    return ops::Mul(g, ops::Tanh(g, x[0]), x[0]);
  }).Check();
}

}  // namespace
}  // namespace kubetrain::runtime::engine
