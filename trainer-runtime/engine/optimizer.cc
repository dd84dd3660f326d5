#include "trainer-runtime/engine/optimizer.h"

#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::runtime::engine {

namespace {

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerOptions& o, Device& d) : Optimizer("sgd", {}, o, d) {}
  AttrMap KernelAttrs() const override { return {{"learning_rate", options_.learning_rate}}; }
  std::string KernelOp() const override { return "ApplyGradientDescent"; }
};

class MomentumOptimizer final : public Optimizer {
 public:
  MomentumOptimizer(const OptimizerOptions& o, Device& d)
      : Optimizer("momentum", {"momentum"}, o, d) {}
  AttrMap KernelAttrs() const override {
    return {{"learning_rate", options_.learning_rate},
            {"momentum", options_.momentum},
            {"nesterov", options_.nesterov}};
  }
  std::string KernelOp() const override { return "ApplyMomentum"; }
};

class AdagradOptimizer final : public Optimizer {
 public:
  AdagradOptimizer(const OptimizerOptions& o, Device& d)
      : Optimizer("adagrad", {"accumulator"}, o, d) {}
  AttrMap KernelAttrs() const override {
    return {{"learning_rate", options_.learning_rate}, {"epsilon", options_.epsilon}};
  }
  std::string KernelOp() const override { return "ApplyAdagrad"; }
  float SlotInitialValue() const override {
    return static_cast<float>(options_.initial_accumulator);
  }
};

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerOptions& o, Device& d) : Optimizer("adam", {"m", "v"}, o, d) {}
  AttrMap KernelAttrs() const override {
    // Kingma & Ba's bias correction folded into the step size (as
    // TensorFlow's Adam): lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t), and
    // epsilon scaled to match Keras' epsilon on the corrected moments.
    double t = static_cast<double>(iterations() + 1);
    double c1 = 1.0 - std::pow(options_.beta1, t);
    double c2 = std::sqrt(1.0 - std::pow(options_.beta2, t));
    return {{"lr_t", options_.learning_rate * c2 / c1},
            {"beta1", options_.beta1},
            {"beta2", options_.beta2},
            {"epsilon_hat", options_.epsilon * c2}};
  }
  std::string KernelOp() const override { return "ApplyAdam"; }
};

}  // namespace

Optimizer::Optimizer(std::string type, std::vector<std::string> slot_names,
                     const OptimizerOptions& options, Device& device)
    : options_(options),
      type_(std::move(type)),
      slot_names_(std::move(slot_names)),
      device_(device) {}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const std::string& name,
                                                             const OptimizerOptions& options,
                                                             Device& device) {
  if (!(options.learning_rate > 0) || !std::isfinite(options.learning_rate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning rate must be positive and finite, got ", options.learning_rate));
  }
  std::string lower = absl::AsciiStrToLower(name);
  if (lower == "sgd" || lower == "gradientdescent")
    return std::make_unique<SgdOptimizer>(options, device);
  if (lower == "momentum") return std::make_unique<MomentumOptimizer>(options, device);
  if (lower == "adagrad") return std::make_unique<AdagradOptimizer>(options, device);
  if (lower == "adam") return std::make_unique<AdamOptimizer>(options, device);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", name, "' (want sgd, momentum, adagrad or adam)"));
}

absl::Status Optimizer::Apply(VariableStore& variables, std::span<const NamedGradient> gradients) {
  Kernel kernel = device_.FindKernel(KernelOp());
  if (kernel == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("no ", device_.name(), " kernel for ", KernelOp()));
  }
  Node node;
  node.name = type_;
  node.op = KernelOp();
  node.attrs = KernelAttrs();
  RunContext run;
  std::vector<Tensor> outputs;
  for (const NamedGradient& g : gradients) {
    Tensor* var = variables.Find(g.name);
    if (var == nullptr) {
      return absl::NotFoundError(absl::StrCat("gradient for unknown variable '", g.name, "'"));
    }
    if (var->shape() != g.gradient.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient for '", g.name, "' has shape ",
                                                     ShapeString(g.gradient.shape()),
                                                     ", variable has ", ShapeString(var->shape())));
    }
    outputs.clear();
    outputs.push_back(*var);
    for (const std::string& slot : slot_names_) {
      std::string key = absl::StrCat(g.name, "/", slot);
      auto it = slots_.find(key);
      if (it == slots_.end()) {
        absl::StatusOr<Tensor> init =
            device_.FromHost(Tensor::Filled(var->shape(), SlotInitialValue()));
        if (!init.ok()) return init.status();
        it = slots_.emplace(key, *std::move(init)).first;
      }
      outputs.push_back(it->second);
    }
    const Tensor* inputs[] = {&g.gradient};
    KernelContext ctx{node, inputs, outputs, device_, run};
    if (absl::Status s = kernel(ctx); !s.ok()) return s;
  }
  ++iterations_;
  return absl::OkStatus();
}

absl::Status Optimizer::SaveState(v1::OptimizerState* state) const {
  state->Clear();
  state->set_type(type_);
  state->set_iterations(iterations_);
  for (const auto& [name, tensor] : slots_) {
    v1::NamedTensor* t = state->add_slots();
    t->set_name(name);
    if (absl::Status s = TensorToProto(tensor, device_, t->mutable_value()); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("optimizer slot '", name, "': ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::RestoreState(const v1::OptimizerState& state) {
  if (state.type() != type_) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint holds ", state.type(), " optimizer state, this run uses ", type_));
  }
  std::map<std::string, Tensor, std::less<>> slots;
  for (const v1::NamedTensor& t : state.slots()) {
    absl::StatusOr<Tensor> value = TensorFromProto(t.value());
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer slot '", t.name(), "': ", value.status().message()));
    }
    absl::StatusOr<Tensor> on_device = device_.FromHost(*value);
    if (!on_device.ok()) return on_device.status();
    slots[t.name()] = *std::move(on_device);
  }
  slots_ = std::move(slots);
  iterations_ = state.iterations();
  return absl::OkStatus();
}

}  // namespace kubetrain::runtime::engine
