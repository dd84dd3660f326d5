#include "operator/kube/expectations.h"

namespace kubetrain::kube {

void Expectations::ExpectCreations(const std::string& job_key,
                                   const std::vector<std::string>& names, absl::Time now) {
  if (names.empty()) return;
  absl::MutexLock lock(&mu_);
  Record& r = records_[job_key];
  r.creations.insert(names.begin(), names.end());
  r.raised = now;
}

void Expectations::ExpectDeletions(const std::string& job_key,
                                   const std::vector<std::string>& names, absl::Time now) {
  if (names.empty()) return;
  absl::MutexLock lock(&mu_);
  Record& r = records_[job_key];
  r.deletions.insert(names.begin(), names.end());
  r.raised = now;
}

void Expectations::CreationObserved(const std::string& job_key, const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(job_key);
  if (it == records_.end()) return;
  it->second.creations.erase(name);
  if (it->second.creations.empty() && it->second.deletions.empty()) records_.erase(it);
}

void Expectations::DeletionObserved(const std::string& job_key, const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(job_key);
  if (it == records_.end()) return;
  it->second.deletions.erase(name);
  if (it->second.creations.empty() && it->second.deletions.empty()) records_.erase(it);
}

bool Expectations::Satisfied(const std::string& job_key, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(job_key);
  if (it == records_.end()) return true;
  const Record& r = it->second;
  if (r.creations.empty() && r.deletions.empty()) return true;
  return now - r.raised > timeout_;
}

size_t Expectations::Pending(const std::string& job_key) const {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(job_key);
  return it == records_.end() ? 0 : it->second.creations.size() + it->second.deletions.size();
}

void Expectations::Forget(const std::string& job_key) {
  absl::MutexLock lock(&mu_);
  records_.erase(job_key);
}

}  // namespace kubetrain::kube
