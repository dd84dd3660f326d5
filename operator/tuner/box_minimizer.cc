#include "operator/tuner/box_minimizer.h"

#include <algorithm>
#include <cmath>
#include <deque>

namespace kubetrain::tuner {
namespace {

Eigen::VectorXd Project(const Eigen::VectorXd& x, const Eigen::VectorXd& lo,
                        const Eigen::VectorXd& hi) {
  return x.cwiseMax(lo).cwiseMin(hi);
}

// Zeroes the gradient entries of variables held at a bound (their descent
// direction leaves the box).
Eigen::VectorXd FreeGradient(const Eigen::VectorXd& x, const Eigen::VectorXd& g,
                             const Eigen::VectorXd& lo, const Eigen::VectorXd& hi) {
  Eigen::VectorXd out = g;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    if ((x[i] <= lo[i] && g[i] > 0) || (x[i] >= hi[i] && g[i] < 0)) out[i] = 0;
  }
  return out;
}

}  // namespace

MinimizeResult MinimizeInBox(const ObjectiveWithGradient& f, Eigen::VectorXd x0,
                             const Eigen::VectorXd& lower, const Eigen::VectorXd& upper,
                             const MinimizeOptions& options) {
  MinimizeResult result;
  Eigen::VectorXd x = Project(x0, lower, upper);
  Eigen::VectorXd g(x.size());
  double fx = f(x, &g);
  result.evaluations = 1;
  if (!std::isfinite(fx) || !g.allFinite()) {
    result.x = x;
    result.value = fx;
    return result;
  }
  std::deque<std::pair<Eigen::VectorXd, Eigen::VectorXd>> memory;  // (s, y)
  for (int iter = 0; iter < options.max_iterations; ++iter) {
    Eigen::VectorXd free_g = FreeGradient(x, g, lower, upper);
    if (free_g.lpNorm<Eigen::Infinity>() < options.gradient_tolerance) break;

    // Two-loop recursion on the free variables.
    Eigen::VectorXd q = free_g;
    std::vector<double> alpha(memory.size());
    for (int i = static_cast<int>(memory.size()) - 1; i >= 0; --i) {
      const auto& [s, y] = memory[i];
      alpha[i] = s.dot(q) / y.dot(s);
      q -= alpha[i] * y;
    }
    if (!memory.empty()) {
      const auto& [s, y] = memory.back();
      q *= s.dot(y) / y.dot(y);
    } else {
      q /= std::max(1.0, free_g.norm());
    }
    for (size_t i = 0; i < memory.size(); ++i) {
      const auto& [s, y] = memory[i];
      const double beta = y.dot(q) / y.dot(s);
      q += (alpha[i] - beta) * s;
    }
    Eigen::VectorXd direction = -q;
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      if (free_g[i] == 0 && g[i] != 0) direction[i] = 0;
    }
    if (direction.dot(free_g) >= 0) {  // not a descent direction: restart
      memory.clear();
      direction = -free_g / std::max(1.0, free_g.norm());
    }

    double step = 1.0;
    bool accepted = false;
    Eigen::VectorXd x_new, g_new(x.size());
    double f_new = fx;
    for (int back = 0; back < 30 && result.evaluations < options.max_evaluations; ++back) {
      x_new = Project(x + step * direction, lower, upper);
      f_new = f(x_new, &g_new);
      ++result.evaluations;
      if (std::isfinite(f_new) && g_new.allFinite() && f_new <= fx + 1e-4 * g.dot(x_new - x)) {
        accepted = true;
        break;
      }
      step *= 0.5;
    }
    if (!accepted) break;
    const double improvement = fx - f_new;
    Eigen::VectorXd s = x_new - x;
    Eigen::VectorXd y = g_new - g;
    if (s.dot(y) > 1e-12 * s.norm() * y.norm() && s.dot(y) > 0) {
      memory.emplace_back(std::move(s), std::move(y));
      if (static_cast<int>(memory.size()) > options.memory) memory.pop_front();
    }
    x = std::move(x_new);
    g = g_new;
    fx = f_new;
    if (improvement <= options.relative_tolerance * std::max(1.0, std::abs(fx))) break;
    if (result.evaluations >= options.max_evaluations) break;
  }
  result.x = x;
  result.value = fx;
  return result;
}

}  // namespace kubetrain::tuner
