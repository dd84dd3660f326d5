#pragma once

// From jobs to admission verdicts: the part of gang admission both backends
// share. The Kubernetes operator's admission pass (operator/kube/
// gang_admission.h) and the local controller (process slots) each observe
// what is free, describe their jobs as JobToAdmit, and hand each job's
// verdict to the reconciler (Observed::admission), which writes it with the
// job's status. Pure.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/gang_admission.h"
#include "operator/core/reconciler.h"

namespace kubetrain::core {

// Whether the job takes part in admission: it is neither finished,
// cancelling nor suspended, and no one else admits it (AdmittedElsewhere).
// Admitted jobs take part until they run: their pods not yet bound keep their
// room (a replica recreated later waits for the scheduler, as any pod); and
// an admitted study as long as it runs, its trials admitted one gang at a
// time. The caller checks that it is valid.
bool TakesPartInAdmission(const v1::TrainingJob& job);

// Admitted already: the Admitted condition is True, or the job went past
// QUEUED (it started before admission was turned on).
bool AdmittedByStatus(const v1::TrainingJobStatus& status);

struct JobToAdmit {
  std::string key;  // unique among the jobs ("namespace/name")
  // As stored (its status is read); valid, and TakesPartInAdmission.
  const v1::TrainingJob* job = nullptr;
  int32_t priority = 0;  // its PriorityClass's value
  // What orders jobs of one priority created in the same second (creation
  // timestamps are whole seconds): "" for the job's uid, as Kueue does; the
  // local backend gives its submission order.
  std::string tie_breaker;
  // The pods of trial `trial` ("" outside studies) as they would be
  // created; each reference must stay valid until PlanJobs returns (the
  // gangs borrow them).
  std::function<const std::vector<PodPlacement>&(const std::string& trial)> pods_of;
  // A verdict given earlier that the job's status does not show yet: an
  // admission counts as made (its pods are coming), and so do the trials it
  // admitted.
  std::optional<AdmissionVerdict> pending;
};

// Plans every job at once (PlanAdmission, in queue order): a job is one
// gang; a queued study is the gang of its first trial; an admitted study is
// one gang per trial (those running, those admitted but not started, then as
// many more as it would start now, up to maxParallelTrials and maxTrials).
// Returns, per job key, what its status should show: for a queued job the
// decision; for a study the planner admits, admitted_trials counts the
// trials let in so far (its first one, on admission).
std::map<std::string, AdmissionVerdict> PlanJobs(const ClusterState& cluster,
                                                 const std::vector<JobToAdmit>& jobs,
                                                 absl::Time now,
                                                 const AdmissionPolicy& policy = {});

// The pods of trial `trial` ("" outside studies) of a job in namespace
// `ns`, as placement reads them from the pods the controller would create
// (ParsePodPlacement of RenderPod). A role's pods differ only in their
// names, labels and environment, so each role's first replica is rendered
// and the others take its placement under their own names. A role whose
// pod cannot be read (the API server would refuse it too) is left out, its
// error added to `errors`.
std::vector<PodPlacement> GangPlacements(const v1::TrainingJob& job, const std::string& ns,
                                         const std::string& trial, const ReconcileOptions& options,
                                         std::vector<absl::Status>* errors);

// Whether the job's status already shows the verdict (nothing to write).
bool StatusShows(const v1::TrainingJobStatus& status, const AdmissionVerdict& verdict);

}  // namespace kubetrain::core
