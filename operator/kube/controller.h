#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/python_runtimes.h"
#include "operator/core/reconciler.h"
#include "operator/kube/cluster_client.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/expectations.h"
#include "operator/kube/gang_admission.h"
#include "operator/kube/informer.h"
#include "operator/kube/study_store.h"
#include "operator/kube/trial_archive.h"
#include "operator/kube/work_queue.h"
#include "operator/observability/operator_metrics.h"

namespace kubetrain::kube {

struct ControllerOptions {
  std::string ns;   // "" = every namespace
  int workers = 4;  // 0: caches only, SyncJob is called by the owner (tests)
  // Everything but `address`, which the controller sets per job namespace
  // (core::KubernetesAddresses).
  core::ReconcileOptions reconcile;
  absl::Duration expectations_timeout = absl::Minutes(5);
  // Where reconcile results and latency, work-queue depth and wait, and jobs
  // and trials by state (read from the cache every `state_metrics_period`)
  // are recorded; null: nowhere. Not owned; must outlive the controller.
  observability::OperatorMetrics* metrics = nullptr;
  absl::Duration state_metrics_period = absl::Seconds(5);
  // The time reconciles see (deadlines, backoffs, expectations' age, the
  // times status records). Tests pass a manual clock.
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  // The cluster's runtime catalog (the kubetrain-runtimes ConfigMap, mounted),
  // read again when it changes; each reconcile uses its current version.
  // Null: reconcile.runtimes as given. Not owned.
  api::RuntimeCatalogFile* runtime_catalog = nullptr;
  // Gang admission (gang_admission.h): a job's pods are created only once all
  // of them can be placed; until then it is QUEUED with Admitted=False.
  bool gang_admission = false;
  GangAdmissionOptions admission{};
};

// The Kubernetes controller for TrainingJobs: informers (jobs; the operator's
// own pods, services and output claims, selected by label) feed a work queue
// of job keys;
// workers run one idempotent SyncJob(key) each:
//
//  1. read the job and its pods/services from the caches (pods and services
//     owned by another incarnation of the same name are ignored: the owner's
//     uid is its identity);
//  2. skip while expectations for the job (by uid) are unsatisfied (the
//     cache has not yet seen our own earlier creates/deletes);
//  3. core::Reconcile(job, observed, now);
//  4. when the result writes objects, the job of this name must still have
//     the cached uid: the status write confirms it when it comes first (its
//     resourceVersion: 409 for another uid, 404 for a deleted job), else
//     one uncached GET does; a cache entry of a deleted job is not acted on
//     (its delete event brings the key back);
//  5. carry out the result in the core's order (core::CarryOut; JobSink is
//     this backend's side): archived trials into their ConfigMaps
//     (trial_archive.h; a failure ends the sync before the status drops
//     them), status (status subresource, only when changed; 409 Conflict ->
//     re-read the job, reconcile again, carry that out), then deletes, then
//     creates, the output claim before pods, rendered from the job as
//     reconciled (NotFound, and AlreadyExists of an object this job owns,
//     are success; creates stop at the first other failure, an object of
//     the name that the cache shows another owner holds included, so a
//     quota error costs one call), events, the job's own deletion;
//  6. requeue after the core's requeue_after; a failed sync is requeued with
//     per-key exponential backoff.
// Thread-safe. Start() once, Stop() once (also from the destructor).
class Controller {
 public:
  Controller(ClusterClient* client, ControllerOptions options, StudyStore* studies);
  ~Controller();

  // Starts the informers, waits for their first lists (false after
  // `sync_timeout`), then the workers.
  bool Start(absl::Duration sync_timeout = absl::Minutes(2));
  void Stop();

  // One reconcile of "namespace/name". Public for tests. `requeued`, when not
  // null, is set when the reconcile asked to come back later (a timer).
  absl::Status SyncJob(const std::string& key, bool* requeued = nullptr);

  void Enqueue(const std::string& key) { queue_.Add(key); }
  // Requeues the job with this uid (new trial metrics arrive keyed by uid).
  void EnqueueByUid(const std::string& uid);
  int64_t sync_count() const { return syncs_.load(); }

  // For the Metrics service (ClusterTrialMetrics), from the caches: the uid
  // of the job "namespace/name" (nullopt when it is not there), and whether
  // one of the pods of that job's trial `trial_id` carries `token` as
  // KUBETRAIN_METRICS_TOKEN.
  std::optional<std::string> CachedJobUid(const std::string& job_key) const;
  bool TrialPodHasToken(const std::string& job_key, const std::string& trial_id,
                        const std::string& token) const;
  // Whether the job's status in the cache holds trial `trial_id`'s report
  // of `values` at `step`, or has nothing to hold: the job is gone, the
  // trial is not in status (archived), or `values` lacks the job's metric tag
  // (status keeps the tag's reports only).
  bool TrialReportRecorded(const std::string& job_key, const std::string& trial_id, int64_t step,
                           const std::map<std::string, double>& values) const;

 private:
  // Carries out a reconcile result on the API server (core::ResultSink).
  class JobSink;

  void Worker();
  // What jobs of namespace `ns` are reconciled with.
  core::ReconcileOptions ReconcileOptionsFor(const std::string& ns) const;
  // Jobs and trials by state, counted from the job cache, into metrics.
  void RecordStateMetrics();
  void OnReplicaEvent(const ObjectPtr& object, bool added, bool deleted, const std::string& kind);
  std::vector<ObjectPtr> Owned(const ObjectCache& cache, const nlohmann::json& job) const;
  absl::Status WriteStatus(nlohmann::json job_object, const v1::TrainingJobStatus& status);
  // What the server refused on a job's last attempt to create replicas
  // (core::Observed::refused_creations), by job key, for the job's uid.
  struct JobRefusals {
    std::string uid;
    std::vector<core::RefusedCreation> creations;
  };
  std::vector<core::RefusedCreation> RefusedCreations(const std::string& job_key,
                                                      const std::string& uid) const;
  void SetRefusedCreations(const std::string& job_key, JobRefusals refusals);

  ClusterClient* const client_;
  const ControllerOptions options_;
  StudyStore* const studies_;
  EventRecorder recorder_;
  Expectations expectations_;
  WorkQueue queue_;
  std::unique_ptr<Informer> jobs_, pods_, services_, claims_;
  std::unique_ptr<GangAdmission> admission_;  // with options.gang_admission
  TrialArchive archive_;
  std::vector<std::thread> workers_;
  std::thread state_metrics_thread_;
  absl::Notification stopping_;
  std::atomic<int64_t> syncs_{0};
  std::atomic<bool> stopped_{false};
  mutable std::mutex refused_mu_;
  std::map<std::string, JobRefusals> refused_creations_;  // guarded by refused_mu_
};

// Reads a TrainingJob object from the API into the schema. Unknown fields
// (managedFields, ownerReferences, ...) are ignored; a malformed document is
// InvalidArgument with protobuf's message.
absl::StatusOr<v1::TrainingJob> JobFromObject(const nlohmann::json& object);
// The job's status in its JSON form, for the status subresource.
nlohmann::json StatusToJson(const v1::TrainingJobStatus& status);

}  // namespace kubetrain::kube
