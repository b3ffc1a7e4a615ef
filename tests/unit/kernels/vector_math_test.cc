// kernels/cpu/vector_math.h: FastExp / FastSigmoid / FastTanh against libm in double over dense
// sweeps of their ranges, the stated error bounds, the edge values, and the array helpers.
#include "kernels/cpu/vector_math.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/kernels/op_test_util.h"

namespace sift::kernels {
namespace {

// A dense sweep of [lo, hi] with `n` points plus random points.
std::vector<float> Sweep(float lo, float hi, int n, uint64_t seed) {
  std::vector<float> v;
  for (int i = 0; i <= n; ++i) v.push_back(lo + (hi - lo) * static_cast<float>(i) / n);
  for (float x : testing::RandomFloats(n, seed, lo, hi)) v.push_back(x);
  return v;
}

TEST(VectorMathTest, ExpRelativeErrorWithinBound) {
  double worst = 0.0;
  for (float x : Sweep(-87.0f, 88.0f, 200000, 1)) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(FastExp(x) - want) / want);
  }
  EXPECT_LE(worst, 4e-7);
}

TEST(VectorMathTest, ExpEdgeValues) {
  EXPECT_EQ(FastExp(0.0f), 1.0f);
  EXPECT_EQ(FastExp(-87.5f), 0.0f);
  EXPECT_EQ(FastExp(-3.4028235e38f), 0.0f);  // the masked score minus a max: exactly 0 weight
  EXPECT_EQ(FastExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isfinite(FastExp(1e30f)));
  EXPECT_EQ(FastExp(1e30f), FastExp(88.0f));
  EXPECT_NEAR(FastExp(1.0f), 2.718281828, 2.718281828 * 4e-7);
}

TEST(VectorMathTest, SigmoidErrorWithinBound) {
  double worst_abs = 0.0, worst_rel = 0.0;
  for (float x : Sweep(-100.0f, 100.0f, 200000, 2)) {
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    const double err = std::abs(FastSigmoid(x) - want);
    worst_abs = std::max(worst_abs, err);
    if (x >= -80.0f) worst_rel = std::max(worst_rel, err / want);
  }
  EXPECT_LE(worst_abs, 2e-7);
  EXPECT_LE(worst_rel, 1e-6);
  EXPECT_EQ(FastSigmoid(0.0f), 0.5f);
  EXPECT_EQ(FastSigmoid(1e4f), 1.0f);
  EXPECT_GE(FastSigmoid(-1e4f), 0.0f);
  EXPECT_LT(FastSigmoid(-1e4f), 1e-37f);
}

TEST(VectorMathTest, TanhErrorWithinBound) {
  double worst_abs = 0.0, worst_rel = 0.0;
  std::vector<float> xs = Sweep(-20.0f, 20.0f, 200000, 3);
  for (float x : Sweep(-1e-3f, 1e-3f, 2000, 4)) xs.push_back(x);
  for (float x : xs) {
    const double want = std::tanh(static_cast<double>(x));
    const double err = std::abs(FastTanh(x) - want);
    worst_abs = std::max(worst_abs, err);
    if (want != 0.0) worst_rel = std::max(worst_rel, err / std::abs(want));
  }
  EXPECT_LE(worst_abs, 3e-7);
  EXPECT_LE(worst_rel, 1e-6);
  EXPECT_EQ(FastTanh(0.0f), 0.0f);
  EXPECT_EQ(FastTanh(100.0f), 1.0f);
  EXPECT_EQ(FastTanh(-100.0f), -1.0f);
  EXPECT_EQ(FastTanh(-1e30f), -1.0f);
}

TEST(VectorMathTest, ArrayHelpersMatchScalarAndAllowInPlace) {
  const std::vector<float> x = testing::RandomFloats(1003, 5, -30.0f, 30.0f);
  std::vector<float> e(x.size()), s(x.size()), t(x.size());
  ExpArray(static_cast<int64_t>(x.size()), x.data(), e.data());
  SigmoidArray(static_cast<int64_t>(x.size()), x.data(), s.data());
  std::vector<float> inplace = x;
  TanhArray(static_cast<int64_t>(x.size()), inplace.data(), inplace.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(e[i], FastExp(x[i]));
    EXPECT_EQ(s[i], FastSigmoid(x[i]));
    EXPECT_EQ(inplace[i], FastTanh(x[i]));
  }
}

}  // namespace
}  // namespace sift::kernels
