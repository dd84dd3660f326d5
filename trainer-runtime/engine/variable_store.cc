#include "trainer-runtime/engine/variable_store.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/engine/device.h"

namespace kubetrain::runtime::engine {

absl::Status VariableStore::Create(const std::string& name, Tensor value) {
  if (!values_.emplace(name, std::move(value)).second) {
    return absl::AlreadyExistsError(absl::StrCat("variable '", name, "' already exists"));
  }
  return absl::OkStatus();
}

Tensor* VariableStore::Find(absl::string_view name) {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

const Tensor* VariableStore::Find(absl::string_view name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

absl::Status VariableStore::Assign(const std::string& name, const Tensor& host_value) {
  if (host_value.device_type() != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("value for variable '", name, "' is not in host memory"));
  }
  Tensor* existing = Find(name);
  if (existing == nullptr) {
    if (device_ == nullptr || device_->type() == DeviceType::kCpu) {
      return Create(name, host_value.Clone());
    }
    Tensor value = device_->Allocate(host_value.shape());
    if (absl::Status s = device_->CopyFromHost(host_value, value); !s.ok()) return s;
    return Create(name, std::move(value));
  }
  if (existing->shape() != host_value.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name, "' has shape ",
                                                   ShapeString(existing->shape()), ", value has ",
                                                   ShapeString(host_value.shape())));
  }
  if (device_ != nullptr) return device_->CopyFromHost(host_value, *existing);
  if (existing->device_type() != DeviceType::kCpu) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variable '", name, "' is in device memory and the store has no device to copy through"));
  }
  if (host_value.num_elements() > 0) {
    std::memcpy(existing->data(), host_value.data(),
                sizeof(float) * static_cast<size_t>(host_value.num_elements()));
  }
  return absl::OkStatus();
}

absl::Status InitializeVariables(const Graph& graph, uint64_t seed, VariableStore& store) {
  for (const Node& node : graph.nodes()) {
    if (node.op != "Variable" || store.Find(node.name) != nullptr) continue;
    Shape shape = node.GetInts("shape");
    for (int64_t d : shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable '", node.name, "' has unknown shape ", ShapeString(shape)));
      }
    }
    std::string init = node.GetString("initializer", "glorot_uniform");
    Tensor value = Tensor::Zeros(shape);
    // Fans as Keras computes them: dense [in, out]; conv [kh, kw, in, out].
    int64_t receptive = 1;
    for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= shape[i];
    double fan_in = shape.size() >= 2 ? static_cast<double>(shape[shape.size() - 2] * receptive)
                                      : static_cast<double>(shape.empty() ? 1 : shape[0]);
    double fan_out = shape.size() >= 2 ? static_cast<double>(shape.back() * receptive) : fan_in;
    std::mt19937_64 rng(seed ^ (std::hash<std::string>()(node.name) * 0x9E3779B97F4A7C15ull));
    float* p = value.data();
    if (init == "glorot_uniform") {
      double limit = std::sqrt(6.0 / std::max(fan_in + fan_out, 1.0));
      std::uniform_real_distribution<double> dist(-limit, limit);
      for (int64_t i = 0; i < value.num_elements(); ++i) p[i] = static_cast<float>(dist(rng));
    } else if (init == "he_normal") {
      std::normal_distribution<double> dist(0.0, std::sqrt(2.0 / std::max(fan_in, 1.0)));
      for (int64_t i = 0; i < value.num_elements(); ++i) p[i] = static_cast<float>(dist(rng));
    } else if (init != "zeros") {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", node.name, "': unknown initializer '", init, "'"));
    }
    if (store.device() != nullptr) {
      absl::StatusOr<Tensor> on_device = store.device()->FromHost(value);
      if (!on_device.ok()) return on_device.status();
      value = *std::move(on_device);
    }
    if (absl::Status s = store.Create(node.name, std::move(value)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void TensorToProto(const Tensor& tensor, v1::TensorProto* proto) {
  proto->clear_shape();
  for (int64_t d : tensor.shape()) proto->add_shape(d);
  proto->set_data(reinterpret_cast<const char*>(tensor.data()),
                  sizeof(float) * static_cast<size_t>(tensor.num_elements()));
}

absl::Status TensorToProto(const Tensor& tensor, Device& device, v1::TensorProto* proto) {
  if (tensor.device_type() == DeviceType::kCpu) {
    TensorToProto(tensor, proto);
    return absl::OkStatus();
  }
  proto->clear_shape();
  for (int64_t d : tensor.shape()) proto->add_shape(d);
  std::string* bytes = proto->mutable_data();
  bytes->resize(sizeof(float) * static_cast<size_t>(tensor.num_elements()));
  // The copy lands in the proto's own bytes: no intermediate host tensor.
  Tensor host = Tensor::WrapHost(tensor.shape(), reinterpret_cast<float*>(bytes->data()), nullptr);
  return device.CopyToHost(tensor, host);
}

absl::StatusOr<Tensor> TensorFromProto(const v1::TensorProto& proto) {
  Shape shape(proto.shape().begin(), proto.shape().end());
  for (int64_t d : shape) {
    if (d < 0 || d > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor has a bad dimension ", d));
    }
  }
  int64_t n = NumElements(shape);
  if (static_cast<int64_t>(proto.data().size()) != n * static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of shape ", ShapeString(shape),
                                                   " needs ", n * 4, " bytes, has ",
                                                   proto.data().size()));
  }
  Tensor t = Tensor::Host(shape);
  if (n > 0) std::memcpy(t.data(), proto.data().data(), proto.data().size());
  return t;
}

}  // namespace kubetrain::runtime::engine
