#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "operator/tuner/search_space.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::tuner {

// What a suggestion step needs from the trial history.
struct ParsedHistory {
  // Keys (AssignmentKey) of every point tried or in flight, whatever its
  // status: the canonical form when the assignment parses, and the raw form
  // always, so an assignment that no longer fits the space still blocks
  // itself.
  std::unordered_set<std::string> used;
  // Completed and stopped-early trials with a finite objective (stopped
  // trials feed the model with their last value): the model's inputs and the
  // objective turned into a loss (negated for MAXIMIZE). Under successive
  // halving, the values at rungs instead (HalvingModel).
  std::vector<std::vector<double>> observed_x;
  std::vector<double> observed_loss;
  // The losses whose best tells whether the study still improves (the stall
  // check), in trial order: observed_loss without halving; the values at the
  // model's rung (kHighestRung) or at the full resource (kEveryRung) under
  // it. A value at a lower rung cannot beat a full run's, and a stand-in
  // value for a trial that ended below the model's rung is no progress.
  std::vector<double> progress_loss;
  // Pending and running trials' inputs.
  std::vector<std::vector<double>> pending_x;
  // Whether every input of observed_x and pending_x is a cube point with one
  // coordinate more, the resource it was observed at (HalvingModel::kEveryRung):
  // 0 at the first rung, 1 at the most any trial has trained. Pending trials
  // are at 1, where the model is asked for suggestions.
  bool fidelity = false;
  // Records whose assignment fits the space (for the initial design's index).
  int64_t num_records = 0;
  // Distinct points of the space among them (to detect exhaustion).
  uint64_t distinct_points = 0;
};

// What the model learns from under successive halving, where most trials end
// at a low rung.
enum class HalvingModel {
  // BOHB's: the values at the highest rung that enough trials (features + 2)
  // reached, while fewer trials have a final objective; the trials that ended
  // below that rung count as the worst value seen there.
  kHighestRung,
  // Every trial's value at each rung it reached, and its last report past
  // them, each a point at its resource level (ParsedHistory::fidelity): the
  // model learns how the objective grows with training, and a trial stopped
  // at the first rung still tells it how good it was there.
  kEveryRung,
};

// Failed trials are only `used`: a failure says nothing about the objective
// (often it is a bad flag combination or a node problem), so the model does
// not see them, but they are never suggested again.
ParsedHistory ParseHistory(const SearchSpace& space, const v1::HyperparameterSpec& spec,
                           const std::vector<TrialRecord>& history, HalvingModel halving_model);

// The per-call generator: a function of the study seed and the history size,
// so the same history always gives the same suggestions.
uint64_t CallSeed(uint64_t seed, size_t history_size);

}  // namespace kubetrain::tuner
