#include "operator/tuner/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "absl/status/status.h"
#include "operator/tuner/box_minimizer.h"

namespace kubetrain::tuner {
namespace {

constexpr double kSqrt5 = 2.23606797749978969640;

// Matérn-5/2 correlation at distance r, and the factor g(r) such that
// d corr / d(r^2) = -g(r) / 2, i.e. g(r) = 5/3 (1 + sqrt5 r) exp(-sqrt5 r).
inline double Matern52(double r) {
  return (1.0 + kSqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-kSqrt5 * r);
}

double NormalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * std::numbers::pi); }
double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

double LogNormalPrior(double v, double mean, double sd, double* d) {
  const double t = (v - mean) / sd;
  *d = t / sd;  // derivative of the negative log density
  return 0.5 * t * t;
}

}  // namespace

Eigen::VectorXd ToLogParams(const GpHyperparameters& h) {
  const Eigen::Index d = h.length_scales.size();
  Eigen::VectorXd theta(d + 2);
  theta[0] = std::log(h.signal_variance);
  theta.segment(1, d) = h.length_scales.array().log();
  theta[d + 1] = std::log(h.noise_variance);
  return theta;
}

GpHyperparameters FromLogParams(const Eigen::VectorXd& theta) {
  GpHyperparameters h;
  const Eigen::Index d = theta.size() - 2;
  h.signal_variance = std::exp(theta[0]);
  h.length_scales = theta.segment(1, d).array().exp();
  h.noise_variance = std::exp(theta[d + 1]);
  return h;
}

namespace {

// Per-dimension squared differences (x_id - x_jd)^2, computed once per fit so
// each likelihood evaluation is a few vectorised passes over n x n arrays.
std::vector<Eigen::ArrayXXd> SquaredDifferences(const Eigen::MatrixXd& x) {
  const Eigen::Index n = x.rows();
  std::vector<Eigen::ArrayXXd> sq(x.cols());
  for (Eigen::Index d = 0; d < x.cols(); ++d) {
    const Eigen::ArrayXd c = x.col(d).array();
    sq[d] = (c.replicate(1, n) - c.transpose().replicate(n, 1)).square();
  }
  return sq;
}

double NegLogPosteriorPrecomputed(const std::vector<Eigen::ArrayXXd>& sq, const Eigen::VectorXd& y,
                                  const Eigen::VectorXd& theta, const GpPrior& prior,
                                  Eigen::VectorXd* grad) {
  const Eigen::Index n = y.size(), dims = static_cast<Eigen::Index>(sq.size());
  const double sf2 = std::exp(theta[0]);
  const double sn2 = std::exp(theta[dims + 1]);
  const Eigen::ArrayXd inv_l2 = (-2.0 * theta.segment(1, dims)).array().exp();

  Eigen::ArrayXXd r2 = Eigen::ArrayXXd::Zero(n, n);
  for (Eigen::Index d = 0; d < dims; ++d) r2 += inv_l2[d] * sq[d];
  const Eigen::ArrayXXd r = r2.sqrt();
  const Eigen::ArrayXXd e = (-kSqrt5 * r).exp();
  const Eigen::ArrayXXd kf = sf2 * (1.0 + kSqrt5 * r + 5.0 / 3.0 * r2) * e;
  Eigen::MatrixXd k = kf.matrix();
  k.diagonal().array() += sn2;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) {
    // Jitter is not part of the model being fitted: a matrix this singular
    // just scores as impossible, steering the search to larger noise.
    return std::numeric_limits<double>::infinity();
  }
  const Eigen::VectorXd alpha = llt.solve(y);
  const Eigen::MatrixXd& l = llt.matrixLLT();
  double nll = 0.5 * y.dot(alpha) + 0.5 * n * std::log(2.0 * std::numbers::pi);
  for (Eigen::Index i = 0; i < n; ++i) nll += std::log(l(i, i));

  double d;
  nll += LogNormalPrior(theta[0], prior.log_signal_mean, prior.log_signal_sd, &d);
  const double d_signal_prior = d;
  Eigen::VectorXd d_length_prior(dims);
  for (Eigen::Index i = 0; i < dims; ++i) {
    nll += LogNormalPrior(theta[1 + i], prior.log_length_mean, prior.log_length_sd, &d);
    d_length_prior[i] = d;
  }
  nll += LogNormalPrior(theta[dims + 1], prior.log_noise_mean, prior.log_noise_sd, &d);
  const double d_noise_prior = d;
  if (!std::isfinite(nll)) return std::numeric_limits<double>::infinity();

  if (grad != nullptr) {
    // d nll / d theta_j = 1/2 tr((K^-1 - alpha alpha^T) dK/dtheta_j), with
    // dK/dlog sf2 = Kf, dK/dlog sn2 = sn2 I and
    // dK_ij/dlog l_d = sf2 g(r_ij) (x_id - x_jd)^2 / l_d^2.
    Eigen::MatrixXd w = llt.solve(Eigen::MatrixXd::Identity(n, n));
    w.noalias() -= alpha * alpha.transpose();
    const Eigen::ArrayXXd wa = w.array();
    grad->resize(dims + 2);
    (*grad)[0] = 0.5 * (wa * kf).sum() + d_signal_prior;
    const Eigen::ArrayXXd a = wa * (sf2 * 5.0 / 3.0) * (1.0 + kSqrt5 * r) * e;
    for (Eigen::Index i = 0; i < dims; ++i) {
      (*grad)[1 + i] = 0.5 * inv_l2[i] * (a * sq[i]).sum() + d_length_prior[i];
    }
    (*grad)[dims + 1] = 0.5 * w.trace() * sn2 + d_noise_prior;
  }
  return nll;
}

}  // namespace

double NegLogPosterior(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                       const Eigen::VectorXd& theta, const GpPrior& prior, Eigen::VectorXd* grad) {
  return NegLogPosteriorPrecomputed(SquaredDifferences(x), y, theta, prior, grad);
}

GpHyperparameters FitHyperparameters(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, Rng& rng,
                                     const GpFitOptions& options) {
  const GpPrior& prior = options.prior;
  const Eigen::Index dims = x.cols();
  Eigen::VectorXd lower(dims + 2), upper(dims + 2), mode(dims + 2);
  lower[0] = prior.min_log_signal;
  upper[0] = prior.max_log_signal;
  mode[0] = prior.log_signal_mean;
  lower.segment(1, dims).setConstant(prior.min_log_length);
  upper.segment(1, dims).setConstant(prior.max_log_length);
  mode.segment(1, dims).setConstant(prior.log_length_mean);
  lower[dims + 1] = prior.min_log_noise;
  upper[dims + 1] = prior.max_log_noise;
  mode[dims + 1] = prior.log_noise_mean;

  const std::vector<Eigen::ArrayXXd> sq = SquaredDifferences(x);
  auto objective = [&](const Eigen::VectorXd& theta, Eigen::VectorXd* g) {
    return NegLogPosteriorPrecomputed(sq, y, theta, prior, g);
  };

  // Score the prior's mode and random draws from the prior (clamped to the
  // box) with one evaluation each; optimise the most promising.
  std::vector<std::pair<double, Eigen::VectorXd>> starts;
  starts.emplace_back(objective(mode, nullptr), mode);
  for (int s = 0; s < options.random_starts; ++s) {
    Eigen::VectorXd theta(dims + 2);
    theta[0] = prior.log_signal_mean + prior.log_signal_sd * rng.Normal();
    for (Eigen::Index i = 0; i < dims; ++i) {
      theta[1 + i] = prior.log_length_mean + prior.log_length_sd * rng.Normal();
    }
    theta[dims + 1] = prior.log_noise_mean + prior.log_noise_sd * rng.Normal();
    theta = theta.cwiseMax(lower).cwiseMin(upper);
    starts.emplace_back(objective(theta, nullptr), theta);
  }
  // The mode always gets a run; stable_sort keeps the order deterministic.
  std::stable_sort(starts.begin() + 1, starts.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  MinimizeOptions mo;
  mo.max_iterations = options.max_iterations;
  mo.max_evaluations = options.max_iterations * 2;
  mo.relative_tolerance = 1e-7;
  mo.gradient_tolerance = 1e-5;
  Eigen::VectorXd best = mode;
  double best_value = std::numeric_limits<double>::infinity();
  const int runs = std::min<int>(options.restarts, static_cast<int>(starts.size()));
  for (int s = 0; s < runs; ++s) {
    if (!std::isfinite(starts[s].first)) continue;
    MinimizeResult r = MinimizeInBox(objective, starts[s].second, lower, upper, mo);
    if (r.value < best_value) {
      best_value = r.value;
      best = r.x;
    }
  }
  return FromLogParams(best);
}

absl::StatusOr<GaussianProcess> GaussianProcess::Fit(Eigen::MatrixXd x, Eigen::VectorXd y,
                                                     GpHyperparameters h) {
  if (x.rows() != y.size() || h.length_scales.size() != x.cols() || x.rows() == 0) {
    return absl::InvalidArgumentError("GaussianProcess::Fit: mismatched or empty inputs");
  }
  GaussianProcess gp;
  gp.x_ = std::move(x);
  gp.y_ = std::move(y);
  gp.h_ = std::move(h);
  const Eigen::Index n = gp.x_.rows();
  gp.x_scaled_ = gp.x_ * gp.h_.length_scales.cwiseInverse().asDiagonal();
  Eigen::MatrixXd k(n, n);
  for (Eigen::Index j = 0; j < n; ++j) {
    k(j, j) = gp.h_.signal_variance + gp.h_.noise_variance;
    for (Eigen::Index i = j + 1; i < n; ++i) {
      const double ri = (gp.x_scaled_.row(i) - gp.x_scaled_.row(j)).norm();
      k(i, j) = k(j, i) = gp.h_.signal_variance * Matern52(ri);
    }
  }
  double jitter = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    gp.llt_.compute(k + jitter * Eigen::MatrixXd::Identity(n, n));
    if (gp.llt_.info() == Eigen::Success) {
      gp.h_.noise_variance += jitter;
      gp.alpha_ = gp.llt_.solve(gp.y_);
      return gp;
    }
    jitter = jitter == 0 ? 1e-10 * gp.h_.signal_variance : jitter * 10;
    if (jitter > 1e-2 * gp.h_.signal_variance) break;
  }
  return absl::FailedPreconditionError(
      "GaussianProcess::Fit: kernel matrix is not positive definite even with jitter");
}

GaussianProcess GaussianProcess::WithTargets(Eigen::VectorXd y) const {
  GaussianProcess gp = *this;
  gp.y_ = std::move(y);
  gp.alpha_ = gp.llt_.solve(gp.y_);
  return gp;
}

void GaussianProcess::Predict(const Eigen::MatrixXd& xs, Eigen::VectorXd* mean,
                              Eigen::VectorXd* variance) const {
  const Eigen::Index m = xs.rows(), n = x_.rows();
  const Eigen::MatrixXd xs_scaled = xs * h_.length_scales.cwiseInverse().asDiagonal();
  // Squared distances through the Gram matrix: one matrix product instead of
  // m * n small loops.
  Eigen::MatrixXd ks = -2.0 * xs_scaled * x_scaled_.transpose();
  ks.colwise() += xs_scaled.rowwise().squaredNorm();
  ks.rowwise() += x_scaled_.rowwise().squaredNorm().transpose();
  for (Eigen::Index j = 0; j < n; ++j) {
    for (Eigen::Index i = 0; i < m; ++i) {
      ks(i, j) = h_.signal_variance * Matern52(std::sqrt(std::max(0.0, ks(i, j))));
    }
  }
  *mean = ks * alpha_;
  Eigen::MatrixXd v = ks.transpose();
  llt_.matrixL().solveInPlace(v);
  *variance = (h_.signal_variance - v.colwise().squaredNorm().transpose().array())
                  .max(1e-12 * h_.signal_variance)
                  .matrix();
}

void GaussianProcess::PredictWithGradient(const Eigen::VectorXd& x, double* mean, double* variance,
                                          Eigen::VectorXd* dmean,
                                          Eigen::VectorXd* dvariance) const {
  const Eigen::VectorXd xs = x.cwiseQuotient(h_.length_scales);
  // diff.row(i) = (x - x_i) / l, in scaled coordinates.
  const Eigen::MatrixXd diff = (-x_scaled_).rowwise() + xs.transpose();
  const Eigen::ArrayXd r = diff.rowwise().norm().array();
  const Eigen::ArrayXd e = (-kSqrt5 * r).exp();
  const Eigen::VectorXd k =
      (h_.signal_variance * (1.0 + kSqrt5 * r + 5.0 / 3.0 * r.square()) * e).matrix();
  // dk_i/dx = -g_i (x - x_i) / l^2 with g = sf2 * 5/3 (1 + sqrt5 r) exp(-sqrt5 r).
  const Eigen::ArrayXd g = h_.signal_variance * 5.0 / 3.0 * (1.0 + kSqrt5 * r) * e;
  const Eigen::VectorXd w = llt_.solve(k);
  *mean = k.dot(alpha_);
  const double raw_var = h_.signal_variance - k.dot(w);
  const double floor = 1e-12 * h_.signal_variance;
  *variance = std::max(raw_var, floor);
  const Eigen::VectorXd inv_l = h_.length_scales.cwiseInverse();
  *dmean = -(diff.transpose() * (alpha_.array() * g).matrix()).cwiseProduct(inv_l);
  *dvariance = 2.0 * (diff.transpose() * (w.array() * g).matrix()).cwiseProduct(inv_l);
  if (raw_var <= floor) dvariance->setZero();
}

double LogExpectedImprovement(double mean, double variance, double best, double* dmean,
                              double* dvariance) {
  const double sigma = std::sqrt(variance);
  const double z = (best - mean) / sigma;
  double log_h, q;  // log(phi(z) + z Phi(z)) and Phi(z) / (phi(z) + z Phi(z))
  if (z > -20) {
    const double cdf = NormalCdf(z), pdf = NormalPdf(z);
    const double h = pdf + z * cdf;
    log_h = std::log(h);
    q = cdf / h;
  } else {
    // Asymptotic series for z -> -inf: h / phi = 1/z^2 - 3/z^4 + 15/z^6 - ...,
    // Phi / phi = 1/|z| (1 - 1/z^2 + 3/z^4 - ...).
    const double z2 = z * z;
    const double h_over_pdf = (1.0 - 3.0 / z2 + 15.0 / (z2 * z2) - 105.0 / (z2 * z2 * z2)) / z2;
    const double mills = (1.0 - 1.0 / z2 + 3.0 / (z2 * z2)) / -z;
    log_h = -0.5 * z2 - 0.5 * std::log(2.0 * std::numbers::pi) + std::log(h_over_pdf);
    q = mills / h_over_pdf;
  }
  // log EI = log sigma + log h(z); dz/dmean = -1/sigma; dz/dsigma = -z/sigma.
  if (dmean != nullptr) *dmean = -q / sigma;
  if (dvariance != nullptr) *dvariance = (1.0 - q * z) / sigma / (2.0 * sigma);
  return std::log(sigma) + log_h;
}

}  // namespace kubetrain::tuner
