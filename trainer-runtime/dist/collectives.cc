#include "trainer-runtime/dist/collectives.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kubetrain::dist {
namespace {

constexpr int kStepBits = 20;

// Segment i of a buffer of `count` elements cut into `parts` near-equal parts.
struct Segment {
  size_t begin;
  size_t size;
};
Segment SegmentOf(size_t count, int parts, int i) {
  size_t begin = count * i / parts;
  size_t end = count * (i + 1) / parts;
  return {begin, end - begin};
}

absl::Span<const std::byte> Bytes(const float* data, size_t count) {
  return {reinterpret_cast<const std::byte*>(data), count * sizeof(float)};
}

// dst[i] += src[i]; the compiler vectorises this loop.
void AddInto(float* __restrict dst, const float* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

}  // namespace

Tag CollectiveTag(uint64_t op, uint32_t step) { return (op << kStepBits) | step; }

absl::Status RingAllReduce(Transport& transport, absl::Span<float> data, uint64_t op,
                           absl::Time deadline) {
  const int n = transport.size();
  const int r = transport.rank();
  if (n == 1) return absl::OkStatus();
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  auto mod = [n](int i) { return ((i % n) + n) % n; };
  uint32_t step = 0;

  // Reduce-scatter: at step s send segment r-s, receive segment r-s-1 and add
  // the local values into it as it arrives.
  for (int s = 0; s < n - 1; ++s, ++step) {
    Segment out = SegmentOf(data.size(), n, mod(r - s));
    Segment in = SegmentOf(data.size(), n, mod(r - s - 1));
    float* dst = data.data() + in.begin;
    RETURN_IF_ERROR(transport.SendRecv(
        right, CollectiveTag(op, step), Bytes(data.data() + out.begin, out.size), left,
        CollectiveTag(op, step), in.size * sizeof(float),
        [dst](size_t offset, absl::Span<const std::byte> piece) {
          // Pieces are kPieceAlign-aligned in offset and length (transport.h).
          AddInto(dst + offset / sizeof(float), reinterpret_cast<const float*>(piece.data()),
                  piece.size() / sizeof(float));
        },
        deadline));
  }
  // All-gather: rank r now holds the sum of segment r+1; at step s send
  // segment r+1-s, receive segment r-s.
  for (int s = 0; s < n - 1; ++s, ++step) {
    Segment out = SegmentOf(data.size(), n, mod(r + 1 - s));
    Segment in = SegmentOf(data.size(), n, mod(r - s));
    std::byte* dst = reinterpret_cast<std::byte*>(data.data() + in.begin);
    RETURN_IF_ERROR(transport.SendRecv(
        right, CollectiveTag(op, step), Bytes(data.data() + out.begin, out.size), left,
        CollectiveTag(op, step), in.size * sizeof(float),
        [dst](size_t offset, absl::Span<const std::byte> piece) {
          if (!piece.empty()) std::memcpy(dst + offset, piece.data(), piece.size());
        },
        deadline));
  }
  return absl::OkStatus();
}

absl::Status ExchangeAllReduce(Transport& transport, absl::Span<float> data, uint64_t op,
                               absl::Time deadline) {
  const int n = transport.size();
  const int r = transport.rank();
  if (n == 1) return absl::OkStatus();
  const size_t bytes = data.size() * sizeof(float);
  // inputs[q]: rank q's buffer; ours is a copy, so the sum can go into data.
  std::vector<std::vector<float>> inputs(n);
  inputs[r].assign(data.begin(), data.end());
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    const int from = (r - k + n) % n;
    inputs[from].resize(data.size());
    std::byte* dst = reinterpret_cast<std::byte*>(inputs[from].data());
    RETURN_IF_ERROR(transport.SendRecv(
        to, CollectiveTag(op, k), Bytes(inputs[r].data(), data.size()), from, CollectiveTag(op, k),
        bytes,
        [dst](size_t offset, absl::Span<const std::byte> piece) {
          if (!piece.empty()) std::memcpy(dst + offset, piece.data(), piece.size());
        },
        deadline));
  }
  std::copy(inputs[0].begin(), inputs[0].end(), data.begin());
  for (int q = 1; q < n; ++q) AddInto(data.data(), inputs[q].data(), data.size());
  return absl::OkStatus();
}

absl::Status AllReduce(Transport& transport, absl::Span<float> data, uint64_t op,
                       absl::Time deadline) {
  if (data.size() * sizeof(float) <= kExchangeAllReduceMaxBytes) {
    return ExchangeAllReduce(transport, data, op, deadline);
  }
  return RingAllReduce(transport, data, op, deadline);
}

absl::Status Broadcast(Transport& transport, int root, absl::Span<std::byte> data, uint64_t op,
                       absl::Time deadline, size_t chunk_bytes) {
  const int n = transport.size();
  const int r = transport.rank();
  if (root < 0 || root >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " not in a group of ", n));
  }
  if (n == 1) return absl::OkStatus();
  chunk_bytes = std::max<size_t>(kPieceAlign, chunk_bytes / kPieceAlign * kPieceAlign);
  const int position = (r - root + n) % n;  // 0 at the root, n-1 at the chain's end
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  const size_t chunks = std::max<size_t>(1, (data.size() + chunk_bytes - 1) / chunk_bytes);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * chunk_bytes;
    const size_t size = std::min(chunk_bytes, data.size() - std::min(begin, data.size()));
    absl::Span<std::byte> chunk = data.subspan(begin, size);
    const Tag tag = CollectiveTag(op, static_cast<uint32_t>(c));
    if (position > 0) RETURN_IF_ERROR(transport.Recv(left, tag, chunk, deadline));
    if (position < n - 1) RETURN_IF_ERROR(transport.Send(right, tag, chunk, deadline));
  }
  return absl::OkStatus();
}

absl::Status Broadcast(Transport& transport, int root, absl::Span<float> data, uint64_t op,
                       absl::Time deadline) {
  return Broadcast(
      transport, root,
      absl::Span<std::byte>(reinterpret_cast<std::byte*>(data.data()), data.size() * sizeof(float)),
      op, deadline);
}

absl::Status Barrier(Transport& transport, uint64_t op, absl::Time deadline) {
  // An all-reduce of one value per rank: nobody finishes before everybody
  // has contributed.
  float one = 1.0f;
  return AllReduce(transport, absl::MakeSpan(&one, 1), op, deadline);
}

}  // namespace kubetrain::dist
