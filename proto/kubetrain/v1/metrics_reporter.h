#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kubetrain/v1/metrics.grpc.pb.h"

namespace kubetrain::metrics {

// Reads one environment variable; nullopt when unset. Tests pass a map.
using GetEnvFn = std::function<std::optional<std::string>(const char*)>;

// The trial side of the Metrics service: reports a trial's metric values to
// the operator. Thread-safe (gRPC stubs are); one per trial task.
class MetricsReporter {
 public:
  struct Identity {
    std::string job;    // "namespace/name"
    std::string trial;  // CLOUD_ML_TRIAL_ID
    std::string task;   // e.g. "master-0"

    // The identity the operator gives a trial replica (operator/core
    // desired_replicas.cc, MakeReplica): job = KUBETRAIN_NAMESPACE "/"
    // KUBETRAIN_JOB_NAME (an empty namespace is "default", as for the
    // replica's Service names), trial = KUBETRAIN_TRIAL_ID, task =
    // KUBETRAIN_TASK_TYPE "-" KUBETRAIN_TASK_INDEX. FailedPrecondition naming
    // the variable when one is unset (or, but for the namespace, empty) or
    // when the index is not a non-negative integer.
    static absl::StatusOr<Identity> FromEnvironment(const GetEnvFn& getenv = nullptr);
  };

  // How Report retries. The operator runs two replicas: during a leader
  // change the answer is UNAVAILABLE ("not the leader"), and while its
  // Service endpoint moves the connection is refused (UNAVAILABLE) or hangs
  // (DEADLINE_EXCEEDED). Those two codes are retried, with a backoff that
  // starts at initial_backoff and doubles up to max_backoff, until `deadline`
  // has passed since the first attempt; any other error (PERMISSION_DENIED,
  // INVALID_ARGUMENT, ...) is returned at once. The deadline decides whether
  // another attempt starts; each attempt has attempt_timeout, so the last
  // one may end up to that much after the deadline.
  struct RetryOptions {
    std::chrono::milliseconds deadline = std::chrono::seconds(60);  // all attempts together
    std::chrono::milliseconds attempt_timeout = std::chrono::seconds(10);
    std::chrono::milliseconds initial_backoff = std::chrono::milliseconds(250);
    std::chrono::milliseconds max_backoff = std::chrono::seconds(5);
    // The clock the deadline is measured on; null: std::chrono::steady_clock.
    std::function<std::chrono::steady_clock::time_point()> now;
    // Waits `pause` before the next attempt, after `failure` (the last
    // attempt's error); returns false to stop retrying (the caller is
    // shutting down, or has something newer to send). Null: sleeps.
    std::function<bool(std::chrono::milliseconds pause, const absl::Status& failure)> wait;
  };

  // Connects (lazily, as gRPC channels do) to `address` ("host:port"). The
  // channel re-resolves and reconnects within seconds after a failure (not
  // gRPC's default of up to two minutes), so a retry soon reaches an
  // operator that has moved or come back.
  static std::unique_ptr<MetricsReporter> Create(const std::string& address, Identity identity,
                                                 std::string token);

  // Reads KUBETRAIN_METRICS_ADDR and KUBETRAIN_METRICS_TOKEN through `getenv`
  // (the process environment by default). FailedPrecondition naming the
  // variable when one is unset or empty.
  static absl::StatusOr<std::unique_ptr<MetricsReporter>> FromEnvironment(
      Identity identity, const GetEnvFn& getenv = nullptr);

  // Sends one report and waits for the answer, at most `timeout`; one
  // attempt. `final` marks the trainer's last evaluation (metrics.proto). The service's status
  // comes back as is (PERMISSION_DENIED for a wrong token, UNAVAILABLE/DEADLINE_EXCEEDED when the
  // operator cannot be reached), with the address in the message.
  absl::Status Report(int64_t step, const std::map<std::string, double>& values,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10),
                      bool final = false);

  // Report, retried as `retry` says. On failure: the last attempt's status
  // (its code, so that callers can tell retryable from permanent), its
  // message saying how many attempts were made over how long.
  absl::Status ReportWithRetry(int64_t step, const std::map<std::string, double>& values,
                               const RetryOptions& retry, bool final = false);

  // Cancels the attempts in flight and makes every later one fail with
  // CANCELLED at once: for a caller that is giving up (e.g. at exit).
  void Cancel();

  const std::string& address() const { return address_; }
  const Identity& identity() const { return identity_; }

 private:
  MetricsReporter(std::string address, Identity identity, std::string token);

  std::string address_;
  Identity identity_;
  std::string token_;
  std::unique_ptr<v1::Metrics::Stub> stub_;

  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
};

// Sends reports from a thread of its own, so that whoever produces them (the
// training loop, the hypertune file follower) never waits for the operator.
//
// Reports are sent in the order they were queued, each retried as
// `retry` says. While one is being retried, later ones wait; when more than
// `max_pending` wait, the oldest waiting one is dropped (coalesced: the
// objective is the last value, and the newest report is never the one
// dropped). Flush waits for everything queued so far.
//
// A PERMISSION_DENIED answer is permanent (the trial's token is not valid):
// nothing more is sent, and permanent_error() returns it from then on.
//
// Thread-safe. The destructor cancels whatever is still in flight and joins
// the thread.
class QueuedMetricsReporter {
 public:
  struct Options {
    // For each report; `wait` is the queue's own (it stops waiting on
    // shutdown), `now` is kept.
    MetricsReporter::RetryOptions retry;
    size_t max_pending = 16;
    // Told of every report that was not delivered (given up, rejected, or
    // dropped to make room), with the reason; not of the newest report
    // queued when it fails while Flush waits (Flush returns its fate) or
    // while the queue shuts down. Called without the queue's lock, on the
    // sending thread or, for a dropped report, in Enqueue.
    std::function<void(const absl::Status&)> on_lost;
  };

  struct Stats {
    int64_t queued = 0;
    int64_t delivered = 0;
    int64_t lost = 0;  // given up, rejected or dropped
  };

  QueuedMetricsReporter(std::unique_ptr<MetricsReporter> reporter, Options options);
  ~QueuedMetricsReporter();

  QueuedMetricsReporter(const QueuedMetricsReporter&) = delete;
  QueuedMetricsReporter& operator=(const QueuedMetricsReporter&) = delete;

  // Queues a report; never blocks on the network. `final`: the trainer's
  // last evaluation.
  void Enqueue(int64_t step, std::map<std::string, double> values, bool final = false);

  // Waits until every report queued so far has been sent or given up, at
  // most `timeout`. While it waits, a report that fails and has a newer one
  // behind it is given up at once, so the time goes to the last one.
  // OK when the newest report sent was delivered, or nothing was queued.
  // Otherwise its error: PERMISSION_DENIED (permanent), or its own failure
  // (UNAVAILABLE after its retries, INVALID_ARGUMENT, ...); or, when
  // `timeout` passed first, DEADLINE_EXCEEDED naming the address, the step
  // and the last error seen. Reports queued while Flush waits are not waited
  // for.
  absl::Status Flush(std::chrono::milliseconds timeout);

  // PERMISSION_DENIED once the service has rejected the trial's token; OK
  // before.
  absl::Status permanent_error() const;

  Stats stats() const;

  const MetricsReporter& reporter() const { return *reporter_; }

 private:
  struct Pending {
    int64_t seq = 0;
    int64_t step = 0;
    std::map<std::string, double> values;
    bool final = false;
  };

  void Run();
  // The retry wait of the report being sent: false when it should stop.
  bool WaitToRetry(std::chrono::milliseconds backoff, const absl::Status& failure);

  std::unique_ptr<MetricsReporter> reporter_;
  Options options_;

  mutable absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;  // the newest report queued
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t done_seq_ ABSL_GUARDED_BY(mu_) = 0;      // the newest report sent or given up
  absl::Status last_result_ ABSL_GUARDED_BY(mu_);  // of report done_seq_
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);   // the latest failed attempt
  absl::Status permanent_error_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kubetrain::metrics
