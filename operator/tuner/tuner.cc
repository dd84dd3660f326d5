#include "operator/tuner/tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "operator/tuner/bayesian_optimizer.h"
#include "operator/tuner/history.h"
#include "operator/tuner/search_space.h"

namespace kubetrain::tuner {
namespace {

using v1::HyperparameterSpec;

// Independent uniform draws (SearchSpace::SampleUniform), redrawn when the
// point is already used; a finite space that runs short is finished in grid
// order, so exhaustion is exact.
class RandomSearch : public Tuner {
 public:
  RandomSearch(SearchSpace space, uint64_t seed) : space_(std::move(space)), seed_(seed) {}

  std::vector<Assignment> Suggest(const std::vector<TrialRecord>& history, int count) override {
    std::vector<Assignment> out;
    if (count <= 0) return out;
    HyperparameterSpec unused_spec;
    ParsedHistory h = ParseHistory(space_, unused_spec, history, HalvingModel::kHighestRung);
    Rng rng(CallSeed(seed_, history.size()));
    uint64_t grid_cursor = 0;
    const std::optional<uint64_t> size = space_.FiniteSize();
    for (int j = 0; j < count; ++j) {
      std::optional<Assignment> next;
      for (int tries = 0; tries < 200 && !next; ++tries) {
        Assignment a = space_.SampleUniform(rng);
        if (!h.used.contains(AssignmentKey(a))) next = std::move(a);
      }
      // Draws keep colliding only when the space is nearly used up.
      for (; !next && size && grid_cursor < *size; ++grid_cursor) {
        Assignment a = space_.GridPoint(grid_cursor);
        if (!h.used.contains(AssignmentKey(a))) next = std::move(a);
      }
      if (!next) break;
      h.used.insert(AssignmentKey(*next));
      out.push_back(std::move(*next));
    }
    return out;
  }

 private:
  SearchSpace space_;
  uint64_t seed_;
};

// Every point of the grid (SearchSpace::GridPoint order) not yet in the
// history, in order; none once all are used.
class GridSearch : public Tuner {
 public:
  explicit GridSearch(SearchSpace space) : space_(std::move(space)) {}

  std::vector<Assignment> Suggest(const std::vector<TrialRecord>& history, int count) override {
    std::vector<Assignment> out;
    HyperparameterSpec unused_spec;
    ParsedHistory h = ParseHistory(space_, unused_spec, history, HalvingModel::kHighestRung);
    const uint64_t size = *space_.FiniteSize();
    for (uint64_t i = 0; i < size && static_cast<int>(out.size()) < count; ++i) {
      Assignment a = space_.GridPoint(i);
      if (!h.used.contains(AssignmentKey(a))) out.push_back(std::move(a));
    }
    return out;
  }

 private:
  SearchSpace space_;
};

// The running average of `curve` over reports at steps <= `step`; nullopt
// when there is none.
std::optional<double> RunningAverageAt(const std::vector<std::pair<int64_t, double>>& curve,
                                       int64_t step) {
  double sum = 0;
  int n = 0;
  for (const auto& [s, v] : curve) {
    if (s > step || !std::isfinite(v)) continue;
    sum += v;
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

// The keep-th best of `values` (keep >= 1, at most their count): the bar a
// value must reach to be among the best `keep` at a rung.
double KeepThBest(std::vector<double> values, size_t keep, bool maximize) {
  std::nth_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(keep - 1), values.end(),
                   [&](double a, double b) { return maximize ? a > b : a < b; });
  return values[keep - 1];
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tuner>> Tuner::Create(const HyperparameterSpec& spec,
                                                     uint64_t seed) {
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  if (!space.ok()) return space.status();
  switch (spec.algorithm()) {
    case HyperparameterSpec::ALGORITHM_UNSPECIFIED:
      return std::make_unique<BayesianOptimizer>(*std::move(space), spec, seed);
    case HyperparameterSpec::RANDOM_SEARCH:
      return std::make_unique<RandomSearch>(*std::move(space), seed);
    case HyperparameterSpec::GRID_SEARCH:
      if (!space->FiniteSize()) {
        return absl::InvalidArgumentError(
            "hyperparameters.algorithm: GRID_SEARCH needs INTEGER, DISCRETE or CATEGORICAL "
            "parameters only, with fewer than 2^63 grid points");
      }
      return std::make_unique<GridSearch>(*std::move(space));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameters.algorithm: unsupported value ", spec.algorithm()));
  }
}

bool ShouldStopEarly(const HyperparameterSpec& spec, const TrialRecord& running,
                     const std::vector<TrialRecord>& completed) {
  const bool maximize = spec.goal() != HyperparameterSpec::MINIMIZE;
  std::optional<double> best;
  int64_t step = 0;
  for (const auto& [s, v] : running.curve) {
    if (!std::isfinite(v)) continue;
    if (!best || (maximize ? v > *best : v < *best)) best = v;
    step = std::max(step, s);
  }
  if (!best) return false;
  std::vector<double> averages;
  int64_t last_completed_step = -1;
  for (const TrialRecord& trial : completed) {
    if (std::optional<double> avg = RunningAverageAt(trial.curve, step)) averages.push_back(*avg);
    for (const auto& [s, v] : trial.curve) {
      if (std::isfinite(v)) last_completed_step = std::max(last_completed_step, s);
    }
  }
  if (averages.empty() || step >= last_completed_step) return false;
  // A true median: the middle value, or the mean of the two middle values.
  std::sort(averages.begin(), averages.end());
  const size_t n = averages.size();
  const double median =
      n % 2 == 1 ? averages[n / 2] : 0.5 * (averages[n / 2 - 1] + averages[n / 2]);
  return maximize ? *best < median : *best > median;
}

int64_t ReductionFactor(const v1::EarlyStoppingSpec& stopping) {
  // At least 2 even where validation was skipped: rungs must grow.
  return stopping.has_reduction_factor() ? std::max(2, stopping.reduction_factor())
                                         : kDefaultReductionFactor;
}

int64_t RungResource(const v1::EarlyStoppingSpec& stopping, int k) {
  const int64_t eta = ReductionFactor(stopping);
  int64_t r = stopping.has_min_resource() ? std::max<int64_t>(1, stopping.min_resource()) : 1;
  for (int i = 0; i < k; ++i) {
    if (r > std::numeric_limits<int64_t>::max() / eta) return std::numeric_limits<int64_t>::max();
    r *= eta;
  }
  return r;
}

std::vector<std::pair<int64_t, double>> FiniteReports(
    const std::vector<std::pair<int64_t, double>>& curve) {
  std::vector<std::pair<int64_t, double>> reports;
  for (const auto& report : curve) {
    if (std::isfinite(report.second)) reports.push_back(report);
  }
  return reports;
}

std::optional<std::pair<int64_t, double>> ReportAtRung(
    const v1::EarlyStoppingSpec& stopping, const std::vector<std::pair<int64_t, double>>& reports,
    int k) {
  const int64_t at = RungResource(stopping, k);
  if (stopping.resource() != v1::EarlyStoppingSpec::STEPS) {
    if (at <= static_cast<int64_t>(reports.size())) return reports[at - 1];
    return std::nullopt;
  }
  for (const auto& report : reports) {
    if (report.first >= at) return report;
  }
  return std::nullopt;
}

bool SameRungs(const v1::EarlyStoppingSpec& a, const v1::EarlyStoppingSpec& b) {
  constexpr auto kHalving = v1::EarlyStoppingSpec::SUCCESSIVE_HALVING;
  // Rungs 0 and 1 fix minResource and the factor; REPORTS is the default.
  return a.algorithm() == kHalving && b.algorithm() == kHalving &&
         (a.resource() == v1::EarlyStoppingSpec::STEPS) ==
             (b.resource() == v1::EarlyStoppingSpec::STEPS) &&
         RungResource(a, 0) == RungResource(b, 0) && RungResource(a, 1) == RungResource(b, 1);
}

std::vector<double> RungsFromCurve(const v1::EarlyStoppingSpec& stopping,
                                   const std::vector<std::pair<int64_t, double>>& curve,
                                   bool truncated) {
  std::vector<double> rungs;
  if (truncated) return rungs;
  const std::vector<std::pair<int64_t, double>> reports = FiniteReports(curve);
  for (int k = 0; k < 63; ++k) {
    const std::optional<std::pair<int64_t, double>> report = ReportAtRung(stopping, reports, k);
    if (!report) break;
    rungs.push_back(report->second);
  }
  return rungs;
}

RungVerdict JudgeAtRungs(const HyperparameterSpec& spec, const TrialRecord& running,
                         const std::vector<TrialRecord>& others) {
  const v1::EarlyStoppingSpec& stopping = spec.early_stopping();
  const bool maximize = spec.goal() != HyperparameterSpec::MINIMIZE;
  const int64_t eta = ReductionFactor(stopping);
  const std::vector<std::pair<int64_t, double>> reports = FiniteReports(running.curve);
  RungVerdict verdict;
  // Past 63 rungs the resource has saturated at INT64_MAX: no more rungs.
  for (int k = static_cast<int>(running.rungs.size()); k < 63; ++k) {
    const std::optional<std::pair<int64_t, double>> report = ReportAtRung(stopping, reports, k);
    if (!report) break;
    verdict.reached.push_back(*report);
    std::vector<double> values = {report->second};
    for (const TrialRecord& other : others) {
      if (static_cast<int>(other.rungs.size()) > k && std::isfinite(other.rungs[k])) {
        values.push_back(other.rungs[k]);
      }
    }
    const size_t keep = std::max<size_t>(1, values.size() / static_cast<size_t>(eta));
    const double bar = KeepThBest(std::move(values), keep, maximize);
    if (maximize ? report->second < bar : report->second > bar) {
      verdict.stop = true;
      break;
    }
  }
  return verdict;
}

std::optional<Promotion> NextPromotion(const HyperparameterSpec& spec,
                                       const std::vector<TrialRecord>& trials,
                                       const std::set<std::string>& paused) {
  const bool maximize = spec.goal() != HyperparameterSpec::MINIMIZE;
  auto better = [maximize](double a, double b) { return maximize ? a > b : a < b; };
  const size_t eta = static_cast<size_t>(ReductionFactor(spec.early_stopping()));
  size_t highest = 0;
  for (const TrialRecord& t : trials) highest = std::max(highest, t.rungs.size());
  for (size_t k = highest; k-- > 0;) {
    std::vector<double> values;
    for (const TrialRecord& t : trials) {
      if (t.rungs.size() > k && std::isfinite(t.rungs[k])) values.push_back(t.rungs[k]);
    }
    const size_t earned = values.size() / eta;
    if (earned == 0) continue;
    const double bar = KeepThBest(std::move(values), earned, maximize);
    const TrialRecord* best = nullptr;
    for (const TrialRecord& t : trials) {
      if (t.rungs.size() != k + 1 || paused.count(t.trial_id) == 0) continue;
      const double v = t.rungs[k];
      if (!std::isfinite(v) || better(bar, v)) continue;
      if (best == nullptr || better(v, best->rungs[k])) best = &t;
    }
    if (best != nullptr) return Promotion{best->trial_id, static_cast<int>(k)};
  }
  return std::nullopt;
}

std::optional<std::string> LeaderAtTopRung(const HyperparameterSpec& spec,
                                           const std::vector<TrialRecord>& trials) {
  const bool maximize = spec.goal() != HyperparameterSpec::MINIMIZE;
  const TrialRecord* leader = nullptr;
  size_t top = 0;  // rungs reached by `leader`
  for (const TrialRecord& t : trials) {
    // Its highest rung with a finite value.
    size_t reached = t.rungs.size();
    while (reached > 0 && !std::isfinite(t.rungs[reached - 1])) --reached;
    if (reached == 0 || reached < top) continue;
    const double v = t.rungs[reached - 1];
    if (leader == nullptr || reached > top ||
        (maximize ? v > leader->rungs[top - 1] : v < leader->rungs[top - 1])) {
      leader = &t;
      top = reached;
    }
  }
  if (leader == nullptr) return std::nullopt;
  return leader->trial_id;
}

}  // namespace kubetrain::tuner
