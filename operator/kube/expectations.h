#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kubetrain::kube {

// Stops a lagging informer cache from making the controller create or delete
// the same object twice (kubernetes pkg/controller/controller_utils.go, with
// names instead of counts since our object names are deterministic).
//
// Keyed by the job's uid, not its name: a TrainingJob deleted and created
// again under its name is another job, and the events of the earlier one's
// replicas (their ownerReferences name its uid) neither meet nor lower what
// the new one expects.
//
// Protocol, per job:
//  1. Before the create/delete calls: ExpectCreations / ExpectDeletions with
//     the object names ("pods/NAME", "services/NAME").
//  2. Informer events lower them: CreationObserved on ADD, DeletionObserved on
//     DELETE.
//  3. A failed call lowers its own expectation (nothing will be observed);
//     AlreadyExists/NotFound count as done (the cache will show it).
//  4. Reconcile only when Satisfied(): nothing pending, or the pending record
//     is older than the timeout (a lost event must not block a job forever).
// Thread-safe; time is passed in.
class Expectations {
 public:
  explicit Expectations(absl::Duration timeout = absl::Minutes(5)) : timeout_(timeout) {}

  void ExpectCreations(const std::string& job_key, const std::vector<std::string>& names,
                       absl::Time now);
  void ExpectDeletions(const std::string& job_key, const std::vector<std::string>& names,
                       absl::Time now);
  void CreationObserved(const std::string& job_key, const std::string& name);
  void DeletionObserved(const std::string& job_key, const std::string& name);
  bool Satisfied(const std::string& job_key, absl::Time now) const;
  // Pending creations + deletions (for logs and tests).
  size_t Pending(const std::string& job_key) const;
  void Forget(const std::string& job_key);  // the job is gone

 private:
  struct Record {
    std::set<std::string> creations, deletions;
    absl::Time raised = absl::InfinitePast();
  };
  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  std::map<std::string, Record> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kubetrain::kube
