#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace kubetrain::tuner {

// A small seeded generator (xoshiro256** seeded through splitmix64). The
// tuner's output must be a function of the seed and the history only, on every
// platform, so it does not use <random>'s distributions (their algorithms are
// implementation-defined). Not thread-safe; cheap to copy.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& s : state_) s = SplitMix64(x);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n); n > 0. The modulo bias is below 2^-32 for the
  // sizes the tuner uses.
  uint64_t UniformInt(uint64_t n) { return Next() % n; }

  // Standard normal (Box-Muller; the second value is discarded to keep the
  // generator's state a function of the call count only).
  double Normal() {
    double u1 = Uniform();
    while (u1 <= 0.0) u1 = Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  static uint64_t SplitMix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4];
};

}  // namespace kubetrain::tuner
