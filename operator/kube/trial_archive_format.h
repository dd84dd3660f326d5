#pragma once

// Trials that left a TrainingJob's status (core::ArchiveTrial, past
// core::kMaxTrialsInStatus) kept in the cluster, so that a study's tuner sees
// its whole history after an operator restart or a leader change.
//
// They live in ConfigMaps next to the job, one per 50 trials by trial number:
//
//   apiVersion: v1
//   kind: ConfigMap
//   metadata:
//     name: <job>-trials-<n>            # trials 50(n-1)+1 .. 50n
//     labels:
//       kubetrain.io/job-name: <job>    # as on the job's pods
//       kubetrain.io/archived-trials: "true"
//     ownerReferences: [the TrainingJob, controller, blockOwnerDeletion]
//   data:
//     trial-<id>.json: <the trial as status held it, JSON>
//
// so `kubectl get configmaps -l kubetrain.io/job-name=<job>` lists them, and
// the garbage collector deletes them with the job. A trial holds at most
// core::kMaxMetricsPerTrial metric points (a few kB): 50 stay far below the
// 1 MiB a ConfigMap may hold. ConfigMaps rather than a CRD of our own: nothing
// to install, kubectl and every backup tool know them, and RBAC is one rule.

#include <cstddef>
#include <string>
#include <vector>

#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"

namespace kubetrain::kube {

inline constexpr int kTrialsPerArchive = 50;
inline constexpr char kLabelArchivedTrials[] = "kubetrain.io/archived-trials";

// "<job object name>-trials-<n>" for the trial with id `trial_id` ("7"); a
// trial id that is not a number goes to chunk 0.
std::string ArchiveName(const std::string& job_object_name, const std::string& trial_id);
// The data key of a trial: "trial-<id>.json".
std::string ArchiveKey(const std::string& trial_id);
// An empty archive ConfigMap `name` for `job`, labelled and owned as above.
nlohmann::json NewArchive(const v1::TrainingJob& job, const std::string& ns,
                          const std::string& name);
// Puts `trial` into the ConfigMap's data (replacing an earlier copy).
void AddToArchive(nlohmann::json& config_map, const v1::HyperparameterOutput& trial);
// The trials a ConfigMap holds; entries that do not parse are skipped and
// counted in *skipped when given.
std::vector<v1::HyperparameterOutput> TrialsInArchive(const nlohmann::json& config_map,
                                                      size_t* skipped = nullptr);
// The label selector of `job`'s archives ("kubetrain.io/archived-trials,
// kubetrain.io/job-name=<job>").
std::string ArchiveSelector(const v1::TrainingJob& job);
// The trials `job` archived among `config_maps` (those it owns, by uid: an
// earlier job of the same name may still have some), one per trial id, in
// trial id order.
std::vector<v1::HyperparameterOutput> ArchivedTrialsOf(
    const v1::TrainingJob& job, const std::vector<nlohmann::json>& config_maps);

// The value of the kubetrain.io/job-name label that `job`'s pods and archives
// carry (core::ReplicaLabels shortens long names).
std::string ArchiveJobLabel(const v1::TrainingJob& job);
// Whether `object` has an owner reference to the object with `uid`.
bool OwnedByUid(const nlohmann::json& object, const std::string& uid);

}  // namespace kubetrain::kube
