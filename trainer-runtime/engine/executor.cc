#include "trainer-runtime/engine/executor.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/engine/op_registry.h"

namespace kubetrain::runtime::engine {

Executor::Executor(const Graph& graph, Device& device, VariableStore& variables)
    : graph_(graph), device_(device), variables_(variables) {}

const Executor::Plan& Executor::GetPlan(std::span<const Feed> feeds,
                                        std::span<const Output> fetches) {
  std::vector<int> key;
  for (const Feed& f : feeds) key.push_back(f.output.node);
  key.push_back(-1);
  for (const Output& o : fetches) {
    key.push_back(o.node);
    key.push_back(o.index);
  }
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;

  std::vector<char> needed(static_cast<size_t>(graph_.num_nodes()), 0);
  std::vector<char> fed(needed.size(), 0);
  for (const Feed& f : feeds) fed[f.output.node] = 1;
  std::vector<int> stack;
  for (const Output& o : fetches) stack.push_back(o.node);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = 1;
    if (fed[id]) continue;  // a fed node's inputs are not computed
    for (const Output& in : graph_.node(id).inputs) stack.push_back(in.node);
  }
  Plan plan;
  for (int id = 0; id < graph_.num_nodes(); ++id) {
    if (needed[id]) plan.nodes.push_back(id);
  }
  for (size_t k = 0; k < fetches.size(); ++k) {
    const int node = fetches[k].node;
    const int position = static_cast<int>(
        std::lower_bound(plan.nodes.begin(), plan.nodes.end(), node) - plan.nodes.begin());
    plan.fetch_ready.emplace_back(fed[node] ? -1 : position, k);
  }
  std::sort(plan.fetch_ready.begin(), plan.fetch_ready.end());
  PlanKernels(fetches, fed, plan);
  return plans_.emplace(std::move(key), std::move(plan)).first->second;
}

void Executor::PlanKernels(std::span<const Output> fetches, const std::vector<char>& fed,
                           Plan& plan) const {
  plan.steps.assign(plan.nodes.size(), Step{});
  std::vector<int> position(static_cast<size_t>(graph_.num_nodes()), -1);
  for (size_t i = 0; i < plan.nodes.size(); ++i) position[plan.nodes[i]] = static_cast<int>(i);
  auto runs_kernel = [&](int id) {
    if (fed[id]) return false;
    const OpDef* def = FindOpDef(graph_.node(id).op);
    return def != nullptr && !def->is_source && !def->is_view;
  };
  const std::set<Output> fetched(fetches.begin(), fetches.end());
  std::map<Output, int> reads;
  for (int id : plan.nodes) {
    if (fed[id]) continue;
    for (const Output& in : graph_.node(id).inputs) ++reads[in];
  }

  // 1. Fusion: a producer whose only output is read once in this run, as
  // its consumer's input 0, and is not fetched.
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const Node& consumer = graph_.node(plan.nodes[i]);
    if (!runs_kernel(consumer.id) || consumer.inputs.empty()) continue;
    const Output in = consumer.inputs[0];
    const int p = position[in.node];
    if (p < 0 || !runs_kernel(in.node) || plan.steps[p].producer >= 0) continue;
    const Node& producer = graph_.node(in.node);
    if (producer.num_outputs != 1 || reads[in] != 1 || fetched.count(in) > 0) continue;
    const Device::FusedKernel* fused = device_.FindFusedKernel(producer.op, consumer.op);
    if (fused == nullptr) continue;
    plan.steps[p].fused_away = true;
    plan.steps[i].producer = producer.id;
    plan.steps[i].fused = fused;
  }

  // 2. Layouts: an output must be row-major when it is fetched, viewed, or
  // read by a kernel that takes row-major tensors only.
  std::set<Output> row_major(fetched);
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const int id = plan.nodes[i];
    const Step& step = plan.steps[i];
    if (fed[id] || step.fused_away) continue;
    const Node& node = graph_.node(id);
    const bool takes_layouts = step.fused != nullptr
                                   ? step.fused->takes_device_layouts
                                   : runs_kernel(id) && device_.TakesDeviceLayouts(node.op);
    if (takes_layouts) continue;
    for (const Output& in : node.inputs) row_major.insert(in);
    if (step.producer >= 0) {
      for (const Output& in : graph_.node(step.producer).inputs) row_major.insert(in);
    }
  }
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const int id = plan.nodes[i];
    if (!runs_kernel(id) || plan.steps[i].fused_away) continue;
    const int outputs = std::min(graph_.node(id).num_outputs, 32);
    for (int k = 0; k < outputs; ++k) {
      if (row_major.count(Output{id, k}) == 0) plan.steps[i].device_layout_outputs |= 1u << k;
    }
  }
}

absl::Status Executor::Run(std::span<const Feed> feeds, std::span<const Output> fetches,
                           std::vector<Tensor>* results, const RunContext& run,
                           FetchObserver* observer) {
  if (!graph_.status().ok()) return graph_.status();
  size_t n = static_cast<size_t>(graph_.num_nodes());
  if (values_.size() != n) {
    values_.resize(n);
    fed_.assign(n, 0);
    owned_.assign(n, 0);
  }
  for (const Output& o : fetches) {
    if (o.node < 0 || o.node >= graph_.num_nodes() || o.index >= graph_.node(o.node).num_outputs) {
      return absl::InvalidArgumentError(
          absl::StrCat("fetch ", o.node, ":", o.index, " is not in the graph"));
    }
  }
  std::fill(fed_.begin(), fed_.end(), 0);
  for (const Feed& f : feeds) {
    if (f.output.node < 0 || f.output.node >= graph_.num_nodes()) {
      return absl::InvalidArgumentError("feed for a node that is not in the graph");
    }
    const Node& node = graph_.node(f.output.node);
    if (node.op == "Placeholder") {
      Shape want = node.GetInts("shape");
      const Shape& got = f.value.shape();
      bool ok = want.size() == got.size();
      for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || want[i] == got[i];
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat("feed for '", node.name, "' has shape ",
                                                       ShapeString(got), ", expected ",
                                                       ShapeString(want)));
      }
    }
    if (!f.value.valid()) {
      return absl::InvalidArgumentError(absl::StrCat("feed for '", node.name, "' is empty"));
    }
    values_[f.output.node].resize(static_cast<size_t>(node.num_outputs));
    values_[f.output.node][f.output.index] = f.value;
    fed_[f.output.node] = 1;
    owned_[f.output.node] = 0;
  }
  const Plan& plan = GetPlan(feeds, fetches);
  if (observer == nullptr) {
    for (size_t i = 0; i < plan.nodes.size(); ++i) {
      const int id = plan.nodes[i];
      if (fed_[id]) continue;
      if (absl::Status s = RunNode(graph_.node(id), plan.steps[i], run); !s.ok()) return s;
    }
  } else {
    auto ready = plan.fetch_ready.begin();
    auto report_through = [&](int position) {
      for (; ready != plan.fetch_ready.end() && ready->first <= position; ++ready) {
        const Output& o = fetches[ready->second];
        observer->FetchReady(ready->second, values_[o.node][o.index]);
      }
    };
    report_through(-1);
    for (size_t i = 0; i < plan.nodes.size(); ++i) {
      const int id = plan.nodes[i];
      if (!fed_[id]) {
        if (absl::Status s = RunNode(graph_.node(id), plan.steps[i], run); !s.ok()) return s;
      }
      report_through(static_cast<int>(i));
    }
  }
  results->clear();
  for (const Output& o : fetches) results->push_back(values_[o.node][o.index]);
  return absl::OkStatus();
}

absl::Status Executor::RunNode(const Node& node, const Step& step, const RunContext& run) {
  if (step.fused_away) return absl::OkStatus();
  std::vector<Tensor>& outs = values_[node.id];
  outs.resize(static_cast<size_t>(node.num_outputs));
  if (node.op == "Placeholder") {
    return absl::InvalidArgumentError(absl::StrCat("placeholder '", node.name, "' was not fed"));
  }
  if (node.op == "Variable") {
    Tensor* value = variables_.Find(node.name);
    if (value == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("variable '", node.name, "' has no value (not initialised or restored)"));
    }
    Shape want = node.GetInts("shape");
    if (value->shape() != want) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", node.name, "' has shape ",
                                                     ShapeString(value->shape()),
                                                     ", the graph wants ", ShapeString(want)));
    }
    outs[0] = *value;
    return absl::OkStatus();
  }
  const OpDef* def = FindOpDef(node.op);
  input_scratch_.clear();
  shape_scratch_.clear();
  const Node* producer = step.producer >= 0 ? &graph_.node(step.producer) : nullptr;
  if (producer != nullptr) {
    // The producer's output is never materialised: its shape comes from its
    // own shape function, and the kernel reads the producer's inputs.
    for (const Output& in : producer->inputs) {
      const Tensor& t = values_[in.node][in.index];
      input_scratch_.push_back(&t);
      shape_scratch_.push_back(&t.shape());
    }
    absl::StatusOr<std::vector<Shape>> produced =
        FindOpDef(producer->op)->shape_fn(*producer, shape_scratch_);
    if (!produced.ok()) return produced.status();
    produced_shape_ = (*produced)[0];
    shape_scratch_.clear();
    shape_scratch_.push_back(&produced_shape_);
  }
  for (size_t i = producer != nullptr ? 1 : 0; i < node.inputs.size(); ++i) {
    const Output& in = node.inputs[i];
    const Tensor& t = values_[in.node][in.index];
    input_scratch_.push_back(&t);
    shape_scratch_.push_back(&t.shape());
  }
  absl::StatusOr<std::vector<Shape>> shapes = def->shape_fn(node, shape_scratch_);
  if (!shapes.ok()) return shapes.status();
  if (def->is_view) {
    absl::StatusOr<Tensor> view = input_scratch_[0]->Reshaped((*shapes)[0]);
    if (!view.ok()) return view.status();
    outs[0] = *std::move(view);
    owned_[node.id] = 0;
    return absl::OkStatus();
  }
  Kernel kernel = step.fused != nullptr ? step.fused->kernel : device_.FindKernel(node.op);
  if (kernel == nullptr) {
    return absl::UnimplementedError(absl::StrCat("no ", device_.name(), " kernel for op ", node.op,
                                                 " (node '", node.name, "')"));
  }
  if (!owned_[node.id]) {
    for (Tensor& t : outs) t = Tensor();
    owned_[node.id] = 1;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    const Shape& shape = (*shapes)[i];
    size_t bytes = static_cast<size_t>(NumElements(shape)) * sizeof(float);
    Tensor& out = outs[i];
    if (out.valid() && out.shape() == shape) continue;
    // Reuse the cached buffer when it is large enough (a smaller last batch
    // or an eval batch), else allocate.
    if (out.valid() && out.buffer()->size() >= bytes) {
      out = Tensor(shape, out.buffer());
    } else {
      out = device_.Allocate(shape);
    }
  }
  KernelContext ctx{node, input_scratch_, outs, device_, run, producer, step.device_layout_outputs};
  return kernel(ctx);
}

}  // namespace kubetrain::runtime::engine
