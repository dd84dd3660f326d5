// Runs kubetrain's tuner on a test function and prints JSON results; the
// comparison with Optuna and scikit-learn is run_bench.py.
//
//   bench_tuner_driver CONFIG.json     (or the JSON on stdin)
//
// Config: {"mode": "optimize", "function": "branin"|"hartmann6", "trials": N,
//          "batch": B, "seeds": [...], "algorithm": "bayes"|"random"}
//   -> {"results": [{"seed": s, "values": [f(x_1), ..., f(x_N)],
//                    "suggest_seconds": total}]}
//   ("record_points": true adds "points": [[x_1...], ...] to each result)
// Config: {"mode": "latency", "function": ..., "completed": [100, 1000],
//          "repeats": R, "batch": B}
//   -> {"latency": [{"completed": n, "median_ms_per_suggestion": ...,
//                    "max_ms": ...}]}
#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "bench/tuner/test_functions.h"
#include "bench/tuner/tuner_overrides.h"
#include "nlohmann/json.hpp"
#include "operator/tuner/bayesian_optimizer.h"
#include "operator/tuner/rng.h"
#include "operator/tuner/search_space.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::tuner::bench {
namespace {

using v1::HyperparameterSpec;
using v1::ParameterSpec;

HyperparameterSpec SpecFor(const TestFunction& fn, const std::string& algorithm) {
  HyperparameterSpec spec;
  spec.set_goal(HyperparameterSpec::MINIMIZE);
  spec.set_algorithm(algorithm == "random" ? HyperparameterSpec::RANDOM_SEARCH
                                           : HyperparameterSpec::ALGORITHM_UNSPECIFIED);
  for (size_t d = 0; d < fn.lower.size(); ++d) {
    ParameterSpec* p = spec.add_params();
    p->set_parameter_name("x" + std::to_string(d));
    p->set_type(ParameterSpec::DOUBLE);
    p->set_min_value(fn.lower[d]);
    p->set_max_value(fn.upper[d]);
    p->set_scale_type(ParameterSpec::UNIT_LINEAR_SCALE);
  }
  return spec;
}

std::vector<double> Point(const TestFunction& fn, const Assignment& a) {
  std::vector<double> x(fn.lower.size());
  for (size_t d = 0; d < x.size(); ++d) x[d] = std::stod(a.at("x" + std::to_string(d)));
  return x;
}

double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

int Run(const nlohmann::json& config) {
  const TestFunction* fn = FindTestFunction(config.at("function").get<std::string>());
  if (fn == nullptr) {
    std::cerr << "unknown function " << config.at("function") << "\n";
    return 2;
  }
  const std::string algorithm = config.value("algorithm", "bayes");
  const HyperparameterSpec spec = SpecFor(*fn, algorithm);
  const int batch = config.value("batch", 1);
  nlohmann::json out;
  if (config.value("mode", "optimize") == "latency") {
    out["latency"] = nlohmann::json::array();
    for (int completed : config.at("completed")) {
      std::vector<double> per_suggestion_ms, cpu_ms;
      const int repeats = config.value("repeats", 5);
      for (int r = 0; r < repeats; ++r) {
        // A history of uniformly random completed trials.
        Rng rng(1000 + r);
        std::vector<TrialRecord> history;
        for (int i = 0; i < completed; ++i) {
          std::vector<double> x(fn->lower.size());
          Assignment a;
          for (size_t d = 0; d < x.size(); ++d) {
            x[d] = fn->lower[d] + rng.Uniform() * (fn->upper[d] - fn->lower[d]);
            a["x" + std::to_string(d)] = FormatDouble(x[d]);
          }
          TrialRecord t;
          t.trial_id = std::to_string(i);
          t.assignment = a;
          t.status = TrialRecord::Status::kCompleted;
          t.objective = fn->f(x);
          history.push_back(std::move(t));
        }
        std::unique_ptr<Tuner> tuner = *MakeTuner(spec, r, config);
        const auto start = std::chrono::steady_clock::now();
        const double cpu_start = CpuSeconds();
        std::vector<Assignment> s = tuner->Suggest(history, batch);
        const double elapsed = Seconds(std::chrono::steady_clock::now() - start);
        const double cpu = CpuSeconds() - cpu_start;
        per_suggestion_ms.push_back(1000.0 * elapsed / std::max<size_t>(1, s.size()));
        cpu_ms.push_back(1000.0 * cpu / std::max<size_t>(1, s.size()));
      }
      std::sort(per_suggestion_ms.begin(), per_suggestion_ms.end());
      std::sort(cpu_ms.begin(), cpu_ms.end());
      out["latency"].push_back(
          {{"completed", completed},
           {"batch", batch},
           {"median_ms_per_suggestion", per_suggestion_ms[per_suggestion_ms.size() / 2]},
           {"median_cpu_ms_per_suggestion", cpu_ms[cpu_ms.size() / 2]},
           {"max_ms", per_suggestion_ms.back()}});
    }
  } else {
    const int trials = config.at("trials");
    out["results"] = nlohmann::json::array();
    for (uint64_t seed : config.at("seeds")) {
      std::unique_ptr<Tuner> tuner = *MakeTuner(spec, seed, config);
      std::vector<TrialRecord> history;
      std::vector<double> values;
      std::vector<std::vector<double>> points;
      double suggest_seconds = 0;
      while (static_cast<int>(history.size()) < trials) {
        const int n = std::min(batch, trials - static_cast<int>(history.size()));
        const auto start = std::chrono::steady_clock::now();
        std::vector<Assignment> s = tuner->Suggest(history, n);
        suggest_seconds += Seconds(std::chrono::steady_clock::now() - start);
        if (s.empty()) break;
        for (const Assignment& a : s) {
          points.push_back(Point(*fn, a));
          const double y = fn->f(points.back());
          TrialRecord t;
          t.trial_id = std::to_string(history.size());
          t.assignment = a;
          t.status = TrialRecord::Status::kCompleted;
          t.objective = y;
          history.push_back(std::move(t));
          values.push_back(y);
        }
      }
      nlohmann::json result = {
          {"seed", seed}, {"values", values}, {"suggest_seconds", suggest_seconds}};
      if (config.value("record_points", false)) result["points"] = points;
      out["results"].push_back(std::move(result));
    }
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace kubetrain::tuner::bench

int main(int argc, char** argv) {
  std::stringstream text;
  if (argc > 1) {
    std::ifstream file(argv[1]);
    if (!file) {
      std::cerr << "cannot read " << argv[1] << "\n";
      return 2;
    }
    text << file.rdbuf();
  } else {
    text << std::cin.rdbuf();
  }
  nlohmann::json config = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    std::cerr << "config is not a JSON object\n";
    return 2;
  }
  try {
    return kubetrain::tuner::bench::Run(config);
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "bad config: " << e.what() << "\n";
    return 2;
  }
}
