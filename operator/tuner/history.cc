#include "operator/tuner/history.h"

#include <cmath>

namespace kubetrain::tuner {

ParsedHistory ParseHistory(const SearchSpace& space, const v1::HyperparameterSpec& spec,
                           const std::vector<TrialRecord>& history) {
  ParsedHistory out;
  const bool maximize = spec.goal() != v1::HyperparameterSpec::MINIMIZE;
  for (const TrialRecord& record : history) {
    absl::StatusOr<Assignment> canonical = space.Canonicalize(record.assignment);
    if (canonical.ok() && out.used.insert(AssignmentKey(*canonical)).second) {
      ++out.distinct_points;
    }
    out.used.insert(AssignmentKey(record.assignment));
    if (!canonical.ok()) continue;
    ++out.num_records;
    absl::StatusOr<std::vector<double>> unit = space.Encode(*canonical);
    if (!unit.ok()) continue;
    switch (record.status) {
      case TrialRecord::Status::kCompleted:
      case TrialRecord::Status::kStoppedEarly:
        if (record.objective.has_value() && std::isfinite(*record.objective)) {
          out.observed_x.push_back(*unit);
          out.observed_loss.push_back(maximize ? -*record.objective : *record.objective);
        }
        break;
      case TrialRecord::Status::kPending:
      case TrialRecord::Status::kRunning:
        out.pending_x.push_back(*unit);
        break;
      case TrialRecord::Status::kFailed:
        break;
    }
  }
  return out;
}

uint64_t CallSeed(uint64_t seed, size_t history_size) {
  return seed ^ (0xd1b54a32d192ed03ULL * (static_cast<uint64_t>(history_size) + 1));
}

}  // namespace kubetrain::tuner
