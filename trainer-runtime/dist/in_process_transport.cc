#include "trainer-runtime/dist/in_process_transport.h"

#include "absl/strings/str_cat.h"

namespace kubetrain::dist {

class InProcessHub::RankTransport : public Transport {
 public:
  RankTransport(InProcessHub* hub, int rank) : hub_(hub), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }

  absl::Status Send(int peer, Tag tag, absl::Span<const std::byte> data,
                    absl::Time deadline) override {
    if (peer < 0 || peer >= size()) return BadPeer(peer);
    absl::MutexLock lock(&hub_->mu_);
    if (hub_->dead_[rank_])
      return absl::UnavailableError(absl::StrCat("rank ", rank_, " was killed"));
    if (hub_->dead_[peer]) return Lost(peer);
    hub_->mailboxes_[Key(rank_, peer, tag)].emplace_back(data.begin(), data.end());
    return absl::OkStatus();
  }

  absl::Status RecvInto(int peer, Tag tag, size_t size, PieceConsumer consume,
                        absl::Time deadline) override {
    if (peer < 0 || peer >= this->size()) return BadPeer(peer);
    std::vector<std::byte> message;
    {
      absl::MutexLock lock(&hub_->mu_);
      const Key key(peer, rank_, tag);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub_->mu_) {
        auto it = hub_->mailboxes_.find(key);
        return (it != hub_->mailboxes_.end() && !it->second.empty()) || hub_->dead_[peer] ||
               hub_->dead_[rank_];
      };
      if (!hub_->mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
        return absl::DeadlineExceededError(
            absl::StrCat("rank ", rank_, ": no message ", tag, " from rank ", peer, " in time"));
      }
      auto it = hub_->mailboxes_.find(key);
      if (it == hub_->mailboxes_.end() || it->second.empty()) {
        return hub_->dead_[rank_]
                   ? absl::UnavailableError(absl::StrCat("rank ", rank_, " was killed"))
                   : Lost(peer);
      }
      message = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) hub_->mailboxes_.erase(it);
    }
    if (message.size() != size) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": message ", tag,
                                                     " from rank ", peer, " has ", message.size(),
                                                     " bytes, expected ", size));
    }
    consume(0, absl::MakeConstSpan(message));
    return absl::OkStatus();
  }

 private:
  absl::Status BadPeer(int peer) const {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": no peer rank ", peer, " in a group of ", size()));
  }
  absl::Status Lost(int peer) const {
    return absl::UnavailableError(absl::StrCat("rank ", rank_, ": lost peer rank ", peer));
  }

  InProcessHub* hub_;
  int rank_;
};

InProcessHub::InProcessHub(int size) : dead_(size, false) {
  for (int r = 0; r < size; ++r) transports_.push_back(std::make_unique<RankTransport>(this, r));
}

InProcessHub::~InProcessHub() = default;

Transport& InProcessHub::transport(int rank) { return *transports_[rank]; }

void InProcessHub::Kill(int rank) {
  absl::MutexLock lock(&mu_);
  dead_[rank] = true;
}

}  // namespace kubetrain::dist
