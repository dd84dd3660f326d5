#include "operator/observability/operator_metrics.h"

#include <algorithm>

namespace kubetrain::observability {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Reconciles take milliseconds (pure core plus a few API calls) but can take
// seconds under API throttling.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries buckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,    1,     2.5,  5,     10,   30};
  return buckets;
}

// Suggestions of a Bayesian tuner refit a model: up to tens of seconds.
const Histogram::BucketBoundaries& SuggestionBuckets() {
  static const Histogram::BucketBoundaries buckets = {0.001, 0.01, 0.05, 0.1, 0.25, 0.5,
                                                      1,     2.5,  5,    10,  30,   60};
  return buckets;
}

// A job waits for admission from seconds to a day.
const Histogram::BucketBoundaries& WaitBuckets() {
  static const Histogram::BucketBoundaries buckets = {1,   5,    15,   30,   60,    120,  300,
                                                      600, 1800, 3600, 7200, 21600, 86400};
  return buckets;
}

template <size_t N>
std::string Bounded(std::string_view value, const std::string_view (&allowed)[N]) {
  return std::find(std::begin(allowed), std::end(allowed), value) != std::end(allowed)
             ? std::string(value)
             : std::string("other");
}

void SetByState(prometheus::Family<prometheus::Gauge>& family,
                const std::map<std::string, int64_t>& counts) {
  for (std::string_view state : OperatorMetrics::kStates) {
    auto it = counts.find(std::string(state));
    family.Add({{"state", std::string(state)}})
        .Set(it == counts.end() ? 0.0 : static_cast<double>(it->second));
  }
}

}  // namespace

OperatorMetrics::OperatorMetrics(prometheus::Registry& registry)
    : reconcile_total_(BuildCounter()
                           .Name("kubetrain_operator_reconcile_total")
                           .Help("TrainingJob reconciles, by result (success, error, requeue).")
                           .Register(registry)),
      reconcile_duration_seconds_(BuildHistogram()
                                      .Name("kubetrain_operator_reconcile_duration_seconds")
                                      .Help("Time to reconcile one TrainingJob, by result.")
                                      .Register(registry)),
      workqueue_depth_(BuildGauge()
                           .Name("kubetrain_operator_workqueue_depth")
                           .Help("Job keys waiting in the work queue.")
                           .Register(registry)
                           .Add({})),
      workqueue_wait_seconds_(
          BuildHistogram()
              .Name("kubetrain_operator_workqueue_wait_seconds")
              .Help("Time a job key waited in the work queue before a worker took it.")
              .Register(registry)
              .Add({}, LatencyBuckets())),
      api_requests_total_(BuildCounter()
                              .Name("kubetrain_operator_api_requests_total")
                              .Help("Kubernetes API requests, by verb and HTTP status code.")
                              .Register(registry)),
      jobs_(BuildGauge()
                .Name("kubetrain_operator_jobs")
                .Help("TrainingJobs the operator sees, by state.")
                .Register(registry)),
      trials_(BuildGauge()
                  .Name("kubetrain_operator_trials")
                  .Help("Hyperparameter tuning trials of live jobs, by state.")
                  .Register(registry)),
      trial_suggestion_seconds_(BuildHistogram()
                                    .Name("kubetrain_operator_trial_suggestion_duration_seconds")
                                    .Help("Time the tuner took to suggest the next trials.")
                                    .Register(registry)
                                    .Add({}, SuggestionBuckets())),
      leader_(BuildGauge()
                  .Name("kubetrain_operator_leader")
                  .Help("1 while this replica holds the leader lease, else 0.")
                  .Register(registry)
                  .Add({})),
      admission_queued_(BuildGauge()
                            .Name("kubetrain_operator_admission_queued_jobs")
                            .Help("Jobs gang admission holds (not yet admitted).")
                            .Register(registry)
                            .Add({})),
      admission_admitted_total_(BuildCounter()
                                    .Name("kubetrain_operator_admission_admitted_total")
                                    .Help("Jobs gang admission admitted.")
                                    .Register(registry)
                                    .Add({})),
      admission_wait_seconds_(BuildHistogram()
                                  .Name("kubetrain_operator_admission_wait_seconds")
                                  .Help("Time from a job's creation to its admission.")
                                  .Register(registry)
                                  .Add({}, WaitBuckets())),
      admission_pass_seconds_(BuildHistogram()
                                  .Name("kubetrain_operator_admission_pass_duration_seconds")
                                  .Help("Time one gang-admission pass took.")
                                  .Register(registry)
                                  .Add({}, LatencyBuckets())) {
  // Every documented series exists from the start, at 0: dashboards and
  // alerts (rate(), absent()) need not special-case a fresh operator.
  for (std::string_view result : kResults) {
    reconcile_total_.Add({{"result", std::string(result)}});
    reconcile_duration_seconds_.Add({{"result", std::string(result)}}, LatencyBuckets());
  }
  SetJobsByState({});
  SetTrialsByState({});
}

void OperatorMetrics::ObserveReconcile(std::string_view result, double seconds) {
  const std::string bounded = Bounded(result, kResults);
  reconcile_total_.Add({{"result", bounded}}).Increment();
  reconcile_duration_seconds_.Add({{"result", bounded}}, LatencyBuckets()).Observe(seconds);
}

void OperatorMetrics::CountApiRequest(std::string_view verb, int code) {
  // HTTP codes are three digits; anything else is a client-side failure.
  const std::string code_label = code >= 100 && code <= 599 ? std::to_string(code) : "0";
  api_requests_total_.Add({{"verb", Bounded(verb, kVerbs)}, {"code", code_label}}).Increment();
}

void OperatorMetrics::SetJobsByState(const std::map<std::string, int64_t>& counts) {
  SetByState(jobs_, counts);
}

void OperatorMetrics::SetTrialsByState(const std::map<std::string, int64_t>& counts) {
  SetByState(trials_, counts);
}

}  // namespace kubetrain::observability
