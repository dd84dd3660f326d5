#include <cmath>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "trainer-runtime/engine/autodiff.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/ops.h"

namespace kubetrain::runtime::engine {
namespace {

TEST(TensorTest, StorageIsAlignedAndReshapeIsAView) {
  Tensor t = Tensor::Zeros({3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % Allocator::kAlignment, 0u);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{5, 1}));
  absl::StatusOr<Tensor> r = t.Reshaped({15});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->SharesStorageWith(t));
  EXPECT_FALSE(t.Reshaped({4, 4}).ok());
}

TEST(GraphTest, UnknownOpAndBadInputAreRecorded) {
  Graph g;
  EXPECT_LT(g.AddNode("NoSuchOp", {}), 0);
  EXPECT_FALSE(g.status().ok());
  Graph h;
  Output x = ops::Placeholder(h, "x", {2});
  ops::MatMul(h, x, Output{42, 0});
  EXPECT_FALSE(h.status().ok());
  EXPECT_NE(h.status().message().find("does not exist"), std::string::npos);
}

TEST(GraphTest, ProtoRoundTripRunsTheSame) {
  Graph g;
  Output x = ops::Placeholder(g, "x", {-1, 3});
  Output w = ops::Variable(g, "w", {3, 2});
  Output b = ops::Variable(g, "b", {2}, "zeros");
  Output y = ops::BiasActivation(g, ops::MatMul(g, x, w), b, "tanh");
  ASSERT_TRUE(g.status().ok());
  absl::StatusOr<Graph> copy = Graph::FromProto(g.ToProto());
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(copy->ToProto(), g.ToProto()));

  VariableStore store;
  ASSERT_TRUE(InitializeVariables(g, 5, store).ok());
  CpuDevice device(1);
  Tensor input = *Tensor::FromVector({2, 3}, {1, 2, 3, -1, 0.5, 0});
  Executor e1(g, device, store), e2(*copy, device, store);
  std::vector<Tensor> r1, r2;
  ASSERT_TRUE(e1.Run({{{x, input}}}, {{y}}, &r1).ok());
  Output y2 = *copy->ParseOutputName(g.OutputName(y));
  Output x2 = *copy->ParseOutputName("x:0");
  ASSERT_TRUE(e2.Run({{{x2, input}}}, {{y2}}, &r2).ok());
  EXPECT_EQ(r1[0].ToVector(), r2[0].ToVector());
}

TEST(GraphTest, FromProtoRejectsForwardReference) {
  v1::GraphDef def;
  v1::NodeDef* n = def.add_nodes();
  n->set_name("relu");
  n->set_op("Relu");
  n->add_inputs("later:0");
  absl::StatusOr<Graph> g = Graph::FromProto(def);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("relu"), std::string::npos);
}

TEST(ExecutorTest, ErrorsNameTheNode) {
  Graph g;
  Output x = ops::Placeholder(g, "x", {-1, 3});
  Output w = ops::Variable(g, "w", {4, 2});
  Output y = ops::MatMul(g, x, w);
  VariableStore store;
  CpuDevice device(1);
  Executor exec(g, device, store);
  std::vector<Tensor> out;
  // Not fed.
  absl::Status s = exec.Run({}, {{y}}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'x'"), std::string::npos) << s;
  // Variable missing.
  Tensor input = Tensor::Zeros({2, 3});
  s = exec.Run({{{x, input}}}, {{y}}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  // Shape mismatch found by the shape function.
  ASSERT_TRUE(InitializeVariables(g, 1, store).ok());
  s = exec.Run({{{x, input}}}, {{y}}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("inner dimensions"), std::string::npos) << s;
  // Wrong feed shape.
  s = exec.Run({{{x, Tensor::Zeros({2, 5})}}}, {{y}}, &out);
  EXPECT_NE(s.message().find("expected [-1, 3]"), std::string::npos) << s;
}

TEST(ExecutorTest, BadLabelIsAnError) {
  Graph g;
  Output logits = ops::Placeholder(g, "logits", {-1, 3});
  Output labels = ops::Placeholder(g, "labels", {-1});
  Output loss = ops::SoftmaxCrossEntropy(g, logits, labels).loss;
  VariableStore store;
  CpuDevice device(1);
  Executor exec(g, device, store);
  std::vector<Tensor> out;
  absl::Status s =
      exec.Run({{{logits, Tensor::Zeros({2, 3})}, {labels, *Tensor::FromVector({2}, {1, 3})}}},
               {{loss}}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("example 1"), std::string::npos) << s;
}

TEST(ExecutorTest, FusedBiasActivationMatchesUnfused) {
  for (std::string act : {"relu", "tanh", "sigmoid"}) {
    Graph g;
    Output x = ops::Placeholder(g, "x", {-1, 4});
    Output b = ops::Variable(g, "b", {4});
    Output fused = ops::BiasActivation(g, x, b, act);
    Output sum = ops::BiasAdd(g, x, b);
    Output unfused = act == "relu"   ? ops::Relu(g, sum)
                     : act == "tanh" ? ops::Tanh(g, sum)
                                     : ops::Sigmoid(g, sum);
    VariableStore store;
    ASSERT_TRUE(store.Create("b", *Tensor::FromVector({4}, {0.5, -0.25, 1, -2})).ok());
    CpuDevice device(1);
    Executor exec(g, device, store);
    std::vector<Tensor> out;
    Tensor input = *Tensor::FromVector({2, 4}, {1, -1, 0.5, 3, -0.7, 0.2, -3, 1.5});
    ASSERT_TRUE(exec.Run({{{x, input}}}, {{fused, unfused}}, &out).ok());
    std::vector<float> a = out[0].ToVector(), c = out[1].ToVector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(a[i], c[i]) << act << " " << i;
  }
}

TEST(ExecutorTest, GradientsSkipTheInputBatch) {
  // d(loss)/d(x) is not needed for training, so no node computes it: the
  // first layer's MatMul gets exactly one gradient MatMul (for the kernel).
  Graph g;
  Output x = ops::Placeholder(g, "x", {-1, 3});
  Output w = ops::Variable(g, "w", {3, 2});
  Output loss = ops::Sum(g, ops::MatMul(g, x, w));
  int before = g.num_nodes();
  ASSERT_TRUE(AddGradients(g, loss, std::vector<Output>{w}).ok());
  int matmuls = 0;
  for (int id = before; id < g.num_nodes(); ++id) matmuls += g.node(id).op == "MatMul";
  EXPECT_EQ(matmuls, 1);
}

TEST(ExecutorTest, DropoutIsIdentityOutsideTrainingAndReproducible) {
  Graph g;
  Output x = ops::Placeholder(g, "x", {-1});
  Output y = ops::Dropout(g, x, 0.5);
  VariableStore store;
  CpuDevice device(1);
  Executor exec(g, device, store);
  Tensor input = Tensor::Filled({1000}, 1.0f);
  std::vector<Tensor> out;
  ASSERT_TRUE(exec.Run({{{x, input}}}, {{y}}, &out, RunContext{false, 1, 1}).ok());
  EXPECT_EQ(out[0].ToVector(), input.ToVector());
  ASSERT_TRUE(exec.Run({{{x, input}}}, {{y}}, &out, RunContext{true, 1, 1}).ok());
  std::vector<float> first = out[0].ToVector();
  int zeros = 0;
  for (float v : first) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f);
    zeros += v == 0.0f;
  }
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  ASSERT_TRUE(exec.Run({{{x, input}}}, {{y}}, &out, RunContext{true, 1, 1}).ok());
  EXPECT_EQ(out[0].ToVector(), first);
  ASSERT_TRUE(exec.Run({{{x, input}}}, {{y}}, &out, RunContext{true, 1, 2}).ok());
  EXPECT_NE(out[0].ToVector(), first);
}

}  // namespace
}  // namespace kubetrain::runtime::engine
