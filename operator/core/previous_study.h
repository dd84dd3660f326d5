#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/reconciler.h"

namespace kubetrain::core {

// How a backend reads the earlier study of a resumed one: its job store
// (the TrainingJobs of the namespace on Kubernetes, $KUBETRAIN_HOME locally).
struct PreviousStudySource {
  // The stored job that resumePreviousJobId names (the backend maps the
  // name to its own: Kubernetes object names take "-" for "_"): nullopt
  // when there is none. An error (the store cannot be read) ends the sync.
  std::function<absl::StatusOr<std::optional<v1::TrainingJob>>(const std::string& name)> find_job;
  // The trials that job archived out of its status (ArchiveTrial).
  std::function<absl::StatusOr<std::vector<v1::HyperparameterOutput>>(const v1::TrainingJob& job)>
      archived_trials;
};

// Observed::previous_study for `job`: empty (not found) unless its spec names
// resumePreviousJobId and the job has not finished (a finished study reads
// no history). Else the earlier job as `source` finds it (a missing one is
// for the reconciler to judge), with its archived trials when it is a
// tuning study (only studies archive trials). Errors are the source's.
absl::StatusOr<PreviousStudy> FindPreviousStudy(const v1::TrainingJob& job,
                                                const PreviousStudySource& source);

}  // namespace kubetrain::core
