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
//
// The values live in the memory of the store's device (host memory when the
// store has none or it is the CPU device); the executor and the optimizer
// must run on that device. Values given in host memory (Assign, restored
// checkpoints, InitializeVariables) are copied through the device. Not
// thread-safe.
class VariableStore {
 public:
  // A store of host tensors.
  VariableStore() = default;
  // A store of tensors in `device`'s memory; the device must outlive it.
  explicit VariableStore(Device* device) : device_(device) {}

  // Null for a store of host tensors.
  Device* device() const { return device_; }

  // Adds a variable whose value already is in the store's memory (the
  // tensor is shared, not copied); AlreadyExists if the name is taken.
  absl::Status Create(const std::string& name, Tensor value);
  // Null when absent. The pointer stays valid until the variable is removed.
  Tensor* Find(absl::string_view name);
  const Tensor* Find(absl::string_view name) const;
  // Copies `host_value` (in host memory) into the existing storage through
  // the store's device (shapes must match), so references held by executors
  // stay valid; creates the variable if absent (a copy: the caller keeps
  // `host_value`). InvalidArgument on a shape mismatch or a value that is
  // not in host memory.
  absl::Status Assign(const std::string& name, const Tensor& host_value);
  bool empty() const { return values_.empty(); }
  size_t size() const { return values_.size(); }
  // In name order (deterministic iteration for checkpoints and reductions).
  const std::map<std::string, Tensor, std::less<>>& values() const { return values_; }

 private:
  Device* device_ = nullptr;
  std::map<std::string, Tensor, std::less<>> values_;
};

// Creates every Variable node's value that `store` lacks, with the node's
// `initializer` attr ("glorot_uniform", "he_normal", "zeros"), from a random
// stream that depends only on `seed` and the variable's name: the same seed
// gives the same initial weights in every process, on every device. Values
// are drawn in host memory and copied through the store's device.
absl::Status InitializeVariables(const Graph& graph, uint64_t seed, VariableStore& store);

// Host tensor <-> TensorProto (little-endian float32 bytes). `tensor` must
// be in host memory (use the overload with a device otherwise).
void TensorToProto(const Tensor& tensor, v1::TensorProto* proto);
// Any tensor -> TensorProto: a host tensor directly, a device tensor copied
// through `device` straight into the proto's bytes.
absl::Status TensorToProto(const Tensor& tensor, Device& device, v1::TensorProto* proto);
// InvalidArgument when the byte count does not match the shape.
absl::StatusOr<Tensor> TensorFromProto(const v1::TensorProto& proto);

}  // namespace kubetrain::runtime::engine
