#include "trainer-runtime/engine/model_yaml.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace kubetrain::runtime::engine {

namespace {

int Line(const YAML::Node& node) { return node.Mark().line + 1; }

absl::Status Error(absl::string_view file, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", line, ": ", what));
}

absl::StatusOr<int64_t> GetInt(const YAML::Node& node, absl::string_view file,
                               absl::string_view key) {
  try {
    return node.as<int64_t>();
  } catch (const YAML::Exception&) {
    return Error(file, Line(node), absl::StrCat("'", key, "' must be an integer"));
  }
}

absl::StatusOr<double> GetDouble(const YAML::Node& node, absl::string_view file,
                                 absl::string_view key) {
  try {
    return node.as<double>();
  } catch (const YAML::Exception&) {
    return Error(file, Line(node), absl::StrCat("'", key, "' must be a number"));
  }
}

absl::StatusOr<std::string> GetString(const YAML::Node& node, absl::string_view file,
                                      absl::string_view key) {
  if (!node.IsScalar())
    return Error(file, Line(node), absl::StrCat("'", key, "' must be a string"));
  return node.Scalar();
}

absl::StatusOr<LayerSpec> ParseLayer(const YAML::Node& node, absl::string_view file) {
  LayerSpec layer;
  layer.line = Line(node);
  if (node.IsScalar()) {
    if (node.Scalar() != "flatten") {
      return Error(
          file, layer.line,
          absl::StrCat("'", node.Scalar(), "' is not a layer (only flatten takes no settings)"));
    }
    layer.kind = LayerSpec::Kind::kFlatten;
    return layer;
  }
  if (!node.IsMap())
    return Error(file, layer.line, "a layer must be a mapping such as {dense: 128}");
  static const std::set<std::string> kKinds = {"dense", "conv2d", "maxpool", "flatten", "dropout"};
  std::string kind;
  for (const auto& kv : node) {
    std::string key = kv.first.Scalar();
    if (kKinds.count(key) > 0) {
      if (!kind.empty()) {
        return Error(file, Line(kv.first),
                     absl::StrCat("one layer names both ", kind, " and ", key));
      }
      kind = key;
    }
  }
  if (kind.empty()) {
    return Error(file, layer.line, "a layer needs one of dense, conv2d, maxpool, flatten, dropout");
  }
  std::set<std::string> allowed = {kind};
  bool stride_given = false, padding_given = false;
  if (kind == "dense") allowed.insert("activation");
  if (kind == "conv2d") allowed.insert({"activation", "kernel_size", "strides", "padding"});
  if (kind == "maxpool") allowed.insert({"strides", "padding"});
  for (const auto& kv : node) {
    std::string key = kv.first.Scalar();
    const YAML::Node& value = kv.second;
    if (allowed.count(key) == 0) {
      return Error(file, Line(kv.first),
                   absl::StrCat("unknown key '", key, "' in a ", kind, " layer"));
    }
    if (key == "dense" || key == "conv2d" || key == "maxpool") {
      absl::StatusOr<int64_t> v = GetInt(value, file, key);
      if (!v.ok()) return v.status();
      if (*v <= 0) return Error(file, Line(value), absl::StrCat("'", key, "' must be positive"));
      if (key == "maxpool") {
        layer.pool_size = *v;
      } else {
        layer.units = *v;
      }
    } else if (key == "dropout") {
      absl::StatusOr<double> v = GetDouble(value, file, key);
      if (!v.ok()) return v.status();
      if (!(*v >= 0 && *v < 1)) return Error(file, Line(value), "dropout rate must be in [0, 1)");
      layer.rate = *v;
    } else if (key == "activation") {
      absl::StatusOr<std::string> v = GetString(value, file, key);
      if (!v.ok()) return v.status();
      std::string a = absl::AsciiStrToLower(*v);
      if (a != "relu" && a != "tanh" && a != "sigmoid" && a != "linear" && a != "softmax") {
        return Error(file, Line(value),
                     absl::StrCat("unknown activation '", *v,
                                  "' (want relu, tanh, sigmoid, linear or softmax)"));
      }
      layer.activation = a;
    } else if (key == "kernel_size" || key == "strides") {
      absl::StatusOr<int64_t> v = GetInt(value, file, key);
      if (!v.ok()) return v.status();
      if (*v <= 0) return Error(file, Line(value), absl::StrCat("'", key, "' must be positive"));
      if (key == "kernel_size") {
        layer.kernel_size = *v;
      } else {
        layer.stride = *v;
        stride_given = true;
      }
    } else if (key == "padding") {
      absl::StatusOr<std::string> v = GetString(value, file, key);
      if (!v.ok()) return v.status();
      std::string p = absl::AsciiStrToUpper(*v);
      if (p != "SAME" && p != "VALID") {
        return Error(file, Line(value),
                     absl::StrCat("padding must be same or valid, got '", *v, "'"));
      }
      layer.padding = p;
      padding_given = true;
    }
  }
  if (kind == "dense") layer.kind = LayerSpec::Kind::kDense;
  if (kind == "conv2d") layer.kind = LayerSpec::Kind::kConv2D;
  if (kind == "flatten") layer.kind = LayerSpec::Kind::kFlatten;
  if (kind == "dropout") layer.kind = LayerSpec::Kind::kDropout;
  if (kind == "maxpool") {
    layer.kind = LayerSpec::Kind::kMaxPool;
    if (!stride_given) layer.stride = layer.pool_size;
    if (!padding_given) layer.padding = "VALID";
  }
  return layer;
}

}  // namespace

absl::StatusOr<ModelSpec> ParseModelYaml(absl::string_view text, absl::string_view file_name) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Error(file_name, e.mark.line + 1, e.msg);
  }
  if (!root.IsMap()) return Error(file_name, 1, "a model file is a mapping with a 'layers' list");
  ModelSpec spec;
  spec.name = std::string(file_name);
  for (const auto& kv : root) {
    if (kv.first.Scalar() != "layers") {
      return Error(file_name, Line(kv.first),
                   absl::StrCat("unknown key '", kv.first.Scalar(), "' (want layers)"));
    }
  }
  YAML::Node layers = root["layers"];
  if (!layers || !layers.IsSequence() || layers.size() == 0) {
    return Error(file_name, layers ? Line(layers) : 1, "'layers' must be a non-empty list");
  }
  for (const YAML::Node& node : layers) {
    absl::StatusOr<LayerSpec> layer = ParseLayer(node, file_name);
    if (!layer.ok()) return layer.status();
    spec.layers.push_back(*layer);
  }
  return spec;
}

}  // namespace kubetrain::runtime::engine
