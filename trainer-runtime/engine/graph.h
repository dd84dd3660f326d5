#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kubetrain/v1/graph.pb.h"

namespace kubetrain::runtime::engine {

// One output of one node: the edges of the dataflow graph.
struct Output {
  int node = -1;
  int index = 0;
  bool valid() const { return node >= 0; }
  friend bool operator==(const Output&, const Output&) = default;
  friend auto operator<=>(const Output&, const Output&) = default;
};

using IntList = std::vector<int64_t>;
using AttrValue = std::variant<int64_t, double, std::string, bool, IntList>;
using AttrMap = std::map<std::string, AttrValue, std::less<>>;

// A node: an op applied to earlier nodes' outputs, with attributes.
struct Node {
  int id = -1;
  std::string name;
  std::string op;
  std::vector<Output> inputs;
  AttrMap attrs;
  int num_outputs = 1;

  // Typed attribute access with a default for absent (or mistyped) attrs.
  int64_t GetInt(absl::string_view key, int64_t default_value = 0) const;
  double GetFloat(absl::string_view key, double default_value = 0) const;
  std::string GetString(absl::string_view key, std::string default_value = "") const;
  bool GetBool(absl::string_view key, bool default_value = false) const;
  IntList GetInts(absl::string_view key, IntList default_value = {}) const;
};

// An append-only dataflow graph. Nodes are numbered in insertion order and a
// node's inputs always come from earlier nodes, so id order is a topological
// order (autodiff and the executor rely on it).
//
// Building mirrors TensorFlow's Scope: the op builders in ops.h return an
// Output even when something is wrong; the first error is kept in status()
// and later additions are ignored. Check status() once after building.
// Not thread-safe; an immutable graph may be read from many threads.
class Graph {
 public:
  Graph() = default;

  // Adds a node of a registered op. `name` must be unique if given; an empty
  // name becomes "<op>_<id>". Returns the new node's id, or -1 (and records
  // the error) when the op is unknown, the input count is wrong, an input
  // does not exist or the name is taken.
  int AddNode(absl::string_view op, std::vector<Output> inputs, AttrMap attrs = {},
              absl::string_view name = "");

  const absl::Status& status() const { return status_; }
  void RecordError(absl::Status status);

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int id) const { return nodes_[static_cast<size_t>(id)]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::optional<int> FindNode(absl::string_view name) const;

  // "name:index", the form used in GraphDef inputs.
  std::string OutputName(Output output) const;
  absl::StatusOr<Output> ParseOutputName(absl::string_view text) const;

  // The first `num_nodes` nodes (all when negative): since inputs precede
  // their consumers, any prefix is a valid graph (e.g. the forward pass).
  v1::GraphDef ToProto(int num_nodes = -1) const;
  // Rebuilds a graph, validating every node (op known, inputs earlier, input
  // counts): a bad GraphDef is an InvalidArgument error naming the node.
  static absl::StatusOr<Graph> FromProto(const v1::GraphDef& def);

 private:
  std::vector<Node> nodes_;
  std::map<std::string, int, std::less<>> by_name_;
  absl::Status status_;
};

}  // namespace kubetrain::runtime::engine
