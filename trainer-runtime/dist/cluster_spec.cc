#include "trainer-runtime/dist/cluster_spec.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kubetrain::dist {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: ", field, ": ", what));
}

std::string Quoted(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

absl::string_view TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

// "host:port" or "[v6]:port"; the port must be a number in 1..65535 (TF
// servers cannot listen on an unknown port, so 0 is refused here too).
absl::Status CheckAddress(absl::string_view field, const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Invalid(field, absl::StrCat("want \"host:port\", got \"", address, "\""));
  }
  std::string_view host(address.data(), colon);
  if (host.front() == '[' ? host.back() != ']' || host.size() < 3
                          : host.find_first_of(":[] \t") != std::string_view::npos) {
    return Invalid(field, absl::StrCat("bad host in \"", address, "\""));
  }
  int port = 0;
  absl::string_view port_text(address.data() + colon + 1, address.size() - colon - 1);
  if (port_text.empty() || !absl::ascii_isdigit(port_text.front()) ||
      !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return Invalid(field, absl::StrCat("port must be 1..65535, got \"", address, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

ClusterSpec ClusterSpec::Local() {
  ClusterSpec spec;
  spec.tasks_[static_cast<int>(api::Role::kMaster)] = {"localhost:0"};
  return spec;
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromTfConfig(std::string_view tf_config) {
  if (absl::StripAsciiWhitespace(absl::string_view(tf_config.data(), tf_config.size())).empty()) {
    return Local();
  }

  Json root;
  try {
    root = Json::parse(tf_config.begin(), tf_config.end());
  } catch (const Json::parse_error& e) {
    // e.what() repeats the byte offset; keep only the explanation after "error: ".
    std::string why = e.what();
    size_t at = why.find("error: ");
    if (at != std::string::npos) why = why.substr(at + 7);
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG: malformed JSON at byte ", e.byte, ": ", why));
  } catch (const Json::exception& e) {
    // E.g. out_of_range for a number too large for a double.
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: malformed JSON: ", e.what()));
  }
  if (!root.is_object())
    return Invalid("(root)", absl::StrCat("want an object, got ", TypeName(root)));

  ClusterSpec spec;
  bool saw_master = false;
  std::set<std::string> addresses;
  if (auto cluster = root.find("cluster"); cluster != root.end() && !cluster->is_null()) {
    if (!cluster->is_object()) {
      return Invalid("cluster", absl::StrCat("want an object, got ", TypeName(*cluster)));
    }
    for (const auto& [name, tasks] : cluster->items()) {
      std::string field = absl::StrCat("cluster.", name);
      std::optional<api::Role> role = api::RoleFromName(name);
      if (!role) {
        return Invalid(field, "unknown role; want master, chief, worker, ps or evaluator");
      }
      if (*role == api::Role::kMaster) {
        if (saw_master) return Invalid(field, "both \"master\" and \"chief\" are given");
        saw_master = true;
        spec.master_name_ = name;
      }
      if (!tasks.is_array()) {
        return Invalid(field, absl::StrCat("want a list of \"host:port\", got ", TypeName(tasks)));
      }
      auto& list = spec.tasks_[static_cast<int>(*role)];
      for (size_t i = 0; i < tasks.size(); ++i) {
        std::string task_field = absl::StrCat(field, "[", i, "]");
        if (!tasks[i].is_string()) {
          return Invalid(task_field, absl::StrCat("want \"host:port\", got ", Quoted(tasks[i])));
        }
        std::string address = tasks[i].get<std::string>();
        RETURN_IF_ERROR(CheckAddress(task_field, address));
        if (!addresses.insert(address).second) {
          return Invalid(task_field, absl::StrCat("address \"", address, "\" is used twice"));
        }
        list.push_back(std::move(address));
      }
    }
    if (spec.NumTasks(api::Role::kMaster) > 1) {
      return Invalid(absl::StrCat("cluster.", spec.master_name_),
                     absl::StrCat("at most one task, got ", spec.NumTasks(api::Role::kMaster)));
    }
  }

  auto task = root.find("task");
  if (task == root.end() || task->is_null()) {
    // No task: only meaningful for a single-process cluster.
    if (spec.NumReplicas() > 1 || spec.NumTasks(api::Role::kParameterServer) > 0) {
      return Invalid("task", "missing; a multi-task cluster must say which task this is");
    }
    if (spec.NumReplicas() == 0)
      spec.tasks_[static_cast<int>(api::Role::kMaster)] = {"localhost:0"};
    spec.task_ = spec.Replicas().front();
  } else {
    if (!task->is_object())
      return Invalid("task", absl::StrCat("want an object, got ", TypeName(*task)));
    auto type = task->find("type");
    if (type == task->end()) return Invalid("task.type", "missing");
    if (!type->is_string())
      return Invalid("task.type", absl::StrCat("want a string, got ", Quoted(*type)));
    std::string type_name = type->get<std::string>();
    std::optional<api::Role> role = api::RoleFromName(type_name);
    if (!role) {
      return Invalid("task.type", absl::StrCat("unknown role \"", type_name,
                                               "\"; want master, chief, worker, ps or evaluator"));
    }
    if (*role == api::Role::kMaster && saw_master && type_name != spec.master_name_) {
      return Invalid("task.type", absl::StrCat("\"", type_name, "\" but the cluster names it \"",
                                               spec.master_name_, "\""));
    }
    if (*role == api::Role::kMaster && !saw_master) spec.master_name_ = type_name;
    int index = 0;
    if (auto idx = task->find("index"); idx != task->end() && !idx->is_null()) {
      if (!idx->is_number_integer() || idx->get<int64_t>() < 0 || idx->get<int64_t>() > 1 << 20) {
        return Invalid("task.index",
                       absl::StrCat("want a non-negative integer, got ", Quoted(*idx)));
      }
      index = static_cast<int>(idx->get<int64_t>());
    }
    // The evaluator is not part of the cluster (it serves nothing).
    if (*role != api::Role::kEvaluator && index >= spec.NumTasks(*role)) {
      return Invalid("task.index",
                     absl::StrCat(type_name, " task ", index, " is not in the cluster (it lists ",
                                  spec.NumTasks(*role), ")"));
    }
    spec.task_ = TaskId{*role, index};
    if (auto trial = task->find("trial"); trial != task->end() && !trial->is_null()) {
      if (trial->is_string()) {
        spec.trial_ = trial->get<std::string>();
      } else if (trial->is_number_integer()) {
        spec.trial_ = std::to_string(trial->get<int64_t>());
      } else {
        return Invalid("task.trial", absl::StrCat("want a string, got ", Quoted(*trial)));
      }
    }
  }

  if (auto env = root.find("environment"); env != root.end() && !env->is_null()) {
    if (!env->is_string())
      return Invalid("environment", absl::StrCat("want a string, got ", Quoted(*env)));
    spec.environment_ = env->get<std::string>();
  }
  return spec;
}

const std::vector<std::string>& ClusterSpec::Tasks(api::Role role) const {
  return tasks_[static_cast<int>(role)];
}

absl::StatusOr<std::string> ClusterSpec::Address(const TaskId& task) const {
  const auto& list = Tasks(task.role);
  if (task.index < 0 || task.index >= static_cast<int>(list.size())) {
    return absl::NotFoundError(absl::StrCat("cluster has no task ", TaskName(task)));
  }
  return list[task.index];
}

bool ClusterSpec::IsChief(const TaskId& task) const {
  if (NumTasks(api::Role::kMaster) > 0) return task.role == api::Role::kMaster && task.index == 0;
  return task.role == api::Role::kWorker && task.index == 0;
}

bool ClusterSpec::IsChief() const { return IsChief(task_); }

std::vector<TaskId> ClusterSpec::Replicas() const {
  std::vector<TaskId> replicas;
  for (api::Role role : {api::Role::kMaster, api::Role::kWorker}) {
    for (int i = 0; i < NumTasks(role); ++i) replicas.push_back(TaskId{role, i});
  }
  return replicas;
}

std::optional<int> ClusterSpec::ReplicaRank() const {
  switch (task_.role) {
    case api::Role::kMaster:
      return task_.index;
    case api::Role::kWorker:
      return NumTasks(api::Role::kMaster) + task_.index;
    default:
      return std::nullopt;
  }
}

std::vector<std::string> ClusterSpec::ReplicaAddresses() const {
  std::vector<std::string> out;
  for (const TaskId& t : Replicas()) out.push_back(Tasks(t.role)[t.index]);
  return out;
}

std::string ClusterSpec::TaskName(const TaskId& task) const {
  std::string job =
      task.role == api::Role::kMaster ? master_name_ : std::string(api::RoleName(task.role));
  return absl::StrCat("/job:", job, "/task:", task.index);
}

}  // namespace kubetrain::dist
