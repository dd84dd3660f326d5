#include "operator/tuner/tuner.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/tuner/bayesian_optimizer.h"
#include "operator/tuner/history.h"
#include "operator/tuner/search_space.h"

namespace kubetrain::tuner {
namespace {

using v1::HyperparameterSpec;
using v1::ParameterSpec;
using Status = TrialRecord::Status;

void AddParam(HyperparameterSpec& spec, const std::string& name, ParameterSpec::ParameterType type,
              double lo, double hi) {
  ParameterSpec* p = spec.add_params();
  p->set_parameter_name(name);
  p->set_type(type);
  p->set_min_value(lo);
  p->set_max_value(hi);
}

void AddCategorical(HyperparameterSpec& spec, const std::string& name,
                    std::vector<std::string> values) {
  ParameterSpec* p = spec.add_params();
  p->set_parameter_name(name);
  p->set_type(ParameterSpec::CATEGORICAL);
  for (const auto& v : values) p->add_categorical_values(v);
}

void AddDiscrete(HyperparameterSpec& spec, const std::string& name, std::vector<double> values) {
  ParameterSpec* p = spec.add_params();
  p->set_parameter_name(name);
  p->set_type(ParameterSpec::DISCRETE);
  for (double v : values) p->add_discrete_values(v);
}

// 4 x 3 x 5 = 60 points.
HyperparameterSpec SmallDiscreteSpec(HyperparameterSpec::Algorithm algorithm) {
  HyperparameterSpec spec;
  spec.set_algorithm(algorithm);
  spec.set_goal(HyperparameterSpec::MAXIMIZE);
  AddParam(spec, "layers", ParameterSpec::INTEGER, 1, 4);
  AddCategorical(spec, "opt", {"sgd", "adam", "rmsprop"});
  AddDiscrete(spec, "batch", {16, 32, 64, 128, 256});
  return spec;
}

double Number(const std::string& s) {
  double v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// A made-up objective over SmallDiscreteSpec.
double SmallObjective(const Assignment& a) {
  return -std::abs(Number(a.at("layers")) - 3) - std::abs(std::log2(Number(a.at("batch"))) - 6) +
         (a.at("opt") == "adam" ? 1.0 : 0.0);
}

TrialRecord Record(int id, const Assignment& a, Status status, std::optional<double> objective) {
  TrialRecord r;
  r.trial_id = std::to_string(id);
  r.assignment = a;
  r.status = status;
  r.objective = objective;
  return r;
}

class AllAlgorithmsTest : public ::testing::TestWithParam<HyperparameterSpec::Algorithm> {};

TEST_P(AllAlgorithmsTest, NeverDuplicatesUntilExhaustedThenReturnsNothing) {
  const HyperparameterSpec spec = SmallDiscreteSpec(GetParam());
  absl::StatusOr<std::unique_ptr<Tuner>> tuner = Tuner::Create(spec, 42);
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  std::vector<TrialRecord> history;
  std::set<Assignment> seen;
  int requested = 0, calls_after_exhaustion = 0;
  // Mixed batch sizes and outcomes: some trials fail, some stay pending.
  while (requested < 10000) {
    const int count = history.size() < 60 ? 1 + static_cast<int>(history.size() % 7) : 1000;
    requested += count;
    std::vector<Assignment> batch = (*tuner)->Suggest(history, count);
    ASSERT_LE(static_cast<int>(batch.size()), count);
    if (history.size() >= 60) {
      EXPECT_THAT(batch, ::testing::IsEmpty());
      ++calls_after_exhaustion;
      continue;
    }
    ASSERT_FALSE(batch.empty()) << "only " << history.size() << " of 60 points were suggested";
    for (const Assignment& a : batch) {
      ASSERT_TRUE(space->Encode(a).ok()) << AssignmentKey(a);
      ASSERT_TRUE(seen.insert(a).second) << "duplicate " << AssignmentKey(a);
      const int id = static_cast<int>(history.size());
      const Status status = id % 5 == 3   ? Status::kFailed
                            : id % 7 == 2 ? Status::kRunning
                                          : Status::kCompleted;
      history.push_back(
          Record(id, a, status,
                 status == Status::kCompleted ? std::optional(SmallObjective(a)) : std::nullopt));
    }
  }
  EXPECT_EQ(seen.size(), 60u);
  EXPECT_GT(calls_after_exhaustion, 0);
}

TEST_P(AllAlgorithmsTest, SameSeedAndHistoryGiveTheSameSuggestions) {
  HyperparameterSpec spec;
  spec.set_algorithm(GetParam());
  AddParam(spec, "n", ParameterSpec::INTEGER, 1, 50);
  AddCategorical(spec, "act", {"relu", "tanh"});
  if (GetParam() != HyperparameterSpec::GRID_SEARCH) {
    AddParam(spec, "lr", ParameterSpec::DOUBLE, 1e-4, 1e-1);
    spec.mutable_params(2)->set_scale_type(ParameterSpec::UNIT_LOG_SCALE);
  }
  std::vector<TrialRecord> history;
  auto a = Tuner::Create(spec, 9);
  auto b = Tuner::Create(spec, 9);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int round = 0; round < 4; ++round) {
    std::vector<Assignment> sa = (*a)->Suggest(history, 3);
    std::vector<Assignment> sb = (*b)->Suggest(history, 3);
    ASSERT_EQ(sa, sb);
    ASSERT_EQ(sa.size(), 3u);
    for (const Assignment& x : sa) {
      history.push_back(Record(static_cast<int>(history.size()), x, Status::kCompleted,
                               Number(x.at("n")) * (x.at("act") == "relu" ? 1 : -1)));
    }
  }
  // The same call again (a tuner keeps no state between calls).
  EXPECT_EQ((*a)->Suggest(history, 2), (*a)->Suggest(history, 2));
  if (GetParam() != HyperparameterSpec::GRID_SEARCH) {
    auto c = Tuner::Create(spec, 10);
    ASSERT_TRUE(c.ok());
    // Another seed starts differently (past the shared centre point).
    EXPECT_NE((*c)->Suggest({}, 3), (*a)->Suggest({}, 3));
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllAlgorithmsTest,
                         ::testing::Values(HyperparameterSpec::ALGORITHM_UNSPECIFIED,
                                           HyperparameterSpec::RANDOM_SEARCH,
                                           HyperparameterSpec::GRID_SEARCH));

TEST(GridSearchTest, WalksTheGridInOrderSkippingTriedPoints) {
  HyperparameterSpec spec;
  spec.set_algorithm(HyperparameterSpec::GRID_SEARCH);
  AddParam(spec, "layers", ParameterSpec::INTEGER, 1, 2);
  AddCategorical(spec, "act", {"relu", "tanh"});
  auto tuner = Tuner::Create(spec, 0);
  ASSERT_TRUE(tuner.ok());
  std::vector<TrialRecord> history = {
      Record(0, {{"layers", "1"}, {"act", "tanh"}}, Status::kFailed, std::nullopt)};
  std::vector<Assignment> s = (*tuner)->Suggest(history, 10);
  EXPECT_THAT(s, ::testing::ElementsAre(Assignment{{"layers", "1"}, {"act", "relu"}},
                                        Assignment{{"layers", "2"}, {"act", "relu"}},
                                        Assignment{{"layers", "2"}, {"act", "tanh"}}));
  for (const Assignment& a : s) history.push_back(Record(1, a, Status::kRunning, std::nullopt));
  EXPECT_THAT((*tuner)->Suggest(history, 10), ::testing::IsEmpty());
}

TEST(TunerTest, GridRejectsContinuousParameters) {
  HyperparameterSpec spec;
  spec.set_algorithm(HyperparameterSpec::GRID_SEARCH);
  AddParam(spec, "lr", ParameterSpec::DOUBLE, 0.1, 0.2);
  absl::StatusOr<std::unique_ptr<Tuner>> t = Tuner::Create(spec, 0);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr("GRID_SEARCH"));
}

TEST(TunerTest, EveryAlgorithmsOutputIsValidForAMixedSpace) {
  HyperparameterSpec spec;
  AddParam(spec, "lr", ParameterSpec::DOUBLE, 1e-5, 1.0);
  spec.mutable_params(0)->set_scale_type(ParameterSpec::UNIT_LOG_SCALE);
  AddParam(spec, "units", ParameterSpec::INTEGER, 8, 512);
  spec.mutable_params(1)->set_scale_type(ParameterSpec::UNIT_REVERSE_LOG_SCALE);
  AddDiscrete(spec, "dropout", {0.0, 0.1, 0.25, 0.5});
  AddCategorical(spec, "opt", {"sgd", "adam"});
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  for (auto algorithm :
       {HyperparameterSpec::ALGORITHM_UNSPECIFIED, HyperparameterSpec::RANDOM_SEARCH}) {
    spec.set_algorithm(algorithm);
    auto tuner = Tuner::Create(spec, 3);
    ASSERT_TRUE(tuner.ok());
    std::vector<TrialRecord> history;
    for (int round = 0; round < 6; ++round) {
      for (const Assignment& a : (*tuner)->Suggest(history, 4)) {
        ASSERT_TRUE(space->Encode(a).ok()) << AssignmentKey(a);
        EXPECT_EQ(*space->Canonicalize(a), a);
        EXPECT_THAT(a.at("units"), ::testing::MatchesRegex("[0-9]+"));
        EXPECT_THAT(a.at("dropout"), ::testing::AnyOf("0", "0.1", "0.25", "0.5"));
        history.push_back(Record(static_cast<int>(history.size()), a, Status::kCompleted,
                                 -std::log(Number(a.at("lr"))) + Number(a.at("dropout"))));
      }
    }
    EXPECT_EQ(history.size(), 24u);
  }
}

TEST(BayesianOptimizerTest, StartsAtTheCentreOfTheSpace) {
  HyperparameterSpec spec;
  AddParam(spec, "x", ParameterSpec::DOUBLE, -2, 4);
  AddParam(spec, "lr", ParameterSpec::DOUBLE, 1e-4, 1);
  spec.mutable_params(1)->set_scale_type(ParameterSpec::UNIT_LOG_SCALE);
  auto tuner = Tuner::Create(spec, 5);
  ASSERT_TRUE(tuner.ok());
  std::vector<Assignment> s = (*tuner)->Suggest({}, 3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].at("x"), "1");
  EXPECT_NEAR(Number(s[0].at("lr")), 0.01, 1e-15);
  EXPECT_NE(s[1], s[2]);
}

// Runs `trials` sequential steps of the default tuner on f over [0, 1] and
// returns the best x found per the goal.
double OptimiseOneDimension(HyperparameterSpec::GoalType goal, double (*f)(double), int trials,
                            int batch) {
  HyperparameterSpec spec;
  spec.set_goal(goal);
  AddParam(spec, "x", ParameterSpec::DOUBLE, 0, 1);
  auto tuner = Tuner::Create(spec, 17);
  EXPECT_TRUE(tuner.ok());
  std::vector<TrialRecord> history;
  double best_x = -1, best_y = 0;
  const bool maximize = goal == HyperparameterSpec::MAXIMIZE;
  while (static_cast<int>(history.size()) < trials) {
    std::vector<Assignment> s = (*tuner)->Suggest(history, batch);
    EXPECT_EQ(static_cast<int>(s.size()), batch);
    for (const Assignment& a : s) {
      const double x = Number(a.at("x"));
      const double y = f(x);
      if (best_x < 0 || (maximize ? y > best_y : y < best_y)) {
        best_x = x;
        best_y = y;
      }
      history.push_back(Record(static_cast<int>(history.size()), a, Status::kCompleted, y));
    }
  }
  return best_x;
}

TEST(BayesianOptimizerTest, FollowsTheGoal) {
  // The same function, maximised and minimised: the optimiser must find the
  // peak at 0.2 in one case and the trough at 0.8 in the other.
  auto f = [](double x) {
    return std::exp(-50 * (x - 0.2) * (x - 0.2)) - std::exp(-50 * (x - 0.8) * (x - 0.8));
  };
  EXPECT_NEAR(OptimiseOneDimension(HyperparameterSpec::MAXIMIZE, f, 15, 1), 0.2, 1e-3);
  EXPECT_NEAR(OptimiseOneDimension(HyperparameterSpec::MINIMIZE, f, 15, 1), 0.8, 1e-3);
  EXPECT_NEAR(OptimiseOneDimension(HyperparameterSpec::MINIMIZE, f, 24, 4), 0.8, 1e-3);
}

TEST(BayesianOptimizerTest, ParallelSuggestionsSpreadOutAndAvoidPendingPoints) {
  HyperparameterSpec spec;
  AddParam(spec, "x", ParameterSpec::DOUBLE, 0, 1);
  AddParam(spec, "y", ParameterSpec::DOUBLE, 0, 1);
  auto tuner = Tuner::Create(spec, 1);
  ASSERT_TRUE(tuner.ok());
  std::vector<TrialRecord> history;
  Rng rng(2);
  for (int i = 0; i < 12; ++i) {
    Assignment a = {{"x", FormatDouble(rng.Uniform())}, {"y", FormatDouble(rng.Uniform())}};
    const double x = Number(a["x"]), y = Number(a["y"]);
    history.push_back(
        Record(i, a, Status::kCompleted, -(x - 0.5) * (x - 0.5) - (y - 0.5) * (y - 0.5)));
  }
  std::vector<Assignment> batch = (*tuner)->Suggest(history, 4);
  ASSERT_EQ(batch.size(), 4u);
  double min_distance = 1e9;
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t j = i + 1; j < batch.size(); ++j) {
      min_distance =
          std::min(min_distance, std::hypot(Number(batch[i].at("x")) - Number(batch[j].at("x")),
                                            Number(batch[i].at("y")) - Number(batch[j].at("y"))));
    }
  }
  EXPECT_GT(min_distance, 1e-3);
  // With the first suggestion pending, the next call does not return it.
  history.push_back(Record(12, batch[0], Status::kPending, std::nullopt));
  std::vector<Assignment> next = (*tuner)->Suggest(history, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_NE(next[0], batch[0]);
}

TEST(BayesianOptimizerTest, FailedTrialsAreNeverSuggestedAgain) {
  HyperparameterSpec spec;
  spec.set_goal(HyperparameterSpec::MINIMIZE);
  AddParam(spec, "n", ParameterSpec::INTEGER, 0, 9);
  auto tuner = Tuner::Create(spec, 4);
  ASSERT_TRUE(tuner.ok());
  std::vector<TrialRecord> history;
  // The optimum (n = 5) failed; everything else completed except 4 and 6.
  for (int n = 0; n < 10; ++n) {
    if (n == 4 || n == 6) continue;
    Assignment a = {{"n", std::to_string(n)}};
    history.push_back(n == 5 ? Record(n, a, Status::kFailed, std::nullopt)
                             : Record(n, a, Status::kCompleted, std::abs(n - 5.0)));
  }
  std::vector<Assignment> s = (*tuner)->Suggest(history, 5);
  EXPECT_THAT(s, ::testing::UnorderedElementsAre(Assignment{{"n", "4"}}, Assignment{{"n", "6"}}));
}

// ---- Median stopping rule ----

TrialRecord Curve(std::vector<std::pair<int64_t, double>> points) {
  TrialRecord r;
  r.curve = std::move(points);
  return r;
}

HyperparameterSpec Goal(HyperparameterSpec::GoalType goal) {
  HyperparameterSpec spec;
  spec.set_goal(goal);
  return spec;
}

TEST(MedianStoppingTest, ComparesTheBestSoFarWithTheMedianOfRunningAverages) {
  // Running averages at step 2: A 0.55, B 0.25, C 0.95 -> median 0.55
  // (their mean would be 0.583).
  std::vector<TrialRecord> completed = {
      Curve({{1, 0.5}, {2, 0.6}, {3, 0.7}}),
      Curve({{1, 0.2}, {2, 0.3}, {3, 0.9}}),
      Curve({{1, 0.9}, {2, 1.0}}),
  };
  const auto maximize = Goal(HyperparameterSpec::MAXIMIZE);
  EXPECT_TRUE(ShouldStopEarly(maximize, Curve({{1, 0.5}, {2, 0.4}}), completed));
  // 0.57 is below the mean but above the median: a true median keeps it.
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({{1, 0.57}, {2, 0.3}}), completed));
  // Equal to the median is not strictly worse.
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({{1, 0.4}, {2, 0.55}}), completed));
  // At step 1 the averages are 0.5, 0.2, 0.9 -> median 0.5.
  EXPECT_TRUE(ShouldStopEarly(maximize, Curve({{1, 0.45}}), completed));
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({{1, 0.55}}), completed));
}

TEST(MedianStoppingTest, MinimiseMirrorsTheRule) {
  // (Their runs go on to step 30: at step 20 there is training left to save.)
  std::vector<TrialRecord> completed = {
      Curve({{10, 3.0}, {20, 2.0}, {30, 1.9}}),  // 2.5 at step 20
      Curve({{10, 1.0}, {20, 0.8}, {30, 0.7}}),  // 0.9
      Curve({{10, 5.0}, {20, 4.0}, {30, 3.9}}),  // 4.5
      Curve({{10, 2.0}, {20, 1.0}, {30, 0.9}}),  // 1.5 -> median (1.5 + 2.5) / 2 = 2.0
  };
  const auto minimize = Goal(HyperparameterSpec::MINIMIZE);
  EXPECT_TRUE(ShouldStopEarly(minimize, Curve({{10, 2.6}, {20, 2.1}}), completed));
  EXPECT_FALSE(ShouldStopEarly(minimize, Curve({{10, 2.6}, {20, 1.9}}), completed));
  // The best so far counts, not the latest value.
  EXPECT_FALSE(ShouldStopEarly(minimize, Curve({{10, 1.0}, {20, 3.0}}), completed));
}

TEST(MedianStoppingTest, NeedsDataOnBothSides) {
  const auto maximize = Goal(HyperparameterSpec::MAXIMIZE);
  std::vector<TrialRecord> late = {Curve({{100, 1.0}, {200, 1.0}})};
  // No completed trial has reported by step 5.
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({{5, 0.0}}), late));
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({}), {Curve({{1, 1.0}, {2, 1.0}})}));
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({{1, 0.0}}), {}));
  EXPECT_TRUE(ShouldStopEarly(maximize, Curve({{100, 0.0}}), late));
}

TEST(MedianStoppingTest, NotAtOrPastTheEndOfEveryCompletedRun) {
  const auto maximize = Goal(HyperparameterSpec::MAXIMIZE);
  // Two completed runs of 300 steps, evaluated every 100.
  std::vector<TrialRecord> completed = {Curve({{100, 0.8}, {200, 0.85}, {300, 0.88}}),
                                        Curve({{100, 0.7}, {200, 0.8}, {300, 0.84}})};
  // A worse trial is stopped while it has steps left...
  EXPECT_TRUE(ShouldStopEarly(maximize, Curve({{100, 0.5}}), completed));
  EXPECT_TRUE(ShouldStopEarly(maximize, Curve({{100, 0.5}, {200, 0.6}}), completed));
  // ...but its report at the completed runs' last step is its end as well
  // (a trainer that reports only once, at the end, is never stopped), and
  // past it there is nothing to compare with either.
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({{100, 0.5}, {200, 0.6}, {300, 0.6}}), completed));
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({{300, 0.1}}), completed));
  EXPECT_FALSE(ShouldStopEarly(maximize, Curve({{400, 0.1}}), completed));
  // A longer completed run keeps the comparison going up to its end.
  completed.push_back(Curve({{100, 0.9}, {200, 0.9}, {300, 0.9}, {400, 0.9}}));
  EXPECT_TRUE(ShouldStopEarly(maximize, Curve({{300, 0.1}}), completed));
}

}  // namespace
}  // namespace kubetrain::tuner

namespace kubetrain::tuner {
namespace {

// Two basins: a wide one at 0.2 (depth 1) where the study has converged,
// and a narrow, deeper one at 0.77 (depth 1.2) that one trial (at 0.8, loss
// -0.44) only hints at.
double TwoBasins(double x) {
  const double wide = (x - 0.2) / 0.1, narrow = (x - 0.77) / 0.03;
  return -std::exp(-wide * wide) - 1.2 * std::exp(-narrow * narrow);
}

TEST(BayesianOptimizerTest, StalledStudiesClimbAnotherBasin) {
  HyperparameterSpec spec;
  spec.set_goal(HyperparameterSpec::MINIMIZE);
  AddParam(spec, "x", ParameterSpec::DOUBLE, 0, 1);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  // The incumbent first, then trials that no longer improve on it: a cluster
  // around it and a spread over the space.
  std::vector<TrialRecord> history;
  auto add = [&](double x) {
    history.push_back(Record(static_cast<int>(history.size()), {{"x", FormatDouble(x)}},
                             Status::kCompleted, TwoBasins(x)));
  };
  for (double x : {0.2, 0.21, 0.19, 0.205, 0.195, 0.202, 0.198}) add(x);
  for (double x : {0.0, 0.1, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}) add(x);
  BayesianOptions plain;
  plain.explore_every = 0;
  BayesianOptimizer exploit(*space, spec, 1, plain);
  EXPECT_LT(std::abs(Number(exploit.Suggest(history, 1).at(0).at("x")) - 0.2), 0.05);

  BayesianOptions options;
  options.explore_every = 1;
  options.explore_steps = 1;
  BayesianOptimizer explore(*space, spec, 1, options);
  BayesianOptimizer twin(*space, spec, 1, options);
  const std::vector<Assignment> step = explore.Suggest(history, 1);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step, twin.Suggest(history, 1));
  // The step leaves the converged basin for the hinted one.
  EXPECT_LT(std::abs(Number(step[0].at("x")) - 0.77), 0.1);
}

// Runs `options`' optimiser with `seed` for `trials` sequential steps on a
// quadratic over the unit square with its optimum at (0.3, 0.7), checking
// that a twin with the same seed makes the same suggestions; returns the
// best loss.
double BestLossOnQuadratic(const BayesianOptions& options, uint64_t seed, int trials) {
  HyperparameterSpec spec;
  spec.set_goal(HyperparameterSpec::MINIMIZE);
  AddParam(spec, "x", ParameterSpec::DOUBLE, 0, 1);
  AddParam(spec, "y", ParameterSpec::DOUBLE, 0, 1);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  EXPECT_TRUE(space.ok());
  if (!space.ok()) return 1e9;
  BayesianOptimizer tuner(*space, spec, seed, options);
  BayesianOptimizer twin(*space, spec, seed, options);
  std::vector<TrialRecord> history;
  double best = 1e9;
  for (int i = 0; i < trials; ++i) {
    std::vector<Assignment> s = tuner.Suggest(history, 1);
    EXPECT_EQ(s.size(), 1u);
    if (s.size() != 1) break;
    EXPECT_EQ(s, twin.Suggest(history, 1));
    const double x = Number(s[0].at("x")), y = Number(s[0].at("y"));
    const double loss = (x - 0.3) * (x - 0.3) + (y - 0.7) * (y - 0.7);
    best = std::min(best, loss);
    history.push_back(Record(i, s[0], Status::kCompleted, loss));
  }
  return best;
}

// On a single basin the default rule still converges: once the study
// stalls, one step in four keeps polishing the incumbent.
TEST(BayesianOptimizerTest, DefaultRuleStillConvergesOnOneBasin) {
  EXPECT_LT(BestLossOnQuadratic(BayesianOptions{}, 3, 30), 1e-4);
}

// With the GLS constant mean, a study whose trials crowd one basin still
// converges there and stays deterministic.
TEST(BayesianOptimizerTest, GlsMeanConvergesAndIsDeterministic) {
  BayesianOptions options;
  options.gls_mean = true;
  EXPECT_LT(BestLossOnQuadratic(options, 7, 25), 1e-3);
}

}  // namespace
}  // namespace kubetrain::tuner

// ---- Successive halving (JudgeAtRungs) and what the model learns from it --

namespace kubetrain::tuner {
namespace {

HyperparameterSpec HalvingSpec(HyperparameterSpec::GoalType goal, int eta, int64_t min_resource,
                               v1::EarlyStoppingSpec::Resource resource) {
  HyperparameterSpec spec;
  spec.set_goal(goal);
  AddParam(spec, "x", ParameterSpec::DOUBLE, 0, 1);
  v1::EarlyStoppingSpec* stopping = spec.mutable_early_stopping();
  stopping->set_algorithm(v1::EarlyStoppingSpec::SUCCESSIVE_HALVING);
  stopping->set_resource(resource);
  stopping->set_min_resource(min_resource);
  stopping->set_reduction_factor(eta);
  return spec;
}

// A trial with reports at steps 10, 20, ... of `values`, and the values it
// recorded at the rungs it already passed.
TrialRecord Reports(const std::string& id, std::vector<double> values,
                    std::vector<double> rungs = {}) {
  TrialRecord record;
  record.trial_id = id;
  record.status = Status::kRunning;
  for (size_t i = 0; i < values.size(); ++i) {
    record.curve.emplace_back(static_cast<int64_t>(10 * (i + 1)), values[i]);
  }
  record.rungs = std::move(rungs);
  return record;
}

TrialRecord AtRungs(const std::string& id, std::vector<double> rungs) {
  TrialRecord record;
  record.trial_id = id;
  record.status = Status::kCompleted;
  record.rungs = std::move(rungs);
  return record;
}

TEST(SuccessiveHalvingTest, RungsAreMinResourceTimesEtaToTheK) {
  v1::EarlyStoppingSpec stopping;
  EXPECT_EQ(RungResource(stopping, 0), 1);  // defaults: 1, 3, 9, ...
  EXPECT_EQ(RungResource(stopping, 2), 9);
  stopping.set_min_resource(100);
  stopping.set_reduction_factor(2);
  EXPECT_EQ(RungResource(stopping, 0), 100);
  EXPECT_EQ(RungResource(stopping, 3), 800);
  EXPECT_EQ(RungResource(stopping, 80), std::numeric_limits<int64_t>::max());
}

TEST(SuccessiveHalvingTest, TheFirstTrialAtARungContinuesAndLaterOnesNeedTheTopThird) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 1, v1::EarlyStoppingSpec::REPORTS);
  // Alone at rung 0 (its first report): it continues, and its value there
  // is recorded.
  RungVerdict first = JudgeAtRungs(spec, Reports("1", {0.5}), {});
  EXPECT_FALSE(first.stop);
  EXPECT_THAT(first.reached, ::testing::ElementsAre(std::pair<int64_t, double>{10, 0.5}));
  // With one other there (n = 2, floor(2/3) = 0): only the best continues.
  EXPECT_TRUE(JudgeAtRungs(spec, Reports("2", {0.4}), {AtRungs("1", {0.5})}).stop);
  EXPECT_FALSE(JudgeAtRungs(spec, Reports("2", {0.6}), {AtRungs("1", {0.5})}).stop);
  // A tie with the bar continues.
  EXPECT_FALSE(JudgeAtRungs(spec, Reports("2", {0.5}), {AtRungs("1", {0.5})}).stop);
  // n = 6: the best two continue.
  const std::vector<TrialRecord> five = {AtRungs("1", {0.9}), AtRungs("2", {0.8}),
                                         AtRungs("3", {0.3}), AtRungs("4", {0.2}),
                                         AtRungs("5", {0.1})};
  EXPECT_FALSE(JudgeAtRungs(spec, Reports("6", {0.85}), five).stop);
  EXPECT_TRUE(JudgeAtRungs(spec, Reports("6", {0.7}), five).stop);
}

// A spec that skipped validation (reductionFactor 1, minResource 0) still
// gets rungs that grow, and judging ends.
TEST(SuccessiveHalvingTest, SettingsOutOfRangeStillMakeGrowingRungs) {
  HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 1, 0, v1::EarlyStoppingSpec::REPORTS);
  EXPECT_EQ(RungResource(spec.early_stopping(), 0), 1);
  EXPECT_EQ(RungResource(spec.early_stopping(), 1), 2);
  RungVerdict verdict = JudgeAtRungs(spec, Reports("1", {0.1, 0.2, 0.3, 0.4}), {});
  EXPECT_EQ(verdict.reached.size(), 3u);  // reports 1, 2, 4
  spec = HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 1, v1::EarlyStoppingSpec::STEPS);
  TrialRecord far;
  far.curve = {{std::numeric_limits<int64_t>::max(), 0.5}};
  EXPECT_EQ(JudgeAtRungs(spec, far, {}).reached.size(), 63u);
}

TEST(SuccessiveHalvingTest, MinimizingKeepsTheLowest) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MINIMIZE, 2, 1, v1::EarlyStoppingSpec::REPORTS);
  const std::vector<TrialRecord> others = {AtRungs("1", {0.2}), AtRungs("2", {0.9}),
                                           AtRungs("3", {0.5})};
  // n = 4, the best two: 0.2 and the bar 0.3 or 0.5.
  EXPECT_FALSE(JudgeAtRungs(spec, Reports("4", {0.3}), others).stop);
  EXPECT_TRUE(JudgeAtRungs(spec, Reports("4", {0.6}), others).stop);
}

TEST(SuccessiveHalvingTest, RungsAlreadyPassedAreNotJudgedAgain) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 2, 1, v1::EarlyStoppingSpec::REPORTS);
  // Trial 1 passed rung 0 at 0.5 when it was alone; better trials came
  // later. Its second report (rung 1) is its next decision, not rung 0 again.
  const std::vector<TrialRecord> others = {AtRungs("2", {0.9}), AtRungs("3", {0.8})};
  RungVerdict verdict = JudgeAtRungs(spec, Reports("1", {0.5, 0.7}, {0.5}), others);
  EXPECT_FALSE(verdict.stop);  // alone at rung 1
  EXPECT_THAT(verdict.reached, ::testing::ElementsAre(std::pair<int64_t, double>{20, 0.7}));
  // Nothing new reached: no decision at all.
  verdict = JudgeAtRungs(spec, Reports("1", {0.5, 0.7, 0.1}, {0.5, 0.7}), others);
  EXPECT_FALSE(verdict.stop);
  EXPECT_TRUE(verdict.reached.empty());
  // Its own record among the others changes nothing: it holds only the
  // rungs below the one judged.
  std::vector<TrialRecord> with_itself = others;
  with_itself.push_back(AtRungs("1", {0.5}));
  verdict = JudgeAtRungs(spec, Reports("1", {0.5, 0.7}, {0.5}), with_itself);
  EXPECT_FALSE(verdict.stop);
  EXPECT_THAT(verdict.reached, ::testing::ElementsAre(std::pair<int64_t, double>{20, 0.7}));
}

TEST(SuccessiveHalvingTest, SeveralRungsReachedAtOnceAreJudgedInOrderUpToTheFirstStop) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 2, 1, v1::EarlyStoppingSpec::REPORTS);
  // Rungs at reports 1, 2, 4. Others: rung 0 {0.2}, rung 1 {0.9}.
  const std::vector<TrialRecord> others = {AtRungs("1", {0.2, 0.9})};
  RungVerdict verdict = JudgeAtRungs(spec, Reports("2", {0.3, 0.5, 0.6, 0.95}), others);
  EXPECT_TRUE(verdict.stop);  // passes rung 0 (0.3 > 0.2), stops at rung 1 (0.5 < 0.9)
  EXPECT_THAT(verdict.reached, ::testing::ElementsAre(std::pair<int64_t, double>{10, 0.3},
                                                      std::pair<int64_t, double>{20, 0.5}));
}

TEST(SuccessiveHalvingTest, StepsCountTheFirstReportAtOrPastTheRung) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 15, v1::EarlyStoppingSpec::STEPS);
  // Reports at steps 10, 20, 30: rung 0 (step 15) is reached by step 20's
  // report; rung 1 (step 45) not yet.
  RungVerdict verdict = JudgeAtRungs(spec, Reports("1", {0.1, 0.4, 0.2}), {});
  EXPECT_FALSE(verdict.stop);
  EXPECT_THAT(verdict.reached, ::testing::ElementsAre(std::pair<int64_t, double>{20, 0.4}));
}

TEST(SuccessiveHalvingTest, ReportsThatAreNotFiniteDoNotCount) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 2, v1::EarlyStoppingSpec::REPORTS);
  // The second finite report is the third one.
  RungVerdict verdict = JudgeAtRungs(spec, Reports("1", {0.1, std::nan(""), 0.3}), {});
  EXPECT_THAT(verdict.reached, ::testing::ElementsAre(std::pair<int64_t, double>{30, 0.3}));
  EXPECT_TRUE(JudgeAtRungs(spec, Reports("1", {0.1, std::nan("")}), {}).reached.empty());
}

// A resumed study's trials, judged under other rungs, are read again at
// this job's: the values JudgeAtRungs would have recorded for them.
TEST(SuccessiveHalvingTest, RungsFromCurveAreTheReportsThatReachedEachRung) {
  const HyperparameterSpec reports =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 2, 1, v1::EarlyStoppingSpec::REPORTS);
  // Finite reports 1, 2 and 4 reach rungs 0, 1 and 2: the NaN does not count.
  const TrialRecord five = Reports("1", {0.1, 0.2, std::nan(""), 0.3, 0.4, 0.5});
  EXPECT_THAT(RungsFromCurve(reports.early_stopping(), five.curve, false),
              ::testing::ElementsAre(0.1, 0.2, 0.4));
  // JudgeAtRungs records the same values.
  std::vector<double> judged;
  for (const auto& [step, value] : JudgeAtRungs(reports, five, {}).reached) judged.push_back(value);
  EXPECT_THAT(judged, ::testing::ElementsAre(0.1, 0.2, 0.4));
  // Steps 10..60 (30 the NaN) against rungs at steps 15, 45, 135.
  const HyperparameterSpec steps =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 15, v1::EarlyStoppingSpec::STEPS);
  EXPECT_THAT(RungsFromCurve(steps.early_stopping(), five.curve, false),
              ::testing::ElementsAre(0.2, 0.4));
  // A curve that lost its first reports gives none; an empty one none.
  EXPECT_THAT(RungsFromCurve(steps.early_stopping(), five.curve, true), ::testing::IsEmpty());
  EXPECT_THAT(RungsFromCurve(reports.early_stopping(), {}, false), ::testing::IsEmpty());
}

TEST(SuccessiveHalvingTest, SameRungsComparesWhereTheRungsAreAfterDefaults) {
  v1::EarlyStoppingSpec a;
  a.set_algorithm(v1::EarlyStoppingSpec::SUCCESSIVE_HALVING);
  v1::EarlyStoppingSpec b = a;
  b.set_min_resource(1);
  b.set_reduction_factor(3);
  b.set_resource(v1::EarlyStoppingSpec::REPORTS);
  EXPECT_TRUE(SameRungs(a, b));  // the defaults, written out
  v1::EarlyStoppingSpec other = b;
  other.set_reduction_factor(2);
  EXPECT_FALSE(SameRungs(a, other));
  other = b;
  other.set_min_resource(2);
  EXPECT_FALSE(SameRungs(a, other));
  other = b;
  other.set_resource(v1::EarlyStoppingSpec::STEPS);
  EXPECT_FALSE(SameRungs(a, other));
  other = b;
  other.set_algorithm(v1::EarlyStoppingSpec::MEDIAN);
  EXPECT_FALSE(SameRungs(a, other));
  EXPECT_FALSE(SameRungs(other, other));
}

// BOHB's model (kHighestRung): under halving, most trials end at a low rung;
// the model learns from the highest rung that enough trials (parameters + 2)
// reached.
TEST(SuccessiveHalvingTest, TheModelLearnsFromTheHighestRungWithEnoughTrials) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 1, v1::EarlyStoppingSpec::REPORTS);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  auto trial = [](double x, Status status, std::vector<double> rungs,
                  std::optional<double> objective) {
    TrialRecord r = AtRungs(FormatDouble(x), std::move(rungs));
    r.assignment = {{"x", FormatDouble(x)}};
    r.status = status;
    r.objective = objective;
    return r;
  };
  // Rung 0: five trials; rung 1: three (= 1 parameter + 2); one final.
  std::vector<TrialRecord> history = {
      trial(0.1, Status::kStoppedEarly, {0.2}, 0.2),
      trial(0.2, Status::kStoppedEarly, {0.3}, 0.3),
      trial(0.3, Status::kCompleted, {0.6, 0.8}, 0.85),
      trial(0.4, Status::kRunning, {0.7, 0.75}, std::nullopt),
      trial(0.5, Status::kStoppedEarly, {0.65, 0.5}, 0.5),
      trial(0.6, Status::kRunning, {}, std::nullopt),
      trial(0.7, Status::kRunning, {0.4}, std::nullopt),
  };
  ParsedHistory h = ParseHistory(*space, spec, history, HalvingModel::kHighestRung);
  EXPECT_FALSE(h.fidelity);
  // Rung 1's three values, as losses; then the two trials stopped at rung 0,
  // as the worst value at rung 1 (they were judged worse than those that
  // went on).
  EXPECT_THAT(h.observed_loss, ::testing::ElementsAre(-0.8, -0.75, -0.5, -0.5, -0.5));
  // The stand-ins are no progress: the stall check sees rung 1's values.
  EXPECT_THAT(h.progress_loss, ::testing::ElementsAre(-0.8, -0.75, -0.5));
  ASSERT_EQ(h.observed_x.size(), 5u);
  EXPECT_NEAR(h.observed_x[0][0], 0.3, 1e-9);
  EXPECT_NEAR(h.observed_x[3][0], 0.1, 1e-9);
  EXPECT_NEAR(h.observed_x[4][0], 0.2, 1e-9);
  // Running trials short of rung 1 are pending.
  ASSERT_EQ(h.pending_x.size(), 2u);
  EXPECT_NEAR(h.pending_x[0][0], 0.6, 1e-9);
  EXPECT_NEAR(h.pending_x[1][0], 0.7, 1e-9);
  // Without halving, the same history gives the final objectives of the
  // trials that ended.
  HyperparameterSpec median = spec;
  median.clear_early_stopping();
  const ParsedHistory plain = ParseHistory(*space, median, history, HalvingModel::kHighestRung);
  EXPECT_THAT(plain.observed_loss, ::testing::ElementsAre(-0.2, -0.3, -0.85, -0.5));
  EXPECT_EQ(plain.progress_loss, plain.observed_loss);
  // Once as many trials have a final objective, those are the model's.
  history.push_back(trial(0.8, Status::kCompleted, {0.7, 0.8}, 0.9));
  history.push_back(trial(0.9, Status::kCompleted, {0.7, 0.8}, 0.8));
  EXPECT_THAT(ParseHistory(*space, spec, history, HalvingModel::kHighestRung).observed_loss,
              ::testing::ElementsAre(-0.2, -0.3, -0.85, -0.5, -0.9, -0.8));
}

// kEveryRung: each rung a trial reached, and its last report past them, is a
// point at its resource level, on a log scale from the first rung to the
// most any trial trained.
TEST(SuccessiveHalvingTest, EveryRungIsAPointAtItsResourceLevel) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 1, v1::EarlyStoppingSpec::REPORTS);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  auto trial = [](double x, Status status, std::vector<double> reports, std::vector<double> rungs) {
    TrialRecord r = Reports(FormatDouble(x), std::move(reports), std::move(rungs));
    r.assignment = {{"x", FormatDouble(x)}};
    r.status = status;
    if (!r.curve.empty()) r.objective = r.curve.back().second;
    return r;
  };
  // Rungs at 1 and 3 reports; trial 0.3 trained 9 (the most), 0.4 is at 4.
  std::vector<TrialRecord> history = {
      trial(0.1, Status::kStoppedEarly, {0.2}, {0.2}),
      trial(0.3, Status::kCompleted, {0.6, 0.7, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.85}, {0.6, 0.8}),
      trial(0.4, Status::kRunning, {0.7, 0.7, 0.75, std::nan("")}, {0.7, 0.75}),
      trial(0.5, Status::kFailed, {0.9}, {0.9}),
      trial(0.6, Status::kRunning, {}, {}),
  };
  ParsedHistory h = ParseHistory(*space, spec, history, HalvingModel::kEveryRung);
  EXPECT_TRUE(h.fidelity);
  // 0.1 at rung 0; 0.3 at rungs 0 and 1 and its last report (9 reports);
  // 0.4 at rungs 0 and 1 (its fourth report is not finite, so its last
  // finite one is rung 1's). The failed trial says nothing.
  EXPECT_THAT(h.observed_loss, ::testing::ElementsAre(-0.2, -0.6, -0.8, -0.85, -0.7, -0.75));
  const double third = std::log(3.0) / std::log(9.0);
  const std::vector<std::pair<double, double>> points = {{0.1, 0.0}, {0.3, 0.0}, {0.3, third},
                                                         {0.3, 1.0}, {0.4, 0.0}, {0.4, third}};
  ASSERT_EQ(h.observed_x.size(), points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    ASSERT_EQ(h.observed_x[i].size(), 2u);
    EXPECT_NEAR(h.observed_x[i][0], points[i].first, 1e-9) << i;
    EXPECT_NEAR(h.observed_x[i][1], points[i].second, 1e-9) << i;
  }
  // Running trials are pending at the full resource, where suggestions are.
  ASSERT_EQ(h.pending_x.size(), 2u);
  EXPECT_THAT(h.pending_x[0], ::testing::ElementsAre(::testing::DoubleNear(0.4, 1e-9), 1.0));
  EXPECT_THAT(h.pending_x[1], ::testing::ElementsAre(::testing::DoubleNear(0.6, 1e-9), 1.0));
  // Progress (the stall check) is judged on full runs alone.
  EXPECT_THAT(h.progress_loss, ::testing::ElementsAre(-0.85));
  // While every trial is at the first rung, all are at the full resource.
  ParsedHistory first = ParseHistory(*space, spec, {history[0]}, HalvingModel::kEveryRung);
  ASSERT_EQ(first.observed_x.size(), 1u);
  EXPECT_EQ(first.observed_x[0][1], 1.0);
  // Without halving the model is the one it always was.
  HyperparameterSpec median = spec;
  median.clear_early_stopping();
  ParsedHistory plain = ParseHistory(*space, median, history, HalvingModel::kEveryRung);
  EXPECT_FALSE(plain.fidelity);
  EXPECT_THAT(plain.observed_loss, ::testing::ElementsAre(-0.2, -0.85));
}

// With STEPS a rung value is at the step of the report that reached it; a
// report that reached several rungs counts once; a completed trial is at the
// full resource, its reports on record or not; a report before the first
// rung is no rung value.
TEST(SuccessiveHalvingTest, EveryRungUnderStepsIsAtTheStepThatReachedTheRung) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 100, v1::EarlyStoppingSpec::STEPS);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  auto trial = [](double x, Status status) {
    TrialRecord r;
    r.trial_id = FormatDouble(x);
    r.assignment = {{"x", FormatDouble(x)}};
    r.status = status;
    return r;
  };
  // Reports every 1000 steps: the first reached rungs 0, 1 and 2 (100, 300, 900).
  TrialRecord coarse = trial(0.2, Status::kRunning);
  coarse.curve = {{1000, 0.5}, {2000, 0.6}};
  coarse.rungs = {0.5, 0.5, 0.5};
  TrialRecord archived = trial(0.4, Status::kCompleted);
  archived.objective = 0.7;
  TrialRecord early = trial(0.6, Status::kRunning);
  early.curve = {{50, 0.3}};
  ParsedHistory h = ParseHistory(*space, spec, {coarse, archived, early}, HalvingModel::kEveryRung);
  EXPECT_THAT(h.observed_loss, ::testing::ElementsAre(-0.5, -0.6, -0.7));
  ASSERT_EQ(h.observed_x.size(), 3u);
  EXPECT_NEAR(h.observed_x[0][1], std::log(10.0) / std::log(20.0), 1e-9);
  EXPECT_EQ(h.observed_x[1][1], 1.0);  // step 2000, the most any trial trained
  EXPECT_EQ(h.observed_x[2][1], 1.0);
  EXPECT_THAT(h.progress_loss, ::testing::ElementsAre(-0.6, -0.7));
  ASSERT_EQ(h.pending_x.size(), 2u);
}

// Early values can rank trials differently from final ones (a high learning
// rate learns fastest in the first epoch and ends worse): the suggestion is
// the model's best at the full resource, not at the rungs where most of the
// data is.
TEST(SuccessiveHalvingTest, EveryRungModelSuggestsWhereTheFullRunIsBest) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 1, v1::EarlyStoppingSpec::REPORTS);
  BayesianOptions options;
  options.halving_model = HalvingModel::kEveryRung;
  options.explore_every = 0;
  // After r reports (1..9), the value peaks at x = 0.2 early and at 0.75 late.
  auto value = [](double x, int r) {
    const double late = std::log(static_cast<double>(r)) / std::log(9.0);
    const double peak = 0.2 + 0.55 * late;
    return 0.5 + 0.3 * late - (x - peak) * (x - peak);
  };
  std::vector<TrialRecord> history;
  auto add = [&](double x, int reports, Status status) {
    TrialRecord r;
    r.trial_id = std::to_string(history.size());
    r.assignment = {{"x", FormatDouble(x)}};
    r.status = status;
    for (int i = 1; i <= reports; ++i) r.curve.emplace_back(i, value(x, i));
    r.rungs.push_back(value(x, 1));
    if (reports >= 3) r.rungs.push_back(value(x, 3));
    r.objective = r.curve.back().second;
    history.push_back(std::move(r));
  };
  // Most trials stopped at the first rung, a few at the second, three ran to
  // the end; none of the finished ones is near 0.75.
  for (double x : {0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95}) {
    add(x, 1, Status::kStoppedEarly);
  }
  for (double x : {0.12, 0.22, 0.32, 0.62}) add(x, 3, Status::kStoppedEarly);
  for (double x : {0.18, 0.5, 0.95}) add(x, 9, Status::kCompleted);
  BayesianOptimizer bo(*SearchSpace::Create(spec), spec, 7, options);
  const std::vector<Assignment> next = bo.Suggest(history, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_NEAR(Number(next[0].at("x")), 0.75, 0.12);
  // A batch spreads out: the believers are at the full resource too, so
  // each one lowers the variance where the next is scored (believers at the
  // first rung leave the batch within 1e-6 of one point).
  const std::vector<Assignment> batch = bo.Suggest(history, 3);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0], next[0]);
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      EXPECT_GT(std::abs(Number(batch[i].at("x")) - Number(batch[j].at("x"))), 1e-3) << i << j;
    }
  }
  // BOHB's model, fitted to the final objectives alone here, knows nothing
  // of the late peak.
  options.halving_model = HalvingModel::kHighestRung;
  BayesianOptimizer bohb(*SearchSpace::Create(spec), spec, 7, options);
  const std::vector<Assignment> control = bohb.Suggest(history, 1);
  ASSERT_EQ(control.size(), 1u);
  EXPECT_GT(std::abs(Number(control[0].at("x")) - 0.75), 0.12) << control[0].at("x");
}

// ---- Successive halving with pauses (NextPromotion) ----------------------

TEST(PromotionTest, NoTrialPassesARungBeforeEtaTrialsReachedIt) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 1, v1::EarlyStoppingSpec::REPORTS);
  std::vector<TrialRecord> trials = {AtRungs("1", {0.9}), AtRungs("2", {0.5})};
  // Two of three: the best waits, and the free slot starts a new trial.
  EXPECT_FALSE(NextPromotion(spec, trials, {"1", "2"}).has_value());
  trials.push_back(AtRungs("3", {0.7}));
  const std::optional<Promotion> promoted = NextPromotion(spec, trials, {"1", "2", "3"});
  ASSERT_TRUE(promoted.has_value());
  EXPECT_EQ(promoted->trial_id, "1");
  EXPECT_EQ(promoted->rung, 0);
}

TEST(PromotionTest, ARungEarnedOnceIsNotEarnedAgainByTheNextBest) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 3, 1, v1::EarlyStoppingSpec::REPORTS);
  // Trial 1 was promoted from rung 0 and trains on (not paused): of three,
  // one earns rung 1, and it is 1; 2 and 3 stay paused.
  const std::vector<TrialRecord> trials = {AtRungs("1", {0.9}), AtRungs("2", {0.8}),
                                           AtRungs("3", {0.7})};
  EXPECT_FALSE(NextPromotion(spec, trials, {"2", "3"}).has_value());
  // Three more reached rung 0, none better than 2: two of six earn it.
  std::vector<TrialRecord> six = trials;
  for (const char* id : {"4", "5", "6"}) six.push_back(AtRungs(id, {0.1}));
  const std::optional<Promotion> promoted = NextPromotion(spec, six, {"2", "3", "4", "5", "6"});
  ASSERT_TRUE(promoted.has_value());
  EXPECT_EQ(promoted->trial_id, "2");
  // Three more: three of nine earn rung 1. 1 and 2 went on before 7
  // arrived, and keep going; 7, the best, earns it as well.
  six.push_back(AtRungs("7", {0.95}));
  six.push_back(AtRungs("8", {0.2}));
  six.push_back(AtRungs("9", {0.2}));
  const std::optional<Promotion> late =
      NextPromotion(spec, six, {"3", "4", "5", "6", "7", "8", "9"});
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->trial_id, "7");
}

TEST(PromotionTest, TheHighestRungGoesFirstThenTheBestValue) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 2, 1, v1::EarlyStoppingSpec::REPORTS);
  // Rung 0: 1..4 (two earn rung 1); rung 1: 1 and 2 (one earns rung 2).
  const std::vector<TrialRecord> trials = {AtRungs("1", {0.6, 0.7}), AtRungs("2", {0.5, 0.8}),
                                           AtRungs("3", {0.4}), AtRungs("4", {0.3})};
  std::optional<Promotion> promoted = NextPromotion(spec, trials, {"1", "2", "3", "4"});
  ASSERT_TRUE(promoted.has_value());
  EXPECT_EQ(promoted->trial_id, "2");
  EXPECT_EQ(promoted->rung, 1);
  // Rung 1's place taken (2 trains on), rung 0's are 1's and 2's: none left.
  EXPECT_FALSE(NextPromotion(spec, trials, {"1", "3", "4"}).has_value());
}

TEST(PromotionTest, MinimizingTiesAndValuesThatAreNotFinite) {
  const HyperparameterSpec spec =
      HalvingSpec(HyperparameterSpec::MINIMIZE, 2, 1, v1::EarlyStoppingSpec::REPORTS);
  // Four values at rung 0: two earn rung 1, the lowest; 4 and 5 tie at the
  // bar, and both earn it (the earlier first).
  std::vector<TrialRecord> trials = {AtRungs("1", {0.9}), AtRungs("2", {0.3}), AtRungs("4", {0.5}),
                                     AtRungs("5", {0.5})};
  std::optional<Promotion> promoted = NextPromotion(spec, trials, {"1", "4", "5"});
  ASSERT_TRUE(promoted.has_value());
  EXPECT_EQ(promoted->trial_id, "4");
  promoted = NextPromotion(spec, trials, {"1", "5"});
  ASSERT_TRUE(promoted.has_value());
  EXPECT_EQ(promoted->trial_id, "5");
  EXPECT_FALSE(NextPromotion(spec, trials, {"1"}).has_value());
  // A value that is not finite is not one of the n: three values, one
  // earns, and it is 2's.
  const std::vector<TrialRecord> with_nan = {AtRungs("1", {0.9}), AtRungs("2", {0.3}),
                                             AtRungs("3", {std::nan("")}), AtRungs("4", {0.5})};
  EXPECT_FALSE(NextPromotion(spec, with_nan, {"1", "3", "4"}).has_value());
}

TEST(PromotionTest, TheLeaderIsTheBestAtTheHighestRungAnyTrialReached) {
  const HyperparameterSpec maximize =
      HalvingSpec(HyperparameterSpec::MAXIMIZE, 2, 1, v1::EarlyStoppingSpec::REPORTS);
  const HyperparameterSpec minimize =
      HalvingSpec(HyperparameterSpec::MINIMIZE, 2, 1, v1::EarlyStoppingSpec::REPORTS);
  EXPECT_FALSE(LeaderAtTopRung(maximize, {}).has_value());
  EXPECT_FALSE(LeaderAtTopRung(maximize, {AtRungs("1", {})}).has_value());
  // Trial 3 is best at rung 0, but 1 and 2 reached rung 1: the best there.
  std::vector<TrialRecord> trials = {AtRungs("1", {0.6, 0.7}), AtRungs("2", {0.5, 0.8}),
                                     AtRungs("3", {0.9})};
  EXPECT_EQ(LeaderAtTopRung(maximize, trials), "2");
  EXPECT_EQ(LeaderAtTopRung(minimize, trials), "1");
  // A tie goes to the earlier; a value that is not finite does not lead.
  trials.push_back(AtRungs("4", {0.1, 0.8}));
  trials.push_back(AtRungs("5", {0.95, std::nan("")}));
  EXPECT_EQ(LeaderAtTopRung(maximize, trials), "2");
  trials.push_back(AtRungs("6", {0.2, 0.3, 0.1}));
  EXPECT_EQ(LeaderAtTopRung(maximize, trials), "6");
}

}  // namespace
}  // namespace kubetrain::tuner
