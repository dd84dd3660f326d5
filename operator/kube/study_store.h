#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/reconciler.h"

namespace kubetrain::kube {

// What the controller keeps about tuning studies outside the TrainingJob
// object: the metric reports trials sent (the Metrics gRPC service feeds
// them). Keyed by the job's uid so a job recreated under the same name starts
// clean. (Trials archived out of status are kept in the cluster:
// trial_archive.h.) Implementations are thread-safe.
class StudyStore {
 public:
  virtual ~StudyStore() = default;
  virtual std::map<std::string, std::vector<core::MetricReport>> TrialMetrics(
      const std::string& job_uid) = 0;
  virtual void ForgetJob(const std::string& job_uid) = 0;
};

// In memory: lost when the operator restarts (trials already in status keep
// their final metrics and curves; a running trial reports again).
class InMemoryStudyStore : public StudyStore {
 public:
  // The most reports kept per trial: the latest. Status keeps the last
  // core::kMaxMetricsPerTrial of the metric tag; this bounds memory and the
  // copy each reconcile takes when a trial reports far more often.
  static constexpr size_t kMaxReportsPerTrial = 1000;

  // Records a report; then calls the listener (the controller requeues the job).
  void Report(const std::string& job_uid, const std::string& trial_id,
              const core::MetricReport& report);
  void SetListener(std::function<void(const std::string& job_uid)> listener);

  std::map<std::string, std::vector<core::MetricReport>> TrialMetrics(
      const std::string& job_uid) override;
  void ForgetJob(const std::string& job_uid) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::map<std::string, std::vector<core::MetricReport>>> metrics_
      ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&)> listener_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kubetrain::kube
