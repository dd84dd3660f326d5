#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Dense>

#include "absl/status/statusor.h"
#include "operator/tuner/rng.h"

namespace kubetrain::tuner {

// Hyperparameters of a GP with a constant zero mean (callers standardise the
// targets) and an ARD Matérn-5/2 kernel:
//   k(x, x') = signal_variance * (1 + sqrt5 r + 5/3 r^2) exp(-sqrt5 r),
//   r^2 = sum_d ((x_d - x'_d) / length_scales_d)^2,
// plus noise_variance on the diagonal.
struct GpHyperparameters {
  double signal_variance = 1.0;
  Eigen::VectorXd length_scales;
  double noise_variance = 1e-4;
};

// The log-space vector the fit optimises: [log signal, log lengths..., log noise].
Eigen::VectorXd ToLogParams(const GpHyperparameters& h);
GpHyperparameters FromLogParams(const Eigen::VectorXd& theta);

// Box and log-normal priors on the log-parameters, for inputs in the unit cube
// and standardised targets. The priors keep the fit away from degenerate
// optima with few points (length scales -> 0 or infinity, noise explaining
// everything); with many points the likelihood dominates.
struct GpPrior {
  double log_signal_mean = 0.0, log_signal_sd = 1.0;
  double log_length_mean = -1.0, log_length_sd = 1.0;  // mode near 0.37
  double log_noise_mean = -9.0, log_noise_sd = 3.0;    // mode near 1e-4
  double min_log_signal = -7.0, max_log_signal = 5.0;
  double min_log_length = -5.0, max_log_length = 3.0;  // 0.0067 .. 20
  double min_log_noise = -16.0, max_log_noise = 0.0;   // 1e-7 .. 1
};

// Negative log posterior of the hyperparameters: -log p(y | X, theta) -
// log prior(theta), and its gradient with respect to theta (analytic). x: one
// point per row. Returns +infinity when the kernel matrix cannot be factored.
double NegLogPosterior(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                       const Eigen::VectorXd& theta, const GpPrior& prior, Eigen::VectorXd* grad);

struct GpFitOptions {
  GpPrior prior;
  // Starting points drawn from the prior and scored with one evaluation
  // each; the best `restarts` of them (the prior's mode always among the
  // candidates) are optimised with L-BFGS.
  int random_starts = 10;
  int restarts = 2;
  int max_iterations = 50;
};

// Maximum a posteriori hyperparameters, with restarts.
GpHyperparameters FitHyperparameters(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, Rng& rng,
                                     const GpFitOptions& options = {});

// A GP conditioned on data. Immutable after Fit; safe to share for reading.
class GaussianProcess {
 public:
  // Factors K + noise I, adding diagonal jitter (from 1e-10 up to 1e-2 of
  // the signal variance) when the factorisation fails. FailedPrecondition if
  // it still fails; InvalidArgument on mismatched shapes.
  static absl::StatusOr<GaussianProcess> Fit(Eigen::MatrixXd x, Eigen::VectorXd y,
                                             GpHyperparameters h);

  // Posterior mean and variance of the latent function at each row of xs.
  void Predict(const Eigen::MatrixXd& xs, Eigen::VectorXd* mean, Eigen::VectorXd* variance) const;

  // Same at one point, with gradients with respect to the point.
  void PredictWithGradient(const Eigen::VectorXd& x, double* mean, double* variance,
                           Eigen::VectorXd* dmean, Eigen::VectorXd* dvariance) const;

  // (K + noise I)^-1 b for b of num_points() entries.
  Eigen::VectorXd Solve(const Eigen::VectorXd& b) const { return llt_.solve(b); }

  // The same points and hyperparameters conditioned on other targets (y of
  // num_points() entries): the kernel matrix and its factor do not depend on
  // y, so they are reused rather than computed again.
  GaussianProcess WithTargets(Eigen::VectorXd y) const;

  const GpHyperparameters& hyperparameters() const { return h_; }
  int num_points() const { return static_cast<int>(x_.rows()); }

 private:
  GaussianProcess() = default;

  Eigen::MatrixXd x_;
  Eigen::VectorXd y_;
  GpHyperparameters h_;
  Eigen::LLT<Eigen::MatrixXd> llt_;
  Eigen::VectorXd alpha_;     // (K + noise I)^-1 y
  Eigen::MatrixXd x_scaled_;  // x_ with each column divided by its length scale
};

// log of expected improvement below `best` (minimisation) for a Gaussian
// N(mean, variance), accurate far into the tail where EI itself underflows;
// and d/dmean, d/dvariance.
double LogExpectedImprovement(double mean, double variance, double best, double* dmean,
                              double* dvariance);

}  // namespace kubetrain::tuner
