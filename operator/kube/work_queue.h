#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kubetrain::kube {

// The controller's queue of keys ("namespace/name" of a TrainingJob), with
// client-go's workqueue guarantees:
//  - de-duplication: a key waiting in the queue is there once, however many
//    times it is added;
//  - a key is never handed to two workers at once: added while being
//    processed, it is queued again only when the worker calls Done();
//  - AddAfter: the key becomes ready after a delay (the earliest of several
//    pending delays wins);
//  - AddRateLimited: per-key exponential backoff (base * 2^(n-1), capped),
//    reset by Forget() after a success.
// Thread-safe. After ShutDown(), Get() drains nothing more and returns nullopt.
class WorkQueue {
 public:
  struct Options {
    absl::Duration base_delay = absl::Milliseconds(5);
    absl::Duration max_delay = absl::Seconds(300);
  };
  WorkQueue() : WorkQueue(Options()) {}
  explicit WorkQueue(Options options);

  void Add(const std::string& key);
  void AddAfter(const std::string& key, absl::Duration delay);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;

  // Blocks until a key is ready (or ShutDown). The caller must call Done(key).
  // `waited`, when not null, receives how long the key sat ready in the queue
  // before this Get took it (the work-queue wait metric).
  std::optional<std::string> Get(absl::Duration* waited = nullptr);
  // Non-blocking Get: nullopt when nothing is ready now.
  std::optional<std::string> TryGet();
  void Done(const std::string& key);

  void ShutDown();
  size_t Len() const;  // keys ready now (not delayed, not processing)

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PromoteDueLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<std::string> PopLocked(absl::Duration* waited = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);                  // queued or to be requeued
  std::set<std::string> processing_ ABSL_GUARDED_BY(mu_);             // handed out, not Done
  std::map<std::string, absl::Time> queued_at_ ABSL_GUARDED_BY(mu_);  // keys in queue_
  std::map<std::string, absl::Time> delayed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kubetrain::kube
