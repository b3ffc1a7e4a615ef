// LrFactor (common/lr_schedule.h) against a hand-computed table: warm-up, linear and cosine
// decay, the final fraction, steps beyond the plan (the last planned step's rate, never 0);
// parsing and validation.
#include "common/lr_schedule.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sift {
namespace {

TEST(LrScheduleTest, ConstantIsOneAndWarmUpRampsLinearly) {
  LrSchedule s;
  EXPECT_TRUE(IsConstantLr(s));
  for (int64_t step : {0, 1, 99, 1000}) EXPECT_EQ(LrFactor(s, step, 100), 1.0);
  s.warmup_steps = 4;
  EXPECT_FALSE(IsConstantLr(s));
  // (s + 1) / 4: 0.25, 0.5, 0.75, 1, then 1.
  const double want[6] = {0.25, 0.5, 0.75, 1.0, 1.0, 1.0};
  for (int step = 0; step < 6; ++step) EXPECT_EQ(LrFactor(s, step, 10), want[step]) << step;
}

TEST(LrScheduleTest, LinearAndCosineDecayToTheFinalFraction) {
  // T = 10, W = 2: p = (s - 2) / 8 for s >= 2.
  LrSchedule lin{LrScheduleKind::kLinear, 2, 0.2};
  LrSchedule cos{LrScheduleKind::kCosine, 2, 0.2};
  // step: warm-up 0.5, 1; then linear 1 - 0.8 p; cosine 0.2 + 0.4 (1 + cos(pi p)).
  struct Row {
    int64_t step;
    double linear, cosine;
  };
  const Row rows[] = {
      {0, 0.5, 0.5},
      {1, 1.0, 1.0},
      {2, 1.0, 1.0},                                       // p = 0
      {4, 0.8, 0.2 + 0.4 * (1 + std::sqrt(0.5))},          // p = 1/4: cos = 0.70711
      {6, 0.6, 0.6},                                       // p = 1/2: cos = 0
      {8, 0.4, 0.2 + 0.4 * (1 - std::sqrt(0.5))},          // p = 3/4
      {9, 0.3, 0.2 + 0.4 * (1 + std::cos(M_PI * 7 / 8))},  // the last planned step: above f
      // Beyond the plan: the last planned step's rate.
      {10, 0.3, 0.2 + 0.4 * (1 + std::cos(M_PI * 7 / 8))},
      {50, 0.3, 0.2 + 0.4 * (1 + std::cos(M_PI * 7 / 8))},
  };
  for (const Row& r : rows) {
    EXPECT_NEAR(LrFactor(lin, r.step, 10), r.linear, 1e-15) << "linear step " << r.step;
    EXPECT_NEAR(LrFactor(cos, r.step, 10), r.cosine, 1e-15) << "cosine step " << r.step;
  }
  // f = 0: every planned step still has a positive factor (a push's multiplier is in (0, 1]).
  LrSchedule to_zero{LrScheduleKind::kCosine, 0, 0};
  EXPECT_GT(LrFactor(to_zero, 999, 1000), 0.0);
  EXPECT_NEAR(LrFactor(to_zero, 999, 1000), 0.5 * (1 + std::cos(M_PI * 0.999)), 1e-15);
  EXPECT_EQ(LrFactor(to_zero, 5000, 1000), LrFactor(to_zero, 999, 1000));  // never 0
}

TEST(LrScheduleTest, WarmUpLongerThanTheRunOnlyWarmsUp) {
  LrSchedule s{LrScheduleKind::kCosine, 20, 0};
  EXPECT_EQ(LrFactor(s, 9, 10), 0.5);
  EXPECT_EQ(LrFactor(s, 15, 10), 0.5);
}

TEST(LrScheduleTest, NamesParseAndBadFieldsAreNamed) {
  for (LrScheduleKind k :
       {LrScheduleKind::kConstant, LrScheduleKind::kLinear, LrScheduleKind::kCosine}) {
    auto parsed = ParseLrScheduleKind(LrScheduleName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_EQ(LrScheduleNames(), (std::vector<std::string>{"constant", "linear", "cosine"}));
  const auto bad = ParseLrScheduleKind("step");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("constant, linear, cosine"), absl::string_view::npos);
  LrSchedule s;
  s.warmup_steps = -1;
  EXPECT_NE(ValidateLrSchedule(s, "training.lr_warmup_steps", "training.lr_final_fraction")
                .message()
                .find("training.lr_warmup_steps must be >= 0"),
            absl::string_view::npos);
  s.warmup_steps = 0;
  for (double f : {-0.1, 1.5, std::nan("")}) {
    s.final_fraction = f;
    EXPECT_NE(ValidateLrSchedule(s, "--lr-warmup-steps", "--lr-final-fraction")
                  .message()
                  .find("--lr-final-fraction must be in [0, 1]"),
              absl::string_view::npos);
  }
  s.final_fraction = 1;
  EXPECT_TRUE(ValidateLrSchedule(s, "a", "b").ok());
}

}  // namespace
}  // namespace sift
