#include "trainer-runtime/engine/autodiff.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/engine/op_registry.h"
#include "trainer-runtime/engine/ops.h"

namespace kubetrain::runtime::engine {

namespace {

// Sums gradient contributions to one output.
Output Accumulate(Graph& graph, const std::vector<Output>& parts) {
  Output sum = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) sum = ops::Add(graph, sum, parts[i]);
  return sum;
}

}  // namespace

absl::StatusOr<std::vector<Output>> AddGradients(Graph& graph, Output y,
                                                 std::span<const Output> xs) {
  if (!graph.status().ok()) return graph.status();
  const int n = graph.num_nodes();
  if (y.node < 0 || y.node >= n) return absl::InvalidArgumentError("y is not in the graph");

  // Ancestors of y.
  std::vector<char> reaches_y(static_cast<size_t>(n), 0);
  reaches_y[y.node] = 1;
  for (int id = y.node; id >= 0; --id) {
    if (!reaches_y[id]) continue;
    for (const Output& in : graph.node(id).inputs) reaches_y[in.node] = 1;
  }
  // Descendants of the xs.
  std::vector<char> from_x(static_cast<size_t>(n), 0);
  for (const Output& x : xs) {
    if (x.node < 0 || x.node >= n) return absl::InvalidArgumentError("an x is not in the graph");
    from_x[x.node] = 1;
  }
  for (int id = 0; id < n; ++id) {
    if (from_x[id]) continue;
    for (const Output& in : graph.node(id).inputs) {
      if (from_x[in.node]) {
        from_x[id] = 1;
        break;
      }
    }
  }
  auto relevant = [&](int id) { return reaches_y[id] && from_x[id]; };

  std::map<Output, std::vector<Output>> pending;
  if (relevant(y.node)) pending[y].push_back(ops::Const(graph, 1.0f, {}));

  for (int id = y.node; id >= 0; --id) {
    if (!relevant(id)) continue;
    if (graph.node(id).inputs.empty()) continue;  // a source: its gradient is the answer
    // A copy: Accumulate adds nodes, which may move the graph's storage.
    GradientContext ctx{graph, graph.node(id), {}, {}, {}};
    bool any = false;
    for (int k = 0; k < ctx.node.num_outputs; ++k) {
      auto it = pending.find(Output{id, k});
      if (it == pending.end()) {
        ctx.dy.push_back(Output{});
      } else {
        ctx.dy.push_back(Accumulate(graph, it->second));
        any = true;
      }
    }
    if (!any) continue;
    const OpDef* def = FindOpDef(ctx.node.op);
    if (def->grad_fn == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("node '", ctx.node.name, "' (", ctx.node.op,
                                                     ") lies between a variable and the loss but "
                                                     "has no gradient"));
    }
    for (const Output& in : ctx.node.inputs) ctx.needs.push_back(relevant(in.node));
    ctx.dx.assign(ctx.node.inputs.size(), Output{});
    if (!ctx.dy[0].valid() && ctx.node.num_outputs > 1) {
      // Multi-output ops take their gradient on output 0; treat an absent one
      // as zero where the op's gradient needs it.
      ctx.dy[0] = ops::ZerosLike(graph, Output{id, 0});
    }
    if (absl::Status s = def->grad_fn(ctx); !s.ok()) return s;
    for (size_t i = 0; i < ctx.dx.size(); ++i) {
      if (ctx.needs[i] && ctx.dx[i].valid()) pending[ctx.node.inputs[i]].push_back(ctx.dx[i]);
    }
  }

  std::vector<Output> grads;
  for (const Output& x : xs) {
    auto it = pending.find(x);
    grads.push_back(it == pending.end() ? ops::ZerosLike(graph, x) : Accumulate(graph, it->second));
  }
  if (!graph.status().ok()) return graph.status();
  return grads;
}

}  // namespace kubetrain::runtime::engine
