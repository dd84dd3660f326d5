#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer-runtime/dist/transport.h"

namespace kubetrain::dist {

// Transport between tasks on any hosts over gRPC (runtime.proto,
// RuntimeTransport.Exchange).
//
// Protocol:
//   1. Every rank serves RuntimeTransport on its own address (Listen).
//   2. Connect: for each peer, the rank dials the peer's address, retrying
//      with exponential backoff (DNS names of headless services appear late)
//      until the deadline, then opens one client stream to it and writes a
//      HELLO frame {from_rank, group}. A HELLO of another group, or of a rank
//      outside this group, is refused. Connect returns once every peer's
//      stream has arrived too: a peer that answers but opens none by the
//      deadline (a task of another run at a reused address) fails it, rather
//      than a later receive waiting out its own, longer deadline.
//   3. Send cuts a message into DATA frames of at most `frame_bytes` and writes
//      them to that peer's stream from a sender thread (one per peer), waiting
//      for the writes up to the deadline.
//   4. The receiving server reads every stream into per-sender mailboxes;
//      RecvInto hands frames to its consumer as they arrive.
//   5. Close writes BYE on every stream. A stream that ends without BYE (the
//      peer crashed, its host vanished and keepalive pings went unanswered)
//      marks the peer lost: pending and later receives from it fail at once
//      with Unavailable naming the peer's rank and address.
//
// Thread safety: as Transport.
class GrpcTransport : public Transport {
 public:
  struct Options {
    // Names the run; peers from another run are refused.
    std::string group = "kubetrain";
    // Largest DATA frame (rounded down to a multiple of 64).
    size_t frame_bytes = size_t{1} << 20;
    // Keepalive ping period and how long an unanswered ping may wait before
    // the connection is declared dead.
    absl::Duration keepalive_time = absl::Seconds(2);
    absl::Duration keepalive_timeout = absl::Seconds(5);
  };

  // Starts the server of rank `rank` of `size` on `bind_address`
  // ("host:port"; port 0 picks a free port, see port()).
  static absl::StatusOr<std::unique_ptr<GrpcTransport>> Listen(int rank, int size,
                                                               const std::string& bind_address,
                                                               const Options& options);
  static absl::StatusOr<std::unique_ptr<GrpcTransport>> Listen(int rank, int size,
                                                               const std::string& bind_address) {
    return Listen(rank, size, bind_address, Options());
  }

  // Joins the group of `addresses` ("host:port", indexed by rank) as rank
  // `rank`: listens on every interface at the port of its own address (the
  // host there may be a service name that resolves to this pod only from
  // outside), then Connect()s by `deadline`. The group is options.group
  // with a fingerprint of `addresses`, so tasks of runs with different
  // clusters refuse each other.
  static absl::StatusOr<std::unique_ptr<GrpcTransport>> Join(
      const std::vector<std::string>& addresses, int rank, const Options& options,
      absl::Time deadline);

  // Closes: BYE to every peer, then stops the server.
  ~GrpcTransport() override;

  // The port the server listens on.
  virtual int port() const = 0;

  // Dials every peer (addresses indexed by rank; this rank's own is unused)
  // and opens the streams, then waits for every peer's stream to this rank.
  // DeadlineExceeded names the peers not reached, or those that opened no
  // stream back and the streams refused meanwhile.
  virtual absl::Status Connect(const std::vector<std::string>& addresses, absl::Time deadline) = 0;

 protected:
  GrpcTransport() = default;
};

}  // namespace kubetrain::dist
