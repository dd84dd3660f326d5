#include "trainer-runtime/dist/grpc/grpc_transport.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <list>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/stable_hash.h"
#include "common/status_macros.h"
#include "kubetrain/v1/runtime.grpc.pb.h"

namespace kubetrain::dist {
namespace {

using v1::TransportFrame;
using v1::TransportSummary;

int Millis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

// Messages arriving from one peer, in arrival order.
class Mailbox {
 public:
  enum class State { kWaiting, kConnected, kClosed, kLost };

  // Server side: a DATA frame. Returns false on a protocol error.
  bool Add(TransportFrame& frame) {
    absl::MutexLock lock(&mu_);
    if (frame.offset() == 0) {
      messages_.push_back(Message{frame.tag(), frame.message_size()});
    } else if (messages_.empty() || messages_.back().tag != frame.tag() ||
               messages_.back().received != frame.offset()) {
      return false;
    }
    Message& m = messages_.back();
    m.received += frame.data().size();
    if (m.received > m.size) return false;
    m.frames.push_back(std::move(*frame.mutable_data()));
    return true;
  }

  void SetState(State state, std::string why) {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kClosed || state_ == State::kLost) return;
    state_ = state;
    why_ = std::move(why);
  }

  State state() {
    absl::MutexLock lock(&mu_);
    return state_;
  }

  // Waits until the peer's stream has arrived (or already ended).
  bool AwaitStream(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ != State::kWaiting; };
    return mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline);
  }

  // Consumes message `tag` of `size` bytes as its frames arrive.
  absl::Status Take(Tag tag, size_t size, PieceConsumer consume, absl::Time deadline,
                    const std::string& peer, int self) {
    absl::MutexLock lock(&mu_);
    std::list<Message>::iterator it;
    auto found = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (it = messages_.begin(); it != messages_.end(); ++it) {
        if (it->tag == tag && !it->taken) return true;
      }
      return state_ == State::kClosed || state_ == State::kLost;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&found), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", self, ": no message ", tag, " from ", peer, " in time"));
    }
    if (it == messages_.end()) return Gone(peer, self);
    if (it->size != size) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", self, ": message ", tag, " from ",
                                                     peer, " has ", it->size, " bytes, expected ",
                                                     size));
    }
    it->taken = true;
    size_t offset = 0;
    while (offset < size) {
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !it->frames.empty() || state_ == State::kClosed || state_ == State::kLost;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
        return absl::DeadlineExceededError(absl::StrCat("rank ", self, ": message ", tag, " from ",
                                                        peer, " stalled at byte ", offset));
      }
      if (it->frames.empty()) return Gone(peer, self);
      std::string frame = std::move(it->frames.front());
      it->frames.pop_front();
      mu_.Unlock();
      consume(offset, absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(frame.data()),
                                                  frame.size()));
      mu_.Lock();
      offset += frame.size();
    }
    messages_.erase(it);
    return absl::OkStatus();
  }

 private:
  struct Message {
    Tag tag;
    size_t size;
    size_t received = 0;
    bool taken = false;
    std::deque<std::string> frames{};
  };

  absl::Status Gone(const std::string& peer, int self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::UnavailableError(
        absl::StrCat("rank ", self, ": ", state_ == State::kClosed ? "peer closed: " : "lost peer ",
                     peer, why_.empty() ? "" : ": ", why_));
  }

  absl::Mutex mu_;
  std::list<Message> messages_ ABSL_GUARDED_BY(mu_);
  State state_ ABSL_GUARDED_BY(mu_) = State::kWaiting;
  std::string why_ ABSL_GUARDED_BY(mu_);
};

// The stream to one peer and the thread that writes to it.
class Outgoing {
 public:
  struct Job {
    Tag tag;
    absl::Span<const std::byte> data;
    bool done = false;
    bool ok = true;
  };

  Outgoing(std::string name, size_t frame_bytes, int self, std::string group)
      : name_(std::move(name)), frame_bytes_(frame_bytes), self_(self), group_(std::move(group)) {}

  ~Outgoing() { Close(); }

  const std::string& name() const { return name_; }

  absl::Status Open(std::shared_ptr<grpc::Channel> channel) {
    stub_ = v1::RuntimeTransport::NewStub(channel);
    writer_ = stub_->Exchange(&context_, &summary_);
    TransportFrame hello;
    hello.set_kind(TransportFrame::HELLO);
    hello.set_from_rank(self_);
    hello.set_group(group_);
    if (!writer_->Write(hello)) {
      grpc::Status status = writer_->Finish();
      writer_.reset();
      return absl::UnavailableError(absl::StrCat("rank ", self_, ": cannot open a stream to ",
                                                 name_, ": ", status.error_message()));
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  // Queues `job` for the writer thread.
  absl::Status Start(Job* job) {
    absl::MutexLock lock(&mu_);
    if (writer_ == nullptr || broken_) return Broken();
    queue_.push_back(job);
    return absl::OkStatus();
  }

  // Waits for `job`; past the deadline the stream is cancelled (the peer is
  // not reading) and the job fails.
  absl::Status Wait(Job* job, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto done = [job]() { return job->done; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
      broken_ = true;
      why_ = "the peer did not take the data in time";
      context_.TryCancel();
      mu_.Await(absl::Condition(&done));
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", self_, ": sending to ", name_, " did not finish in time"));
    }
    return job->ok ? absl::OkStatus() : Broken();
  }

  void Close() {
    {
      absl::MutexLock lock(&mu_);
      if (writer_ == nullptr) return;
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
    if (!broken_) {
      TransportFrame bye;
      bye.set_kind(TransportFrame::BYE);
      writer_->Write(bye);
      writer_->WritesDone();
    } else {
      context_.TryCancel();
    }
    writer_->Finish();
    writer_.reset();
  }

 private:
  absl::Status Broken() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::UnavailableError(
        absl::StrCat("rank ", self_, ": lost peer ", name_, why_.empty() ? "" : ": ", why_));
  }

  void Run() {
    TransportFrame frame;
    frame.set_kind(TransportFrame::DATA);
    for (;;) {
      Job* job;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;
        job = queue_.front();
        queue_.pop_front();
      }
      bool ok = !broken_;
      size_t offset = 0;
      do {
        size_t n = std::min(frame_bytes_, job->data.size() - offset);
        frame.set_tag(job->tag);
        frame.set_message_size(job->data.size());
        frame.set_offset(offset);
        frame.set_data(reinterpret_cast<const char*>(job->data.data()) + offset, n);
        ok = ok && writer_->Write(frame);
        offset += n;
      } while (ok && offset < job->data.size());
      absl::MutexLock lock(&mu_);
      if (!ok && !broken_) {
        broken_ = true;
        why_ = "the stream broke";
      }
      job->ok = ok;
      job->done = true;
    }
  }

  const std::string name_;
  const size_t frame_bytes_;
  const int self_;
  const std::string group_;
  std::unique_ptr<v1::RuntimeTransport::Stub> stub_;
  grpc::ClientContext context_;
  TransportSummary summary_;
  std::unique_ptr<grpc::ClientWriter<TransportFrame>> writer_;
  std::thread thread_;

  absl::Mutex mu_;
  std::deque<Job*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> broken_ = false;
  std::string why_ ABSL_GUARDED_BY(mu_);
};

grpc::ChannelArguments KeepaliveArgs(const GrpcTransport::Options& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(options.keepalive_timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Peers that are not up yet are retried quickly (DNS may lag).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // One connection per peer, not shared with other channels.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

class GrpcTransportImpl final : public GrpcTransport, public v1::RuntimeTransport::Service {
 public:
  GrpcTransportImpl(int rank, int size, const Options& options)
      : rank_(rank), size_(size), options_(options), mailboxes_(size) {
    for (auto& m : mailboxes_) m = std::make_unique<Mailbox>();
    options_.frame_bytes = std::max(kPieceAlign, options.frame_bytes / kPieceAlign * kPieceAlign);
  }

  ~GrpcTransportImpl() override {
    for (auto& out : outgoing_) {
      if (out) out->Close();
    }
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
    }
  }

  absl::Status Start(const std::string& bind_address) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(bind_address, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    builder.SetMaxReceiveMessageSize(-1);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options_.keepalive_time));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(options_.keepalive_timeout));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("rank ", rank_, ": cannot serve on ", bind_address, " (address in use?)"));
    }
    return absl::OkStatus();
  }

  int port() const override { return port_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status Connect(const std::vector<std::string>& addresses, absl::Time deadline) override {
    if (static_cast<int>(addresses.size()) != size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": ", addresses.size(), " addresses for ", size_, " ranks"));
    }
    addresses_ = addresses;
    outgoing_.resize(size_);
    std::vector<std::shared_ptr<grpc::Channel>> channels(size_);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      channels[peer] = grpc::CreateCustomChannel(
          addresses[peer], grpc::InsecureChannelCredentials(), KeepaliveArgs(options_));
    }
    // Wait for all peers at once: each channel retries with backoff.
    std::string missing;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (!channels[peer]->WaitForConnected(absl::ToChronoTime(deadline))) {
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", Name(peer));
      }
    }
    if (!missing.empty()) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", rank_, ": peers not reachable before the deadline: ", missing));
    }
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      outgoing_[peer] =
          std::make_unique<Outgoing>(Name(peer), options_.frame_bytes, rank_, options_.group);
      RETURN_IF_ERROR(outgoing_[peer]->Open(channels[peer]));
    }
    // Every peer opens its stream to us as we did to it. One that answers but
    // never does is not of this group (another run at a reused address, a
    // process that refused our HELLO): without its stream a receive from it
    // could only wait out its whole deadline.
    std::string silent;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (!mailboxes_[peer]->AwaitStream(deadline)) {
        absl::StrAppend(&silent, silent.empty() ? "" : ", ", Name(peer));
      }
    }
    if (!silent.empty()) {
      absl::MutexLock lock(&refused_mu_);
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", rank_,
          ": peers answered but opened no stream back before the deadline "
          "(are they tasks of another run?): ",
          silent,
          refused_.empty() ? "" : absl::StrCat("; refused here: ", absl::StrJoin(refused_, "; "))));
    }
    return absl::OkStatus();
  }

  absl::Status Send(int peer, Tag tag, absl::Span<const std::byte> data,
                    absl::Time deadline) override {
    RETURN_IF_ERROR(CheckOutgoing(peer));
    Outgoing::Job job{tag, data};
    RETURN_IF_ERROR(outgoing_[peer]->Start(&job));
    return outgoing_[peer]->Wait(&job, deadline);
  }

  absl::Status RecvInto(int peer, Tag tag, size_t size, PieceConsumer consume,
                        absl::Time deadline) override {
    if (peer < 0 || peer >= size_ || peer == rank_) return BadPeer(peer);
    return mailboxes_[peer]->Take(tag, size, consume, deadline, Name(peer), rank_);
  }

  // The send runs on the peer's writer thread while this thread receives.
  absl::Status SendRecv(int send_peer, Tag send_tag, absl::Span<const std::byte> data,
                        int recv_peer, Tag recv_tag, size_t recv_size, PieceConsumer consume,
                        absl::Time deadline) override {
    RETURN_IF_ERROR(CheckOutgoing(send_peer));
    Outgoing::Job job{send_tag, data};
    RETURN_IF_ERROR(outgoing_[send_peer]->Start(&job));
    absl::Status received = RecvInto(recv_peer, recv_tag, recv_size, consume, deadline);
    // The job points at the caller's data: it must finish (or be cancelled)
    // before returning, whatever happened to the receive.
    absl::Status sent = outgoing_[send_peer]->Wait(&job, received.ok() ? deadline : absl::Now());
    return received.ok() ? sent : received;
  }

  // RuntimeTransport.Exchange: one peer's stream into our mailboxes.
  grpc::Status Exchange(grpc::ServerContext* context, grpc::ServerReader<TransportFrame>* reader,
                        TransportSummary* summary) override {
    TransportFrame frame;
    if (!reader->Read(&frame)) return grpc::Status::OK;
    if (frame.kind() != TransportFrame::HELLO || frame.group() != options_.group ||
        frame.from_rank() < 0 || frame.from_rank() >= size_ || frame.from_rank() == rank_) {
      const std::string refusal =
          absl::StrCat("a stream from rank ", frame.from_rank(), " of group ", frame.group(),
                       " (this is rank ", rank_, " of ", size_, " in group ", options_.group, ")");
      {
        absl::MutexLock lock(&refused_mu_);
        // The first few say what happened; a flood would only repeat them.
        if (refused_.size() < 3) refused_.push_back(refusal);
      }
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "refused " + refusal);
    }
    const int peer = frame.from_rank();
    Mailbox& mailbox = *mailboxes_[peer];
    mailbox.SetState(Mailbox::State::kConnected, "");
    uint64_t frames = 0;
    while (reader->Read(&frame)) {
      ++frames;
      if (frame.kind() == TransportFrame::BYE) {
        mailbox.SetState(Mailbox::State::kClosed, "it closed its transport");
        summary->set_frames(frames);
        return grpc::Status::OK;
      }
      if (frame.kind() != TransportFrame::DATA || !mailbox.Add(frame)) {
        mailbox.SetState(Mailbox::State::kLost, "it broke the frame protocol");
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad frame");
      }
    }
    mailbox.SetState(Mailbox::State::kLost,
                     context->IsCancelled() ? "its stream was cancelled (crashed or unreachable)"
                                            : "its stream ended without a goodbye (crashed?)");
    return grpc::Status::OK;
  }

 private:
  std::string Name(int peer) const {
    return PeerName(peer, peer < static_cast<int>(addresses_.size()) ? addresses_[peer] : "");
  }
  absl::Status BadPeer(int peer) const {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": no peer rank ", peer, " in a group of ", size_));
  }
  absl::Status CheckOutgoing(int peer) const {
    if (peer < 0 || peer >= size_ || peer == rank_) return BadPeer(peer);
    if (peer >= static_cast<int>(outgoing_.size()) || outgoing_[peer] == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank_, ": not connected to ", Name(peer)));
    }
    return absl::OkStatus();
  }

  const int rank_;
  const int size_;
  Options options_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<Outgoing>> outgoing_;
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
  absl::Mutex refused_mu_;
  std::vector<std::string> refused_ ABSL_GUARDED_BY(refused_mu_);
};

// The addresses in rank order, hashed: the same in every task of a run (they
// all read one cluster spec).
std::string ClusterFingerprint(const std::vector<std::string>& addresses) {
  return absl::StrCat(absl::Hex(StableHash(absl::StrJoin(addresses, ",")), absl::kZeroPad16));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Listen(
    int rank, int size, const std::string& bind_address, const Options& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", size));
  }
  auto transport = std::make_unique<GrpcTransportImpl>(rank, size, options);
  RETURN_IF_ERROR(transport->Start(bind_address));
  return std::unique_ptr<GrpcTransport>(std::move(transport));
}

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Join(
    const std::vector<std::string>& addresses, int rank, const Options& options,
    absl::Time deadline) {
  if (rank < 0 || rank >= static_cast<int>(addresses.size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", addresses.size()));
  }
  const std::string& own = addresses[rank];
  const std::string bind_address = absl::StrCat("0.0.0.0:", own.substr(own.rfind(':') + 1));
  Options joined = options;
  joined.group = absl::StrCat(options.group, "@", ClusterFingerprint(addresses));
  ASSIGN_OR_RETURN(std::unique_ptr<GrpcTransport> transport,
                   Listen(rank, static_cast<int>(addresses.size()), bind_address, joined));
  RETURN_IF_ERROR(transport->Connect(addresses, deadline));
  return transport;
}

GrpcTransport::~GrpcTransport() = default;

}  // namespace kubetrain::dist
