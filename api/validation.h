#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/field_error.h"
#include "api/python_runtimes.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::api {

struct ValidateOptions {
  // A manifest must name its job; a bare Cloud ML config gets its name from
  // the command line (`jobs submit training JOB`).
  bool require_name = true;
  // Report paths as a bare Cloud ML config spells them ("trainingInput...").
  bool bare_config = false;
  // A study that resumes an earlier one (resumePreviousJobId) may leave its
  // params to it, as Cloud ML's did: `jobs submit training` copies them
  // (with the goal, metric tag and algorithm left unset) from the earlier
  // job before it submits (TakeResumedStudyParams). A TrainingJob, the submitted
  // form, always lists them.
  bool params_from_resumed_job = false;
  // The runtimes runtimeVersion and pythonVersion may name: those where the
  // job runs. Null: not checked here (a job submitted to a cluster, whose
  // operator checks it against the cluster's catalog).
  const PythonRuntimeCatalog* runtimes = &PythonRuntimeCatalog::BuiltIn();
};

// Checks a decoded (not yet defaulted) TrainingJob. Every error names its field
// path, e.g. "spec.trainingInput.hyperparameters.params[1].minValue: must be >
// 0 for UNIT_LOG_SCALE". Returns all errors, not just the first.
std::vector<FieldError> Validate(const v1::TrainingJob& job, const ValidateOptions& options = {});

// Job names: Cloud ML's rule (a letter first, then letters, digits and
// underscores, at most 128) or a DNS-1123 label (lowercase letters, digits,
// '-', at most 63; what Kubernetes needs). Returns an empty string when valid,
// else the reason.
std::string ValidateJobName(std::string_view name);

// "" when `name` can name a Kubernetes namespace (a DNS-1123 label), else
// why not.
std::string ValidateNamespaceName(std::string_view name);

// spec.nprocPerNode: a number of processes (1 to 1024), or torchrun's auto,
// gpu or cpu. Returns an empty string when valid, else the reason.
std::string ValidateNprocPerNode(std::string_view value);

// The Kubernetes object name for a job name: lowercase, '_' becomes '-'.
// "fmnist_hptuning" -> "fmnist-hptuning". Two Cloud ML names that map to the
// same object name are the same job.
std::string KubernetesName(std::string_view job_name);

}  // namespace kubetrain::api
