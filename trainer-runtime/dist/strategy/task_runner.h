#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer-runtime/dist/cluster_spec.h"
#include "trainer-runtime/engine/trainer.h"

namespace CLI {
class App;
}  // namespace CLI

namespace kubetrain::dist {

// The distributed-training flags, next to the engine's trainer flags:
//   --strategy=auto|local|allreduce|ps   auto: ps when the cluster has ps
//                                        tasks, allreduce when it has more
//                                        than one replica, else local
//   --sync_replicas[=true|false]         ps: one gradient per worker per step
//                                        (SyncReplicasOptimizer); default async
//   --transport=auto|grpc|shm            allreduce: shm when every replica is
//                                        on this host, else grpc
//   --connect_timeout_secs=N             how long to wait for peers (120)
//   --allreduce_overlap[=true|false]     allreduce: all-reduce gradient buckets
//                                        while the backward pass goes on
//                                        (default true); false waits for the
//                                        whole backward pass first. Same
//                                        results either way, bit for bit.
//   --allreduce_bucket_kib=N             allreduce: gradients fused per
//                                        all-reduce (4096 KiB)
struct DistributedFlags {
  std::string strategy = "auto";
  bool sync_replicas = false;
  std::string transport = "auto";
  absl::Duration connect_timeout = absl::Seconds(120);
  bool allreduce_overlap = true;
  size_t allreduce_bucket_bytes = size_t{4} << 20;
};

// Adds the flags above to `app` (common/flags), with their help and
// defaults; values land in `*flags`, which must outlive the parse. A bad
// value is refused naming the flag ("--strategy: want auto, ...").
void AddDistributedFlags(CLI::App& app, DistributedFlags* flags);

// Takes the flags above out of `args` (leaving the engine's), accepting
// "--name=value", "--name value" and '-' for '_'. InvalidArgument naming the
// flag for a bad value.
absl::StatusOr<DistributedFlags> ExtractDistributedFlags(std::vector<std::string>& args);

// The strategy this task's cluster shape and flags call for: "local",
// "allreduce" or "ps".
absl::StatusOr<std::string> ChooseStrategy(const ClusterSpec& cluster,
                                           const DistributedFlags& flags);

// Runs this task's part of the job: the training loop with the chosen
// strategy for the master and workers, the serving loop for a ps task (which
// returns when the chief has finished). `env` is the engine's: its metrics
// sinks are kept for the chief only. Errors carry exit codes
// (trainer-runtime/exit_codes.h): 138 for lost peers, naming them.
absl::StatusOr<runtime::engine::TrainResult> RunTask(const ClusterSpec& cluster,
                                                     const DistributedFlags& flags,
                                                     runtime::engine::TrainerOptions options,
                                                     runtime::engine::TrainerEnvironment env);

// `kubetrain-runtime train` with distribution: flags, TF_CONFIG from the
// environment, RunTask. Returns the process exit code, the error on stderr.
int TrainMain(const std::vector<std::string>& args);

}  // namespace kubetrain::dist
