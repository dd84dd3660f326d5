#include "trainer-runtime/dist/shm/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kubetrain::dist {
namespace {

constexpr uint64_t kMagic = 0x6b7473686d763031;  // "ktshmv01"
constexpr int kMaxRanks = 64;
constexpr size_t kLine = 64;
static_assert(kLine == kPieceAlign);

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

absl::Status Errno(absl::string_view what, const std::string& name) {
  return absl::InternalError(absl::StrCat(what, " ", name, ": ", std::strerror(errno)));
}

// False once `pid` has exited, including as a zombie its parent has not
// reaped yet (it holds nothing, and will never write again).
bool ProcessAlive(int32_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;  // no /proc: trust kill()
  char line[512];
  size_t n = std::fread(line, 1, sizeof(line) - 1, f);
  std::fclose(f);
  line[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')'.
  const char* close_paren = std::strrchr(line, ')');
  if (close_paren == nullptr || close_paren[1] == '\0') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

}  // namespace

// The segment, all-zero when created (ftruncate), which is its initial state.
struct ShmTransport::Layout {
  struct alignas(kLine) Header {
    std::atomic<uint32_t> init;  // 0 new, 1 being initialised, 2 ready
    uint32_t size;
    uint64_t magic;
    uint64_t ring_bytes;
    std::atomic<int32_t> pid[kMaxRanks];      // non-zero once the rank attached
    std::atomic<uint32_t> closed[kMaxRanks];  // set by a clean shutdown
  };
  struct alignas(kLine) Bell {
    std::atomic<uint32_t> seq;
    std::atomic<uint32_t> waiting;
  };
  struct alignas(kLine) RingHeader {
    std::atomic<uint64_t> head;                 // bytes published by the producer
    alignas(kLine) std::atomic<uint64_t> tail;  // bytes released by the consumer
  };
  struct Record {
    uint64_t tag;
    uint64_t size;
  };

  static size_t BellsOffset() { return RoundUp(sizeof(Header), kLine); }
  static size_t RingsOffset(int size) { return BellsOffset() + size * sizeof(Bell); }
  static size_t RingStride(size_t ring_bytes) { return sizeof(RingHeader) + ring_bytes; }
  static size_t TotalBytes(int size, size_t ring_bytes) {
    return RingsOffset(size) + size_t(size) * size * RingStride(ring_bytes);
  }
};

struct ShmTransport::SendOp {
  int peer;
  Tag tag;
  absl::Span<const std::byte> data;
  bool header_written = false;
  size_t offset = 0;  // payload bytes written
  bool done = false;
};

struct ShmTransport::RecvOp {
  int peer;
  Tag tag;
  size_t size;
  PieceConsumer* consume;
  // Set while draining a message with another tag into early_.
  bool have_record = false;
  Tag record_tag = 0;
  size_t record_size = 0;
  std::vector<std::byte>* stash = nullptr;
  size_t offset = 0;
  bool done = false;
};

namespace {

using Layout = ShmTransport::Layout;

struct RingView {
  Layout::RingHeader* header;
  std::byte* data;
  size_t capacity;
};

RingView Ring(void* base, int size, size_t ring_bytes, int from, int to) {
  auto* p = static_cast<std::byte*>(base) + Layout::RingsOffset(size) +
            (size_t(from) * size + to) * Layout::RingStride(ring_bytes);
  return {reinterpret_cast<Layout::RingHeader*>(p), p + sizeof(Layout::RingHeader), ring_bytes};
}

Layout::Bell& BellOf(void* base, int rank) {
  return reinterpret_cast<Layout::Bell*>(static_cast<std::byte*>(base) +
                                         Layout::BellsOffset())[rank];
}

Layout::Header& HeaderOf(void* base) { return *static_cast<Layout::Header*>(base); }

void Notify(Layout::Bell& bell) {
  bell.seq.fetch_add(1, std::memory_order_seq_cst);
  if (bell.waiting.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell.seq), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Connect(const std::string& name,
                                                                    int rank, int size,
                                                                    const Options& options,
                                                                    absl::Time deadline) {
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("shm group ", name, ": rank ", rank, " of ",
                                                   size, " (at most ", kMaxRanks, ")"));
  }
  if (options.ring_bytes < 4096 || (options.ring_bytes & (options.ring_bytes - 1)) != 0 ||
      options.piece_bytes < kLine) {
    return absl::InvalidArgumentError(absl::StrCat("shm group ", name, ": ring_bytes ",
                                                   options.ring_bytes,
                                                   " must be a power of two >= 4096"));
  }
  if (name.empty() || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm group name \"", name, "\" must be non-empty, without '/'"));
  }
  const std::string path = "/" + name;
  const size_t total = Layout::TotalBytes(size, options.ring_bytes);
  int fd = shm_open(path.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return Errno("shm_open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return Errno("fstat", path);
  }
  // Every rank sizes the segment before mapping it, so no rank touches pages
  // past its end; all want the same size, so the order does not matter.
  if (static_cast<size_t>(st.st_size) < total && ftruncate(fd, total) != 0) {
    close(fd);
    return Errno("ftruncate", path);
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("mmap", path);

  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->name_ = path;
  t->rank_ = rank;
  t->size_ = size;
  t->options_ = options;
  t->options_.piece_bytes = RoundUp(options.piece_bytes, kLine);
  t->base_ = base;
  t->mapped_bytes_ = total;
  t->early_.resize(size);

  Layout::Header& header = HeaderOf(base);
  uint32_t expected = 0;
  if (header.init.compare_exchange_strong(expected, 1)) {
    header.size = size;
    header.ring_bytes = options.ring_bytes;
    header.magic = kMagic;
    header.init.store(2);
  } else {
    while (header.init.load() != 2) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("shm group ", path, ": never initialised"));
      }
      usleep(100);
    }
  }
  if (header.magic != kMagic || header.size != static_cast<uint32_t>(size) ||
      header.ring_bytes != options.ring_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shm group ", path, " exists with ", header.size, " ranks and rings of ", header.ring_bytes,
        " bytes; this rank wants ", size, " and ", options.ring_bytes, " (stale segment?)"));
  }
  int32_t none = 0;
  if (!header.pid[rank].compare_exchange_strong(none, static_cast<int32_t>(getpid()))) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm group ", path, ": rank ", rank, " already attached by pid ", none));
  }
  // Wait for everybody, backing off up to 10 ms between looks.
  absl::Duration pause = absl::Microseconds(50);
  for (;;) {
    std::string missing;
    for (int r = 0; r < size; ++r) {
      if (header.pid[r].load() == 0) absl::StrAppend(&missing, missing.empty() ? "" : ", ", r);
    }
    if (missing.empty()) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("shm group ", path, ": ranks ", missing, " never attached"));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(10));
  }
  // Everybody has it mapped: the name is no longer needed.
  if (rank == 0) shm_unlink(path.c_str());
  return t;
}

ShmTransport::~ShmTransport() {
  if (base_ == nullptr) return;
  Layout::Header& header = HeaderOf(base_);
  if (header.pid[rank_].load() == getpid()) {
    header.closed[rank_].store(1);
    for (int r = 0; r < size_; ++r) Notify(BellOf(base_, r));
  }
  if (rank_ == 0) shm_unlink(name_.c_str());
  munmap(base_, mapped_bytes_);
}

absl::Status ShmTransport::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm rank ", rank_, ": no peer rank ", peer, " in a group of ", size_));
  }
  return absl::OkStatus();
}

absl::Status ShmTransport::PeerGone(int peer) const {
  const Layout::Header& header = HeaderOf(base_);
  const int32_t pid = header.pid[peer].load();
  if (header.closed[peer].load() != 0) {
    return absl::UnavailableError(absl::StrCat("shm rank ", rank_, ": peer rank ", peer, " (pid ",
                                               pid, ") closed its transport"));
  }
  if (pid > 0 && !ProcessAlive(pid)) {
    return absl::UnavailableError(
        absl::StrCat("shm rank ", rank_, ": peer rank ", peer, " (pid ", pid, ") is gone"));
  }
  return absl::OkStatus();
}

bool ShmTransport::TryWrite(SendOp& op) {
  RingView ring = Ring(base_, size_, options_.ring_bytes, rank_, op.peer);
  const uint64_t head = ring.header->head.load(std::memory_order_relaxed);
  const uint64_t tail = ring.header->tail.load(std::memory_order_acquire);
  uint64_t free_bytes = ring.capacity - (head - tail);
  uint64_t pos = head;
  if (!op.header_written) {
    if (free_bytes < kLine) return false;
    Layout::Record record{op.tag, op.data.size()};
    std::memcpy(ring.data + (pos & (ring.capacity - 1)), &record, sizeof(record));
    pos += kLine;
    free_bytes -= kLine;
    op.header_written = true;
  }
  // Payload in pieces, each published on its own so the reader can start.
  while (op.offset < op.data.size() && free_bytes >= kLine) {
    const size_t at = pos & (ring.capacity - 1);
    const size_t contiguous = ring.capacity - at;
    size_t n = std::min({op.data.size() - op.offset, free_bytes, contiguous, options_.piece_bytes});
    // Keep pieces whole lines unless this is the last one.
    if (op.offset + n < op.data.size()) n = n / kLine * kLine;
    if (n == 0) break;
    std::memcpy(ring.data + at, op.data.data() + op.offset, n);
    op.offset += n;
    pos += RoundUp(n, kLine);
    free_bytes -= RoundUp(n, kLine);
    ring.header->head.store(pos, std::memory_order_release);
    Notify(BellOf(base_, op.peer));
  }
  const bool progressed = pos != head;
  if (progressed && ring.header->head.load(std::memory_order_relaxed) != pos) {
    ring.header->head.store(pos, std::memory_order_release);
    Notify(BellOf(base_, op.peer));
  }
  op.done = op.header_written && op.offset == op.data.size();
  return progressed;
}

absl::StatusOr<bool> ShmTransport::TryRead(RecvOp& op) {
  auto& early = early_[op.peer];
  if (!op.have_record) {
    // An earlier message may already have been set aside.
    if (auto it = early.find(op.tag); it != early.end()) {
      std::vector<std::byte> message = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) early.erase(it);
      if (message.size() != op.size) {
        return absl::InvalidArgumentError(
            absl::StrCat("shm rank ", rank_, ": message ", op.tag, " from rank ", op.peer, " has ",
                         message.size(), " bytes, expected ", op.size));
      }
      (*op.consume)(0, absl::MakeConstSpan(message));
      op.done = true;
      return true;
    }
  }
  RingView ring = Ring(base_, size_, options_.ring_bytes, op.peer, rank_);
  const uint64_t tail = ring.header->tail.load(std::memory_order_relaxed);
  const uint64_t head = ring.header->head.load(std::memory_order_acquire);
  uint64_t pos = tail;
  bool progressed = false;
  while (!op.done) {
    if (!op.have_record) {
      if (head - pos < kLine) break;
      Layout::Record record;
      std::memcpy(&record, ring.data + (pos & (ring.capacity - 1)), sizeof(record));
      pos += kLine;
      progressed = true;
      op.have_record = true;
      op.record_tag = record.tag;
      op.record_size = record.size;
      op.offset = 0;
      if (record.tag == op.tag) {
        if (record.size != op.size) {
          ring.header->tail.store(pos, std::memory_order_release);
          return absl::InvalidArgumentError(
              absl::StrCat("shm rank ", rank_, ": message ", op.tag, " from rank ", op.peer,
                           " has ", record.size, " bytes, expected ", op.size));
        }
        op.stash = nullptr;
      } else {
        auto& queue = early[record.tag];
        queue.emplace_back(record.size);
        op.stash = &queue.back();
      }
    }
    // Payload: whatever is published, up to the ring's end.
    while (op.offset < op.record_size && head - pos >= 1) {
      const size_t at = pos & (ring.capacity - 1);
      const size_t available = std::min<uint64_t>(head - pos, ring.capacity - at);
      const size_t n = std::min<size_t>(op.record_size - op.offset, available);
      absl::Span<const std::byte> piece(ring.data + at, n);
      if (op.stash != nullptr) {
        std::memcpy(op.stash->data() + op.offset, piece.data(), n);
      } else {
        (*op.consume)(op.offset, piece);
      }
      op.offset += n;
      pos += RoundUp(n, kLine);
      progressed = true;
      // Give the space back at once: the sender may be waiting for it.
      ring.header->tail.store(pos, std::memory_order_release);
      Notify(BellOf(base_, op.peer));
    }
    if (op.offset < op.record_size) break;
    // A whole message.
    op.have_record = false;
    if (op.stash == nullptr) {
      op.done = true;
    } else {
      op.stash = nullptr;
      // The next record may be the one wanted; loop.
    }
  }
  if (pos != tail) {
    ring.header->tail.store(pos, std::memory_order_release);
    Notify(BellOf(base_, op.peer));
  }
  return progressed;
}

absl::Status ShmTransport::WaitForProgress(uint32_t seen, int peer_a, int peer_b,
                                           absl::Time deadline) {
  // Nothing could move since the doorbell read `seen`: spin a little (the peer
  // is usually about to publish), then sleep on the doorbell in short slices.
  Layout::Bell& bell = BellOf(base_, rank_);
  for (int i = 0; i < options_.spin_iterations; ++i) {
    if (bell.seq.load(std::memory_order_acquire) != seen) return absl::OkStatus();
    CpuRelax();
  }
  if (options_.yield_for > absl::ZeroDuration()) {
    const absl::Time yield_until = std::min(deadline, absl::Now() + options_.yield_for);
    for (int i = 0;; ++i) {
      if (bell.seq.load(std::memory_order_acquire) != seen) return absl::OkStatus();
      sched_yield();
      if ((i & 15) == 15 && absl::Now() >= yield_until) break;
    }
  }
  bell.waiting.fetch_add(1, std::memory_order_seq_cst);
  if (bell.seq.load(std::memory_order_seq_cst) == seen) {
    absl::Duration left = deadline - absl::Now();
    absl::Duration slice = std::max(absl::ZeroDuration(), std::min(left, absl::Milliseconds(20)));
    struct timespec ts = absl::ToTimespec(slice);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell.seq), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  bell.waiting.fetch_sub(1, std::memory_order_seq_cst);
  if (bell.seq.load(std::memory_order_acquire) != seen) return absl::OkStatus();
  for (int peer : {peer_a, peer_b}) {
    if (peer >= 0) RETURN_IF_ERROR(PeerGone(peer));
  }
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(absl::StrCat("shm rank ", rank_, ": peer rank ",
                                                    peer_a >= 0 ? peer_a : peer_b,
                                                    " did not answer in time"));
  }
  return absl::OkStatus();
}

absl::Status ShmTransport::Progress(SendOp* send, RecvOp* recv, absl::Time deadline) {
  Layout::Bell& bell = BellOf(base_, rank_);
  for (;;) {
    // Read before looking at the rings, so a change made after the look is
    // seen as a new doorbell value and the wait returns at once.
    const uint32_t seen = bell.seq.load(std::memory_order_seq_cst);
    bool progressed = false;
    if (send != nullptr && !send->done) progressed |= TryWrite(*send);
    if (recv != nullptr && !recv->done) {
      ASSIGN_OR_RETURN(bool read, TryRead(*recv));
      progressed |= read;
    }
    const bool done = (send == nullptr || send->done) && (recv == nullptr || recv->done);
    if (done) return absl::OkStatus();
    if (progressed) continue;
    absl::Status waited =
        WaitForProgress(seen, send != nullptr && !send->done ? send->peer : -1,
                        recv != nullptr && !recv->done ? recv->peer : -1, deadline);
    if (!waited.ok()) return waited;
  }
}

absl::Status ShmTransport::Send(int peer, Tag tag, absl::Span<const std::byte> data,
                                absl::Time deadline) {
  RETURN_IF_ERROR(CheckPeer(peer));
  SendOp op{peer, tag, data};
  return Progress(&op, nullptr, deadline);
}

absl::Status ShmTransport::RecvInto(int peer, Tag tag, size_t size, PieceConsumer consume,
                                    absl::Time deadline) {
  RETURN_IF_ERROR(CheckPeer(peer));
  RecvOp op{peer, tag, size, &consume};
  return Progress(nullptr, &op, deadline);
}

absl::Status ShmTransport::SendRecv(int send_peer, Tag send_tag, absl::Span<const std::byte> data,
                                    int recv_peer, Tag recv_tag, size_t recv_size,
                                    PieceConsumer consume, absl::Time deadline) {
  RETURN_IF_ERROR(CheckPeer(send_peer));
  RETURN_IF_ERROR(CheckPeer(recv_peer));
  SendOp send{send_peer, send_tag, data};
  RecvOp recv{recv_peer, recv_tag, recv_size, &consume};
  return Progress(&send, &recv, deadline);
}

}  // namespace kubetrain::dist
