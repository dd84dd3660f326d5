#pragma once

#include <map>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/graph.h"
#include "trainer-runtime/engine/tensor.h"
#include "trainer-runtime/engine/variable_store.h"

namespace kubetrain::runtime::engine {

struct Feed {
  Output output;  // a Placeholder's output
  Tensor value;   // in the device's memory (host memory for the CPU device)
};

// Told during a Run, as soon as each fetch's value is final, so a caller can
// start on it while the rest of the graph runs (e.g. all-reduce the gradients
// of the last layers while the backward pass goes on through the first).
//
// FetchReady is called on the thread calling Run, in execution order, once
// per fetch (a fed fetch before any node runs), right after the node that
// produces it. `fetch` indexes Run's `fetches`; `value` is the tensor Run
// will return for it. Within the run nothing writes that tensor's buffer
// again: every node writes only its own cached outputs, once per run, and
// view ops alias without writing. Its lifetime is that of Run's results
// (until the next Run). On a device with asynchronous kernels the value is
// final in the device's order: read it through the Device (ToHost
// synchronises). FetchReady must not call into the executor. A Run that
// fails may have reported some fetches; its error stands.
class FetchObserver {
 public:
  virtual ~FetchObserver() = default;
  virtual void FetchReady(size_t fetch, const Tensor& value) = 0;
};

// Runs the part of a graph that the fetches need, given feeds, like a
// TensorFlow session. Variable nodes read the VariableStore (by reference: no
// copy); Placeholders must be fed.
//
// Kernels: the device's fused kernel runs a producer and its only reader as
// one (Device::FindFusedKernel), and an output read only by kernels that
// take the device's own layouts may stay in one (KernelContext); fetches,
// the observer and views always see row-major tensors.
//
// Memory: each node's outputs are cached and reused by later runs while they
// fit, so a steady training loop allocates no tensor memory per step.
// Consequently the tensors Run returns alias that cache: they are valid until
// the next Run on this executor (Clone() what must outlive it).
//
// Errors: InvalidArgument for a missing or mis-shaped feed, a shape mismatch
// found by an op's shape function, or bad data found by a kernel (each naming
// the node); FailedPrecondition for a variable absent from the store;
// Unimplemented for an op without a kernel on the device.
//
// Not thread-safe: one Run at a time. The graph, device and store must
// outlive the executor; the graph must not change while it exists.
class Executor {
 public:
  Executor(const Graph& graph, Device& device, VariableStore& variables);

  // `observer` (optional, not owned) is told of each fetch as soon as it is
  // computed; without one Run costs the same as ever.
  absl::Status Run(std::span<const Feed> feeds, std::span<const Output> fetches,
                   std::vector<Tensor>* results, const RunContext& run = {},
                   FetchObserver* observer = nullptr);

  Device& device() { return device_; }

 private:
  // How one node of a plan runs.
  struct Step {
    // Runs inside its only reader's fused kernel (nothing to do here).
    bool fused_away = false;
    // The node whose kernel this node's fused kernel also runs, or -1.
    int producer = -1;
    const Device::FusedKernel* fused = nullptr;
    // KernelContext::device_layout_outputs.
    uint32_t device_layout_outputs = 0;
  };
  struct Plan {
    std::vector<int> nodes;   // in topological (id) order
    std::vector<Step> steps;  // per position in `nodes`
    // (position in `nodes` after which the fetch is final, fetch index),
    // sorted; position -1 for a fed fetch. Read only with an observer.
    std::vector<std::pair<int, size_t>> fetch_ready;
  };
  const Plan& GetPlan(std::span<const Feed> feeds, std::span<const Output> fetches);
  // Fuses producer/consumer pairs the device has a kernel for, and decides
  // which outputs may stay in a device layout.
  void PlanKernels(std::span<const Output> fetches, const std::vector<char>& fed, Plan& plan) const;
  absl::Status RunNode(const Node& node, const Step& step, const RunContext& run);

  const Graph& graph_;
  Device& device_;
  VariableStore& variables_;
  std::map<std::vector<int>, Plan> plans_;
  std::vector<std::vector<Tensor>> values_;  // per node, per output
  std::vector<char> fed_;                    // per node, for the current run
  // Per node: values_ holds buffers this executor allocated (not a caller's
  // feed), so kernels may write into them.
  std::vector<char> owned_;
  std::vector<const Tensor*> input_scratch_;
  std::vector<const Shape*> shape_scratch_;
  Shape produced_shape_;  // a fused producer's output shape
};

}  // namespace kubetrain::runtime::engine
