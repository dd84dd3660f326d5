#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::tuner {

// A point in the search space: parameterName -> value as it is passed to the
// trial (`--name=value`): integers printed as integers, doubles with full
// (round-trip) precision, categorical values verbatim.
using Assignment = std::map<std::string, std::string>;

// What the tuner knows of one trial.
struct TrialRecord {
  enum class Status { kPending, kRunning, kCompleted, kFailed, kStoppedEarly };
  std::string trial_id;
  Assignment assignment;
  Status status = Status::kPending;
  // The trial's objective (its last reported value of the metric tag), when
  // it has one.
  std::optional<double> objective;
  // Every report of the metric tag, in step order: (training step, value).
  std::vector<std::pair<int64_t, double>> curve;
};

// Suggests trials for one study. Pure: no clock, no I/O; the seed and the
// history determine the output. Not thread-safe; one per job.
class Tuner {
 public:
  virtual ~Tuner() = default;

  // Builds the tuner the spec's `algorithm` names (ALGORITHM_UNSPECIFIED:
  // Bayesian optimisation; RANDOM_SEARCH; GRID_SEARCH). The spec must have
  // passed api::Validate; an unsupported spec is an InvalidArgument error.
  static absl::StatusOr<std::unique_ptr<Tuner>> Create(const v1::HyperparameterSpec& spec,
                                                       uint64_t seed);

  // Up to `count` new assignments, none equal to an assignment in `history`
  // (pending, running, completed, failed or stopped) nor to each other. Fewer
  // than `count` (possibly none) when the space is exhausted.
  virtual std::vector<Assignment> Suggest(const std::vector<TrialRecord>& history, int count) = 0;
};

// Vizier's median stopping rule: true when `running`'s best objective so far
// is strictly worse (per the spec's goal) than the median, over the completed
// trials, of their running averages at the running trial's latest step.
bool ShouldStopEarly(const v1::HyperparameterSpec& spec, const TrialRecord& running,
                     const std::vector<TrialRecord>& completed);

}  // namespace kubetrain::tuner
