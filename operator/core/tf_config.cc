#include "operator/core/tf_config.h"

#include <map>
#include <utility>

#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace kubetrain::core {

AddressFn KubernetesAddresses(std::string namespace_name) {
  return [namespace_name = std::move(namespace_name)](std::string_view replica_name,
                                                      const ReplicaKey&, int port) {
    return std::string(replica_name) + "." + namespace_name + ".svc:" + std::to_string(port);
  };
}

AddressFn LoopbackAddresses(std::function<int(std::string_view replica_name)> port_of) {
  return [port_of = std::move(port_of)](std::string_view replica_name, const ReplicaKey&, int) {
    return "127.0.0.1:" + std::to_string(port_of(replica_name));
  };
}

std::string TfConfigRoleName(api::Role role, bool use_chief) {
  return ReplicaRoleName(role, use_chief);
}

std::string BuildTfConfig(const v1::TrainingJob& job, const std::vector<api::ReplicaGroup>& groups,
                          const ReplicaKey& task, const AddressFn& address,
                          const TfConfigOptions& options) {
  const v1::TrainingInput& input = job.spec().training_input();
  const bool use_chief = input.use_chief_in_tf_config();
  const int port = job.spec().has_port() ? job.spec().port() : 2222;
  const std::string job_name = JobObjectName(job);

  // std::map sorts the role names, as TensorFlow and Kubeflow print them.
  std::map<std::string, std::vector<std::string>> cluster;
  for (const api::ReplicaGroup& group : groups) {
    if (group.role == api::Role::kEvaluator && !job.spec().evaluator_in_cluster()) continue;
    std::vector<std::string>& endpoints = cluster[TfConfigRoleName(group.role, use_chief)];
    for (int64_t i = 0; i < group.count; ++i) {
      ReplicaKey key{task.trial_id, group.role, i};
      endpoints.push_back(address(ReplicaName(job_name, key, use_chief), key, port));
    }
  }

  nlohmann::ordered_json config;
  config["cluster"] = nlohmann::ordered_json::object();
  for (const auto& [role, endpoints] : cluster) config["cluster"][role] = endpoints;
  config["task"]["type"] = TfConfigRoleName(task.role, use_chief);
  config["task"]["index"] = task.index;
  if (!task.trial_id.empty()) config["task"]["trial"] = task.trial_id;
  config["environment"] = "cloud";
  if (options.include_job) {
    std::string input_json;
    google::protobuf::util::JsonPrintOptions print_options;
    if (google::protobuf::util::MessageToJsonString(input, &input_json, print_options).ok()) {
      config["job"] =
          nlohmann::ordered_json::parse(input_json, nullptr, /*allow_exceptions=*/false);
    }
  }
  return config.dump();
}

}  // namespace kubetrain::core
