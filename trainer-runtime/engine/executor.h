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

// Runs the part of a graph that the fetches need, given feeds, like a
// TensorFlow session. Variable nodes read the VariableStore (by reference: no
// copy); Placeholders must be fed.
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

  absl::Status Run(std::span<const Feed> feeds, std::span<const Output> fetches,
                   std::vector<Tensor>* results, const RunContext& run = {});

  Device& device() { return device_; }

 private:
  struct Plan {
    std::vector<int> nodes;  // in topological (id) order
  };
  const Plan& GetPlan(std::span<const Feed> feeds, std::span<const Output> fetches);
  absl::Status RunNode(const Node& node, const RunContext& run);

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
};

}  // namespace kubetrain::runtime::engine
