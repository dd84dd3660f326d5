#include "operator/core/previous_study.h"

#include <utility>

namespace kubetrain::core {

absl::StatusOr<PreviousStudy> FindPreviousStudy(const v1::TrainingJob& job,
                                                const PreviousStudySource& source) {
  PreviousStudy previous;
  const std::string& name = job.spec().training_input().hyperparameters().resume_previous_job_id();
  if (name.empty() || IsTerminal(job.status().state())) return previous;
  absl::StatusOr<std::optional<v1::TrainingJob>> found = source.find_job(name);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return previous;
  previous.found = true;
  previous.job = **std::move(found);
  if (previous.job.spec().training_input().hyperparameters().params_size() > 0) {
    absl::StatusOr<std::vector<v1::HyperparameterOutput>> archived =
        source.archived_trials(previous.job);
    if (!archived.ok()) return archived.status();
    previous.archived_trials = *std::move(archived);
  }
  return previous;
}

}  // namespace kubetrain::core
