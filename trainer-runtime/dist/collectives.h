#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "trainer-runtime/dist/transport.h"

namespace kubetrain::dist {

// Collective operations written once against Transport, so they run the same
// over the in-process, gRPC and shared-memory transports.
//
// Every rank of the group must call the same collective with the same `op`
// (an id the caller keeps distinct for collectives that may be in flight at
// once, e.g. a step counter times the number of buckets) and the same
// element count. `op` must be < 2^44: the low 20 bits of a Tag carry the step
// within the operation.
//
// All errors of the transport come back unchanged (they name the peer); a
// collective that fails leaves `data` unspecified.
Tag CollectiveTag(uint64_t op, uint32_t step);

// Sums `data` element-wise across all ranks, in place, with the ring
// algorithm: the buffer is cut into size() segments; size()-1 reduce-scatter
// steps leave rank r with the full sum of segment r+1, then size()-1
// all-gather steps pass the sums round the ring. Each rank sends and receives
// 2(n-1)/n of the buffer in all, whatever n. Within a step the receiver adds
// each piece as the transport delivers it, so reducing overlaps the transfer.
// Segments may be empty (fewer elements than ranks).
absl::Status RingAllReduce(Transport& transport, absl::Span<float> data, uint64_t op,
                           absl::Time deadline);

// Sums small buffers with one exchange round instead of the ring's 2(n-1)
// steps: every rank sends its whole buffer to every other (one SendRecv per
// peer distance) and adds the n buffers in rank order, so every rank gets the
// bit-identical sum. Latency-bound sizes only: it moves (n-1) x the buffer.
absl::Status ExchangeAllReduce(Transport& transport, absl::Span<float> data, uint64_t op,
                               absl::Time deadline);

// Up to this many bytes AllReduce uses ExchangeAllReduce, above it the ring.
inline constexpr size_t kExchangeAllReduceMaxBytes = 16 << 10;

// Sum all-reduce with the algorithm suited to the size.
absl::Status AllReduce(Transport& transport, absl::Span<float> data, uint64_t op,
                       absl::Time deadline);

// Copies `data` of rank `root` into `data` of every other rank. Ranks form a
// chain from the root; the buffer travels in chunks of `chunk_bytes` so that
// forwarding chunk k overlaps receiving chunk k+1.
absl::Status Broadcast(Transport& transport, int root, absl::Span<std::byte> data, uint64_t op,
                       absl::Time deadline, size_t chunk_bytes = 1 << 20);

// Broadcast of floats.
absl::Status Broadcast(Transport& transport, int root, absl::Span<float> data, uint64_t op,
                       absl::Time deadline);

// Waits until every rank has called Barrier with the same `op`.
absl::Status Barrier(Transport& transport, uint64_t op, absl::Time deadline);

}  // namespace kubetrain::dist
