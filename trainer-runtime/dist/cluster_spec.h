#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "api/roles.h"

namespace kubetrain::dist {

// One task of the cluster: a role and its index within that role.
struct TaskId {
  api::Role role = api::Role::kMaster;
  int index = 0;

  friend bool operator==(const TaskId&, const TaskId&) = default;
};

// The cluster a training process belongs to and its own place in it, as
// TF_CONFIG describes them:
//
//   {"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"],
//                "ps": ["h3:2222"]},
//    "task": {"type": "worker", "index": 1, "trial": "3"},
//    "environment": "cloud"}
//
// The master may be spelt "master" (Cloud ML Engine) or "chief" (TF 2.x,
// Kubeflow); both map to api::Role::kMaster and `master_name()` remembers the
// spelling. An evaluator may be absent from "cluster": it only reads
// checkpoints and has no server peers need to reach.
//
// A ClusterSpec is an immutable value; all methods are const and thread-safe.
class ClusterSpec {
 public:
  // Parses TF_CONFIG. An empty or all-blank string is a single-process
  // cluster: one master at "localhost:0", this process being it.
  // Errors (InvalidArgument) name the offending field, e.g.
  //   "TF_CONFIG: cluster.worker[1]: port must be 1..65535, got \"h:99999\""
  //   "TF_CONFIG: malformed JSON at byte 17: ..."
  static absl::StatusOr<ClusterSpec> FromTfConfig(std::string_view tf_config);

  // A single-process cluster (no TF_CONFIG).
  static ClusterSpec Local();

  // This process's task.
  const TaskId& task() const { return task_; }
  // "trial" from task.trial (Cloud ML hyperparameter tuning), "" when absent.
  const std::string& trial() const { return trial_; }
  // "environment" ("cloud" on Cloud ML), "" when absent.
  const std::string& environment() const { return environment_; }
  // How TF_CONFIG named the master: "master" or "chief".
  const std::string& master_name() const { return master_name_; }

  // The addresses ("host:port") of the tasks of `role`, by index.
  const std::vector<std::string>& Tasks(api::Role role) const;
  int NumTasks(api::Role role) const { return static_cast<int>(Tasks(role).size()); }
  // The address of `task`; NotFound when the cluster has no such task.
  absl::StatusOr<std::string> Address(const TaskId& task) const;

  // True for the task that initialises variables, checkpoints and reports
  // metrics: the master when there is one, else worker 0.
  bool IsChief() const;
  bool IsChief(const TaskId& task) const;

  // The replicas that compute gradients, in collective rank order: the master
  // (if any) first, then the workers by index.
  std::vector<TaskId> Replicas() const;
  int NumReplicas() const { return static_cast<int>(Replicas().size()); }
  // This task's rank among Replicas(); nullopt for ps and evaluator tasks.
  std::optional<int> ReplicaRank() const;
  // Addresses of Replicas(), in rank order.
  std::vector<std::string> ReplicaAddresses() const;

  // "/job:worker/task:1", with the master spelt as TF_CONFIG spelt it.
  std::string TaskName(const TaskId& task) const;
  std::string TaskName() const { return TaskName(task_); }

 private:
  ClusterSpec() = default;

  std::vector<std::string> tasks_[api::kAllRoles.size()];
  TaskId task_;
  std::string trial_;
  std::string environment_;
  std::string master_name_ = "master";
};

}  // namespace kubetrain::dist
