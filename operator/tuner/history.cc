#include "operator/tuner/history.h"

#include <cmath>
#include <limits>
#include <optional>

namespace kubetrain::tuner {

namespace {

// The rung whose values the model learns from under successive halving, as
// BOHB chooses its budget: the highest rung that at least `enough` trials
// reached; nullopt when the final objectives are at least as many as that
// (they are the full budget) or no rung has enough.
std::optional<size_t> ModelRung(const std::vector<const TrialRecord*>& records, size_t enough) {
  size_t finals = 0;
  std::vector<size_t> at_rung;
  for (const TrialRecord* record : records) {
    if (record->status == TrialRecord::Status::kCompleted && record->objective &&
        std::isfinite(*record->objective)) {
      ++finals;
    }
    for (size_t k = 0; k < record->rungs.size(); ++k) {
      if (!std::isfinite(record->rungs[k])) continue;
      if (at_rung.size() <= k) at_rung.resize(k + 1, 0);
      ++at_rung[k];
    }
  }
  if (finals >= enough) return std::nullopt;
  for (size_t k = at_rung.size(); k-- > 0;) {
    if (at_rung[k] >= enough) return k;
  }
  return std::nullopt;
}

}  // namespace

ParsedHistory ParseHistory(const SearchSpace& space, const v1::HyperparameterSpec& spec,
                           const std::vector<TrialRecord>& history) {
  ParsedHistory out;
  const bool maximize = spec.goal() != v1::HyperparameterSpec::MINIMIZE;
  // Records whose point the model can place, with that point.
  std::vector<const TrialRecord*> placed;
  std::vector<std::vector<double>> placed_x;
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
    placed.push_back(&record);
    placed_x.push_back(*unit);
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
  // Under successive halving most trials end at a low rung: the model learns
  // from the values at the highest rung enough trials reached (as BOHB),
  // while too few trials have a final objective. Trials still short of that
  // rung are pending. Those that ended below it were judged worse than the
  // trials that went on: they count as the worst value seen there, or the
  // model, never seeing them at its rung, would suggest their region again
  // and again, only to have each suggestion stopped below it.
  if (spec.early_stopping().algorithm() != v1::EarlyStoppingSpec::SUCCESSIVE_HALVING) return out;
  const std::optional<size_t> rung =
      ModelRung(placed, static_cast<size_t>(space.num_features()) + 2);
  if (!rung) return out;
  out.observed_x.clear();
  out.observed_loss.clear();
  out.pending_x.clear();
  auto reached = [&](const TrialRecord& record) {
    return record.rungs.size() > *rung && std::isfinite(record.rungs[*rung]);
  };
  double worst_loss = -std::numeric_limits<double>::infinity();
  for (const TrialRecord* record : placed) {
    if (!reached(*record)) continue;
    worst_loss = std::max(worst_loss, maximize ? -record->rungs[*rung] : record->rungs[*rung]);
  }
  std::vector<std::vector<double>> ended_below;
  for (size_t i = 0; i < placed.size(); ++i) {
    const TrialRecord& record = *placed[i];
    if (reached(record)) {
      out.observed_x.push_back(placed_x[i]);
      out.observed_loss.push_back(maximize ? -record.rungs[*rung] : record.rungs[*rung]);
    } else if (record.status == TrialRecord::Status::kPending ||
               record.status == TrialRecord::Status::kRunning) {
      out.pending_x.push_back(placed_x[i]);
    } else if (!record.rungs.empty() && record.status != TrialRecord::Status::kFailed) {
      ended_below.push_back(placed_x[i]);
    }
  }
  for (std::vector<double>& x : ended_below) {
    out.observed_x.push_back(std::move(x));
    out.observed_loss.push_back(worst_loss);
  }
  return out;
}

uint64_t CallSeed(uint64_t seed, size_t history_size) {
  return seed ^ (0xd1b54a32d192ed03ULL * (static_cast<uint64_t>(history_size) + 1));
}

}  // namespace kubetrain::tuner
