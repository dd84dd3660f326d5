#include "operator/tuner/history.h"

#include <algorithm>
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

// One value of a trial at the resource it had trained when it was reported.
struct Observation {
  int64_t resource;
  double value;
  // A completed trial's final value: at the full resource, whatever its
  // count of reports on record says (status keeps a trial's last 100).
  bool full = false;
};

// A trial's values at the rungs it reached and, when it trained past the last
// of them, its last report; a completed trial's last report is its final
// value. With STEPS a rung's value is at the step of the report that reached
// it, and a report that reached several rungs counts once.
std::vector<Observation> ObservationsOf(const v1::EarlyStoppingSpec& stopping,
                                        const TrialRecord& record) {
  const bool by_steps = stopping.resource() == v1::EarlyStoppingSpec::STEPS;
  const std::vector<std::pair<int64_t, double>> reports = FiniteReports(record.curve);
  std::vector<Observation> out;
  for (size_t k = 0; k < record.rungs.size(); ++k) {
    if (!std::isfinite(record.rungs[k])) continue;
    int64_t resource = RungResource(stopping, static_cast<int>(k));
    if (by_steps) {
      const auto reached = ReportAtRung(stopping, reports, static_cast<int>(k));
      if (reached && reached->second == record.rungs[k]) resource = reached->first;
    }
    if (!out.empty() && resource <= out.back().resource) continue;
    out.push_back({resource, record.rungs[k]});
  }
  const bool completed = record.status == TrialRecord::Status::kCompleted;
  if (!reports.empty()) {
    const int64_t resource = by_steps ? reports.back().first : static_cast<int64_t>(reports.size());
    if (completed && !out.empty() && resource <= out.back().resource) {
      out.back().full = true;  // its last report is the last rung's
    } else if (out.empty() || resource > out.back().resource) {
      out.push_back({resource, reports.back().second, completed});
    }
  } else if (completed && record.objective && std::isfinite(*record.objective)) {
    out.push_back({RungResource(stopping, 0), *record.objective, true});
  }
  return out;
}

// kEveryRung: `placed` records' observations, each a point with its resource
// as one more coordinate, on a log scale from the first rung (0) to the most
// any trial trained (1); pending and running trials at 1. A report before the
// first rung is no rung value and is left out.
void ObserveEveryRung(const v1::HyperparameterSpec& spec,
                      const std::vector<const TrialRecord*>& placed,
                      const std::vector<std::vector<double>>& placed_x, ParsedHistory& out) {
  const bool maximize = spec.goal() != v1::HyperparameterSpec::MINIMIZE;
  const v1::EarlyStoppingSpec& stopping = spec.early_stopping();
  const int64_t lowest = RungResource(stopping, 0);
  int64_t highest = lowest;
  std::vector<std::vector<Observation>> observations;
  for (const TrialRecord* record : placed) {
    observations.emplace_back();
    if (record->status == TrialRecord::Status::kFailed) continue;
    for (const Observation& o : ObservationsOf(stopping, *record)) {
      if (o.resource < lowest && !o.full) continue;
      observations.back().push_back(o);
      highest = std::max(highest, o.resource);
    }
  }
  const double span = std::log(static_cast<double>(highest) / static_cast<double>(lowest));
  auto level = [&](const Observation& o) {
    if (o.full || !(span > 0) || o.resource >= highest) return 1.0;
    return std::clamp(
        std::log(static_cast<double>(o.resource) / static_cast<double>(lowest)) / span, 0.0, 1.0);
  };
  out.observed_x.clear();
  out.observed_loss.clear();
  out.progress_loss.clear();
  out.pending_x.clear();
  out.fidelity = true;
  for (size_t i = 0; i < placed.size(); ++i) {
    for (const Observation& o : observations[i]) {
      std::vector<double> x = placed_x[i];
      x.push_back(level(o));
      out.observed_x.push_back(std::move(x));
      out.observed_loss.push_back(maximize ? -o.value : o.value);
      if (out.observed_x.back().back() == 1.0)
        out.progress_loss.push_back(out.observed_loss.back());
    }
    if (placed[i]->status == TrialRecord::Status::kPending ||
        placed[i]->status == TrialRecord::Status::kRunning) {
      std::vector<double> x = placed_x[i];
      x.push_back(1.0);
      out.pending_x.push_back(std::move(x));
    }
  }
}

}  // namespace

ParsedHistory ParseHistory(const SearchSpace& space, const v1::HyperparameterSpec& spec,
                           const std::vector<TrialRecord>& history, HalvingModel halving_model) {
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
          out.progress_loss.push_back(out.observed_loss.back());
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
  if (spec.early_stopping().algorithm() != v1::EarlyStoppingSpec::SUCCESSIVE_HALVING) return out;
  if (halving_model == HalvingModel::kEveryRung) {
    ObserveEveryRung(spec, placed, placed_x, out);
    return out;
  }
  // kHighestRung: the values at the highest rung enough trials reached (as
  // BOHB), while too few trials have a final objective. Trials still short of
  // that rung are pending. Those that ended below it were judged worse than
  // the trials that went on: they count as the worst value seen there, or the
  // model, never seeing them at its rung, would suggest their region again
  // and again, only to have each suggestion stopped below it.
  const std::optional<size_t> rung =
      ModelRung(placed, static_cast<size_t>(space.num_features()) + 2);
  if (!rung) return out;
  out.observed_x.clear();
  out.observed_loss.clear();
  out.progress_loss.clear();
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
      out.progress_loss.push_back(out.observed_loss.back());
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
