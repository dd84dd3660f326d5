#include "trainer-runtime/engine/graph.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/engine/op_registry.h"

namespace kubetrain::runtime::engine {

namespace {

template <typename T>
const T* GetAttr(const AttrMap& attrs, absl::string_view key) {
  auto it = attrs.find(key);
  if (it == attrs.end()) return nullptr;
  return std::get_if<T>(&it->second);
}

}  // namespace

int64_t Node::GetInt(absl::string_view key, int64_t default_value) const {
  const int64_t* v = GetAttr<int64_t>(attrs, key);
  return v ? *v : default_value;
}
double Node::GetFloat(absl::string_view key, double default_value) const {
  const double* v = GetAttr<double>(attrs, key);
  return v ? *v : default_value;
}
std::string Node::GetString(absl::string_view key, std::string default_value) const {
  const std::string* v = GetAttr<std::string>(attrs, key);
  return v ? *v : default_value;
}
bool Node::GetBool(absl::string_view key, bool default_value) const {
  const bool* v = GetAttr<bool>(attrs, key);
  return v ? *v : default_value;
}
IntList Node::GetInts(absl::string_view key, IntList default_value) const {
  const IntList* v = GetAttr<IntList>(attrs, key);
  return v ? *v : default_value;
}

void Graph::RecordError(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

int Graph::AddNode(absl::string_view op, std::vector<Output> inputs, AttrMap attrs,
                   absl::string_view name) {
  if (!status_.ok()) return -1;
  const OpDef* def = FindOpDef(op);
  if (def == nullptr) {
    RecordError(absl::InvalidArgumentError(absl::StrCat("unknown op '", op, "'")));
    return -1;
  }
  int id = num_nodes();
  std::string node_name = name.empty() ? absl::StrCat(op, "_", id) : std::string(name);
  if (static_cast<int>(inputs.size()) != def->num_inputs) {
    RecordError(
        absl::InvalidArgumentError(absl::StrCat("node '", node_name, "': op ", op, " takes ",
                                                def->num_inputs, " inputs, got ", inputs.size())));
    return -1;
  }
  for (const Output& in : inputs) {
    if (in.node < 0 || in.node >= id || in.index < 0 || in.index >= nodes_[in.node].num_outputs) {
      RecordError(absl::InvalidArgumentError(absl::StrCat("node '", node_name, "': input ", in.node,
                                                          ":", in.index, " does not exist")));
      return -1;
    }
  }
  if (by_name_.count(node_name) > 0) {
    RecordError(absl::AlreadyExistsError(absl::StrCat("node name '", node_name, "' is taken")));
    return -1;
  }
  Node node;
  node.id = id;
  node.name = node_name;
  node.op = std::string(op);
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  node.num_outputs = def->num_outputs;
  by_name_.emplace(node.name, id);
  nodes_.push_back(std::move(node));
  return id;
}

std::optional<int> Graph::FindNode(absl::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::string Graph::OutputName(Output output) const {
  return absl::StrCat(nodes_[output.node].name, ":", output.index);
}

absl::StatusOr<Output> Graph::ParseOutputName(absl::string_view text) const {
  absl::string_view name = text;
  int index = 0;
  size_t colon = text.rfind(':');
  if (colon != absl::string_view::npos) {
    name = text.substr(0, colon);
    absl::string_view digits = text.substr(colon + 1);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) {
      return absl::InvalidArgumentError(absl::StrCat("bad output name '", text, "'"));
    }
  }
  std::optional<int> id = FindNode(name);
  if (!id) return absl::NotFoundError(absl::StrCat("no node named '", name, "'"));
  if (index < 0 || index >= nodes_[*id].num_outputs) {
    return absl::InvalidArgumentError(absl::StrCat("node '", name, "' has no output ", index));
  }
  return Output{*id, index};
}

v1::GraphDef Graph::ToProto(int num_nodes) const {
  v1::GraphDef def;
  def.set_version(1);
  size_t count =
      num_nodes < 0 ? nodes_.size() : std::min(nodes_.size(), static_cast<size_t>(num_nodes));
  for (size_t i = 0; i < count; ++i) {
    const Node& node = nodes_[i];
    v1::NodeDef* n = def.add_nodes();
    n->set_name(node.name);
    n->set_op(node.op);
    for (const Output& in : node.inputs) n->add_inputs(OutputName(in));
    for (const auto& [key, value] : node.attrs) {
      v1::AttrValue& a = (*n->mutable_attrs())[key];
      if (const auto* i = std::get_if<int64_t>(&value)) a.set_i(*i);
      if (const auto* f = std::get_if<double>(&value)) a.set_f(*f);
      if (const auto* s = std::get_if<std::string>(&value)) a.set_s(*s);
      if (const auto* b = std::get_if<bool>(&value)) a.set_b(*b);
      if (const auto* l = std::get_if<IntList>(&value)) {
        a.mutable_ints();
        for (int64_t x : *l) a.mutable_ints()->add_values(x);
      }
    }
  }
  return def;
}

absl::StatusOr<Graph> Graph::FromProto(const v1::GraphDef& def) {
  Graph g;
  for (int i = 0; i < def.nodes_size(); ++i) {
    const v1::NodeDef& n = def.nodes(i);
    std::vector<Output> inputs;
    for (const std::string& in : n.inputs()) {
      absl::StatusOr<Output> out = g.ParseOutputName(in);
      if (!out.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph node ", i, " ('", n.name(), "'): input '", in, "': ", out.status().message()));
      }
      inputs.push_back(*out);
    }
    AttrMap attrs;
    for (const auto& [key, a] : n.attrs()) {
      switch (a.value_case()) {
        case v1::AttrValue::kI:
          attrs[key] = a.i();
          break;
        case v1::AttrValue::kF:
          attrs[key] = a.f();
          break;
        case v1::AttrValue::kS:
          attrs[key] = a.s();
          break;
        case v1::AttrValue::kB:
          attrs[key] = a.b();
          break;
        case v1::AttrValue::kInts:
          attrs[key] = IntList(a.ints().values().begin(), a.ints().values().end());
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat("graph node ", i, " ('", n.name(), "'): attr '", key, "' has no value"));
      }
    }
    if (n.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("graph node ", i, " has no name"));
    }
    if (g.AddNode(n.op(), std::move(inputs), std::move(attrs), n.name()) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph node ", i, " ('", n.name(), "'): ", g.status().message()));
    }
  }
  return g;
}

}  // namespace kubetrain::runtime::engine
