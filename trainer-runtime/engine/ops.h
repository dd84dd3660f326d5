#pragma once

#include <string>
#include <string_view>

#include "trainer-runtime/engine/graph.h"
#include "trainer-runtime/engine/tensor.h"

// Graph builders for every op. Each adds one node to the graph and returns
// its output(s); errors are recorded in the graph (see Graph). Shapes are
// checked when the graph runs, by each op's shape function.
//
// Layouts: images are NHWC, convolution filters HWIO ([height, width,
// in_channels, out_channels]), dense kernels [in, out]. Labels are class
// indices stored as floats, shape [batch].
namespace kubetrain::runtime::engine::ops {

// A value fed at run time. `shape` may hold -1 for any size (the batch).
Output Placeholder(Graph& g, absl::string_view name, const Shape& shape);
// Named graph state, read from the VariableStore at run time. `initializer`
// is what InitializeVariables uses: "glorot_uniform", "he_normal", "zeros".
Output Variable(Graph& g, absl::string_view name, const Shape& shape,
                absl::string_view initializer = "glorot_uniform");
// A tensor of `shape` filled with `value`.
Output Const(Graph& g, float value, const Shape& shape = {});
Output ZerosLike(Graph& g, Output x);

// [m,k] x [k,n] -> [m,n], optionally transposing either operand (sgemm).
Output MatMul(Graph& g, Output a, Output b, bool transpose_a = false, bool transpose_b = false);
// x [..., c] + bias [c].
Output BiasAdd(Graph& g, Output x, Output bias);
// activation(x + bias) in one pass; activation is "relu", "tanh", "sigmoid"
// or "linear". The fused form of BiasAdd followed by the activation.
Output BiasActivation(Graph& g, Output x, Output bias, absl::string_view activation);

// Elementwise; shapes equal, or one operand has exactly one element.
Output Add(Graph& g, Output a, Output b);
Output Sub(Graph& g, Output a, Output b);
Output Mul(Graph& g, Output a, Output b);
Output Neg(Graph& g, Output x);
Output Relu(Graph& g, Output x);
Output Tanh(Graph& g, Output x);
Output Sigmoid(Graph& g, Output x);

// Fused, numerically stable softmax + cross-entropy. `loss` is the mean over
// the batch; `backprop` is d(loss)/d(logits). A label outside [0, classes)
// fails the run with InvalidArgument.
struct SoftmaxCrossEntropyOutputs {
  Output loss;
  Output backprop;
};
SoftmaxCrossEntropyOutputs SoftmaxCrossEntropy(Graph& g, Output logits, Output labels);
Output Softmax(Graph& g, Output logits);
// Fraction of rows whose arg-max equals the label (not differentiable).
Output Accuracy(Graph& g, Output logits, Output labels);

// Reductions over `axes` (empty: all axes); reduced axes are dropped.
Output Sum(Graph& g, Output x, const IntList& axes = {});
Output Mean(Graph& g, Output x, const IntList& axes = {});

// Inverted dropout: in training runs, zeroes each element with probability
// `rate` and scales the rest by 1/(1-rate); the identity otherwise. The mask
// depends only on (run seed, step, node name), so runs are reproducible.
Output Dropout(Graph& g, Output x, double rate);

// padding: "SAME" or "VALID".
Output Conv2D(Graph& g, Output input, Output filter, int64_t stride, absl::string_view padding);
Output MaxPool(Graph& g, Output input, int64_t ksize, int64_t stride, absl::string_view padding);

// `shape` may hold one -1, inferred from the element count.
Output Reshape(Graph& g, Output x, const Shape& shape);
// [n, ...] -> [n, product of the rest].
Output Flatten(Graph& g, Output x);

}  // namespace kubetrain::runtime::engine::ops
