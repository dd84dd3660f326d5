#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer-runtime/engine/graph.h"
#include "trainer-runtime/engine/tensor.h"

namespace kubetrain::runtime::engine {

// One layer of a Keras-Sequential-like model.
struct LayerSpec {
  enum class Kind { kDense, kConv2D, kMaxPool, kFlatten, kDropout };
  Kind kind = Kind::kDense;
  int64_t units = 0;                  // dense: output width; conv2d: filters
  std::string activation = "linear";  // relu, tanh, sigmoid, linear, softmax (output layer only)
  int64_t kernel_size = 3;            // conv2d
  int64_t pool_size = 2;              // maxpool
  int64_t stride = 1;                 // conv2d (default 1), maxpool (default = pool_size)
  std::string padding = "SAME";       // conv2d: SAME/VALID; maxpool: VALID unless given
  double rate = 0.0;                  // dropout
  int line = 0;                       // where the layer was written (0: built in)
};

struct ModelSpec {
  std::string name;  // "mlp", "cnn", or the model file
  std::vector<LayerSpec> layers;
};

// 784-256-128-10 by default: Dense(hidden1, relu), Dense(hidden2, relu).
ModelSpec MlpSpec(int64_t hidden1 = 256, int64_t hidden2 = 128);
// Conv2D(32, 3x3, relu, SAME) MaxPool(2) Conv2D(64, 3x3, relu, SAME) MaxPool(2)
// Flatten Dense(128, relu) Dropout(0.25), for 28x28x1 images.
ModelSpec CnnSpec();

// A model compiled to a training graph. The graph's first
// `num_forward_nodes` nodes are the forward pass (input to loss and
// metrics), a valid graph on its own (what is exported); gradient nodes
// follow.
struct Model {
  Graph graph;
  Output input;   // Placeholder [-1, example_shape...]
  Output labels;  // Placeholder [-1]: class indices as floats
  Output logits;
  Output probabilities;
  Output loss;                              // mean softmax cross-entropy over the batch
  Output accuracy;                          // fraction of the batch classified right
  std::vector<std::string> variable_names;  // in creation order
  std::vector<Output> variables;
  std::vector<Output> gradients;  // d(loss)/d(variable), same order
  int num_forward_nodes = 0;
  Shape example_shape;
  int32_t num_classes = 0;
};

// Compiles `spec` for examples of `example_shape` (e.g. {28, 28, 1} or
// {784}) and `num_classes` classes. The layers are followed by the output
// layer: a linear dense layer with one unit per class, unless the last
// layer already is a dense layer with `num_classes` units and a linear or
// softmax activation (softmax is folded into the loss). A dense layer
// flattens an input of rank > 1 first. With `fuse`, a dense or conv layer's
// bias and activation run as one BiasActivation op.
//
// InvalidArgument for a spec that does not fit the data, naming the layer
// and its line, e.g. "model.yaml:3: conv2d needs an image input [h, w, c],
// got [784]".
absl::StatusOr<Model> BuildModel(const ModelSpec& spec, const Shape& example_shape,
                                 int32_t num_classes, bool fuse = true);

}  // namespace kubetrain::runtime::engine
