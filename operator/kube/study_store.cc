#include "operator/kube/study_store.h"

namespace kubetrain::kube {

void InMemoryStudyStore::Report(const std::string& job_uid, const std::string& trial_id,
                                const core::MetricReport& report) {
  std::function<void(const std::string&)> listener;
  {
    absl::MutexLock lock(&mu_);
    std::vector<core::MetricReport>& reports = metrics_[job_uid][trial_id];
    if (reports.size() >= kMaxReportsPerTrial) {
      reports.erase(reports.begin(), reports.begin() + (reports.size() - kMaxReportsPerTrial + 1));
    }
    reports.push_back(report);
    listener = listener_;
  }
  if (listener) listener(job_uid);
}

void InMemoryStudyStore::SetListener(std::function<void(const std::string& job_uid)> listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

std::map<std::string, std::vector<core::MetricReport>> InMemoryStudyStore::TrialMetrics(
    const std::string& job_uid) {
  absl::MutexLock lock(&mu_);
  auto it = metrics_.find(job_uid);
  return it == metrics_.end() ? std::map<std::string, std::vector<core::MetricReport>>()
                              : it->second;
}

void InMemoryStudyStore::ForgetJob(const std::string& job_uid) {
  absl::MutexLock lock(&mu_);
  metrics_.erase(job_uid);
}

}  // namespace kubetrain::kube
