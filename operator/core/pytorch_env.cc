#include "operator/core/pytorch_env.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/defaults.h"

namespace kubetrain::core {

bool WantsTfConfig(const v1::TrainingInput& input) {
  return input.framework() != v1::TrainingInput::PYTORCH;
}

bool WantsPyTorchEnv(const v1::TrainingInput& input) {
  return input.framework() != v1::TrainingInput::TENSORFLOW;
}

namespace {

// An elastic node's torchrun settings. No RANK, WORLD_SIZE or MASTER_ADDR:
// ranks change as nodes come and go, and torchrun gives its processes their
// own at each rendezvous.
EnvList ElasticEnv(const v1::TrainingJob& job, const ReplicaKey& task, bool is_rank0,
                   const std::string& rank0_host, const std::string& rank0_port, int64_t nodes,
                   const std::string& nproc_per_node) {
  const v1::ElasticPolicy& elastic = job.spec().elastic_policy();
  const std::string backend = elastic.rdzv_backend().empty() ? "c10d" : elastic.rdzv_backend();
  const std::string host = elastic.rdzv_host().empty() ? rank0_host : elastic.rdzv_host();
  const std::string port =
      elastic.has_rdzv_port() ? std::to_string(elastic.rdzv_port()) : rank0_port;
  std::vector<std::string> conf;
  bool is_host_given = false;
  for (const v1::ElasticPolicy::RendezvousConf& entry : elastic.rdzv_conf()) {
    conf.push_back(absl::StrCat(entry.key(), "=", entry.value()));
    is_host_given |= entry.key() == "is_host";
  }
  // The master's torchrun hosts the c10d store. Said outright rather than
  // left to torchrun's guess from the host name, which every node matches
  // when they share a host (the local backend's 127.0.0.1): the guess makes
  // whichever node binds first the host, and the group dies with it.
  if (backend == "c10d" && elastic.rdzv_host().empty() && !is_host_given) {
    conf.push_back(is_rank0 ? "is_host=true" : "is_host=false");
  }
  const api::ElasticNodeRange range = api::ElasticNodes(elastic, nodes);
  EnvList env = {
      {"PET_NNODES", absl::StrCat(range.min, ":", range.max)},
      {"PET_RDZV_BACKEND", backend},
      {"PET_RDZV_ENDPOINT", absl::StrCat(host, ":", port)},
      {"PET_RDZV_ID", elastic.rdzv_id().empty() ? PodGroupName(JobObjectName(job), task.trial_id)
                                                : elastic.rdzv_id()},
      {"PET_NPROC_PER_NODE", nproc_per_node},
  };
  if (!conf.empty()) env.emplace_back("PET_RDZV_CONF", absl::StrJoin(conf, ","));
  if (elastic.has_max_restarts()) {
    env.emplace_back("PET_MAX_RESTARTS", std::to_string(elastic.max_restarts()));
  }
  return env;
}

}  // namespace

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

  const int64_t gpus = own_group == nullptr ? 0 : own_group->resources.gpus;
  const std::string& nproc_given = job.spec().nproc_per_node();
  const std::string nproc_per_node =
      nproc_given.empty() ? std::to_string(std::max<int64_t>(gpus, 1)) : nproc_given;
  if (job.spec().has_elastic_policy()) {
    return ElasticEnv(job, task, rank0 == task, host, master_port, masters + workers,
                      nproc_per_node);
  }
  const int64_t rank = task.role == api::Role::kMaster ? task.index : masters + task.index;
  // A number of processes per node multiplies the ranks, as Kubeflow's
  // nprocPerNode does; torchrun's own words (auto, gpu, cpu) leave it to
  // torchrun, which sets its processes' WORLD_SIZE.
  int64_t processes = 1;
  if (!absl::SimpleAtoi(nproc_given, &processes) || processes < 1) processes = 1;
  const std::string world_size = std::to_string((masters + workers) * processes);
  return {
      {"MASTER_ADDR", host},
      {"MASTER_PORT", master_port},
      {"WORLD_SIZE", world_size},
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", "0"},
      {"PET_MASTER_ADDR", host},
      {"PET_MASTER_PORT", master_port},
      {"PET_NNODES", std::to_string(masters + workers)},
      {"PET_NODE_RANK", std::to_string(rank)},
      {"PET_NPROC_PER_NODE", nproc_per_node},
  };
}

}  // namespace kubetrain::core
