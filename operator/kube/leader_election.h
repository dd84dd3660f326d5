#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "operator/kube/cluster_client.h"

namespace kubetrain::kube {

struct LeaderElectionConfig {
  std::string ns;
  std::string lease_name = "kubetrain-operator";
  std::string identity;  // unique per operator process (hostname_pid)
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
};

// Leader election over a coordination.k8s.io/v1 Lease, as client-go's
// leaderelection does it:
//  - the lease is free when it does not exist, has no holder, or its holder
//    has not renewed it for leaseDurationSeconds — measured on OUR clock from
//    the moment we first saw its current renewTime, so clock skew between
//    operators does not matter;
//  - acquiring and renewing are conditional updates (resourceVersion), so of
//    two candidates only one wins; the loser sees 409 and stays a follower;
//  - the leader renews every retry_period and gives up (on_stopped) when it
//    could not renew for renew_deadline;
//  - Release() empties the holder so a successor does not wait a full lease.
// Thread-safe.
class LeaderElector {
 public:
  LeaderElector(ClusterClient* client, LeaderElectionConfig config);
  ~LeaderElector();

  // One attempt at time `now`: true when we hold the lease afterwards.
  // Errors only for failures other than losing the race.
  absl::StatusOr<bool> TryAcquireOrRenew(absl::Time now);

  // Runs the election loop on a thread: on_started when we become leader,
  // on_stopped when we lose the lease (never called before on_started).
  void Start(std::function<void()> on_started, std::function<void()> on_stopped);
  // Stops the loop and releases the lease if we hold it.
  void Stop();
  absl::Status Release(absl::Time now);

  bool IsLeader() const { return leader_.load(); }

 private:
  void Loop(std::function<void()> on_started, std::function<void()> on_stopped);

  ClusterClient* const client_;
  const LeaderElectionConfig config_;
  std::atomic<bool> leader_{false};

  absl::Mutex mu_;
  std::string observed_record_ ABSL_GUARDED_BY(mu_);  // holder + renewTime last seen
  absl::Time observed_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// RFC 3339 with microseconds, as Kubernetes' MicroTime ("2026-01-02T15:04:05.000000Z").
std::string FormatMicroTime(absl::Time t);

}  // namespace kubetrain::kube
