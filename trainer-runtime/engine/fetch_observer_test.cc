// The executor's FetchObserver and TrainingContext's GradientObserver: what
// an overlapping all-reduce relies on (each fetch reported once, as soon as
// it is computed, and never written again within the run).
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/model.h"
#include "trainer-runtime/engine/ops.h"
#include "trainer-runtime/engine/trainer.h"

namespace kubetrain::runtime::engine {
namespace {

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data(), t.data() + t.num_elements());
}

// Keeps a copy of each value as it was when reported.
class RecordingFetchObserver : public FetchObserver {
 public:
  void FetchReady(size_t fetch, const Tensor& value) override {
    order.push_back(fetch);
    seen.push_back(Values(value));
    buffers.push_back(value.data());
  }
  std::vector<size_t> order;
  std::vector<std::vector<float>> seen;
  std::vector<const float*> buffers;
};

TEST(FetchObserverTest, ReportsEachFetchOnceInExecutionOrderWithItsFinalValue) {
  Graph g;
  Output x = ops::Placeholder(g, "x", {-1, 3});
  Output w = ops::Variable(g, "w", {3, 2});
  Output h = ops::Tanh(g, ops::MatMul(g, x, w));              // computed early
  Output flat = ops::Reshape(g, h, {-1});                     // a view of h
  Output y = ops::Mul(g, ops::Add(g, h, h), ops::Neg(g, h));  // computed late
  Output total = ops::Sum(g, y);
  ASSERT_TRUE(g.status().ok()) << g.status();
  VariableStore store;
  ASSERT_TRUE(InitializeVariables(g, 3, store).ok());
  CpuDevice device(1);
  Tensor input = *Tensor::FromVector({2, 3}, {1, 2, 3, -1, 0.5, 0});
  // Fetches in another order than they are computed; x is fed; h twice.
  std::vector<Output> fetches = {total, h, x, flat, y, h};
  std::vector<Feed> feeds = {{x, input}};

  Executor executor(g, device, store);
  RecordingFetchObserver observer;
  std::vector<Tensor> results;
  ASSERT_TRUE(executor.Run(feeds, fetches, &results, {}, &observer).ok());

  // The fed x first, then h (both fetches of it), its view, y, the sum.
  EXPECT_EQ(observer.order, (std::vector<size_t>{2, 1, 5, 3, 4, 0}));
  for (size_t i = 0; i < observer.order.size(); ++i) {
    const size_t k = observer.order[i];
    // The very tensor Run returns, holding then what it holds at the end:
    // nothing wrote it after it was reported.
    EXPECT_EQ(observer.buffers[i], results[k].data()) << "fetch " << k;
    EXPECT_EQ(observer.seen[i], Values(results[k])) << "fetch " << k;
  }

  // Without an observer the same values come back.
  Executor plain(g, device, store);
  std::vector<Tensor> plain_results;
  ASSERT_TRUE(plain.Run(feeds, fetches, &plain_results).ok());
  for (size_t k = 0; k < fetches.size(); ++k) {
    EXPECT_EQ(Values(plain_results[k]), Values(results[k])) << "fetch " << k;
  }

  // A second run reuses the cached buffers and reports again, once each.
  RecordingFetchObserver again;
  Tensor other = *Tensor::FromVector({2, 3}, {0, 1, 0, 2, -2, 1});
  feeds = {{x, other}};
  ASSERT_TRUE(executor.Run(feeds, fetches, &results, {}, &again).ok());
  EXPECT_EQ(again.order, observer.order);
  for (size_t i = 0; i < again.order.size(); ++i) {
    EXPECT_EQ(again.seen[i], Values(results[again.order[i]]));
  }
}

TEST(FetchObserverTest, AFailingRunReportsOnlyWhatWasComputed) {
  Graph g;
  Output logits = ops::Placeholder(g, "logits", {-1, 3});
  Output labels = ops::Placeholder(g, "labels", {-1});
  Output doubled = ops::Add(g, logits, logits);
  Output loss = ops::SoftmaxCrossEntropy(g, doubled, labels).loss;
  ASSERT_TRUE(g.status().ok()) << g.status();
  VariableStore store;
  CpuDevice device(1);
  std::vector<Feed> feeds = {{logits, *Tensor::FromVector({1, 3}, {1, 2, 3})},
                             {labels, *Tensor::FromVector({1}, {7})}};  // out of range
  Executor executor(g, device, store);
  RecordingFetchObserver observer;
  std::vector<Tensor> results;
  std::vector<Output> fetches = {loss, doubled};
  EXPECT_FALSE(executor.Run(feeds, fetches, &results, {}, &observer).ok());
  EXPECT_EQ(observer.order, (std::vector<size_t>{1}));
}

class RecordingGradientObserver : public GradientObserver {
 public:
  void GradientReady(size_t variable, const Tensor& gradient) override {
    order.push_back(variable);
    seen.push_back(Values(gradient));
  }
  std::vector<size_t> order;
  std::vector<std::vector<float>> seen;
};

TEST(GradientObserverTest, MlpGradientsArriveOutputLayerFirstWithTheirFinalValues) {
  absl::StatusOr<Model> model = BuildModel(MlpSpec(8, 6), {5}, 3);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuDevice device(1);
  VariableStore variables(&device);
  ASSERT_TRUE(InitializeVariables(model->graph, 11, variables).ok());
  auto optimizer = Optimizer::Create("sgd", {}, device);
  ASSERT_TRUE(optimizer.ok());
  TrainerOptions options;
  options.seed = 11;
  TrainingContext ctx(options, *model, device, variables, **optimizer);
  data::Batch batch;
  batch.size = 4;
  for (int i = 0; i < 4 * 5; ++i) batch.features.push_back(static_cast<float>((i * 7) % 5) - 2);
  batch.labels = {0, 2, 1, 2};

  RecordingGradientObserver observer;
  absl::StatusOr<GradientResult> g = ctx.ComputeGradients(batch, 0, &observer);
  ASSERT_TRUE(g.ok()) << g.status();
  const size_t n = model->variable_names.size();
  ASSERT_EQ(observer.order.size(), n);
  std::vector<size_t> position(n, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_LT(observer.order[i], n);
    EXPECT_EQ(position[observer.order[i]], n) << "variable reported twice";
    position[observer.order[i]] = i;
    EXPECT_EQ(observer.seen[i], Values(g->gradients[observer.order[i]].gradient))
        << model->variable_names[observer.order[i]];
  }
  // Variables are in creation order (input layer first); the backward pass
  // finishes a layer's gradients before the layer below's.
  ASSERT_EQ(n, 6u);
  for (size_t layer = 0; layer + 1 < 3; ++layer) {
    for (size_t below : {2 * layer, 2 * layer + 1}) {
      for (size_t above : {2 * layer + 2, 2 * layer + 3}) {
        EXPECT_LT(position[above], position[below])
            << model->variable_names[above] << " vs " << model->variable_names[below];
      }
    }
  }

  // The same gradients without an observer.
  absl::StatusOr<GradientResult> plain = ctx.ComputeGradients(batch, 0);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->loss, g->loss);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(Values(plain->gradients[i].gradient), observer.seen[position[i]]);
  }
}

}  // namespace
}  // namespace kubetrain::runtime::engine
