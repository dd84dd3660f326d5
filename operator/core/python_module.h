#pragma once

// How a replica runs trainingInput.pythonModule: Cloud ML's package workflow.
//
// In a job with pythonModule, every role without a containerCommand runs the
// module (parameter servers too: the trainer reads its role from TF_CONFIG):
//
//   command  kubetrain-runtime exec [--package P]... -- PYTHON -m MODULE
//            (PYTHON: the runtime's interpreter, python3 unless its catalog
//            entry names another)
//   args     the job's args, hyperparameter flags and --job-dir, as for any
//            replica (replica.h)
//   image    the role's imageUri; else the Python runtime image that
//            runtimeVersion and pythonVersion pick in the runtime catalog
//            (api/python_runtimes.h)
//
// `exec` makes each package importable before the module starts (pip for
// files and URLs, the search path for folders) and forwards the module's
// cloudml-hypertune reports to the operator (docs/runtime.md). A package
// stored in the cluster (packageUris configmap://NAME/FILE) is a file of a
// read-only ConfigMap volume: exec is given its path there.

#include <string>
#include <vector>

#include "api/python_runtimes.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/replica.h"

namespace kubetrain::core {

// Where packageUris[i] = configmap://NAME/FILE is mounted: FILE in
// kPackageMountRoot/<i>/.
inline constexpr char kPackageMountRoot[] = "/var/kubetrain/packages";
// Where a trainer that runs its image's entrypoint and its metrics sidecar
// share the cloudml-hypertune file (DesiredReplica::metrics_sidecar).
inline constexpr char kMetricsSidecarFolder[] = "/var/kubetrain/metrics";

// Whether a replica of `config` runs the job's pythonModule.
bool RunsPythonModule(const v1::TrainingInput& input, const v1::ReplicaConfig& config);

struct PythonModuleRun {
  std::vector<std::string> command;
  std::vector<PackageMount> mounts;  // one per configmap:// package, in packageUris order
  // The image of the Python runtime that runtimeVersion and pythonVersion
  // pick in `runtimes`; empty when none does (validation refuses such a job).
  std::string image;
  // That runtime's interpreter (python3 when none), the one `command` runs.
  std::string python;
};

// The command, mounts and runtime of a replica that runs the module. `input`
// must be valid (api::Validate); an unreadable packageUris entry is passed on
// as it is, for exec to refuse.
PythonModuleRun PlanPythonModule(const v1::TrainingInput& input,
                                 const api::PythonRuntimeCatalog& runtimes);

}  // namespace kubetrain::core
