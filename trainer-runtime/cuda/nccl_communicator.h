#pragma once

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer-runtime/cuda/cuda_device.h"
#include "trainer-runtime/engine/tensor.h"

namespace kubetrain::runtime::cuda {

// How rank 0's NCCL unique id (an opaque NCCL_UNIQUE_ID_BYTES-byte blob)
// reaches the other ranks. NCCL bootstraps its own connections from it; the
// id itself must travel over a channel the job already has: the master
// publishes it once, every other task receives it once (in a cluster, over
// the dist transport's gRPC channel; in one process, InProcessIdChannel).
// Implementations must be thread-safe.
class NcclIdChannel {
 public:
  virtual ~NcclIdChannel() = default;
  // Rank 0: hands the id to every other rank.
  virtual absl::Status Publish(const std::string& id) = 0;
  // Ranks > 0: the published id. Blocks until it is available or the
  // channel gives up (DeadlineExceeded / Unavailable, naming the peer).
  virtual absl::StatusOr<std::string> Receive() = 0;
};

// A channel between threads of one process (mirrored replicas, tests).
class InProcessIdChannel final : public NcclIdChannel {
 public:
  explicit InProcessIdChannel(std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : timeout_(timeout) {}
  absl::Status Publish(const std::string& id) override;
  absl::StatusOr<std::string> Receive() override;

 private:
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable published_;
  std::optional<std::string> id_;
};

// One rank's NCCL communicator, bound to one CudaDevice. Collectives are
// queued on the device's compute stream, after the kernels that produced
// the gradients and before the optimizer's, so no extra synchronisation is
// needed; they return without waiting (Device::Synchronize or a copy to
// the host waits).
//
// Errors carry file, line and rank (NCCL_CHECK). A rank that never joins
// makes Create block in NCCL; that bound is the caller's (the channel's
// timeout covers the id exchange only). Not thread-safe: one thread per
// communicator, as NCCL requires.
class NcclCommunicator {
 public:
  // Collective: every rank of `world_size` calls it with its own rank.
  // Rank 0 creates the id and publishes it on `channel`; the others receive
  // it. InvalidArgument for a rank outside [0, world_size) or a received id
  // of the wrong size.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(CudaDevice& device, int rank,
                                                                  int world_size,
                                                                  NcclIdChannel& channel);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // In place over the tensors (device memory of this communicator's device),
  // all in one NCCL group: every rank must pass tensors of the same shapes
  // in the same order. InvalidArgument for a host tensor.
  absl::Status AllReduceSum(std::span<engine::Tensor> tensors);
  // The sum divided by world_size (NCCL's ncclAvg: one pass), what
  // synchronous data parallelism applies.
  absl::Status AllReduceMean(std::span<engine::Tensor> tensors);

 private:
  NcclCommunicator(CudaDevice& device, int rank, int world_size, ncclComm_t comm)
      : device_(device), rank_(rank), world_size_(world_size), comm_(comm) {}
  absl::Status AllReduce(std::span<engine::Tensor> tensors, ncclRedOp_t op);

  CudaDevice& device_;
  int rank_;
  int world_size_;
  ncclComm_t comm_;
};

}  // namespace kubetrain::runtime::cuda
