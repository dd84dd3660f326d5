#include "operator/core/pytorch_env.h"

#include <algorithm>
#include <cstdint>

#include "api/defaults.h"

namespace kubetrain::core {

bool WantsTfConfig(const v1::TrainingInput& input) {
  return input.framework() != v1::TrainingInput::PYTORCH;
}

bool WantsPyTorchEnv(const v1::TrainingInput& input) {
  return input.framework() != v1::TrainingInput::TENSORFLOW;
}

EnvList BuildPyTorchEnv(const v1::TrainingJob& job, const std::vector<api::ReplicaGroup>& groups,
                        const ReplicaKey& task, const AddressFn& address) {
  if (task.role != api::Role::kMaster && task.role != api::Role::kWorker) return {};
  int64_t masters = 0;
  int64_t workers = 0;
  const api::ReplicaGroup* own_group = nullptr;
  for (const api::ReplicaGroup& group : groups) {
    if (group.role == api::Role::kMaster) masters += group.count;
    if (group.role == api::Role::kWorker) workers += group.count;
    if (group.role == task.role) own_group = &group;
  }
  if (masters + workers == 0) return {};
  // Rank 0 hosts the rendezvous store (torch's TCPStore, or torchrun's).
  const ReplicaKey rank0{task.trial_id, masters > 0 ? api::Role::kMaster : api::Role::kWorker, 0};
  const bool use_chief = job.spec().training_input().use_chief_in_tf_config();
  const int port = job.spec().has_port() ? job.spec().port() : api::kDefaultPort;
  const std::string endpoint =
      address(ReplicaName(JobObjectName(job), rank0, use_chief), rank0, port);
  // "host:port"; the port is what follows the last colon.
  const size_t colon = endpoint.rfind(':');
  const std::string host = colon == std::string::npos ? endpoint : endpoint.substr(0, colon);
  const std::string master_port =
      colon == std::string::npos ? std::to_string(port) : endpoint.substr(colon + 1);

  const int64_t rank = task.role == api::Role::kMaster ? task.index : masters + task.index;
  const int64_t gpus = own_group == nullptr ? 0 : own_group->resources.gpus;
  const std::string world_size = std::to_string(masters + workers);
  return {
      {"MASTER_ADDR", host},
      {"MASTER_PORT", master_port},
      {"WORLD_SIZE", world_size},
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", "0"},
      {"PET_MASTER_ADDR", host},
      {"PET_MASTER_PORT", master_port},
      {"PET_NNODES", world_size},
      {"PET_NODE_RANK", std::to_string(rank)},
      {"PET_NPROC_PER_NODE", std::to_string(std::max<int64_t>(gpus, 1))},
  };
}

}  // namespace kubetrain::core
