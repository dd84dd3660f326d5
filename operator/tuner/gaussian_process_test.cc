#include "operator/tuner/gaussian_process.h"

#include <cmath>
#include <numbers>

#include "gtest/gtest.h"
#include "operator/tuner/box_minimizer.h"

namespace kubetrain::tuner {
namespace {

Eigen::MatrixXd RandomPoints(int n, int dims, Rng& rng) {
  Eigen::MatrixXd x(n, dims);
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < dims; ++d) x(i, d) = rng.Uniform();
  return x;
}

double Smooth(const Eigen::VectorXd& x) { return std::sin(6 * x[0]) + 0.5 * std::cos(4 * x[1]); }

GpHyperparameters Hyper(int dims, double length, double noise) {
  GpHyperparameters h;
  h.signal_variance = 1.3;
  h.length_scales = Eigen::VectorXd::Constant(dims, length);
  h.noise_variance = noise;
  return h;
}

TEST(GaussianProcessTest, PosteriorInterpolatesTrainingPoints) {
  Rng rng(1);
  Eigen::MatrixXd x = RandomPoints(30, 2, rng);
  Eigen::VectorXd y(30);
  for (int i = 0; i < 30; ++i) y[i] = Smooth(x.row(i).transpose());
  absl::StatusOr<GaussianProcess> gp = GaussianProcess::Fit(x, y, Hyper(2, 0.3, 1e-8));
  ASSERT_TRUE(gp.ok()) << gp.status();
  Eigen::VectorXd mean, var;
  gp->Predict(x, &mean, &var);
  for (int i = 0; i < 30; ++i) {
    EXPECT_NEAR(mean[i], y[i], 1e-4);
    EXPECT_LT(var[i], 1e-5);
  }
  // Far from the data the variance returns towards the prior's.
  Eigen::MatrixXd far(1, 2);
  far << 3.0, 3.0;
  gp->Predict(far, &mean, &var);
  EXPECT_NEAR(var[0], 1.3, 1e-3);
  EXPECT_NEAR(mean[0], 0.0, 1e-3);
}

TEST(GaussianProcessTest, DuplicatePointsGetJitterInsteadOfFailing) {
  Eigen::MatrixXd x(3, 1);
  x << 0.5, 0.5, 0.5;
  Eigen::VectorXd y(3);
  y << 1.0, 1.0, 1.0;
  absl::StatusOr<GaussianProcess> gp = GaussianProcess::Fit(x, y, Hyper(1, 0.3, 0.0));
  ASSERT_TRUE(gp.ok()) << gp.status();
  EXPECT_GT(gp->hyperparameters().noise_variance, 0.0);
  Eigen::VectorXd mean, var;
  gp->Predict(x.topRows(1), &mean, &var);
  EXPECT_NEAR(mean[0], 1.0, 1e-3);
}

TEST(GaussianProcessTest, GradientOfPredictionMatchesFiniteDifferences) {
  Rng rng(2);
  Eigen::MatrixXd x = RandomPoints(20, 3, rng);
  Eigen::VectorXd y(20);
  for (int i = 0; i < 20; ++i) y[i] = Smooth(x.row(i).transpose()) + x(i, 2);
  GpHyperparameters h = Hyper(3, 0.4, 1e-6);
  h.length_scales << 0.2, 0.5, 0.9;
  absl::StatusOr<GaussianProcess> gp = GaussianProcess::Fit(x, y, h);
  ASSERT_TRUE(gp.ok());
  for (int t = 0; t < 5; ++t) {
    Eigen::VectorXd p = RandomPoints(1, 3, rng).row(0).transpose();
    double mean, var;
    Eigen::VectorXd dmean, dvar;
    gp->PredictWithGradient(p, &mean, &var, &dmean, &dvar);
    Eigen::VectorXd bm, bv;
    gp->Predict(p.transpose(), &bm, &bv);
    EXPECT_NEAR(mean, bm[0], 1e-9);
    EXPECT_NEAR(var, bv[0], 1e-9);
    for (int d = 0; d < 3; ++d) {
      const double eps = 1e-6;
      Eigen::VectorXd hi = p, lo = p;
      hi[d] += eps;
      lo[d] -= eps;
      double mh, vh, ml, vl;
      Eigen::VectorXd g1, g2;
      gp->PredictWithGradient(hi, &mh, &vh, &g1, &g2);
      gp->PredictWithGradient(lo, &ml, &vl, &g1, &g2);
      EXPECT_NEAR(dmean[d], (mh - ml) / (2 * eps), 1e-5 * std::max(1.0, std::abs(dmean[d])));
      EXPECT_NEAR(dvar[d], (vh - vl) / (2 * eps), 1e-5 * std::max(1.0, std::abs(dvar[d])));
    }
  }
}

TEST(GaussianProcessTest, LikelihoodGradientMatchesFiniteDifferences) {
  Rng rng(3);
  Eigen::MatrixXd x = RandomPoints(25, 2, rng);
  Eigen::VectorXd y(25);
  for (int i = 0; i < 25; ++i) y[i] = Smooth(x.row(i).transpose());
  Eigen::VectorXd theta(4);
  theta << 0.2, -1.1, -0.4, -6.0;
  GpPrior prior;
  Eigen::VectorXd grad;
  const double f = NegLogPosterior(x, y, theta, prior, &grad);
  ASSERT_TRUE(std::isfinite(f));
  for (int j = 0; j < 4; ++j) {
    const double eps = 1e-5;
    Eigen::VectorXd hi = theta, lo = theta;
    hi[j] += eps;
    lo[j] -= eps;
    const double numeric =
        (NegLogPosterior(x, y, hi, prior, nullptr) - NegLogPosterior(x, y, lo, prior, nullptr)) /
        (2 * eps);
    EXPECT_NEAR(grad[j], numeric, 1e-4 * std::max(1.0, std::abs(numeric))) << j;
  }
}

TEST(GaussianProcessTest, FitFindsTheIrrelevantDimension) {
  Rng rng(4);
  Eigen::MatrixXd x = RandomPoints(40, 2, rng);
  Eigen::VectorXd y(40);
  for (int i = 0; i < 40; ++i) y[i] = std::sin(6 * x(i, 0));  // ignores x1
  y = ((y.array() - y.mean()) / std::sqrt((y.array() - y.mean()).square().mean())).matrix();
  GpHyperparameters h = FitHyperparameters(x, y, rng);
  EXPECT_GT(h.length_scales[1], 3 * h.length_scales[0]);
  EXPECT_LT(h.noise_variance, 1e-2);
  // The fitted model predicts held-out points well.
  absl::StatusOr<GaussianProcess> gp = GaussianProcess::Fit(x, y, h);
  ASSERT_TRUE(gp.ok());
  Eigen::MatrixXd test = RandomPoints(50, 2, rng);
  Eigen::VectorXd mean, var;
  gp->Predict(test, &mean, &var);
  const Eigen::ArrayXd raw = (6 * x.col(0).array()).sin();
  const double y_mean = raw.mean();
  const double y_sd = std::sqrt((raw - y_mean).square().mean());
  for (int i = 0; i < 50; ++i) {
    EXPECT_NEAR(mean[i], (std::sin(6 * test(i, 0)) - y_mean) / y_sd, 0.1);
  }
}

TEST(ExpectedImprovementTest, MatchesTheClosedFormAndIsNonNegative) {
  for (double mean : {-2.0, -0.3, 0.0, 0.4, 1.5, 3.0}) {
    for (double var : {1e-4, 0.04, 1.0, 4.0}) {
      const double best = 0.1;
      const double sigma = std::sqrt(var);
      const double z = (best - mean) / sigma;
      const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi);
      const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
      const double ei = (best - mean) * cdf + sigma * pdf;
      double dm, dv;
      const double log_ei = LogExpectedImprovement(mean, var, best, &dm, &dv);
      ASSERT_TRUE(std::isfinite(log_ei));
      EXPECT_GE(std::exp(log_ei), 0.0);
      if (ei > 1e-300) {
        EXPECT_NEAR(log_ei, std::log(ei), 1e-9 * std::max(1.0, std::abs(log_ei)));
      }
      const double eps = 1e-7;
      const double num_dm = (LogExpectedImprovement(mean + eps, var, best, nullptr, nullptr) -
                             LogExpectedImprovement(mean - eps, var, best, nullptr, nullptr)) /
                            (2 * eps);
      const double ev = eps * var;
      const double num_dv = (LogExpectedImprovement(mean, var + ev, best, nullptr, nullptr) -
                             LogExpectedImprovement(mean, var - ev, best, nullptr, nullptr)) /
                            (2 * ev);
      EXPECT_NEAR(dm, num_dm, 1e-4 * std::max(1.0, std::abs(dm)));
      EXPECT_NEAR(dv, num_dv, 1e-4 * std::max(1.0, std::abs(dv)));
    }
  }
}

TEST(ExpectedImprovementTest, StaysFiniteAndMonotoneFarIntoTheTail) {
  double previous = std::numeric_limits<double>::infinity();
  for (double mean = 0.0; mean < 200.0; mean += 0.5) {
    const double log_ei = LogExpectedImprovement(mean, 1.0, 0.0, nullptr, nullptr);
    ASSERT_TRUE(std::isfinite(log_ei)) << mean;
    EXPECT_LT(log_ei, previous) << mean;
    previous = log_ei;
  }
}

TEST(BoxMinimizerTest, FindsTheConstrainedMinimumOfAQuadratic) {
  // min (x0 - 2)^2 + 10 (x1 - 0.3)^2 + (x0 x1) over [0, 1]^2.
  auto f = [](const Eigen::VectorXd& x, Eigen::VectorXd* g) {
    (*g).resize(2);
    (*g)[0] = 2 * (x[0] - 2) + x[1];
    (*g)[1] = 20 * (x[1] - 0.3) + x[0];
    return (x[0] - 2) * (x[0] - 2) + 10 * (x[1] - 0.3) * (x[1] - 0.3) + x[0] * x[1];
  };
  MinimizeResult r =
      MinimizeInBox(f, Eigen::Vector2d(0.1, 0.9), Eigen::Vector2d(0, 0), Eigen::Vector2d(1, 1));
  // x0 pinned at 1; then x1 = 0.3 - 1/20.
  EXPECT_NEAR(r.x[0], 1.0, 1e-9);
  EXPECT_NEAR(r.x[1], 0.25, 1e-6);
}

}  // namespace
}  // namespace kubetrain::tuner
