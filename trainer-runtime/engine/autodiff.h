#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer-runtime/engine/graph.h"

namespace kubetrain::runtime::engine {

// Reverse-mode automatic differentiation: adds to `graph` the nodes that
// compute d(y)/d(x) for each x in `xs`, and returns those outputs in order.
// `y` must be a scalar when the graph runs (the loss). Only nodes on a path
// from some x to y get gradient nodes, so e.g. no gradient is computed for
// the input batch. An x that y does not depend on gets zeros.
//
// Errors: InvalidArgument when a node on such a path has no gradient
// function (e.g. Accuracy), or any error recorded in the graph.
absl::StatusOr<std::vector<Output>> AddGradients(Graph& graph, Output y,
                                                 std::span<const Output> xs);

}  // namespace kubetrain::runtime::engine
