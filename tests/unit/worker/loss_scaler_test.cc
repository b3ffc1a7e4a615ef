// DynamicLossScaler (worker/loss_scaler.h): the overflow / growth state machine and the option
// checks.
#include "worker/loss_scaler.h"

#include <gtest/gtest.h>

namespace sift::worker {
namespace {

TEST(LossScalerTest, OverflowSkipsTheStepAndHalvesTheScale) {
  DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 16384.0f);
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 8192.0f);
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 8192.0f);
}

TEST(LossScalerTest, GrowsAfterTheIntervalOfFiniteStepsOnly) {
  LossScalerOptions o;
  o.initial_scale = 4;
  o.growth_interval = 3;
  DynamicLossScaler s(o);
  EXPECT_TRUE(s.Update(true));
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 4.0f);
  EXPECT_TRUE(s.Update(true));  // the third finite step in a row
  EXPECT_EQ(s.scale(), 8.0f);
  // An overflow resets the run of finite steps.
  EXPECT_TRUE(s.Update(true));
  EXPECT_TRUE(s.Update(true));
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 4.0f);
  EXPECT_TRUE(s.Update(true));
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 4.0f);
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 8.0f);
}

TEST(LossScalerTest, ScaleStaysWithinItsBounds) {
  LossScalerOptions o;
  o.initial_scale = 2;
  o.min_scale = 1;
  o.max_scale = 4;
  o.growth_interval = 1;
  DynamicLossScaler s(o);
  for (int i = 0; i < 5; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 4.0f);
  for (int i = 0; i < 5; ++i) s.Update(false);
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.skipped_steps(), 5);
}

TEST(LossScalerTest, RestoreSetsTheEvolvingState) {
  DynamicLossScaler s;
  s.Restore(256.0f, 1999);
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScalerTest, OptionsAreValidated) {
  EXPECT_TRUE(ValidateLossScalerOptions({}).ok());
  LossScalerOptions o;
  o.growth_factor = 1.0f;
  EXPECT_NE(ValidateLossScalerOptions(o).message().find("growth_factor"), std::string::npos);
  o = {};
  o.backoff_factor = 1.5f;
  EXPECT_NE(ValidateLossScalerOptions(o).message().find("backoff_factor"), std::string::npos);
  o = {};
  o.initial_scale = -1.0f;
  EXPECT_NE(ValidateLossScalerOptions(o).message().find("initial_scale"), std::string::npos);
  o = {};
  o.growth_interval = 0;
  EXPECT_NE(ValidateLossScalerOptions(o).message().find("growth_interval"), std::string::npos);
  o = {};
  o.min_scale = 1e9f;
  EXPECT_NE(ValidateLossScalerOptions(o).message().find("min_scale <= initial_scale"),
            std::string::npos);
}

}  // namespace
}  // namespace sift::worker
