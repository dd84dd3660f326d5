#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kubetrain/v1/graph.pb.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/tensor.h"
#include "trainer-runtime/engine/variable_store.h"

namespace kubetrain::runtime::engine {

// A gradient for one named variable.
struct NamedGradient {
  std::string name;
  Tensor gradient;
};

struct OptimizerOptions {
  double learning_rate = 0.001;
  double momentum = 0.9;             // Momentum
  bool nesterov = false;             // Momentum
  double beta1 = 0.9;                // Adam
  double beta2 = 0.999;              // Adam
  double epsilon = 1e-7;             // Adam, Adagrad (Keras' default)
  double initial_accumulator = 0.1;  // Adagrad
};

// Applies gradients to variables: the half of a training step that is
// separate from computing gradients, so that a parameter server can apply
// gradients pushed by workers, and all-reduce replicas can apply averaged
// ones. The update kernels run on `device` (ApplyGradientDescent,
// ApplyMomentum, ApplyAdagrad, ApplyAdam), in place on the store's tensors.
//
// Slots (momentum, accumulators, Adam moments) are created on first use per
// variable and saved/restored with the checkpoint, so a resumed run continues
// exactly. Not thread-safe: serialise Apply calls (a parameter server holds a
// lock per shard).
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // name: "sgd" (alias "gradientdescent"), "momentum", "adagrad", "adam";
  // case-insensitive. InvalidArgument for another name or a learning rate
  // that is not positive and finite.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const std::string& name,
                                                           const OptimizerOptions& options,
                                                           Device& device);

  // One update with every gradient given (one step). NotFound when a
  // gradient names no variable; InvalidArgument on a shape mismatch.
  absl::Status Apply(VariableStore& variables, std::span<const NamedGradient> gradients);

  const std::string& type() const { return type_; }
  int64_t iterations() const { return iterations_; }
  double learning_rate() const { return options_.learning_rate; }
  void set_learning_rate(double lr) { options_.learning_rate = lr; }

  // The slots are copied to host memory through the optimizer's device;
  // an error is the device's.
  absl::Status SaveState(v1::OptimizerState* state) const;
  // Slots are copied to the optimizer's device. InvalidArgument when the
  // state is of another optimizer type or malformed.
  absl::Status RestoreState(const v1::OptimizerState& state);

 protected:
  Optimizer(std::string type, std::vector<std::string> slot_names, const OptimizerOptions& options,
            Device& device);
  // Attributes of the update kernel for the step about to be applied
  // (iterations_ is the number of steps already applied).
  virtual AttrMap KernelAttrs() const = 0;
  virtual std::string KernelOp() const = 0;
  virtual float SlotInitialValue() const { return 0.0f; }

  OptimizerOptions options_;

 private:
  std::string type_;
  std::vector<std::string> slot_names_;
  Device& device_;
  int64_t iterations_ = 0;
  // "<variable>/<slot>" -> tensor.
  std::map<std::string, Tensor, std::less<>> slots_;
};

}  // namespace kubetrain::runtime::engine
