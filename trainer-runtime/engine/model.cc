#include "trainer-runtime/engine/model.h"

#include "absl/strings/str_cat.h"
#include "trainer-runtime/engine/autodiff.h"
#include "trainer-runtime/engine/op_registry.h"
#include "trainer-runtime/engine/ops.h"

namespace kubetrain::runtime::engine {

ModelSpec MlpSpec(int64_t hidden1, int64_t hidden2) {
  ModelSpec spec;
  spec.name = "mlp";
  spec.layers.push_back({.kind = LayerSpec::Kind::kDense, .units = hidden1, .activation = "relu"});
  spec.layers.push_back({.kind = LayerSpec::Kind::kDense, .units = hidden2, .activation = "relu"});
  return spec;
}

ModelSpec CnnSpec() {
  using K = LayerSpec::Kind;
  ModelSpec spec;
  spec.name = "cnn";
  spec.layers.push_back({.kind = K::kConv2D, .units = 32, .activation = "relu", .kernel_size = 3});
  spec.layers.push_back({.kind = K::kMaxPool, .pool_size = 2, .stride = 2, .padding = "VALID"});
  spec.layers.push_back({.kind = K::kConv2D, .units = 64, .activation = "relu", .kernel_size = 3});
  spec.layers.push_back({.kind = K::kMaxPool, .pool_size = 2, .stride = 2, .padding = "VALID"});
  spec.layers.push_back({.kind = K::kFlatten});
  spec.layers.push_back({.kind = K::kDense, .units = 128, .activation = "relu"});
  spec.layers.push_back({.kind = K::kDropout, .rate = 0.25});
  return spec;
}

namespace {

std::string Where(const ModelSpec& spec, const LayerSpec& layer, size_t index) {
  if (layer.line > 0) return absl::StrCat(spec.name, ":", layer.line);
  return absl::StrCat(spec.name, " layer ", index);
}

Output Activate(Graph& g, Output x, const std::string& activation) {
  if (activation == "relu") return ops::Relu(g, x);
  if (activation == "tanh") return ops::Tanh(g, x);
  if (activation == "sigmoid") return ops::Sigmoid(g, x);
  return x;
}

bool IsActivation(const std::string& a) {
  return a == "relu" || a == "tanh" || a == "sigmoid" || a == "linear";
}

}  // namespace

absl::StatusOr<Model> BuildModel(const ModelSpec& spec, const Shape& example_shape,
                                 int32_t num_classes, bool fuse) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data has ", num_classes, " classes; a classifier needs at least 2"));
  }
  for (int64_t d : example_shape) {
    if (d <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("bad example shape ", ShapeString(example_shape)));
  }
  Model m;
  m.example_shape = example_shape;
  m.num_classes = num_classes;
  Graph& g = m.graph;
  Shape input_shape = {-1};
  input_shape.insert(input_shape.end(), example_shape.begin(), example_shape.end());
  m.input = ops::Placeholder(g, "input", input_shape);
  m.labels = ops::Placeholder(g, "labels", {-1});

  std::vector<LayerSpec> layers = spec.layers;
  bool has_output = !layers.empty() && layers.back().kind == LayerSpec::Kind::kDense &&
                    (layers.back().activation == "linear" || layers.back().activation == "softmax");
  if (has_output && layers.back().units != num_classes) {
    if (layers.back().activation == "softmax") {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(spec, layers.back(), layers.size() - 1), ": the output layer has ",
                       layers.back().units, " units but the data has ", num_classes, " classes"));
    }
    has_output = false;
  }
  if (!has_output) {
    layers.push_back(
        {.kind = LayerSpec::Kind::kDense, .units = num_classes, .activation = "linear"});
  }

  Output x = m.input;
  Shape shape = example_shape;  // per example
  int dense_count = 0, conv_count = 0;
  auto add_variable = [&](const std::string& name, const Shape& s, const std::string& init) {
    Output v = ops::Variable(g, name, s, init);
    m.variable_names.push_back(name);
    m.variables.push_back(v);
    return v;
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& layer = layers[i];
    bool is_output = i + 1 == layers.size();
    std::string where = Where(spec, layer, i);
    std::string activation = layer.activation;
    if (activation == "softmax" && is_output && layer.kind == LayerSpec::Kind::kDense)
      activation = "linear";
    if ((layer.kind == LayerSpec::Kind::kDense || layer.kind == LayerSpec::Kind::kConv2D) &&
        !IsActivation(activation)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown activation '", layer.activation,
                       "' (want relu, tanh, sigmoid, linear", is_output ? ", softmax" : "", ")"));
    }
    switch (layer.kind) {
      case LayerSpec::Kind::kDense: {
        if (layer.units <= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": dense needs a positive unit count"));
        }
        if (shape.size() != 1) {
          x = ops::Flatten(g, x);
          shape = {NumElements(shape)};
        }
        std::string prefix = absl::StrCat("dense_", dense_count++);
        Output w = add_variable(prefix + "/kernel", {shape[0], layer.units}, "glorot_uniform");
        Output b = add_variable(prefix + "/bias", {layer.units}, "zeros");
        Output z = ops::MatMul(g, x, w);
        x = fuse ? ops::BiasActivation(g, z, b, activation)
                 : Activate(g, ops::BiasAdd(g, z, b), activation);
        shape = {layer.units};
        break;
      }
      case LayerSpec::Kind::kConv2D: {
        if (shape.size() != 3) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": conv2d needs an image input [h, w, c], got ", ShapeString(shape)));
        }
        if (layer.units <= 0 || layer.kernel_size <= 0 || layer.stride <= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": conv2d needs positive filters, kernel_size and strides"));
        }
        auto gh = ComputeWindow(shape[0], layer.kernel_size, layer.stride, layer.padding);
        auto gw = ComputeWindow(shape[1], layer.kernel_size, layer.stride, layer.padding);
        if (!gh.ok() || !gw.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": conv2d on ", ShapeString(shape),
                                                         ": ",
                                                         (!gh.ok() ? gh : gw).status().message()));
        }
        std::string prefix = absl::StrCat("conv2d_", conv_count++);
        Output f = add_variable(prefix + "/kernel",
                                {layer.kernel_size, layer.kernel_size, shape[2], layer.units},
                                "glorot_uniform");
        Output b = add_variable(prefix + "/bias", {layer.units}, "zeros");
        Output z = ops::Conv2D(g, x, f, layer.stride, layer.padding);
        x = fuse ? ops::BiasActivation(g, z, b, activation)
                 : Activate(g, ops::BiasAdd(g, z, b), activation);
        shape = {gh->out, gw->out, layer.units};
        break;
      }
      case LayerSpec::Kind::kMaxPool: {
        if (shape.size() != 3) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": maxpool needs an image input [h, w, c], got ", ShapeString(shape)));
        }
        auto gh = ComputeWindow(shape[0], layer.pool_size, layer.stride, layer.padding);
        auto gw = ComputeWindow(shape[1], layer.pool_size, layer.stride, layer.padding);
        if (!gh.ok() || !gw.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": maxpool on ", ShapeString(shape),
                                                         ": ",
                                                         (!gh.ok() ? gh : gw).status().message()));
        }
        x = ops::MaxPool(g, x, layer.pool_size, layer.stride, layer.padding);
        shape = {gh->out, gw->out, shape[2]};
        break;
      }
      case LayerSpec::Kind::kFlatten:
        x = ops::Flatten(g, x);
        shape = {NumElements(shape)};
        break;
      case LayerSpec::Kind::kDropout:
        if (!(layer.rate >= 0 && layer.rate < 1)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": dropout rate must be in [0, 1)"));
        }
        x = ops::Dropout(g, x, layer.rate);
        break;
    }
  }
  m.logits = x;
  auto xent = ops::SoftmaxCrossEntropy(g, m.logits, m.labels);
  m.loss = xent.loss;
  m.accuracy = ops::Accuracy(g, m.logits, m.labels);
  m.probabilities = ops::Softmax(g, m.logits);
  if (!g.status().ok()) return g.status();
  m.num_forward_nodes = g.num_nodes();
  absl::StatusOr<std::vector<Output>> grads = AddGradients(g, m.loss, m.variables);
  if (!grads.ok()) return grads.status();
  m.gradients = *std::move(grads);
  return m;
}

}  // namespace kubetrain::runtime::engine
