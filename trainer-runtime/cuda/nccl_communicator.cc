#include "trainer-runtime/cuda/nccl_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/cuda/cuda_check.h"

namespace kubetrain::runtime::cuda {

absl::Status InProcessIdChannel::Publish(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (id_.has_value())
      return absl::FailedPreconditionError("NCCL id already published on this channel");
    id_ = id;
  }
  published_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> InProcessIdChannel::Receive() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!published_.wait_for(lock, timeout_, [this] { return id_.has_value(); })) {
    return absl::DeadlineExceededError(
        absl::StrCat("no NCCL id published by rank 0 within ", timeout_.count(), " ms"));
  }
  return *id_;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(CudaDevice& device,
                                                                           int rank, int world_size,
                                                                           NcclIdChannel& channel) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL rank ", rank, " is not in a world of ", world_size, " ranks"));
  }
  ScopedRank scoped_rank(rank);
  CUDA_CHECK(cudaSetDevice(device.ordinal()));
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    if (absl::Status s = channel.Publish(std::string(id.internal, sizeof(id.internal))); !s.ok())
      return s;
  } else {
    absl::StatusOr<std::string> bytes = channel.Receive();
    if (!bytes.ok()) return bytes.status();
    if (bytes->size() != sizeof(id.internal)) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " received a ", bytes->size(),
                                                     "-byte NCCL id from rank 0, want ",
                                                     sizeof(id.internal)));
    }
    std::memcpy(id.internal, bytes->data(), sizeof(id.internal));
  }
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, world_size, id, rank));
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(device, rank, world_size, comm));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

absl::Status NcclCommunicator::AllReduce(std::span<engine::Tensor> tensors, ncclRedOp_t op) {
  ScopedRank scoped_rank(rank_);
  for (const engine::Tensor& t : tensors) {
    if (t.num_elements() > 0 && t.device_type() != engine::DeviceType::kCuda) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank_, ": all-reduce of a host tensor ", engine::ShapeString(t.shape())));
    }
  }
  CUDA_CHECK(cudaSetDevice(device_.ordinal()));
  NCCL_CHECK(ncclGroupStart());
  for (engine::Tensor& t : tensors) {
    if (t.num_elements() == 0) continue;
    ncclResult_t result = ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.num_elements()),
                                        ncclFloat32, op, comm_, device_.compute_stream());
    if (result != ncclSuccess) {
      ncclGroupEnd();
      NCCL_CHECK(result);
    }
  }
  NCCL_CHECK(ncclGroupEnd());
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllReduceSum(std::span<engine::Tensor> tensors) {
  return AllReduce(tensors, ncclSum);
}

absl::Status NcclCommunicator::AllReduceMean(std::span<engine::Tensor> tensors) {
  return AllReduce(tensors, ncclAvg);
}

}  // namespace kubetrain::runtime::cuda
