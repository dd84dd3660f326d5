#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "operator/core/gang_admission.h"
#include "operator/core/reconciler.h"
#include "operator/kube/cluster_client.h"
#include "operator/kube/informer.h"
#include "operator/observability/operator_metrics.h"

namespace kubetrain::kube {

struct GangAdmissionOptions {
  std::string ns;  // the jobs' and quotas' namespace; "" = every namespace
  core::AdmissionPolicy policy;
  // A pass runs after a change to jobs, nodes, pods or quotas, at most once
  // per `min_interval` (and after a rest of twice its CPU time), and at
  // least once per `period` (backfill limits expire with no change). Short,
  // so jobs submitted together are admitted as they come: their pods start
  // as soon as without admission.
  absl::Duration min_interval = absl::Milliseconds(50);
  absl::Duration period = absl::Seconds(10);
  // Jobs one pass sends to the controller at most to write what only
  // informs (a reason, or a queue position that moved), changed reasons
  // first; admissions are always sent. The rest wait for the next pass, so
  // 1,000 positions moving at once do not hold the API server.
  int max_writes_per_pass = 50;
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  // Where the queued count, admissions and their waits, and pass times are
  // recorded; null: nowhere. Not owned.
  observability::OperatorMetrics* metrics = nullptr;
};

// The operator's gang admission on Kubernetes: informers on nodes, every
// pod (what is bound where: the controller's informer), the jobs' namespace's ResourceQuotas and
// the PriorityClasses feed core::PlanJobs with the TrainingJobs of the controller's cache. Each
// job's verdict is kept here (VerdictFor) and the job is sent to the controller, whose reconcile
// writes it with the job's status (Observed::admission) and, once admitted, creates its pods in the
// same pass: admission costs no status write of its own. An admission made
// but not yet written counts as made in the next pass. The queue's order
// comes from the jobs themselves (priority, creationTimestamp, uid) and how
// long the head has waited from its condition, so a restarted operator, or a
// new leader, decides the same. docs/admission.md says what users see.
class GangAdmission {
 public:
  // `jobs`: the controller's TrainingJob cache (not owned). `reconcile`: the
  // options the controller reconciles with (the replicas a job asks for are
  // rendered from them, as the controller creates them). `on_verdict` is
  // called, on the pass's thread, with "namespace/name" of each job whose
  // status should show a new verdict.
  // `pods`: a cache of every pod in the cluster that another informer
  // keeps (the controller's: one watch for both), holding at least what
  // KeepForPlacement keeps, whose changes are passed to OnPodChange.
  GangAdmission(ClusterClient* client, const ObjectCache* jobs, const ObjectCache* pods,
                GangAdmissionOptions options,
                std::function<core::ReconcileOptions(const std::string& ns)> reconcile,
                std::function<void(const std::string& job_key)> on_verdict);
  ~GangAdmission();

  // Starts the informers and waits for their first lists (false after
  // `timeout`), then the thread that runs passes.
  bool Start(absl::Duration timeout);
  void Stop();

  // Something changed: a pass runs soon.
  void Poke();
  // A pod was added (`before` null), changed or deleted (`after` null): a
  // pass runs soon when that frees room, or takes room admission did not set
  // aside (another owner's pod).
  void OnPodChange(const ObjectPtr& before, const ObjectPtr& after);
  // A job changed: a pass runs soon when that changes what admission
  // decides (its spec, its state, a trial ending or released), not for
  // each status write of a running job.
  void OnJobChange(const ObjectPtr& before, const ObjectPtr& after);

  // Adds to `kept` what placement reads of `pod` (its name and namespace,
  // its kubetrain.io/job-name label, nodeName, each container's and init container's resources, its
  // phase): for a shared pods informer's transform.
  static void KeepForPlacement(const nlohmann::json& pod, nlohmann::json& kept);
  // Reduces `pod` to what KeepForPlacement keeps: a pods cache's transform
  // for pods nothing else reads.
  static void StripForPlacement(nlohmann::json& pod);

  // One admission pass now, on the caller's thread. Public for tests.
  absl::Status RunPass();

  // The last pass's verdict on the job of this uid; nullopt when it has
  // none (not seen yet, admitted and written, or not admission's to hold).
  std::optional<core::AdmissionVerdict> VerdictFor(const std::string& uid) const;

 private:
  // The pods of a job's gang (`trial` "") or of one trial of a study,
  // rendered as the controller would create them; cached by uid, trial and
  // generation.
  const std::vector<core::PodPlacement>& GangPods(const v1::TrainingJob& job,
                                                  const std::string& trial);
  void Loop();

  ClusterClient* const client_;
  const ObjectCache* const jobs_;
  const GangAdmissionOptions options_;
  const std::function<core::ReconcileOptions(const std::string& ns)> reconcile_;
  const std::function<void(const std::string& job_key)> on_verdict_;
  std::vector<Informer*> OwnInformers();

  const ObjectCache* const pods_;
  std::unique_ptr<Informer> nodes_, quotas_, priority_classes_;

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
    int64_t generation = 0;
    std::shared_ptr<const v1::TrainingJob> job;  // null: unreadable
    std::optional<bool> valid;                   // api::Validate's verdict on this generation
  };
  std::map<std::string, ParsedJob> parsed_;  // by job uid
  struct ParsedPod {
    ObjectPtr object;       // the version read (kept alive: its address is the key)
    bool terminal = false;  // Succeeded or Failed
    std::optional<core::PodPlacement> placement;  // nullopt: malformed
  };
  // By the cached object's address: a changed pod is a new object, so a
  // pass reads each version once, and finds it again without building a key.
  std::unordered_map<const nlohmann::json*, ParsedPod> parsed_pods_;

  mutable std::mutex verdicts_mu_;
  std::map<std::string, core::AdmissionVerdict> verdicts_;  // by job uid; guarded by verdicts_mu_
};

}  // namespace kubetrain::kube
