#include "operator/kube/work_queue.h"

#include "absl/time/clock.h"
#include "operator/kube/backoff.h"

namespace kubetrain::kube {

WorkQueue::WorkQueue(Options options) : options_(options) {}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_ || dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // Done() queues it again
  PushLocked(key);
}

void WorkQueue::PushLocked(const std::string& key) {
  queue_.push_back(key);
  queued_at_[key] = absl::Now();
  cv_.Signal();
}

void WorkQueue::Add(const std::string& key) {
  absl::MutexLock lock(&mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  if (delay <= absl::ZeroDuration()) {
    Add(key);
    return;
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  absl::Time ready = absl::Now() + delay;
  auto it = delayed_.find(key);
  if (it == delayed_.end() || ready < it->second) delayed_[key] = ready;
  cv_.SignalAll();  // waiters recompute their deadline
}

void WorkQueue::AddRateLimited(const std::string& key) {
  int failures;
  {
    absl::MutexLock lock(&mu_);
    failures = ++failures_[key];
  }
  AddAfter(key, ExponentialBackoff(failures, options_.base_delay, options_.max_delay));
}

void WorkQueue::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  failures_.erase(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::PromoteDueLocked(absl::Time now) {
  for (auto it = delayed_.begin(); it != delayed_.end();) {
    if (it->second <= now) {
      std::string key = it->first;
      it = delayed_.erase(it);
      AddLocked(key);
    } else {
      ++it;
    }
  }
}

std::optional<std::string> WorkQueue::PopLocked(absl::Duration* waited) {
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  if (auto it = queued_at_.find(key); it != queued_at_.end()) {
    if (waited != nullptr) *waited = absl::Now() - it->second;
    queued_at_.erase(it);
  }
  dirty_.erase(key);
  processing_.insert(key);
  return key;
}

std::optional<std::string> WorkQueue::Get(absl::Duration* waited) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (shutting_down_) return std::nullopt;
    PromoteDueLocked(absl::Now());
    if (auto key = PopLocked(waited)) return key;
    if (delayed_.empty()) {
      cv_.Wait(&mu_);
    } else {
      absl::Time earliest = absl::InfiniteFuture();
      for (const auto& [key, t] : delayed_) earliest = std::min(earliest, t);
      cv_.WaitWithDeadline(&mu_, earliest);
    }
  }
}

std::optional<std::string> WorkQueue::TryGet() {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return std::nullopt;
  PromoteDueLocked(absl::Now());
  return PopLocked();
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  processing_.erase(key);
  if (dirty_.count(key) && !shutting_down_) PushLocked(key);
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  cv_.SignalAll();
}

size_t WorkQueue::Len() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace kubetrain::kube
