#pragma once

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

namespace kubetrain::tuner::bench {

// Standard global-optimisation test functions (minimisation) with their
// domains and known minima.
struct TestFunction {
  std::string name;
  std::vector<double> lower, upper;
  double minimum;
  double (*f)(const std::vector<double>&);
};

inline double Branin(const std::vector<double>& x) {
  const double pi = std::numbers::pi;
  const double b = 5.1 / (4 * pi * pi), c = 5 / pi, t = 1 / (8 * pi);
  const double u = x[1] - b * x[0] * x[0] + c * x[0] - 6;
  return u * u + 10 * (1 - t) * std::cos(x[0]) + 10;
}

inline double Hartmann6(const std::vector<double>& x) {
  static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  static const double a[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                 {0.05, 10, 17, 0.1, 8, 14},
                                 {3, 3.5, 1.7, 10, 17, 8},
                                 {17, 8, 0.05, 10, 0.1, 14}};
  static const double p[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                 {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                 {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                 {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < 6; ++j) inner += a[i][j] * (x[j] - p[i][j]) * (x[j] - p[i][j]);
    sum += alpha[i] * std::exp(-inner);
  }
  return -sum;
}

inline const TestFunction* FindTestFunction(const std::string& name) {
  static const TestFunction kBranin{"branin", {-5, 0}, {10, 15}, 0.397887357729738, &Branin};
  static const TestFunction kHartmann6{"hartmann6", std::vector<double>(6, 0.0),
                                       std::vector<double>(6, 1.0), -3.32236801141551, &Hartmann6};
  if (name == "branin") return &kBranin;
  if (name == "hartmann6") return &kHartmann6;
  return nullptr;
}

}  // namespace kubetrain::tuner::bench
