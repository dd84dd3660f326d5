#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/tuner/rng.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::tuner {

// Formats a double the shortest way that parses back to the same value
// ("0.001", "1e-05", "32"); -0 prints as "0".
std::string FormatDouble(double value);

// The study's parameters as a unit cube, the space the model works in.
//
// Each numeric parameter is one coordinate in [0, 1]:
//   * UNIT_LINEAR_SCALE (and NONE): u = (x - lo) / (hi - lo).
//   * UNIT_LOG_SCALE: u = log(x / lo) / log(hi / lo); resolution near `lo`.
//   * UNIT_REVERSE_LOG_SCALE: u = 1 - log((hi + lo - x) / lo) / log(hi / lo);
//     resolution near `hi` (Vizier's definition).
// INTEGER parameters warp the interval [min - 0.5, max + 0.5], so that every
// integer owns a cell of the cube (uniform sampling is uniform over integers)
// and decoding rounds. DISCRETE parameters warp [min listed, max listed] and
// decode to the listed value nearest in the warped coordinate. A CATEGORICAL
// parameter with k values is k one-hot coordinates; it decodes to the largest
// coordinate (ties to the first), so a uniform point of the cube picks every
// category with the same probability.
//
// Immutable after Create; safe to share between threads.
class SearchSpace {
 public:
  // InvalidArgument (naming the parameter) for specs the cube cannot express:
  // no parameters, duplicate names, min > max, a log scale over non-positive
  // values, an empty DISCRETE or CATEGORICAL list, an unknown type.
  static absl::StatusOr<SearchSpace> Create(const v1::HyperparameterSpec& spec);

  // Number of cube coordinates (one per numeric parameter, k per categorical).
  int num_features() const { return num_features_; }
  int num_params() const { return static_cast<int>(params_.size()); }

  // A valid assignment for any point; coordinates are clamped to [0, 1].
  Assignment Decode(std::span<const double> unit) const;

  // The cube point of an assignment. InvalidArgument when a parameter is
  // missing, a value does not parse, lies outside its range, is not one of
  // the listed values (DISCRETE, within 1e-9 relative) or categories.
  absl::StatusOr<std::vector<double>> Encode(const Assignment& assignment) const;

  // Decode(Encode(assignment)): the form this space prints the assignment in
  // (integers as integers, doubles shortest round-trip, DISCRETE as the
  // listed value). Two assignments are the same point iff their canonical
  // forms are equal.
  absl::StatusOr<Assignment> Canonicalize(const Assignment& assignment) const;

  // A point drawn uniformly: uniform in the warped coordinate for DOUBLE and
  // INTEGER, uniform over the listed values for DISCRETE and CATEGORICAL.
  Assignment SampleUniform(Rng& rng) const;

  // The number of distinct points when every parameter is INTEGER, DISCRETE
  // or CATEGORICAL and the count fits in 63 bits; nullopt otherwise.
  std::optional<uint64_t> FiniteSize() const { return finite_size_; }

  // The index-th point of the grid, index < *FiniteSize(): parameters in
  // spec order, the last one varying fastest; INTEGER ascending, DISCRETE
  // ascending, CATEGORICAL in listed order.
  Assignment GridPoint(uint64_t index) const;

 private:
  struct Param {
    std::string name;
    v1::ParameterSpec::ParameterType type;
    v1::ParameterSpec::ScaleType scale;
    double lo = 0;  // the warped interval, in value space
    double hi = 0;
    int64_t int_min = 0;
    int64_t int_max = 0;
    std::vector<double> discrete;       // sorted, unique
    std::vector<double> discrete_unit;  // their cube coordinates
    std::vector<std::string> categories;
    int offset = 0;            // first cube coordinate
    uint64_t cardinality = 0;  // 0: continuous
  };

  double ToUnit(const Param& p, double x) const;
  double FromUnit(const Param& p, double u) const;
  std::string DecodeParam(const Param& p, std::span<const double> unit) const;
  std::string GridValue(const Param& p, uint64_t i) const;

  std::vector<Param> params_;
  int num_features_ = 0;
  std::optional<uint64_t> finite_size_;
};

// A stable string key for an assignment (for sets of seen points).
std::string AssignmentKey(const Assignment& assignment);

}  // namespace kubetrain::tuner
