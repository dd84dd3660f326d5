#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
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
  // Successive halving: its value at each rung it reached, lowest first
  // (HyperparameterOutput.rungMetrics).
  std::vector<double> rungs;
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

// Vizier's median stopping rule. Let S be the step of `running`'s latest
// report. True when
//   1. some trial in `completed` reported at a step <= S (their running
//      averages at S: the mean of each one's reports at steps <= S; one such
//      trial is enough), and
//   2. S is below the last step some completed trial reported: at or past
//      the end of every completed run there is no training left to save (and
//      a trainer that cannot mark its last report, such as one writing the
//      cloudml-hypertune file, is not stopped at its end), and
//   3. `running`'s best objective over its reports so far is strictly worse
//      (per the spec's goal) than the median of those running averages (the
//      middle one, or the mean of the two middle ones).
// Reports that are not finite are ignored. Callers pass as `completed` the
// trials that ran to their end (not those stopped early), and do not ask
// about a trial whose final report has arrived (MetricReport::final).
bool ShouldStopEarly(const v1::HyperparameterSpec& spec, const TrialRecord& running,
                     const std::vector<TrialRecord>& completed);

// Asynchronous successive halving (ASHA; hyperparameters.earlyStopping
// SUCCESSIVE_HALVING). Rung k is at minResource x reductionFactor^k of the
// resource: a trial's count of finite reports (REPORTS) or the step of its
// latest one (STEPS). A trial's value at rung k is its report that reached
// the rung (the r-th report; the first at a step >= r). When a trial first
// reaches a rung it is compared, once, with every trial that reached that
// rung before it (any state: their recorded `rungs`): it continues if its
// value is among the best max(1, floor(n / reductionFactor)) of the n values
// there, its own included (ties continue), and stops otherwise. So the first
// trial at a rung always continues, and the decision never waits for a rung
// to fill. A decision is never revisited: callers record `reached`.
inline constexpr int kDefaultReductionFactor = 3;

// The spec's reduction factor: its reductionFactor, else the default.
int64_t ReductionFactor(const v1::EarlyStoppingSpec& stopping);

// The resource at which rung `k` is (saturating).
int64_t RungResource(const v1::EarlyStoppingSpec& stopping, int k);

// `curve` (a trial's reports) without those whose value is not finite.
std::vector<std::pair<int64_t, double>> FiniteReports(
    const std::vector<std::pair<int64_t, double>>& curve);

// The report of `reports` (a trial's finite reports, in step order) that
// reached rung `k`: the r-th with REPORTS, the first at a step >= r with
// STEPS; nullopt when none has.
std::optional<std::pair<int64_t, double>> ReportAtRung(
    const v1::EarlyStoppingSpec& stopping, const std::vector<std::pair<int64_t, double>>& reports,
    int k);

// Whether `a` and `b` put successive halving's rungs at the same places:
// both SUCCESSIVE_HALVING, with the same resource, minResource and
// reductionFactor (after their defaults).
bool SameRungs(const v1::EarlyStoppingSpec& a, const v1::EarlyStoppingSpec& b);

// A trial's values at every rung of `stopping` that its `curve` (every
// report of the metric tag, in step order; values that are not finite are
// ignored) reached: what JudgeAtRungs records, were the trial never
// stopped. For a trial judged under other rungs (a resumed study's): it did
// reach them, whatever stopped it later. None when `truncated`: the
// curve lost its first reports (status keeps the last kMaxMetricsPerTrial),
// so which report reached a rung is not known.
std::vector<double> RungsFromCurve(const v1::EarlyStoppingSpec& stopping,
                                   const std::vector<std::pair<int64_t, double>>& curve,
                                   bool truncated);

struct RungVerdict {
  // The running trial's reports at the rungs it reached past running.rungs,
  // lowest first: (training step, value). The caller appends them to its
  // record.
  std::vector<std::pair<int64_t, double>> reached;
  // Not among the best at the last of them: stop it there.
  bool stop = false;
};

// Judges `running` at each rung it reached beyond its recorded ones, in
// order, until one stops it. `others` are the study's trials (only their
// `rungs` are read); `running` itself may be among them, as its recorded
// rungs are all below those judged. Reports that are not finite are ignored.
RungVerdict JudgeAtRungs(const v1::HyperparameterSpec& spec, const TrialRecord& running,
                         const std::vector<TrialRecord>& others);

// Successive halving with pauses: ASHA as Li et al. (2018) give it, where a
// trial pauses at every rung it reaches and a free slot first resumes a
// paused trial that has earned the next rung, instead of JudgeAtRungs's
// verdict on arrival. Of the n trials that reached rung k (any state: their
// recorded `rungs`; values that are not finite are ignored), the best
// floor(n / reductionFactor) have earned rung k + 1 (ties earn it too); a
// trial counts as paused at rung k when its id is in `paused` and rung k is
// its last recorded one. So no trial goes past a rung before
// reductionFactor trials have reached it, and the first trials of a study
// do not spend the budget before anything is known.
struct Promotion {
  std::string trial_id;
  int rung = 0;  // the rung it paused at; it trains on to the next one
};

// The paused trial to resume: of those that earned their next rung, the one
// at the highest rung, the best value there first (then the earliest in
// `trials`). nullopt: none has, and a free slot starts a new trial.
std::optional<Promotion> NextPromotion(const v1::HyperparameterSpec& spec,
                                       const std::vector<TrialRecord>& trials,
                                       const std::set<std::string>& paused);

// The trial with the best value at the highest rung any of `trials` reached
// (the earliest in `trials` on a tie; values that are not finite are
// ignored); nullopt when none reached a rung. When a study starts no more
// trials and none runs, a paused leader is resumed to its end although no
// eta trials reached its rung, so that the study's best configuration is
// trained fully instead of being stopped where it waited.
std::optional<std::string> LeaderAtTopRung(const v1::HyperparameterSpec& spec,
                                           const std::vector<TrialRecord>& trials);

}  // namespace kubetrain::tuner
