#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace kubetrain::dist {

// Messages between two ranks are matched by tag: a Recv(peer, tag) takes the
// message the peer sent with the same tag, whatever else arrived first.
// Messages from one peer with the same tag are received in the order sent
// (the parameter-server protocol relies on it).
using Tag = uint64_t;

// Pieces handed to a receiver start at offsets that are multiples of
// kPieceAlign, and every piece but the last of a message has a length that is a
// multiple of it, so a consumer of float32 never sees half a float.
inline constexpr size_t kPieceAlign = 64;

// Called with consecutive pieces of one message: (offset in the message,
// bytes). The bytes are only valid during the call.
using PieceConsumer = absl::FunctionRef<void(size_t offset, absl::Span<const std::byte> piece)>;

// Point-to-point messages between the `size()` ranks of a group; this object is
// rank `rank()`. Collective algorithms (collectives.h) are written against this
// interface once; implementations: in-process (tests), gRPC (any hosts) and
// shared memory (same host).
//
// Thread safety: one thread may send to a peer while another receives from it,
// but two threads must not send to the same peer, nor receive from the same
// peer, at once.
//
// Errors, each naming the peer (rank and, where known, its address):
//   DeadlineExceeded  the deadline passed first;
//   Unavailable       the peer is gone (closed, crashed, connection lost);
//   InvalidArgument   a bad peer rank, or the message has another size than
//                     the receiver expects.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Hands `data` to the transport for `peer`; returns once `data` may be
  // reused. It waits for the receiver only while the transport's buffer
  // towards `peer` is full.
  virtual absl::Status Send(int peer, Tag tag, absl::Span<const std::byte> data,
                            absl::Time deadline) = 0;

  // Receives the message `tag` from `peer`, which must be exactly `size` bytes,
  // and passes it to `consume` in order, in one or more pieces, as it arrives.
  virtual absl::Status RecvInto(int peer, Tag tag, size_t size, PieceConsumer consume,
                                absl::Time deadline) = 0;

  // One step of a ring: sends `data` to `send_peer` while receiving
  // `recv_size` bytes from `recv_peer`. Transports with bounded buffers
  // (shared memory) must make progress on both at once, else two ranks
  // sending large messages to each other would wait for each other forever.
  // The default sends then receives, right for transports whose Send never
  // waits for the receiver.
  virtual absl::Status SendRecv(int send_peer, Tag send_tag, absl::Span<const std::byte> data,
                                int recv_peer, Tag recv_tag, size_t recv_size,
                                PieceConsumer consume, absl::Time deadline);

  // RecvInto a caller's buffer.
  absl::Status Recv(int peer, Tag tag, absl::Span<std::byte> out, absl::Time deadline);
};

// "rank 3" or "rank 3 (10.0.0.7:2222)".
std::string PeerName(int rank, absl::string_view address);

}  // namespace kubetrain::dist
