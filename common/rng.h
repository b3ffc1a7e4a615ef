// Rng: a small, fast, seedable PRNG (xoshiro256**), with samplers written out so that a seed gives
// the same numbers on every platform and standard library (std:: distributions do not).
// Not thread-safe: one Rng per thread or per stream (e.g. per user, seeded from HashCombine).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hash.h"

namespace sift {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (auto& w : s_) {
      x += 0x9e3779b97f4a7c15ULL;
      w = Mix64(x);
    }
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform double in [0, 1).
  double Uniform() { return UnitFromHash(Next()); }
  // Uniform integer in [0, n), n > 0.
  uint64_t Below(uint64_t n) { return BoundedFromHash(Next(), n); }
  // Gamma(shape, 1), shape > 0 (Marsaglia–Tsang; shape < 1 by the boost U^(1/shape)).
  double Gamma(double shape);
  // Standard normal (Box–Muller, one value per call).
  double Normal() {
    double u1 = 1.0 - Uniform();  // (0, 1]
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static constexpr uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

inline double Rng::Gamma(double shape) {
  if (shape < 1.0) {
    double u = 1.0 - Uniform();
    return Gamma(shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  if (shape == 1.0) return -std::log(1.0 - Uniform());  // exponential: exact and cheap
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = Normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    double u = 1.0 - Uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

}  // namespace sift
