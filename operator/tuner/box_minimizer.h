#pragma once

#include <Eigen/Dense>
#include <functional>

namespace kubetrain::tuner {

// f(x) and, into *grad, its gradient at x. Must be finite inside the box.
using ObjectiveWithGradient =
    std::function<double(const Eigen::VectorXd& x, Eigen::VectorXd* grad)>;

struct MinimizeOptions {
  int max_iterations = 100;
  int max_evaluations = 200;
  int memory = 8;
  // Stops when an iteration improves f by less than this (relative to
  // max(1, |f|)) or the projected gradient's largest entry is below
  // `gradient_tolerance`.
  double relative_tolerance = 1e-9;
  double gradient_tolerance = 1e-7;
};

struct MinimizeResult {
  Eigen::VectorXd x;
  double value = 0;
  int evaluations = 0;
};

// Minimises f over the box [lower, upper] from x0 (projected into the box):
// L-BFGS directions over the free variables (those not held at a bound by
// their gradient), steps projected onto the box, backtracking until the
// Armijo condition holds. Small, deterministic, enough for the tuner's
// low-dimensional problems (GP hyperparameters, acquisition refinement); not
// a general-purpose L-BFGS-B.
MinimizeResult MinimizeInBox(const ObjectiveWithGradient& f, Eigen::VectorXd x0,
                             const Eigen::VectorXd& lower, const Eigen::VectorXd& upper,
                             const MinimizeOptions& options = {});

}  // namespace kubetrain::tuner
