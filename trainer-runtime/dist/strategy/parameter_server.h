#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer-runtime/dist/cluster_spec.h"
#include "trainer-runtime/dist/transport.h"
#include "trainer-runtime/engine/trainer.h"

namespace kubetrain::dist {

struct ParameterServerOptions {
  // SyncReplicasOptimizer semantics: each step's update is the mean of one
  // gradient from every replica; a gradient computed at an older step is
  // dropped. Otherwise (the default, as TensorFlow's) every push is applied
  // at once.
  bool sync_replicas = false;
  absl::Duration connect_timeout = absl::Seconds(120);
  // How long a request may wait for an answer (a sync step waits for the
  // slowest replica).
  absl::Duration request_timeout = absl::Minutes(5);
  // After the chief says it is done, how long a ps waits for the workers to
  // hear it before exiting.
  absl::Duration finish_grace = absl::Seconds(8);
};

// Which ps task holds each variable: greedily by size, largest first, to the
// ps holding the fewest floats so far (ties: the lower index), as
// replica_device_setter's greedy strategy. Deterministic: every task computes
// the same placement from the same (name, element count) list.
// Returns the ps index per variable, in the order given.
std::vector<int> PlaceVariables(const std::vector<std::pair<std::string, int64_t>>& variables,
                                int num_ps);

// Protocol between workers (the master and workers; "replicas") and ps tasks,
// as tagged messages over the gRPC transport, group ranks: replicas first,
// then ps tasks. Every request is a 32-byte header {type, step,
// payload_bytes, flags} plus an optional payload; every request gets one
// reply of the same shape.
//
//   INIT      chief -> each ps: its shard as a v1::Checkpoint (variables,
//             optimizer slots, global step); sent by Initialize, fresh or
//             restored.
//   PULL      the shard's variables as raw float32 in placement order; waits
//             until the chief's INIT arrived.
//   PUSH      gradients for the shard, computed at `step`. Async: applied at
//             once (so a job's last step may pass --max_steps by the pushes
//             in flight at its end, one per replica at most, as TensorFlow's
//             asynchronous training does). Sync: added to step's aggregate;
//             when every replica has given one the mean is applied and the
//             step advances; the reply waits for that. A gradient for an
//             older step is dropped.
//   SNAPSHOT  the shard as a v1::Checkpoint, for the chief's checkpoints.
//   LEAVE     worker -> each ps at its end: its stream closing next is no
//             crash.
//   DONE      chief -> each ps at the end: the ps answers every later request
//             with the final global step (so workers end their loops) and
//             exits once every worker has left, or after finish_grace.
//
// The replies carry the ps's global step (updates applied so far).

// The ps side: serves until the chief is DONE (then returns OK) or until the
// chief is lost (Unavailable naming it). In sync mode a lost worker fails the
// ps too (its step can never complete); in async mode the ps carries on.
absl::Status ServeParameters(const ClusterSpec& cluster,
                             const runtime::engine::TrainerOptions& options,
                             const ParameterServerOptions& ps_options);

// The replica side, for the training loop.
absl::StatusOr<std::unique_ptr<runtime::engine::TrainingStrategy>> MakeParameterServerStrategy(
    const ClusterSpec& cluster, const runtime::engine::TrainerOptions& options,
    const ParameterServerOptions& ps_options);

// The two above over a transport the caller has joined already (rank: the
// replicas first, then the ps tasks), as tests join an in-process hub.
absl::Status ServeParametersOver(Transport& transport, const ClusterSpec& cluster,
                                 const runtime::engine::TrainerOptions& options,
                                 const ParameterServerOptions& ps_options);
std::unique_ptr<runtime::engine::TrainingStrategy> MakeParameterServerStrategyOver(
    std::unique_ptr<Transport> transport, const ClusterSpec& cluster,
    const ParameterServerOptions& ps_options);

}  // namespace kubetrain::dist
