#include "api/job_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/status/status.h"
#include "api/codec.h"
#include "api/training_job_schema.h"
#include "api/validation.h"

namespace kubetrain::api {

namespace {

CheckedJob CheckKubeflowJob(KubeflowConversion conversion, bool require_name,
                            const PythonRuntimeCatalog* runtimes) {
  CheckedJob checked;
  checked.kubeflow_kind = conversion.kind;
  checked.mapped = std::move(conversion.mapped);
  checked.errors = std::move(conversion.errors);
  if (checked.errors.empty()) {
    ValidateOptions options;
    options.require_name = require_name;
    options.runtimes = runtimes;
    checked.errors = Validate(conversion.job, options);
    // The converted job's own paths: say where they come from.
    for (FieldError& error : checked.errors) {
      error.reason += " (in the TrainingJob converted from the " + conversion.kind + ")";
    }
    checked.job = std::move(conversion.job);
  }
  // A file still to be filled in is refused for its placeholders, not (only)
  // for what their values break: they come first, in place of the errors
  // of their own fields.
  if (!checked.errors.empty() && !conversion.placeholders.empty()) {
    std::vector<FieldError> errors = std::move(conversion.placeholders);
    const size_t placeholders = errors.size();
    for (FieldError& error : checked.errors) {
      const bool same_field = std::any_of(
          errors.begin(), errors.begin() + placeholders,
          [&](const FieldError& placeholder) { return placeholder.path == error.path; });
      if (!same_field) errors.push_back(std::move(error));
    }
    checked.errors = std::move(errors);
  }
  return checked;
}

}  // namespace

CheckedJob CheckTrainingJob(std::string_view text, bool require_name,
                            const PythonRuntimeCatalog* runtimes) {
  if (KubeflowConversion conversion = ConvertKubeflowJob(text); conversion.kubeflow) {
    return CheckKubeflowJob(std::move(conversion), require_name, runtimes);
  }
  DecodeResult decoded = DecodeTrainingJob(text);
  CheckedJob checked;
  checked.bare_config = decoded.bare_config;
  if (!decoded.ok()) {
    checked.errors = std::move(decoded.errors);
    return checked;
  }
  ValidateOptions options;
  options.require_name = require_name && !decoded.bare_config;
  options.bare_config = decoded.bare_config;
  options.params_from_resumed_job = decoded.bare_config;
  options.runtimes = runtimes;
  checked.errors = Validate(decoded.job, options);
  decoded.Locate(&checked.errors);
  if (!decoded.bare_config) {
    // A manifest goes to the API server as written (`kubectl apply`), so it
    // must also pass the CRD's schema, which is stricter about types than
    // the decoder (`minValue: "0.1"`, `categoricalValues: [1, 2]`). A bare
    // config never reaches the server as written: kubetrain builds the
    // TrainingJob from what it decoded.
    DecodedDocument document = DecodeDocument(text);
    for (FieldError& error : CheckAgainstCrdSchema(document.value)) {
      if (auto at = document.positions.find(error.path); at != document.positions.end()) {
        std::tie(error.line, error.column) = at->second;
      }
      checked.errors.push_back(std::move(error));
    }
  }
  // Errors in file order read best; validation found them field by field.
  std::stable_sort(checked.errors.begin(), checked.errors.end(),
                   [](const FieldError& a, const FieldError& b) {
                     return std::make_pair(a.line, a.column) < std::make_pair(b.line, b.column);
                   });
  checked.job = std::move(decoded.job);
  return checked;
}

bool LeavesParamsToResumedJob(const v1::TrainingJob& job) {
  const v1::HyperparameterSpec& hp = job.spec().training_input().hyperparameters();
  return hp.params().empty() && !hp.resume_previous_job_id().empty();
}

absl::Status TakeResumedStudyParams(const v1::TrainingJob& earlier, v1::TrainingJob* job) {
  const v1::HyperparameterSpec& theirs = earlier.spec().training_input().hyperparameters();
  v1::HyperparameterSpec* ours =
      job->mutable_spec()->mutable_training_input()->mutable_hyperparameters();
  if (theirs.params().empty()) {
    return absl::InvalidArgumentError(
        "job \"" + ours->resume_previous_job_id() +
        "\" is not a hyperparameter tuning job: it has no params to go on with");
  }
  *ours->mutable_params() = theirs.params();
  if (ours->goal() == v1::HyperparameterSpec::GOAL_TYPE_UNSPECIFIED) ours->set_goal(theirs.goal());
  if (ours->hyperparameter_metric_tag().empty()) {
    ours->set_hyperparameter_metric_tag(theirs.hyperparameter_metric_tag());
  }
  if (ours->algorithm() == v1::HyperparameterSpec::ALGORITHM_UNSPECIFIED) {
    ours->set_algorithm(theirs.algorithm());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  // An ifstream opens a directory and reads it as empty.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(path + ": is a directory, not a job file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(path + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return absl::DataLossError(path + ": read failed: " + std::strerror(errno));
  return content.str();
}

}  // namespace kubetrain::api
