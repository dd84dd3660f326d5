#pragma once

// The operator's side of the Metrics gRPC service on a cluster: who may
// report for a trial, and where accepted reports go.
//
// Tokens are not kept in a table. Each trial's pods carry their token in
// their spec (KUBETRAIN_METRICS_TOKEN), and a report is checked against the
// pods of the trial it names, read from the controller's pod cache. So a
// token stays valid across operator restarts and leader changes, for as long
// as the pod that holds it exists, and nothing needs to be shared between
// operator replicas.

#include <atomic>
#include <string>

#include "absl/time/time.h"
#include "operator/kube/controller.h"
#include "operator/kube/study_store.h"
#include "operator/metrics/metrics_service.h"

namespace kubetrain::kube {

// Issues per-trial tokens: HMAC-SHA256 over "<job uid>/<trial id>" with a key
// drawn when the issuer is made (metrics::NewTrialToken), as 32 hex
// characters. The same (uid, trial) always gets the same token from one
// issuer, so every replica of a trial and every reconcile agree without
// state. Thread-safe.
class TrialTokenIssuer {
 public:
  TrialTokenIssuer();
  std::string Token(const std::string& job_uid, const std::string& trial_id) const;

 private:
  std::string key_;
};

// The Metrics service's authority and sink for the Kubernetes controller.
// Until SetLeading(true) (call it once the controller's caches have synced)
// every report is UNAVAILABLE "not the leader", so a trial whose report lands
// on a standby replica retries. Accepted reports go into `studies`, whose
// listener requeues the job. Thread-safe; `controller` and `studies` must
// outlive it.
class ClusterTrialMetrics : public metrics::TrialAuthority, public metrics::ReportSink {
 public:
  // `record_timeout`: how long Accept waits for the report to reach the job's
  // status (see Accept).
  ClusterTrialMetrics(const Controller* controller, InMemoryStudyStore* studies,
                      absl::Duration record_timeout = absl::Seconds(10))
      : controller_(controller), studies_(studies), record_timeout_(record_timeout) {}

  void SetLeading(bool leading) { leading_.store(leading); }

  // `job` is "namespace/name". OK when a pod of that job's trial carries
  // `token`; PERMISSION_DENIED otherwise.
  absl::Status Authorize(const std::string& job, const std::string& trial,
                         const std::string& token) const override;
  // Hands the report to the study store (which requeues the job), then
  // answers once the job's status holds it: a report that lived only in this
  // replica's memory would be lost if it stopped leading before writing it,
  // after the trial had been told it was delivered. UNAVAILABLE when the
  // status does not hold it within `record_timeout` (the trial retries; a
  // repeated report is harmless). NOT_FOUND when the job is gone from the
  // cache (deleted meanwhile).
  absl::Status Accept(const metrics::MetricsReport& report) override;

 private:
  const Controller* const controller_;
  InMemoryStudyStore* const studies_;
  const absl::Duration record_timeout_;
  std::atomic<bool> leading_{false};
};

}  // namespace kubetrain::kube
