#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "api/field_error.h"
#include "api/kubeflow.h"
#include "api/python_runtimes.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::api {

// What every entry point (CLI, local backend, operator) does with a job
// someone wrote: decode, then validate, errors pointing into the text.
struct CheckedJob {
  v1::TrainingJob job;             // decoded, not defaulted
  std::vector<FieldError> errors;  // decode errors, or else validation errors
  bool bare_config = false;        // a Cloud ML config.yaml, not a manifest
  // A Kubeflow manifest (kubeflow.h): its kind ("PyTorchJob") and what each
  // of its fields became. `job` is then the TrainingJob it converts to, and
  // `errors` name the manifest's fields, or (validation of the converted
  // job) the TrainingJob's.
  std::string kubeflow_kind;
  std::vector<MappedField> mapped;
  bool ok() const { return errors.empty(); }
};

// `require_name`: a manifest must carry metadata.name; a bare config never
// has to (the name comes from the command line). A kubeflow.org/v1 TFJob or
// PyTorchJob is converted first (ConvertKubeflowJob). `runtimes`: the
// catalog runtimeVersion and pythonVersion are checked against (null: not
// checked; ValidateOptions::runtimes).
CheckedJob CheckTrainingJob(
    std::string_view text, bool require_name = true,
    const PythonRuntimeCatalog* runtimes = &PythonRuntimeCatalog::BuiltIn());

// A Cloud ML config may resume a study (resumePreviousJobId) without params
// of its own: Cloud ML went on with the earlier study's. kubetrain's study is
// the TrainingJob's spec, so `jobs submit training` copies them in.
bool LeavesParamsToResumedJob(const v1::TrainingJob& job);
// Copies `earlier`'s params into `job`, and its goal, hyperparameterMetricTag
// and algorithm where `job` leaves them unset (one it sets must match, as the
// operator checks). InvalidArgument, saying why, when `earlier` is not a
// tuning job.
absl::Status TakeResumedStudyParams(const v1::TrainingJob& earlier, v1::TrainingJob* job);

// Reads a whole file; the error names the file and the reason.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace kubetrain::api
