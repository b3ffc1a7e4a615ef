// Fast, branch-free float exp / sigmoid / tanh for the CPU kernels: inline scalar functions written
// so that a loop calling them over a contiguous array vectorises (inlined into the cpu backend's
// ISA variants; -fno-trapping-math lets the selects if-convert), plus array helpers. Pure
// functions; thread-safe. Accuracy (checked by tests/unit/kernels/vector_math_test):
// - FastExp(x): relative error <= 4e-7 for x in [-87, 88]; exactly 0 for x < -87 (the true value is
//   < 1.7e-38, so the absolute error is below that); x > 88 returns FastExp(88). Not
//   NaN-preserving.
// - FastSigmoid(x): absolute error <= 2e-7 everywhere, relative error <= 1e-6 for x >= -80.
// - FastTanh(x): absolute error <= 3e-7 everywhere, relative error <= 1e-6 (small |x| uses the
//   odd polynomial, so tanh(x) ~ x keeps full relative precision near 0).
// Requires the default round-to-nearest floating-point mode.
#pragma once

#include <bit>
#include <cstdint>

namespace sift::kernels {

// exp(x): Cody-Waite range reduction x = n ln2 + r (|r| <= ln2/2), a degree-6 minimax polynomial
// for exp(r) (Cephes expf), and 2^n built in the exponent bits.
inline float FastExp(float x) {
  constexpr float kLo = -87.0f, kHi = 88.0f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x < kLo ? kLo : (x > kHi ? kHi : x);
  const float t = xc * kLog2e + kRound;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float fn = t - kRound;
  float r = xc - fn * kLn2Hi;
  r = r - fn * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = (p * r * r + r) + 1.0f;
  const float scale = std::bit_cast<float>((n + 127) << 23);
  const float result = e * scale;
  return x < kLo ? 0.0f : result;
}

// 1 / (1 + exp(-x)).
inline float FastSigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }

// tanh(x): an odd polynomial for |x| < 0.625 (Cephes tanhf), else sign(x) (1 - e)/(1 + e) with
// e = exp(-2|x|); both are computed and one is selected (no branch).
inline float FastTanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = FastExp(-2.0f * ax);
  const float big_abs = (1.0f - e) / (1.0f + e);
  const float big = x < 0.0f ? -big_abs : big_abs;
  return ax < 0.625f ? small : big;
}

// y[i] = f(x[i]) for i < n; y == x is allowed.
inline void ExpArray(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastExp(x[i]);
}
inline void SigmoidArray(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastSigmoid(x[i]);
}
inline void TanhArray(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastTanh(x[i]);
}

}  // namespace sift::kernels
