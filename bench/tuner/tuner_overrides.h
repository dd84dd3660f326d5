#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "operator/tuner/bayesian_optimizer.h"
#include "operator/tuner/search_space.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::tuner::bench {

// The tuner under test: Tuner::Create, or, when `config` has "options" and
// the spec asks for Bayesian optimisation, the Bayesian optimiser with those
// BayesianOptions overrides (for tuning the defaults). An invalid spec is
// Tuner::Create's error.
inline absl::StatusOr<std::unique_ptr<Tuner>> MakeTuner(const v1::HyperparameterSpec& spec,
                                                        uint64_t seed,
                                                        const nlohmann::json& config) {
  absl::StatusOr<std::unique_ptr<Tuner>> tuner = Tuner::Create(spec, seed);
  if (!tuner.ok() || !config.contains("options") ||
      spec.algorithm() != v1::HyperparameterSpec::ALGORITHM_UNSPECIFIED) {
    return tuner;
  }
  const nlohmann::json& o = config["options"];
  BayesianOptions options;
  options.initial_design = o.value("initial_design", options.initial_design);
  options.max_training_points = o.value("max_training_points", options.max_training_points);
  options.max_fit_points = o.value("max_fit_points", options.max_fit_points);
  options.random_candidates = o.value("random_candidates", options.random_candidates);
  options.local_candidates = o.value("local_candidates", options.local_candidates);
  options.refine_starts = o.value("refine_starts", options.refine_starts);
  options.explore_every = o.value("explore_every", options.explore_every);
  options.explore_steps = o.value("explore_steps", options.explore_steps);
  options.basin_link_cut = o.value("basin_link_cut", options.basin_link_cut);
  options.gls_mean = o.value("gls_mean", options.gls_mean);
  options.stall_window = o.value("stall_window", options.stall_window);
  options.stall_tolerance = o.value("stall_tolerance", options.stall_tolerance);
  if (o.contains("halving_model")) {
    const std::string model =
        o["halving_model"].is_string() ? o["halving_model"].get<std::string>() : "";
    if (model != "every_rung" && model != "highest_rung") {
      return absl::InvalidArgumentError(
          "options.halving_model: one of \"every_rung\", \"highest_rung\", got " +
          o["halving_model"].dump());
    }
    options.halving_model =
        model == "every_rung" ? HalvingModel::kEveryRung : HalvingModel::kHighestRung;
  }
  options.fit.restarts = o.value("restarts", options.fit.restarts);
  options.fit.random_starts = o.value("random_starts", options.fit.random_starts);
  options.fit.max_iterations = o.value("fit_iterations", options.fit.max_iterations);
  GpPrior& prior = options.fit.prior;
  prior.log_length_mean = o.value("log_length_mean", prior.log_length_mean);
  prior.log_length_sd = o.value("log_length_sd", prior.log_length_sd);
  prior.max_log_length = o.value("max_log_length", prior.max_log_length);
  prior.min_log_length = o.value("min_log_length", prior.min_log_length);
  return std::unique_ptr<Tuner>(
      std::make_unique<BayesianOptimizer>(*SearchSpace::Create(spec), spec, seed, options));
}

}  // namespace kubetrain::tuner::bench
