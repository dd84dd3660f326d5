#pragma once

#include <string>
#include <utility>
#include <vector>

#include "api/scale_tiers.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/naming.h"
#include "operator/core/tf_config.h"

namespace kubetrain::core {

// The distributed environment a replica gets besides kubetrain's own
// variables: TF_CONFIG (tf_config.h) and, here, the variables PyTorch reads,
// chosen by trainingInput.framework:
//
//   framework               TF_CONFIG   PyTorch set
//   unset / ANY             yes         yes
//   TENSORFLOW              yes         no
//   PYTORCH                 no          yes
bool WantsTfConfig(const v1::TrainingInput& input);
bool WantsPyTorchEnv(const v1::TrainingInput& input);

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The PyTorch set for one task of a defaulted, valid job whose replicas are
// `groups` (api::ReplicaGroups of its trainingInput; for a trial's task,
// task.trial_id names the trial and rank 0 is that trial's). What
// `torch.distributed.init_process_group("gloo"|"nccl")` reads with its
// default env:// init, and what `torchrun` reads for its --master_addr,
// --master_port, --nnodes, --node_rank and --nproc_per_node, with the values
// Kubeflow's PyTorchJob gives (docs/pytorch.md lists them for a sample job):
//
//   MASTER_ADDR, PET_MASTER_ADDR  rank 0's host: the master's, else worker
//                                 0's (on Kubernetes its headless Service's
//                                 DNS name, locally 127.0.0.1), from `address`
//   MASTER_PORT, PET_MASTER_PORT  rank 0's port, from `address`
//   WORLD_SIZE, PET_NNODES        the number of ranks: masters + workers
//   RANK, PET_NODE_RANK           master 0, worker i i+1 (i without a master)
//   LOCAL_RANK                    0: one process per replica
//   PET_NPROC_PER_NODE            the replica's GPUs, 1 without GPUs: the
//                                 processes torchrun starts in the replica
//
// With spec.elasticPolicy the master and workers are the nodes of one
// torchrun elastic group instead, and get only torchrun's settings (no
// RANK, WORLD_SIZE or MASTER_*: torchrun assigns them at each rendezvous):
//
//   PET_NNODES            "minReplicas:maxReplicas"
//   PET_RDZV_BACKEND      rdzvBackend, default c10d
//   PET_RDZV_ENDPOINT     rdzvHost:rdzvPort, default rank 0's host and port
//   PET_RDZV_ID           rdzvId, default PodGroupName (the job, or trial)
//   PET_RDZV_CONF         rdzvConf, and for c10d at rank 0's host is_host:
//                         true on rank 0 only, whose torchrun hosts the store
//   PET_MAX_RESTARTS      maxRestarts, when given
//   PET_NPROC_PER_NODE    as above
//
// Parameter servers and evaluators are not ranks: they get an empty list, so
// that a script calling init_process_group there fails at once ("RANK
// expected") instead of joining, or waiting for, a group it does not belong
// to.
EnvList BuildPyTorchEnv(const v1::TrainingJob& job, const std::vector<api::ReplicaGroup>& groups,
                        const ReplicaKey& task, const AddressFn& address);

}  // namespace kubetrain::core
