#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kubetrain/v1/graph.pb.h"
#include "trainer-runtime/engine/graph.h"
#include "trainer-runtime/engine/tensor.h"

namespace kubetrain::runtime::engine {

class Device;

// The values of a graph's variables, by name: what the executor reads for
// Variable nodes, what optimizers update in place, what checkpoints hold.
// Tensors live on the device that owns the store's values. Not thread-safe.
class VariableStore {
 public:
  // Adds a variable; AlreadyExists if the name is taken.
  absl::Status Create(const std::string& name, Tensor value);
  // Null when absent. The pointer stays valid until the variable is removed.
  Tensor* Find(absl::string_view name);
  const Tensor* Find(absl::string_view name) const;
  // Copies `value` into the existing storage (shapes must match), so
  // references held by executors stay valid; creates the variable if absent.
  absl::Status Assign(const std::string& name, const Tensor& value);
  bool empty() const { return values_.empty(); }
  size_t size() const { return values_.size(); }
  // In name order (deterministic iteration for checkpoints and reductions).
  const std::map<std::string, Tensor, std::less<>>& values() const { return values_; }

 private:
  std::map<std::string, Tensor, std::less<>> values_;
};

// Creates every Variable node's value that `store` lacks, with the node's
// `initializer` attr ("glorot_uniform", "he_normal", "zeros"), from a random
// stream that depends only on `seed` and the variable's name: the same seed
// gives the same initial weights in every process.
absl::Status InitializeVariables(const Graph& graph, uint64_t seed, VariableStore& store);

// Host tensor <-> TensorProto (little-endian float32 bytes).
void TensorToProto(const Tensor& tensor, v1::TensorProto* proto);
// InvalidArgument when the byte count does not match the shape.
absl::StatusOr<Tensor> TensorFromProto(const v1::TensorProto& proto);

}  // namespace kubetrain::runtime::engine
