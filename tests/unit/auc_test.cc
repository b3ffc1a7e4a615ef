// ExactAuc against a brute-force pair count (ties count one half), on random inputs with ties.
#include "common/auc.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"

namespace sift {
namespace {

double BruteForceAuc(const std::vector<double>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] <= 0.5f) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] > 0.5f) continue;
      pairs += 1;
      wins += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
    }
  }
  return wins / pairs;
}

TEST(ExactAucTest, MatchesBruteForceWithTies) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Rng rng(seed);
    const int n = 2 + static_cast<int>(rng.Below(60));
    const int levels = 1 + static_cast<int>(rng.Below(8));  // few levels: many ties
    std::vector<double> s(n);
    std::vector<float> y(n);
    for (int i = 0; i < n; ++i) {
      s[i] = static_cast<double>(rng.Below(levels)) * 0.25 - 0.5;
      y[i] = rng.Uniform() < 0.4 ? 1.0f : 0.0f;
    }
    y[0] = 1.0f;  // both classes present
    y[1] = 0.0f;
    const double expected = BruteForceAuc(s, y);
    EXPECT_NEAR(ExactAuc(s, y), expected, 1e-12) << "seed " << seed;
    std::vector<float> sf(s.begin(), s.end());
    EXPECT_NEAR(ExactAuc(sf, y), expected, 1e-12) << "seed " << seed;
  }
}

TEST(ExactAucTest, MatchesBruteForceOnContinuousScores) {
  Rng rng(42);
  std::vector<double> s(500);
  std::vector<float> y(500);
  for (size_t i = 0; i < s.size(); ++i) {
    y[i] = rng.Uniform() < 0.5 ? 1.0f : 0.0f;
    s[i] = rng.Normal() + (y[i] > 0.5f ? 0.7 : 0.0);
  }
  EXPECT_NEAR(ExactAuc(s, y), BruteForceAuc(s, y), 1e-12);
}

TEST(ExactAucTest, KnownValues) {
  const std::vector<float> y = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<double>{0.1, 0.2, 0.3, 0.4}, y), 1.0);
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<double>{0.4, 0.3, 0.2, 0.1}, y), 0.0);
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<double>{1, 1, 1, 1}, y), 0.5);
  // Positives at ranks 2.5 (tie with a negative) and 4: (6.5 − 3) / 4 = 0.875.
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<double>{0.1, 0.5, 0.5, 0.9}, y), 0.875);
}

TEST(ExactAucTest, UndefinedIsNaN) {
  EXPECT_TRUE(std::isnan(ExactAuc(std::vector<double>{}, std::vector<float>{})));
  EXPECT_TRUE(std::isnan(ExactAuc(std::vector<double>{0.1, 0.2}, std::vector<float>{1, 1})));
  EXPECT_TRUE(std::isnan(ExactAuc(std::vector<double>{0.1, 0.2}, std::vector<float>{0, 0})));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(ExactAuc(std::vector<double>{0.1, nan}, std::vector<float>{0, 1})));
}

}  // namespace
}  // namespace sift
