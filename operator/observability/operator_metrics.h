#pragma once

#include <map>
#include <string>
#include <string_view>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kubetrain::observability {

// Every Prometheus metric of kubetrain-operator, declared here and nowhere
// else, so that a reader (and a dashboard author) sees the whole set at once.
// Names follow the Prometheus conventions: a `kubetrain_operator_` prefix,
// base units (seconds), `_total` on counters.
//
//   kubetrain_operator_reconcile_total{result}             counter
//   kubetrain_operator_reconcile_duration_seconds{result}  histogram
//   kubetrain_operator_workqueue_depth                     gauge
//   kubetrain_operator_workqueue_wait_seconds              histogram  (Add to Get)
//   kubetrain_operator_api_requests_total{verb,code}       counter
//   kubetrain_operator_jobs{state}                         gauge
//   kubetrain_operator_trials{state}                       gauge
//   kubetrain_operator_trial_suggestion_duration_seconds   histogram
//   kubetrain_operator_leader                              gauge (1 while leading)
//   kubetrain_operator_admission_queued_jobs               gauge      (held by gang admission)
//   kubetrain_operator_admission_admitted_total            counter
//   kubetrain_operator_admission_wait_seconds              histogram  (creation to admission)
//   kubetrain_operator_admission_pass_duration_seconds     histogram
//
// Label values are bounded: results and verbs outside the documented sets are
// recorded as "other", so no input can grow the number of series without
// limit. Job and trial states are the names of kubetrain.v1.State.
//
// The metrics live in the Registry passed to the constructor, which must
// outlive this object. Thread-safe: prometheus-cpp metrics and families are.
class OperatorMetrics {
 public:
  // Reconcile results: "success", "error", "requeue" (finished but asked to
  // come back later, e.g. a deadline timer).
  static constexpr std::string_view kResults[] = {"success", "error", "requeue"};
  // Kubernetes API verbs as RBAC names them.
  static constexpr std::string_view kVerbs[] = {"get",    "list",  "watch", "create",
                                                "update", "patch", "delete"};
  static constexpr std::string_view kStates[] = {"QUEUED", "PREPARING",  "RUNNING",  "SUCCEEDED",
                                                 "FAILED", "CANCELLING", "CANCELLED"};

  explicit OperatorMetrics(prometheus::Registry& registry);

  OperatorMetrics(const OperatorMetrics&) = delete;
  OperatorMetrics& operator=(const OperatorMetrics&) = delete;

  // One finished SyncJob: its result and how long it took.
  void ObserveReconcile(std::string_view result, double seconds);
  // One Kubernetes API request; `code` is the HTTP status (0 when no reply
  // came back: connection failure).
  void CountApiRequest(std::string_view verb, int code);
  // Replaces the per-state job counts; states absent from `counts` read 0.
  void SetJobsByState(const std::map<std::string, int64_t>& counts);
  void SetTrialsByState(const std::map<std::string, int64_t>& counts);
  void SetLeader(bool leading) { leader_.Set(leading ? 1 : 0); }
  void SetWorkQueueDepth(int64_t depth) { workqueue_depth_.Set(static_cast<double>(depth)); }
  void ObserveWorkQueueWait(double seconds) { workqueue_wait_seconds_.Observe(seconds); }
  void ObserveTrialSuggestion(double seconds) { trial_suggestion_seconds_.Observe(seconds); }
  // Gang admission (docs/admission.md): jobs it holds after a pass, one admitted after waiting
  // `waited_seconds` since it was created, and how long a pass took.
  void SetQueuedJobs(int64_t n) { admission_queued_.Set(static_cast<double>(n)); }
  void ObserveAdmission(double waited_seconds) {
    admission_admitted_total_.Increment();
    admission_wait_seconds_.Observe(waited_seconds);
  }
  void ObserveAdmissionPass(double seconds) { admission_pass_seconds_.Observe(seconds); }

 private:
  prometheus::Family<prometheus::Counter>& reconcile_total_;
  prometheus::Family<prometheus::Histogram>& reconcile_duration_seconds_;
  prometheus::Gauge& workqueue_depth_;
  prometheus::Histogram& workqueue_wait_seconds_;
  prometheus::Family<prometheus::Counter>& api_requests_total_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& trials_;
  prometheus::Histogram& trial_suggestion_seconds_;
  prometheus::Gauge& leader_;
  prometheus::Gauge& admission_queued_;
  prometheus::Counter& admission_admitted_total_;
  prometheus::Histogram& admission_wait_seconds_;
  prometheus::Histogram& admission_pass_seconds_;
};

}  // namespace kubetrain::observability
