#include "trainer-runtime/engine/ops.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/engine/op_list.h"
#include "trainer-runtime/engine/op_registry.h"

namespace kubetrain::runtime::engine {

namespace {

using Shapes = std::span<const Shape* const>;
using ShapeResult = absl::StatusOr<std::vector<Shape>>;

absl::Status ShapeError(const Node& node, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("node '", node.name, "' (", node.op, "): ", what));
}

ShapeResult SameAsInput0(const Node&, Shapes in) { return std::vector<Shape>{*in[0]}; }

ShapeResult ConstShape(const Node& node, Shapes) {
  Shape s = node.GetInts("shape");
  for (int64_t d : s) {
    if (d < 0) return ShapeError(node, "negative dimension");
  }
  return std::vector<Shape>{s};
}

ShapeResult MatMulShape(const Node& node, Shapes in) {
  const Shape& a = *in[0];
  const Shape& b = *in[1];
  if (a.size() != 2 || b.size() != 2) {
    return ShapeError(node, absl::StrCat("operands must be matrices, got ", ShapeString(a), " and ",
                                         ShapeString(b)));
  }
  bool ta = node.GetBool("transpose_a"), tb = node.GetBool("transpose_b");
  int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (ka != kb) {
    return ShapeError(node, absl::StrCat("inner dimensions differ: ", ShapeString(a),
                                         ta ? "^T" : "", " x ", ShapeString(b), tb ? "^T" : ""));
  }
  return std::vector<Shape>{{m, n}};
}

absl::Status CheckBias(const Node& node, const Shape& x, const Shape& b) {
  if (x.empty() || b.size() != 1 || b[0] != x.back()) {
    return ShapeError(node, absl::StrCat("bias ", ShapeString(b),
                                         " does not match the last dimension of ", ShapeString(x)));
  }
  return absl::OkStatus();
}

ShapeResult BiasAddShape(const Node& node, Shapes in) {
  if (absl::Status s = CheckBias(node, *in[0], *in[1]); !s.ok()) return s;
  return std::vector<Shape>{*in[0]};
}

ShapeResult BiasAddGradShape(const Node& node, Shapes in) {
  if (in[0]->empty()) return ShapeError(node, "gradient must have rank >= 1");
  return std::vector<Shape>{{in[0]->back()}};
}

ShapeResult BiasActivationGradShape(const Node& node, Shapes in) {
  if (*in[0] != *in[1] || in[0]->empty()) {
    return ShapeError(node, absl::StrCat("gradient ", ShapeString(*in[0]), " and output ",
                                         ShapeString(*in[1]), " differ"));
  }
  return std::vector<Shape>{*in[0], {in[0]->back()}};
}

ShapeResult BinaryShape(const Node& node, Shapes in) {
  const Shape& a = *in[0];
  const Shape& b = *in[1];
  if (a == b) return std::vector<Shape>{a};
  if (NumElements(b) == 1) return std::vector<Shape>{a};
  if (NumElements(a) == 1) return std::vector<Shape>{b};
  return ShapeError(node, absl::StrCat("shapes ", ShapeString(a), " and ", ShapeString(b),
                                       " differ (only equal shapes or a one-element operand)"));
}

ShapeResult SameTwoShape(const Node& node, Shapes in) {
  if (*in[0] != *in[1]) {
    return ShapeError(node, absl::StrCat("shapes ", ShapeString(*in[0]), " and ",
                                         ShapeString(*in[1]), " differ"));
  }
  return std::vector<Shape>{*in[0]};
}

ShapeResult SumLikeShape(const Node& node, Shapes in) {
  if (*in[0] != *in[1] && NumElements(*in[1]) != 1) {
    return ShapeError(
        node, absl::StrCat("cannot reduce ", ShapeString(*in[0]), " to ", ShapeString(*in[1])));
  }
  return std::vector<Shape>{*in[1]};
}

absl::Status CheckLogitsLabels(const Node& node, const Shape& logits, const Shape& labels) {
  if (logits.size() != 2 || labels.size() != 1 || labels[0] != logits[0]) {
    return ShapeError(node, absl::StrCat("want logits [batch, classes] and labels [batch], got ",
                                         ShapeString(logits), " and ", ShapeString(labels)));
  }
  return absl::OkStatus();
}

ShapeResult SoftmaxXentShape(const Node& node, Shapes in) {
  if (absl::Status s = CheckLogitsLabels(node, *in[0], *in[1]); !s.ok()) return s;
  return std::vector<Shape>{{}, *in[0]};
}

ShapeResult SoftmaxShape(const Node& node, Shapes in) {
  if (in[0]->size() != 2) return ShapeError(node, "logits must be [batch, classes]");
  return std::vector<Shape>{*in[0]};
}

ShapeResult AccuracyShape(const Node& node, Shapes in) {
  if (absl::Status s = CheckLogitsLabels(node, *in[0], *in[1]); !s.ok()) return s;
  return std::vector<Shape>{{}};
}

absl::StatusOr<std::vector<bool>> ReducedAxes(const Node& node, const Shape& x) {
  IntList axes = node.GetInts("axes");
  std::vector<bool> reduced(x.size(), axes.empty());
  for (int64_t a : axes) {
    int64_t axis = a < 0 ? a + static_cast<int64_t>(x.size()) : a;
    if (axis < 0 || axis >= static_cast<int64_t>(x.size())) {
      return ShapeError(node, absl::StrCat("axis ", a, " out of range for ", ShapeString(x)));
    }
    reduced[axis] = true;
  }
  return reduced;
}

ShapeResult ReduceShape(const Node& node, Shapes in) {
  absl::StatusOr<std::vector<bool>> reduced = ReducedAxes(node, *in[0]);
  if (!reduced.ok()) return reduced.status();
  Shape out;
  for (size_t i = 0; i < in[0]->size(); ++i) {
    if (!(*reduced)[i]) out.push_back((*in[0])[i]);
  }
  return std::vector<Shape>{out};
}

ShapeResult ReduceGradShape(const Node& node, Shapes in) {
  std::vector<Shape> reduced_shape;
  ShapeResult r = ReduceShape(node, in.subspan(1, 1));
  if (!r.ok()) return r.status();
  if ((*r)[0] != *in[0]) {
    return ShapeError(node, absl::StrCat("gradient ", ShapeString(*in[0]),
                                         " does not match reduced ", ShapeString((*r)[0])));
  }
  return std::vector<Shape>{*in[1]};
}

ShapeResult DropoutShape(const Node& node, Shapes in) {
  double rate = node.GetFloat("rate");
  if (!(rate >= 0 && rate < 1)) return ShapeError(node, "rate must be in [0, 1)");
  return std::vector<Shape>{*in[0], *in[0]};
}

}  // namespace

absl::StatusOr<WindowGeometry> ComputeWindow(int64_t in, int64_t k, int64_t stride,
                                             absl::string_view padding) {
  if (k <= 0 || stride <= 0)
    return absl::InvalidArgumentError("window and stride must be positive");
  WindowGeometry g;
  if (padding == "VALID") {
    if (in < k)
      return absl::InvalidArgumentError(absl::StrCat("window ", k, " larger than input ", in));
    g.out = (in - k) / stride + 1;
  } else if (padding == "SAME") {
    g.out = (in + stride - 1) / stride;
    int64_t total = std::max<int64_t>((g.out - 1) * stride + k - in, 0);
    g.pad_before = total / 2;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("padding must be SAME or VALID, got '", padding, "'"));
  }
  return g;
}

namespace {

ShapeResult Conv2DShape(const Node& node, Shapes in) {
  const Shape& x = *in[0];
  const Shape& f = *in[1];
  if (x.size() != 4 || f.size() != 4 || f[2] != x[3]) {
    return ShapeError(node, absl::StrCat("want input [n,h,w,c] and filter [kh,kw,c,out], got ",
                                         ShapeString(x), " and ", ShapeString(f)));
  }
  int64_t stride = node.GetInt("stride", 1);
  std::string padding = node.GetString("padding", "SAME");
  auto gh = ComputeWindow(x[1], f[0], stride, padding);
  auto gw = ComputeWindow(x[2], f[1], stride, padding);
  if (!gh.ok()) return ShapeError(node, gh.status().message());
  if (!gw.ok()) return ShapeError(node, gw.status().message());
  return std::vector<Shape>{{x[0], gh->out, gw->out, f[3]}};
}

ShapeResult Conv2DBackpropInputShape(const Node& node, Shapes in) {
  // (dy, filter, input)
  return std::vector<Shape>{*in[2]};
}

ShapeResult Conv2DBackpropFilterShape(const Node& node, Shapes in) {
  // (input, dy, filter)
  return std::vector<Shape>{*in[2]};
}

ShapeResult MaxPoolShape(const Node& node, Shapes in) {
  const Shape& x = *in[0];
  if (x.size() != 4)
    return ShapeError(node, absl::StrCat("want input [n,h,w,c], got ", ShapeString(x)));
  int64_t k = node.GetInt("ksize", 2), stride = node.GetInt("stride", 2);
  std::string padding = node.GetString("padding", "VALID");
  auto gh = ComputeWindow(x[1], k, stride, padding);
  auto gw = ComputeWindow(x[2], k, stride, padding);
  if (!gh.ok()) return ShapeError(node, gh.status().message());
  if (!gw.ok()) return ShapeError(node, gw.status().message());
  return std::vector<Shape>{{x[0], gh->out, gw->out, x[3]}};
}

ShapeResult MaxPoolGradShape(const Node& node, Shapes in) {
  // (input, dy)
  ShapeResult fwd = MaxPoolShape(node, in.subspan(0, 1));
  if (!fwd.ok()) return fwd.status();
  if ((*fwd)[0] != *in[1])
    return ShapeError(node, "gradient shape does not match the pooled shape");
  return std::vector<Shape>{*in[0]};
}

ShapeResult ReshapeShape(const Node& node, Shapes in) {
  Shape target = node.GetInts("shape");
  int64_t known = 1;
  int unknown = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (unknown >= 0) return ShapeError(node, "more than one -1 in the target shape");
      unknown = static_cast<int>(i);
    } else if (target[i] < 0) {
      return ShapeError(node, "negative dimension in the target shape");
    } else {
      known *= target[i];
    }
  }
  int64_t n = NumElements(*in[0]);
  if (unknown >= 0) {
    if (known == 0 || n % known != 0) {
      return ShapeError(
          node, absl::StrCat("cannot reshape ", ShapeString(*in[0]), " to ", ShapeString(target)));
    }
    target[unknown] = n / known;
  }
  if (NumElements(target) != n) {
    return ShapeError(
        node, absl::StrCat("cannot reshape ", ShapeString(*in[0]), " to ", ShapeString(target)));
  }
  return std::vector<Shape>{target};
}

ShapeResult ReshapeLikeShape(const Node& node, Shapes in) {
  if (NumElements(*in[0]) != NumElements(*in[1])) {
    return ShapeError(
        node, absl::StrCat("cannot reshape ", ShapeString(*in[0]), " to ", ShapeString(*in[1])));
  }
  return std::vector<Shape>{*in[1]};
}

ShapeResult FlattenShape(const Node& node, Shapes in) {
  if (in[0]->empty()) return ShapeError(node, "cannot flatten a scalar");
  return std::vector<Shape>{{(*in[0])[0], NumElements(*in[0]) / std::max<int64_t>((*in[0])[0], 1)}};
}

// ---- Gradients ----

absl::Status MatMulGrad(GradientContext& c) {
  Graph& g = c.graph;
  Output a = c.node.inputs[0], b = c.node.inputs[1], dy = c.dy[0];
  bool ta = c.node.GetBool("transpose_a"), tb = c.node.GetBool("transpose_b");
  if (!ta && !tb) {
    if (c.needs[0]) c.dx[0] = ops::MatMul(g, dy, b, false, true);
    if (c.needs[1]) c.dx[1] = ops::MatMul(g, a, dy, true, false);
  } else if (!ta && tb) {
    if (c.needs[0]) c.dx[0] = ops::MatMul(g, dy, b, false, false);
    if (c.needs[1]) c.dx[1] = ops::MatMul(g, dy, a, true, false);
  } else if (ta && !tb) {
    if (c.needs[0]) c.dx[0] = ops::MatMul(g, b, dy, false, true);
    if (c.needs[1]) c.dx[1] = ops::MatMul(g, a, dy, false, false);
  } else {
    if (c.needs[0]) c.dx[0] = ops::MatMul(g, b, dy, true, true);
    if (c.needs[1]) c.dx[1] = ops::MatMul(g, dy, a, true, true);
  }
  return absl::OkStatus();
}

absl::Status BiasAddGrad(GradientContext& c) {
  if (c.needs[0]) c.dx[0] = c.dy[0];
  if (c.needs[1]) c.dx[1] = Output{c.graph.AddNode("BiasAddGrad", {c.dy[0]}), 0};
  return absl::OkStatus();
}

absl::Status BiasActivationGrad(GradientContext& c) {
  std::string act = c.node.GetString("activation", "linear");
  if (act == "linear") return BiasAddGrad(c);
  int id =
      c.graph.AddNode("BiasActivationGrad", {c.dy[0], Output{c.node.id, 0}}, {{"activation", act}});
  c.dx[0] = Output{id, 0};
  c.dx[1] = Output{id, 1};
  return absl::OkStatus();
}

Output SumLike(Graph& g, Output dy, Output like) {
  return Output{g.AddNode("SumLike", {dy, like}), 0};
}

absl::Status AddGrad(GradientContext& c) {
  if (c.needs[0]) c.dx[0] = SumLike(c.graph, c.dy[0], c.node.inputs[0]);
  if (c.needs[1]) c.dx[1] = SumLike(c.graph, c.dy[0], c.node.inputs[1]);
  return absl::OkStatus();
}

absl::Status SubGrad(GradientContext& c) {
  if (c.needs[0]) c.dx[0] = SumLike(c.graph, c.dy[0], c.node.inputs[0]);
  if (c.needs[1]) c.dx[1] = SumLike(c.graph, ops::Neg(c.graph, c.dy[0]), c.node.inputs[1]);
  return absl::OkStatus();
}

absl::Status MulGrad(GradientContext& c) {
  Output a = c.node.inputs[0], b = c.node.inputs[1];
  if (c.needs[0]) c.dx[0] = SumLike(c.graph, ops::Mul(c.graph, c.dy[0], b), a);
  if (c.needs[1]) c.dx[1] = SumLike(c.graph, ops::Mul(c.graph, c.dy[0], a), b);
  return absl::OkStatus();
}

absl::Status NegGrad(GradientContext& c) {
  c.dx[0] = ops::Neg(c.graph, c.dy[0]);
  return absl::OkStatus();
}

template <const char* kGradOp>
absl::Status ActivationGrad(GradientContext& c) {
  c.dx[0] = Output{c.graph.AddNode(kGradOp, {c.dy[0], Output{c.node.id, 0}}), 0};
  return absl::OkStatus();
}
constexpr char kReluGrad[] = "ReluGrad";
constexpr char kTanhGrad[] = "TanhGrad";
constexpr char kSigmoidGrad[] = "SigmoidGrad";

absl::Status SoftmaxXentGrad(GradientContext& c) {
  if (!c.needs[0]) return absl::OkStatus();
  if (c.dy[1].valid()) {
    return absl::UnimplementedError(
        absl::StrCat("node '", c.node.name, "': gradient through the backprop output"));
  }
  c.dx[0] = ops::Mul(c.graph, Output{c.node.id, 1}, c.dy[0]);
  return absl::OkStatus();
}

absl::Status SumGrad(GradientContext& c) {
  c.dx[0] = Output{c.graph.AddNode("ReduceGrad", {c.dy[0], c.node.inputs[0]},
                                   {{"axes", c.node.GetInts("axes")}, {"mean", false}}),
                   0};
  return absl::OkStatus();
}

absl::Status MeanGrad(GradientContext& c) {
  c.dx[0] = Output{c.graph.AddNode("ReduceGrad", {c.dy[0], c.node.inputs[0]},
                                   {{"axes", c.node.GetInts("axes")}, {"mean", true}}),
                   0};
  return absl::OkStatus();
}

absl::Status DropoutGrad(GradientContext& c) {
  c.dx[0] = ops::Mul(c.graph, c.dy[0], Output{c.node.id, 1});
  return absl::OkStatus();
}

absl::Status Conv2DGrad(GradientContext& c) {
  Output x = c.node.inputs[0], f = c.node.inputs[1], dy = c.dy[0];
  AttrMap attrs = {{"stride", c.node.GetInt("stride", 1)},
                   {"padding", c.node.GetString("padding", "SAME")}};
  if (c.needs[0]) c.dx[0] = Output{c.graph.AddNode("Conv2DBackpropInput", {dy, f, x}, attrs), 0};
  if (c.needs[1]) c.dx[1] = Output{c.graph.AddNode("Conv2DBackpropFilter", {x, dy, f}, attrs), 0};
  return absl::OkStatus();
}

absl::Status MaxPoolGrad(GradientContext& c) {
  c.dx[0] = Output{c.graph.AddNode("MaxPoolGrad", {c.node.inputs[0], c.dy[0]}, c.node.attrs), 0};
  return absl::OkStatus();
}

absl::Status ReshapeGrad(GradientContext& c) {
  c.dx[0] = Output{c.graph.AddNode("ReshapeLike", {c.dy[0], c.node.inputs[0]}), 0};
  return absl::OkStatus();
}

absl::Status ReshapeLikeGrad(GradientContext& c) {
  if (c.needs[0]) c.dx[0] = Output{c.graph.AddNode("ReshapeLike", {c.dy[0], c.node.inputs[0]}), 0};
  return absl::OkStatus();
}

const std::map<std::string, OpDef, std::less<>>& OpTable() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, OpDef, std::less<>>();
    auto add = [t](OpDef def) { t->emplace(def.name, std::move(def)); };
    // op_list.h names every op once.
#define KUBETRAIN_ADD_OP(name, inputs, outputs, shape_fn, grad_fn) \
  add({#name, inputs, outputs, shape_fn, grad_fn});
#define KUBETRAIN_ADD_VIEW(name, inputs, outputs, shape_fn, grad_fn) \
  add({#name, inputs, outputs, shape_fn, grad_fn, /*is_view=*/true});
#define KUBETRAIN_ADD_SOURCE(name) \
  add({#name, 0, 1, nullptr, nullptr, /*is_view=*/false, /*is_source=*/true});
    KUBETRAIN_SOURCE_OPS(KUBETRAIN_ADD_SOURCE)
    KUBETRAIN_KERNEL_OPS(KUBETRAIN_ADD_OP)
    KUBETRAIN_VIEW_OPS(KUBETRAIN_ADD_VIEW)
#undef KUBETRAIN_ADD_OP
#undef KUBETRAIN_ADD_VIEW
#undef KUBETRAIN_ADD_SOURCE
    return t;
  }();
  return *table;
}

Output One(Graph& g, int id) { return Output{id, 0}; }

}  // namespace

const OpDef* FindOpDef(absl::string_view name) {
  const auto& table = OpTable();
  auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

namespace ops {

Output Placeholder(Graph& g, absl::string_view name, const Shape& shape) {
  return One(g, g.AddNode("Placeholder", {}, {{"shape", IntList(shape)}}, name));
}

Output Variable(Graph& g, absl::string_view name, const Shape& shape,
                absl::string_view initializer) {
  return One(
      g, g.AddNode("Variable", {},
                   {{"shape", IntList(shape)}, {"initializer", std::string(initializer)}}, name));
}

Output Const(Graph& g, float value, const Shape& shape) {
  return One(g, g.AddNode("Const", {}, {{"shape", IntList(shape)}, {"value", double{value}}}));
}

Output ZerosLike(Graph& g, Output x) { return One(g, g.AddNode("ZerosLike", {x})); }

Output MatMul(Graph& g, Output a, Output b, bool transpose_a, bool transpose_b) {
  return One(
      g, g.AddNode("MatMul", {a, b}, {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}}));
}

Output BiasAdd(Graph& g, Output x, Output bias) { return One(g, g.AddNode("BiasAdd", {x, bias})); }

Output BiasActivation(Graph& g, Output x, Output bias, absl::string_view activation) {
  if (activation != "relu" && activation != "tanh" && activation != "sigmoid" &&
      activation != "linear") {
    g.RecordError(
        absl::InvalidArgumentError(absl::StrCat("unknown activation '", activation, "'")));
    return Output{};
  }
  return One(g, g.AddNode("BiasActivation", {x, bias}, {{"activation", std::string(activation)}}));
}

Output Add(Graph& g, Output a, Output b) { return One(g, g.AddNode("Add", {a, b})); }
Output Sub(Graph& g, Output a, Output b) { return One(g, g.AddNode("Sub", {a, b})); }
Output Mul(Graph& g, Output a, Output b) { return One(g, g.AddNode("Mul", {a, b})); }
Output Neg(Graph& g, Output x) { return One(g, g.AddNode("Neg", {x})); }
Output Relu(Graph& g, Output x) { return One(g, g.AddNode("Relu", {x})); }
Output Tanh(Graph& g, Output x) { return One(g, g.AddNode("Tanh", {x})); }
Output Sigmoid(Graph& g, Output x) { return One(g, g.AddNode("Sigmoid", {x})); }

SoftmaxCrossEntropyOutputs SoftmaxCrossEntropy(Graph& g, Output logits, Output labels) {
  int id = g.AddNode("SoftmaxCrossEntropy", {logits, labels});
  return {Output{id, 0}, Output{id, 1}};
}

Output Softmax(Graph& g, Output logits) { return One(g, g.AddNode("Softmax", {logits})); }
Output Accuracy(Graph& g, Output logits, Output labels) {
  return One(g, g.AddNode("Accuracy", {logits, labels}));
}

Output Sum(Graph& g, Output x, const IntList& axes) {
  return One(g, g.AddNode("Sum", {x}, {{"axes", axes}}));
}
Output Mean(Graph& g, Output x, const IntList& axes) {
  return One(g, g.AddNode("Mean", {x}, {{"axes", axes}}));
}

Output Dropout(Graph& g, Output x, double rate) {
  return One(g, g.AddNode("Dropout", {x}, {{"rate", rate}}));
}

Output Conv2D(Graph& g, Output input, Output filter, int64_t stride, absl::string_view padding) {
  return One(g, g.AddNode("Conv2D", {input, filter},
                          {{"stride", stride}, {"padding", std::string(padding)}}));
}

Output MaxPool(Graph& g, Output input, int64_t ksize, int64_t stride, absl::string_view padding) {
  return One(g,
             g.AddNode("MaxPool", {input},
                       {{"ksize", ksize}, {"stride", stride}, {"padding", std::string(padding)}}));
}

Output Reshape(Graph& g, Output x, const Shape& shape) {
  return One(g, g.AddNode("Reshape", {x}, {{"shape", IntList(shape)}}));
}

Output Flatten(Graph& g, Output x) { return One(g, g.AddNode("Flatten", {x})); }

}  // namespace ops
}  // namespace kubetrain::runtime::engine
