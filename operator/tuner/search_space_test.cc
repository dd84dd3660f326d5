#include "operator/tuner/search_space.h"

#include <charconv>
#include <cmath>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::tuner {
namespace {

using v1::HyperparameterSpec;
using v1::ParameterSpec;

ParameterSpec* AddNumeric(HyperparameterSpec& spec, const std::string& name,
                          ParameterSpec::ParameterType type, double lo, double hi,
                          ParameterSpec::ScaleType scale = ParameterSpec::UNIT_LINEAR_SCALE) {
  ParameterSpec* p = spec.add_params();
  p->set_parameter_name(name);
  p->set_type(type);
  p->set_min_value(lo);
  p->set_max_value(hi);
  p->set_scale_type(scale);
  return p;
}

double Parse(const std::string& s) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  EXPECT_EQ(ec, std::errc()) << s;
  EXPECT_EQ(ptr, s.data() + s.size()) << s;
  return v;
}

TEST(FormatDoubleTest, ShortestRoundTrip) {
  EXPECT_EQ(FormatDouble(0.001), "0.001");
  EXPECT_EQ(FormatDouble(32.0), "32");
  EXPECT_EQ(FormatDouble(-0.0), "0");
  Rng rng(7);
  for (int i = 0; i < 1000; ++i) {
    const double x = std::exp(40 * (rng.Uniform() - 0.5)) * (rng.Uniform() < 0.5 ? -1 : 1);
    EXPECT_EQ(Parse(FormatDouble(x)), x);
  }
}

class ScaleTest : public ::testing::TestWithParam<ParameterSpec::ScaleType> {};

TEST_P(ScaleTest, DoubleRoundTripsBothWays) {
  HyperparameterSpec spec;
  AddNumeric(spec, "lr", ParameterSpec::DOUBLE, 1e-4, 0.5, GetParam());
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok()) << space.status();
  ASSERT_EQ(space->num_features(), 1);
  Rng rng(1);
  for (int i = 0; i < 2000; ++i) {
    const double u = rng.Uniform();
    const Assignment a = space->Decode(std::vector<double>{u});
    const double x = Parse(a.at("lr"));
    EXPECT_GE(x, 1e-4);
    EXPECT_LE(x, 0.5);
    absl::StatusOr<std::vector<double>> back = space->Encode(a);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_NEAR((*back)[0], u, 1e-9);
    absl::StatusOr<Assignment> canonical = space->Canonicalize(a);
    ASSERT_TRUE(canonical.ok());
    EXPECT_EQ(*canonical, a);
  }
  EXPECT_EQ(Parse(space->Decode(std::vector<double>{0.0}).at("lr")), 1e-4);
  EXPECT_EQ(Parse(space->Decode(std::vector<double>{1.0}).at("lr")), 0.5);
  // Out-of-cube coordinates clamp.
  EXPECT_EQ(Parse(space->Decode(std::vector<double>{-3.0}).at("lr")), 1e-4);
  EXPECT_EQ(Parse(space->Decode(std::vector<double>{7.0}).at("lr")), 0.5);
}

INSTANTIATE_TEST_SUITE_P(AllScales, ScaleTest,
                         ::testing::Values(ParameterSpec::NONE, ParameterSpec::UNIT_LINEAR_SCALE,
                                           ParameterSpec::UNIT_LOG_SCALE,
                                           ParameterSpec::UNIT_REVERSE_LOG_SCALE));

TEST(SearchSpaceTest, WarpsPutTheMidpointWhereTheScaleSays) {
  HyperparameterSpec spec;
  AddNumeric(spec, "lin", ParameterSpec::DOUBLE, 1, 100, ParameterSpec::UNIT_LINEAR_SCALE);
  AddNumeric(spec, "log", ParameterSpec::DOUBLE, 1, 100, ParameterSpec::UNIT_LOG_SCALE);
  AddNumeric(spec, "rev", ParameterSpec::DOUBLE, 1, 100, ParameterSpec::UNIT_REVERSE_LOG_SCALE);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  const Assignment mid = space->Decode(std::vector<double>{0.5, 0.5, 0.5});
  EXPECT_NEAR(Parse(mid.at("lin")), 50.5, 1e-12);
  EXPECT_NEAR(Parse(mid.at("log")), 10.0, 1e-12);          // geometric mean
  EXPECT_NEAR(Parse(mid.at("rev")), 101.0 - 10.0, 1e-12);  // resolution near the top
  const Assignment quarter = space->Decode(std::vector<double>{0.25, 0.25, 0.75});
  EXPECT_LT(Parse(quarter.at("log")), Parse(quarter.at("lin")));
  EXPECT_GT(Parse(quarter.at("rev")), 97.0);
}

TEST(SearchSpaceTest, IntegersAreValidAndEachGetsAFairShare) {
  for (auto scale : {ParameterSpec::UNIT_LINEAR_SCALE, ParameterSpec::UNIT_LOG_SCALE,
                     ParameterSpec::UNIT_REVERSE_LOG_SCALE}) {
    HyperparameterSpec spec;
    AddNumeric(spec, "n", ParameterSpec::INTEGER, 1, 6, scale);
    absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
    ASSERT_TRUE(space.ok());
    EXPECT_EQ(space->FiniteSize(), 6u);
    Rng rng(3);
    std::map<std::string, int> counts;
    for (int i = 0; i < 6000; ++i) {
      const Assignment a = space->Decode(std::vector<double>{rng.Uniform()});
      ++counts[a.at("n")];
      ASSERT_TRUE(space->Encode(a).ok());
      EXPECT_EQ(*space->Canonicalize(a), a);
    }
    EXPECT_THAT(counts, ::testing::SizeIs(6));
    for (const auto& [value, n] : counts) {
      EXPECT_THAT(value, ::testing::MatchesRegex("[1-6]"));
      EXPECT_GT(n, 100) << value;  // every integer owns a cell of the cube
    }
    if (scale == ParameterSpec::UNIT_LINEAR_SCALE) {
      for (const auto& [value, n] : counts) EXPECT_NEAR(n, 1000, 150) << value;
    }
  }
}

TEST(SearchSpaceTest, IntegerEncodingRejectsFractionsAndOutOfRange) {
  HyperparameterSpec spec;
  AddNumeric(spec, "n", ParameterSpec::INTEGER, -3, 3);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  EXPECT_TRUE(space->Encode({{"n", "-3"}}).ok());
  EXPECT_EQ(*space->Canonicalize({{"n", "2.0"}}), (Assignment{{"n", "2"}}));
  EXPECT_FALSE(space->Encode({{"n", "2.5"}}).ok());
  EXPECT_FALSE(space->Encode({{"n", "4"}}).ok());
  EXPECT_FALSE(space->Encode({{"n", "x"}}).ok());
  EXPECT_FALSE(space->Encode({{"m", "1"}}).ok());
  absl::Status missing = space->Encode({{"m", "1"}}).status();
  EXPECT_THAT(missing.message(), ::testing::HasSubstr("\"n\""));
}

TEST(SearchSpaceTest, DiscreteSnapsToTheNearestListedValueInTheWarpedCoordinate) {
  HyperparameterSpec spec;
  ParameterSpec* p = spec.add_params();
  p->set_parameter_name("batch");
  p->set_type(ParameterSpec::DISCRETE);
  for (double v : {256.0, 16.0, 32.0, 64.0}) p->add_discrete_values(v);
  p->set_scale_type(ParameterSpec::UNIT_LOG_SCALE);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(space->FiniteSize(), 4u);
  // In log2 coordinates 16..256 spans 4 units: 32 at 0.25, 64 at 0.5.
  EXPECT_EQ(space->Decode(std::vector<double>{0.0}).at("batch"), "16");
  EXPECT_EQ(space->Decode(std::vector<double>{0.2}).at("batch"), "32");
  EXPECT_EQ(space->Decode(std::vector<double>{0.45}).at("batch"), "64");
  EXPECT_EQ(space->Decode(std::vector<double>{0.76}).at("batch"), "256");
  Rng rng(5);
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const Assignment a = space->Decode(std::vector<double>{rng.Uniform()});
    EXPECT_THAT(a.at("batch"), ::testing::AnyOf("16", "32", "64", "256"));
    absl::StatusOr<std::vector<double>> u = space->Encode(a);
    ASSERT_TRUE(u.ok());
    EXPECT_EQ(space->Decode(*u), a);
    seen.insert(space->SampleUniform(rng).at("batch"));
  }
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_FALSE(space->Encode({{"batch", "48"}}).ok());
}

TEST(SearchSpaceTest, DiscretePrintsListedNumbersTheSameWay) {
  HyperparameterSpec spec;
  ParameterSpec* p = spec.add_params();
  p->set_parameter_name("rate");
  p->set_type(ParameterSpec::DISCRETE);
  for (double v : {0.1, 0.001, 1e-05, 2.0}) p->add_discrete_values(v);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  std::set<std::string> values;
  for (uint64_t i = 0; i < 4; ++i) values.insert(space->GridPoint(i).at("rate"));
  EXPECT_THAT(values, ::testing::UnorderedElementsAre("1e-05", "0.001", "0.1", "2"));
}

TEST(SearchSpaceTest, CategoricalIsOneHotAndDecodesToTheLargestCoordinate) {
  HyperparameterSpec spec;
  AddNumeric(spec, "x", ParameterSpec::DOUBLE, 0, 1);
  ParameterSpec* p = spec.add_params();
  p->set_parameter_name("opt");
  p->set_type(ParameterSpec::CATEGORICAL);
  for (const char* c : {"sgd", "adam", "rmsprop"}) p->add_categorical_values(c);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(space->num_features(), 4);
  EXPECT_EQ(space->Decode(std::vector<double>{0.5, 0.1, 0.9, 0.3}).at("opt"), "adam");
  EXPECT_EQ(space->Decode(std::vector<double>{0.5, 0.5, 0.5, 0.5}).at("opt"), "sgd");
  absl::StatusOr<std::vector<double>> u = space->Encode({{"x", "0.25"}, {"opt", "rmsprop"}});
  ASSERT_TRUE(u.ok());
  EXPECT_THAT(*u, ::testing::ElementsAre(0.25, 0.0, 0.0, 1.0));
  EXPECT_FALSE(space->Encode({{"x", "0.25"}, {"opt", "adagrad"}}).ok());
  Rng rng(11);
  std::map<std::string, int> counts;
  for (int i = 0; i < 3000; ++i) {
    std::vector<double> v(4);
    for (double& c : v) c = rng.Uniform();
    const Assignment a = space->Decode(v);
    ++counts[a.at("opt")];
    EXPECT_TRUE(space->Encode(a).ok());
  }
  for (const auto& [c, n] : counts) EXPECT_NEAR(n, 1000, 150) << c;
  EXPECT_FALSE(space->FiniteSize().has_value());  // a DOUBLE makes it infinite
}

TEST(SearchSpaceTest, GridOrderIsSpecOrderWithTheLastParameterFastest) {
  HyperparameterSpec spec;
  AddNumeric(spec, "layers", ParameterSpec::INTEGER, 1, 2);
  ParameterSpec* p = spec.add_params();
  p->set_parameter_name("act");
  p->set_type(ParameterSpec::CATEGORICAL);
  for (const char* c : {"relu", "tanh", "gelu"}) p->add_categorical_values(c);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  ASSERT_EQ(space->FiniteSize(), 6u);
  std::vector<std::string> order;
  for (uint64_t i = 0; i < 6; ++i) {
    const Assignment a = space->GridPoint(i);
    order.push_back(a.at("layers") + "/" + a.at("act"));
  }
  EXPECT_THAT(order,
              ::testing::ElementsAre("1/relu", "1/tanh", "1/gelu", "2/relu", "2/tanh", "2/gelu"));
}

TEST(SearchSpaceTest, RejectsSpecsTheCubeCannotExpress) {
  {
    HyperparameterSpec spec;
    EXPECT_EQ(SearchSpace::Create(spec).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    HyperparameterSpec spec;
    AddNumeric(spec, "lr", ParameterSpec::DOUBLE, 0.0, 1.0, ParameterSpec::UNIT_LOG_SCALE);
    absl::Status s = SearchSpace::Create(spec).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), ::testing::HasSubstr("lr"));
  }
  {
    HyperparameterSpec spec;
    AddNumeric(spec, "a", ParameterSpec::DOUBLE, 2, 1);
    EXPECT_FALSE(SearchSpace::Create(spec).ok());
  }
  {
    HyperparameterSpec spec;
    AddNumeric(spec, "a", ParameterSpec::DOUBLE, 0, 1);
    AddNumeric(spec, "a", ParameterSpec::DOUBLE, 0, 1);
    EXPECT_FALSE(SearchSpace::Create(spec).ok());
  }
  {
    HyperparameterSpec spec;
    AddNumeric(spec, "n", ParameterSpec::INTEGER, 0.5, 3);
    EXPECT_FALSE(SearchSpace::Create(spec).ok());
  }
  {
    HyperparameterSpec spec;
    ParameterSpec* p = spec.add_params();
    p->set_parameter_name("c");
    p->set_type(ParameterSpec::CATEGORICAL);
    EXPECT_FALSE(SearchSpace::Create(spec).ok());
  }
}

TEST(SearchSpaceTest, DegenerateRangeIsASinglePoint) {
  HyperparameterSpec spec;
  AddNumeric(spec, "x", ParameterSpec::DOUBLE, 3, 3);
  absl::StatusOr<SearchSpace> space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(space->Decode(std::vector<double>{0.9}).at("x"), "3");
  EXPECT_TRUE(space->Encode({{"x", "3"}}).ok());
}

}  // namespace
}  // namespace kubetrain::tuner
