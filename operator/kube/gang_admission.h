#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "operator/core/gang_admission.h"
#include "operator/core/reconciler.h"
#include "operator/kube/cluster_client.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/informer.h"
#include "operator/observability/operator_metrics.h"

namespace kubetrain::kube {

struct GangAdmissionOptions {
  std::string ns;  // the jobs' and quotas' namespace; "" = every namespace
  core::AdmissionPolicy policy;
  // A pass runs after a change to jobs, nodes, pods or quotas, at most once
  // per `min_interval`, and at least once per `period` (backfill limits
  // expire with no change).
  absl::Duration min_interval = absl::Milliseconds(200);
  absl::Duration period = absl::Seconds(10);
  // Status writes one pass makes at most, admissions aside (always made):
  // changed reasons first, then changed messages (a queue position that
  // moved). The rest wait for the next pass, so 1,000 positions moving at
  // once do not hold the API server.
  int max_writes_per_pass = 50;
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  // Where the queued count, admissions and their waits, and pass times are
  // recorded; null: nowhere. Not owned.
  observability::OperatorMetrics* metrics = nullptr;
};

// The operator's gang admission on Kubernetes: informers on nodes, every
// pod (what is bound where), the jobs' namespace's ResourceQuotas and the
// PriorityClasses feed core::PlanAdmission with the queued TrainingJobs of
// the controller's cache; each decision is written to the job's status as
// its Admitted condition (core::kAdmittedCondition), which the reconciler
// waits for before it creates anything (ReconcileOptions::gang_admission).
// A job that never fits, or is over its quota, gets one Warning event; an
// admitted one a Normal event. The queue's order comes from the jobs
// themselves (priority, creationTimestamp, uid) and how long the head has
// waited from its condition, so a restarted operator, or a new leader,
// decides the same. docs/admission.md says what users see.
class GangAdmission {
 public:
  // `jobs`: the controller's TrainingJob cache (not owned). `reconcile`: the
  // options the controller reconciles with (the replicas a job asks for are
  // rendered from them, as the controller creates them). `poke_job` is
  // called with "namespace/name" of each job whose condition it wrote.
  GangAdmission(ClusterClient* client, const ObjectCache* jobs, GangAdmissionOptions options,
                std::function<core::ReconcileOptions(const std::string& ns)> reconcile,
                EventRecorder* recorder);
  ~GangAdmission();

  // Starts the informers and waits for their first lists (false after
  // `timeout`), then the thread that runs passes.
  bool Start(absl::Duration timeout);
  void Stop();

  // Something changed: a pass runs soon.
  void Poke();

  // One admission pass now, on the caller's thread. Public for tests.
  absl::Status RunPass();

 private:
  // The pods of a job's gang (`trial` "") or of one trial of a study,
  // rendered as the controller would create them; cached by uid, trial and
  // generation.
  std::vector<core::PodPlacement> GangPods(const v1::TrainingJob& job, const std::string& trial);
  void Loop();

  ClusterClient* const client_;
  const ObjectCache* const jobs_;
  const GangAdmissionOptions options_;
  const std::function<core::ReconcileOptions(const std::string& ns)> reconcile_;
  EventRecorder* const recorder_;
  std::unique_ptr<Informer> nodes_, pods_, quotas_, priority_classes_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool dirty_ = true;      // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;

  std::mutex pass_mu_;  // one pass at a time; guards rendered_
  struct Rendered {
    int64_t generation = 0;
    std::vector<core::PodPlacement> pods;
  };
  std::map<std::string, Rendered> rendered_;  // by "uid/trial"
  struct ParsedJob {
    std::string resource_version;
    std::shared_ptr<const v1::TrainingJob> job;  // null: unreadable
    std::optional<bool> valid;                   // api::Validate's verdict, once asked
  };
  std::map<std::string, ParsedJob> parsed_;  // by job uid
};

}  // namespace kubetrain::kube
