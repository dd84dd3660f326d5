#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::fake_apiserver {

// A parsed Kubernetes label selector, the string form `?labelSelector=` takes:
// comma-separated requirements, each one of
//   key=value  key==value  key!=value  key  !key  key in (a,b)  key notin (a,b)
// An empty selector matches everything. Pure value type; thread-compatible.
class LabelSelector {
 public:
  // InvalidArgument naming the offending requirement on malformed input.
  static absl::StatusOr<LabelSelector> Parse(absl::string_view text);

  bool Matches(const std::map<std::string, std::string>& labels) const;
  bool empty() const { return requirements_.empty(); }

 private:
  enum class Op { kIn, kNotIn, kExists, kDoesNotExist };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };
  std::vector<Requirement> requirements_;
};

}  // namespace kubetrain::fake_apiserver
