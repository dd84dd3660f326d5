#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer-runtime/dist/transport.h"

namespace kubetrain::dist {

// Transport between processes on one host through POSIX shared memory, in the
// manner of the SHM transports of NCCL and MPI.
//
// Layout: one segment per group, /dev/shm/<group name>, holding a header, one
// doorbell per rank and one single-producer single-consumer ring buffer per
// ordered pair of ranks. Messages are framed as a 64-byte record {tag, size}
// followed by the payload, both padded to 64 bytes, so every piece handed to a
// receiver is 64-byte aligned (transport.h). A sender copies its payload into
// the ring piece by piece and publishes each piece; the receiver consumes the
// pieces straight out of the ring (a ring all-reduce adds them into its buffer
// with no intermediate copy) while the sender is still writing.
//
// Waiting: a rank spins briefly, yields the CPU for a while, then sleeps on a futex in its own
// doorbell; whoever publishes data for it or frees space it waits for rings that doorbell. Sleeps
// are short slices so that the deadline and the peers' liveness (their pid, and a "closed" flag set
// by a clean shutdown) are checked: a crashed peer is reported as Unavailable naming its rank and
// pid, never a hang.
//
// Thread safety: as Transport. Ownership: the transport owns its mapping; the
// segment's name is unlinked as soon as all ranks have attached, so nothing is
// left in /dev/shm after a crash once the group formed.
class ShmTransport : public Transport {
 public:
  struct Options {
    // Bytes of each ring buffer; a power of two, at least 4 KiB.
    size_t ring_bytes = size_t{1} << 20;
    // Largest piece a sender publishes at once: smaller pieces let the
    // receiver start sooner, larger ones cost fewer synchronisations.
    size_t piece_bytes = size_t{64} << 10;
    // Waiting for a peer: busy-wait this many iterations, then yield the CPU
    // (sched_yield) for up to `yield_for`, then sleep on the futex. Yielding
    // is what keeps latency low when ranks outnumber free cores: the peer we
    // wait for may need this very core (Open MPI's yield_when_idle).
    int spin_iterations = 256;
    absl::Duration yield_for = absl::Milliseconds(5);
  };

  // Attaches rank `rank` of `size` to the group `name` (a name unique to this
  // run, e.g. "kubetrain-<job uid>-<attempt>"; it must not contain '/'), creating
  // the segment if this rank is first, and waits until every rank attached.
  // Errors: DeadlineExceeded naming the ranks that never came;
  // FailedPrecondition when the segment exists with other parameters;
  // Internal for a failing system call, with errno text.
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Connect(const std::string& name, int rank,
                                                               int size, const Options& options,
                                                               absl::Time deadline);
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Connect(const std::string& name, int rank,
                                                               int size, absl::Time deadline) {
    return Connect(name, rank, size, Options(), deadline);
  }

  // Marks this rank closed (peers waiting for it get Unavailable) and unmaps.
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status Send(int peer, Tag tag, absl::Span<const std::byte> data,
                    absl::Time deadline) override;
  absl::Status RecvInto(int peer, Tag tag, size_t size, PieceConsumer consume,
                        absl::Time deadline) override;
  // Writes to `send_peer` and reads from `recv_peer` in one loop, so two ranks
  // exchanging messages larger than a ring cannot block each other.
  absl::Status SendRecv(int send_peer, Tag send_tag, absl::Span<const std::byte> data,
                        int recv_peer, Tag recv_tag, size_t recv_size, PieceConsumer consume,
                        absl::Time deadline) override;

  struct Layout;
  struct SendOp;
  struct RecvOp;

 private:
  ShmTransport() = default;

  absl::Status CheckPeer(int peer) const;
  absl::Status Progress(SendOp* send, RecvOp* recv, absl::Time deadline);
  bool TryWrite(SendOp& op);
  absl::StatusOr<bool> TryRead(RecvOp& op);
  absl::Status WaitForProgress(uint32_t seen, int peer_a, int peer_b, absl::Time deadline);
  absl::Status PeerGone(int peer) const;

  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  Options options_;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  // Per peer: messages that arrived before the Recv that wants them, by tag.
  // Only the thread receiving from that peer touches its map.
  std::vector<std::map<Tag, std::deque<std::vector<std::byte>>>> early_;
};

}  // namespace kubetrain::dist
