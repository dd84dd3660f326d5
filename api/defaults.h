#pragma once

#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::api {

inline constexpr char kApiVersion[] = "kubetrain.io/v1";
inline constexpr char kKind[] = "TrainingJob";
inline constexpr char kDefaultMetricTag[] = "training/hptuning/metric";
inline constexpr int kDefaultPort = 2222;
inline constexpr int kDefaultBackoffLimit = 3;
inline constexpr int64_t kDefaultMaxRunningTimeSeconds = 7 * 24 * 3600;
// Metric points kept per trial in status (allMetrics holds the last this
// many); successive halving counts rungs in them.
inline constexpr int kMaxMetricsPerTrial = 100;
// Trials a study keeps in its status; finished ones past this many are
// archived (operator/core/reconciler.h).
inline constexpr int kMaxTrialsInStatus = 100;

// Fills what Cloud ML Engine and Kubeflow would fill: scale tier BASIC (the
// tier's replica counts and machine types come from ReplicaGroups in
// scale_tiers.h, so the echoed trainingInput stays as the user wrote it),
// one GPU for BASIC_GPU's master, goal MAXIMIZE, maxTrials 1,
// maxParallelTrials 1, the default metric tag, maxRunningTime 7 days,
// restartPolicy Never, backoffLimit 3, cleanPodPolicy Running, port 2222.
// Idempotent. Call after validation has passed: defaults never hide an error.
void ApplyDefaults(v1::TrainingJob* job);

// maxTrials as the study runs it: 0 (Cloud ML's unset) and below are the
// default, 1. For jobs read before ApplyDefaults (validation, what the CLI
// and UI show of a stored job).
int EffectiveMaxTrials(const v1::HyperparameterSpec& spec);

// maxFailedTrials 0 means "the service decides". kubetrain's rule: the job
// fails once this many trials have failed. See defaults.cc for the formula.
int EffectiveMaxFailedTrials(const v1::HyperparameterSpec& spec);

}  // namespace kubetrain::api
