#include "trainer-runtime/dist/transport.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kubetrain::dist {

absl::Status Transport::SendRecv(int send_peer, Tag send_tag, absl::Span<const std::byte> data,
                                 int recv_peer, Tag recv_tag, size_t recv_size,
                                 PieceConsumer consume, absl::Time deadline) {
  RETURN_IF_ERROR(Send(send_peer, send_tag, data, deadline));
  return RecvInto(recv_peer, recv_tag, recv_size, consume, deadline);
}

absl::Status Transport::Recv(int peer, Tag tag, absl::Span<std::byte> out, absl::Time deadline) {
  return RecvInto(
      peer, tag, out.size(),
      [&](size_t offset, absl::Span<const std::byte> piece) {
        if (!piece.empty()) std::memcpy(out.data() + offset, piece.data(), piece.size());
      },
      deadline);
}

std::string PeerName(int rank, absl::string_view address) {
  if (address.empty()) return absl::StrCat("rank ", rank);
  return absl::StrCat("rank ", rank, " (", address, ")");
}

}  // namespace kubetrain::dist
