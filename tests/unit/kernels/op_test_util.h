// Shared helpers for the kernel op tests: seeded random fills (sift::Rng), float<->double copies,
// max-relative-error comparison, and central finite differences in double. Header-only; every
// function is pure apart from the Rng it is given.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"

namespace sift::kernels::testing {

// n uniform values in [lo, hi) from a fixed seed.
inline std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(lo + (hi - lo) * rng.Uniform());
  return v;
}

// n values in {0, 1}, each 1 with probability p_one.
inline std::vector<float> RandomMask(int64_t n, uint64_t seed, double p_one = 0.7) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.Uniform() < p_one ? 1.0f : 0.0f;
  return v;
}

// n indices in [lo, hi) (lo may be negative, e.g. -1 for padding).
inline std::vector<int32_t> RandomIndices(int64_t n, uint64_t seed, int32_t lo, int32_t hi) {
  Rng rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + static_cast<int32_t>(rng.Below(static_cast<uint64_t>(hi - lo)));
  return v;
}

inline std::vector<double> AsDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}
inline std::vector<float> AsFloat(const std::vector<double>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

// max_i |a_i - b_i| / max(|b_i|, floor): relative error with an absolute floor for values near 0.
// Non-finite mismatches give +inf; equal non-finite values (same inf, both NaN) count as 0.
template <typename A, typename B>
double MaxRelError(const std::vector<A>& a, const std::vector<B>& b, double floor = 1e-3) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) && std::isnan(y)) continue;
      return std::numeric_limits<double>::infinity();
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x == y) continue;
      return std::numeric_limits<double>::infinity();
    }
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), floor));
  }
  return worst;
}

// gtest assertion: MaxRelError(actual, expected, floor) <= tol, naming the worst index.
template <typename A, typename B>
::testing::AssertionResult AllClose(const std::vector<A>& actual, const std::vector<B>& expected,
                                    double tol, double floor = 1e-3) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  const double err = MaxRelError(actual, expected, floor);
  if (err <= tol) return ::testing::AssertionSuccess();
  size_t worst = 0;
  double worst_err = -1.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double e = MaxRelError(std::vector<double>{static_cast<double>(actual[i])},
                                 std::vector<double>{static_cast<double>(expected[i])}, floor);
    if (e > worst_err) worst_err = e, worst = i;
  }
  return ::testing::AssertionFailure()
         << "max relative error " << err << " > " << tol << " at index " << worst << ": actual "
         << static_cast<double>(actual[worst]) << " expected "
         << static_cast<double>(expected[worst]);
}

// Bit-identical float arrays (determinism checks).
inline ::testing::AssertionResult BitIdentical(const std::vector<float>& a,
                                               const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
      return ::testing::AssertionFailure()
             << "index " << i << ": " << a[i] << " vs " << b[i] << " (bits differ)";
    }
  }
  return ::testing::AssertionSuccess();
}

// Central difference of a scalar function of x at every index: g_i = (f(x + eps e_i) -
// f(x - eps e_i)) / (2 eps). x is restored afterwards.
inline std::vector<double> NumericalGradient(const std::function<double()>& f,
                                             std::vector<double>* x, double eps = 1e-6) {
  std::vector<double> g(x->size());
  for (size_t i = 0; i < x->size(); ++i) {
    const double saved = (*x)[i];
    (*x)[i] = saved + eps;
    const double fp = f();
    (*x)[i] = saved - eps;
    const double fm = f();
    (*x)[i] = saved;
    g[i] = (fp - fm) / (2.0 * eps);
  }
  return g;
}

// gtest assertion: the analytic gradient matches central differences of f w.r.t. *x within tol
// (MaxRelError with the given floor).
inline ::testing::AssertionResult GradientMatches(const std::function<double()>& f,
                                                  std::vector<double>* x,
                                                  const std::vector<double>& analytic, double tol,
                                                  double eps = 1e-6, double floor = 1e-4) {
  const std::vector<double> numeric = NumericalGradient(f, x, eps);
  return AllClose(analytic, numeric, tol, floor);
}

// A fixed random projection: loss = sum_i w_i y_i, so d loss / d y = w (turns a vector output
// into the scalar the finite differences need).
inline double Project(const std::vector<double>& y, const std::vector<double>& w) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * w[i];
  return s;
}

}  // namespace sift::kernels::testing
