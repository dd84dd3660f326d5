#include "trainer-runtime/engine/model.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/model_yaml.h"
#include "trainer-runtime/engine/optimizer.h"

namespace kubetrain::runtime::engine {
namespace {

TEST(ModelYamlTest, ParsesLayers) {
  absl::StatusOr<ModelSpec> spec = ParseModelYaml(R"(layers:
  - conv2d: 16
    kernel_size: 5
    activation: relu
  - maxpool: 2
  - flatten
  - dense: 64
    activation: tanh
  - dropout: 0.5
  - dense: 10
    activation: softmax
)",
                                                  "m.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->layers.size(), 6u);
  EXPECT_EQ(spec->layers[0].kind, LayerSpec::Kind::kConv2D);
  EXPECT_EQ(spec->layers[0].units, 16);
  EXPECT_EQ(spec->layers[0].kernel_size, 5);
  EXPECT_EQ(spec->layers[0].line, 2);
  EXPECT_EQ(spec->layers[1].stride, 2);
  EXPECT_EQ(spec->layers[1].padding, "VALID");
  EXPECT_EQ(spec->layers[2].kind, LayerSpec::Kind::kFlatten);
  EXPECT_EQ(spec->layers[4].rate, 0.5);
  EXPECT_EQ(spec->layers[5].activation, "softmax");
  // The softmax output layer is the model's output: no extra layer.
  absl::StatusOr<Model> m = BuildModel(*spec, {28, 28, 1}, 10);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->variable_names.size(), 6u);
}

TEST(ModelYamlTest, ErrorsCarryFileAndLine) {
  auto bad_key = ParseModelYaml("layers:\n  - dense: 4\n    activaton: relu\n", "m.yaml");
  ASSERT_FALSE(bad_key.ok());
  EXPECT_NE(bad_key.status().message().find("m.yaml:3: unknown key 'activaton'"), std::string::npos)
      << bad_key.status();
  auto bad_value = ParseModelYaml("layers:\n  - dense: many\n", "m.yaml");
  EXPECT_NE(bad_value.status().message().find("m.yaml:2:"), std::string::npos)
      << bad_value.status();
  auto syntax = ParseModelYaml("layers: [dense: 4\n", "m.yaml");
  EXPECT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("m.yaml:"), std::string::npos);
  auto empty = ParseModelYaml("layers: []\n", "m.yaml");
  EXPECT_FALSE(empty.ok());
}

TEST(ModelTest, ShapeMismatchNamesTheLayerLine) {
  auto spec = ParseModelYaml("layers:\n  - dense: 8\n  - conv2d: 4\n", "m.yaml");
  ASSERT_TRUE(spec.ok());
  absl::StatusOr<Model> m = BuildModel(*spec, {784}, 10);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("m.yaml:3: conv2d needs an image input"), std::string::npos)
      << m.status();
  auto wrong_classes = ParseModelYaml("layers:\n  - dense: 5\n    activation: softmax\n", "m.yaml");
  m = BuildModel(*wrong_classes, {4}, 3);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("m.yaml:2"), std::string::npos) << m.status();
}

TEST(ModelTest, BuiltinsBuild) {
  absl::StatusOr<Model> mlp = BuildModel(MlpSpec(), {28, 28, 1}, 10);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ(mlp->variable_names,
            (std::vector<std::string>{"dense_0/kernel", "dense_0/bias", "dense_1/kernel",
                                      "dense_1/bias", "dense_2/kernel", "dense_2/bias"}));
  absl::StatusOr<Model> cnn = BuildModel(CnnSpec(), {28, 28, 1}, 10);
  ASSERT_TRUE(cnn.ok()) << cnn.status();
}

std::string ReadExample(const std::string& name) {
  std::ifstream in(std::string(KUBETRAIN_SOURCE_DIR) + "/examples/models/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<Shape> VariableShapes(const Model& m) {
  std::vector<Shape> shapes;
  for (const Output& v : m.variables) shapes.push_back(m.graph.node(v.node).GetInts("shape"));
  return shapes;
}

TEST(ModelTest, ExampleModelFilesMatchTheBuiltins) {
  for (const char* name : {"mlp.yaml", "cnn.yaml", "small_mlp_dropout.yaml"}) {
    absl::StatusOr<ModelSpec> spec = ParseModelYaml(ReadExample(name), name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<Model> m = BuildModel(*spec, {28, 28, 1}, 10);
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
  }
  auto mlp_file = BuildModel(*ParseModelYaml(ReadExample("mlp.yaml"), "mlp.yaml"), {28, 28, 1}, 10);
  auto cnn_file = BuildModel(*ParseModelYaml(ReadExample("cnn.yaml"), "cnn.yaml"), {28, 28, 1}, 10);
  EXPECT_EQ(VariableShapes(*mlp_file), VariableShapes(*BuildModel(MlpSpec(), {28, 28, 1}, 10)));
  EXPECT_EQ(VariableShapes(*cnn_file), VariableShapes(*BuildModel(CnnSpec(), {28, 28, 1}, 10)));
}

// The classic end-to-end check: a 2-8-2 MLP learns XOR.
TEST(ModelTest, TinyMlpLearnsXor) {
  ModelSpec spec;
  spec.name = "xor";
  spec.layers.push_back({.kind = LayerSpec::Kind::kDense, .units = 8, .activation = "tanh"});
  absl::StatusOr<Model> m = BuildModel(spec, {2}, 2);
  ASSERT_TRUE(m.ok()) << m.status();
  CpuDevice device(1);
  VariableStore store;
  ASSERT_TRUE(InitializeVariables(m->graph, 1, store).ok());
  OptimizerOptions oo;
  oo.learning_rate = 0.05;
  auto opt = Optimizer::Create("adam", oo, device);
  ASSERT_TRUE(opt.ok());
  Executor exec(m->graph, device, store);
  Tensor x = *Tensor::FromVector({4, 2}, {0, 0, 0, 1, 1, 0, 1, 1});
  Tensor y = *Tensor::FromVector({4}, {0, 1, 1, 0});
  std::vector<Output> fetches = {m->loss, m->accuracy};
  fetches.insert(fetches.end(), m->gradients.begin(), m->gradients.end());
  std::vector<Tensor> out;
  float first_loss = 0, loss = 0, accuracy = 0;
  for (int step = 0; step < 300; ++step) {
    ASSERT_TRUE(
        exec.Run({{{m->input, x}, {m->labels, y}}}, fetches, &out, RunContext{true, 1, step}).ok());
    if (step == 0) first_loss = out[0].at(0);
    loss = out[0].at(0);
    accuracy = out[1].at(0);
    std::vector<NamedGradient> grads;
    for (size_t i = 0; i < m->variable_names.size(); ++i)
      grads.push_back({m->variable_names[i], out[2 + i]});
    ASSERT_TRUE((*opt)->Apply(store, grads).ok());
  }
  EXPECT_EQ(accuracy, 1.0f);
  EXPECT_LT(loss, 0.05f);
  EXPECT_GT(first_loss, 0.5f);
}

}  // namespace
}  // namespace kubetrain::runtime::engine
