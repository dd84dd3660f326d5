#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer-runtime/engine/graph.h"
#include "trainer-runtime/engine/tensor.h"

namespace kubetrain::runtime::engine {

// What autodiff hands an op's gradient function: the forward node, the
// gradient flowing into each of its outputs (invalid Output: none flows),
// and which inputs need a gradient. The function adds nodes to `graph` and
// sets dx[i] for each needed input (leaving it invalid means "zero").
struct GradientContext {
  Graph& graph;
  Node node;  // a copy: adding nodes may move the graph's storage
  std::vector<Output> dy;
  std::vector<bool> needs;
  std::vector<Output> dx;
};

using ShapeFn = absl::StatusOr<std::vector<Shape>> (*)(const Node& node,
                                                       std::span<const Shape* const> inputs);
using GradFn = absl::Status (*)(GradientContext& ctx);

// Device-independent description of an op.
struct OpDef {
  std::string name;
  int num_inputs = 0;  // exact
  int num_outputs = 1;
  ShapeFn shape_fn = nullptr;
  GradFn grad_fn = nullptr;  // null: not differentiable (gradients stop here)
  // Output 0 is a view of input 0 with another shape (Reshape, Flatten): the
  // executor makes the view and runs no kernel.
  bool is_view = false;
  // Placeholder / Variable: values come from feeds or the variable store.
  bool is_source = false;
};

// The op with this name, or null. The table is immutable.
const OpDef* FindOpDef(absl::string_view name);

// Output size and leading padding of a convolution or pooling window along
// one spatial axis, with TensorFlow's SAME / VALID rules. Shared by the shape
// functions and every device's kernels.
struct WindowGeometry {
  int64_t out = 0;
  int64_t pad_before = 0;
};
absl::StatusOr<WindowGeometry> ComputeWindow(int64_t in, int64_t k, int64_t stride,
                                             absl::string_view padding);

}  // namespace kubetrain::runtime::engine
