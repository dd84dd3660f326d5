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
  // trials feed the model with their last value): cube points and the
  // objective turned into a loss (negated for MAXIMIZE). Under successive
  // halving, the values at one rung instead (history.cc, ModelRung).
  std::vector<std::vector<double>> observed_x;
  std::vector<double> observed_loss;
  // Pending and running trials' cube points.
  std::vector<std::vector<double>> pending_x;
  // Records whose assignment fits the space (for the initial design's index).
  int64_t num_records = 0;
  // Distinct points of the space among them (to detect exhaustion).
  uint64_t distinct_points = 0;
};

// Failed trials are only `used`: a failure says nothing about the objective
// (often it is a bad flag combination or a node problem), so the model does
// not see them, but they are never suggested again.
ParsedHistory ParseHistory(const SearchSpace& space, const v1::HyperparameterSpec& spec,
                           const std::vector<TrialRecord>& history);

// The per-call generator: a function of the study seed and the history size,
// so the same history always gives the same suggestions.
uint64_t CallSeed(uint64_t seed, size_t history_size);

}  // namespace kubetrain::tuner
