// ModelSelection (common/model_selection.h): strict improvement, ties keep the earlier epoch, NaN
// never improves, patience counts epochs since the best; AppendSelectionMetrics' final record.
#include "common/model_selection.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace sift {
namespace {

double Get(const DllMetrics& m, const std::string& key) {
  for (const auto& [k, v] : m) {
    if (k == key) return v;
  }
  ADD_FAILURE() << "no metric " << key;
  return 0;
}

TEST(ModelSelectionTest, TheBestIsTheFirstStrictlyHighestFiniteValidationAuc) {
  ModelSelection s;
  EXPECT_FALSE(s.ShouldStop(0, 1));  // nothing recorded yet
  EXPECT_FALSE(s.Update(0, std::nan(""), 0.7, 1.0));
  EXPECT_EQ(s.best_epoch, -1);
  EXPECT_TRUE(s.Update(1, 0.80, 0.71, 0.9));
  EXPECT_FALSE(s.Update(2, 0.80, 0.99, 0.1));  // a tie keeps the earlier epoch
  EXPECT_FALSE(s.Update(3, 0.79, 0.99, 0.1));
  EXPECT_EQ(s.best_epoch, 1);
  EXPECT_EQ(s.best_test_auc, 0.71);
  EXPECT_TRUE(s.Update(4, 0.81, 0.72, 0.8));
  EXPECT_EQ(s.best_epoch, 4);
  EXPECT_EQ(s.best_validation_auc, 0.81);
  EXPECT_EQ(s.best_test_loss, 0.8);
}

TEST(ModelSelectionTest, PatienceCountsEpochsSinceTheBest) {
  ModelSelection s;
  s.Update(0, 0.8, 0.7, 1);
  EXPECT_FALSE(s.ShouldStop(0, 1));
  s.Update(1, 0.7, 0.7, 1);
  EXPECT_TRUE(s.ShouldStop(1, 1));
  EXPECT_FALSE(s.ShouldStop(1, 2));
  EXPECT_FALSE(s.ShouldStop(1, 0));  // 0 never stops
  s.Update(2, 0.7, 0.7, 1);
  EXPECT_TRUE(s.ShouldStop(2, 2));
}

TEST(ModelSelectionTest, TheFinalRecordReportsTheKeptModel) {
  ModelSelection s;
  s.Update(0, 0.80, 0.75, 0.5);
  s.Update(1, 0.78, 0.74, 0.6);
  DllMetrics m = {{"time_to_train", 10}, {"test_auc", 0.74}, {"test_loss", 0.6}};
  AppendSelectionMetrics(s, /*keep_best=*/true, /*kept_epoch=*/0, /*last_epoch=*/1, true, &m);
  EXPECT_EQ(Get(m, "test_auc"), 0.75);
  EXPECT_EQ(Get(m, "test_loss"), 0.5);
  EXPECT_EQ(Get(m, "last_test_auc"), 0.74);
  EXPECT_EQ(Get(m, "kept_epoch"), 0);
  EXPECT_EQ(Get(m, "best_validation_auc"), 0.80);
  EXPECT_EQ(Get(m, "epochs_trained"), 2);
  DllMetrics last = {{"test_auc", 0.74}, {"test_loss", 0.6}};
  AppendSelectionMetrics(s, /*keep_best=*/false, 1, 1, true, &last);
  EXPECT_EQ(Get(last, "test_auc"), 0.74);  // keep_best: last reports the last epoch
  EXPECT_EQ(Get(last, "kept_epoch"), 1);
  DllMetrics none = {{"test_auc", 0.74}};
  AppendSelectionMetrics(s, true, 0, 1, /*has_validation=*/false, &none);
  EXPECT_EQ(none.size(), 1u);
}

}  // namespace
}  // namespace sift
