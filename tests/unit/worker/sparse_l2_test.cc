// Mini-batch-aware L2 (worker/sparse_l2.h): occurrences counted from a batch's inverse indices
// (padding left out), and the gradient term λ·w_j / n_j computed by hand.
#include "worker/sparse_l2.h"

#include <vector>

#include "gtest/gtest.h"

namespace sift::worker {
namespace {

// One user feature and one item feature; batch of 2, long history of 3 slots (-1 = padding).
BatchKeys TwoRowBatch() {
  BatchKeys k;
  k.num_user_features = 1;
  k.num_item_features = 1;
  k.batch = 2;
  k.tables.resize(2);
  k.tables[0].keys = {7, 9};         // users
  k.tables[1].keys = {3, 4, 5};      // items
  k.user_inv = {0, 1};               // user 7, user 9
  k.target_inv = {2, 0};             // item 5, item 3
  k.long_inv = {0, 1, -1, 0, 0, 2};  // row 0: 3, 4, pad; row 1: 3, 3, 5
  return k;
}

TEST(SparseL2Test, OccurrencesCountEverySlotButPaddingAcrossBatches) {
  IdCounts c;
  const BatchKeys k = TwoRowBatch();
  CountOccurrences(k, &c);
  ASSERT_EQ(c.tables.size(), 2u);
  EXPECT_EQ(c.tables[0].at(7), 1);
  EXPECT_EQ(c.tables[0].at(9), 1);
  EXPECT_EQ(c.tables[1].at(3), 4);  // target of row 1, long slots 0 of row 0, 0 and 1 of row 1
  EXPECT_EQ(c.tables[1].at(4), 1);
  EXPECT_EQ(c.tables[1].at(5), 2);
  CountOccurrences(k, &c);  // a second batch adds up
  EXPECT_EQ(c.tables[1].at(3), 8);
}

TEST(SparseL2Test, TheTermIsLambdaTimesTheRowOverItsCount) {
  IdCounts c;
  BatchKeys k = TwoRowBatch();
  CountOccurrences(k, &c);  // n(3) = 4, n(4) = 1, n(5) = 2
  const int dim = 2;
  TableKeys& items = k.tables[1];
  items.rows = {1.0f, -2.0f, 0.5f, 4.0f, -1.0f, 8.0f};
  items.grads = {0.1f, 0.2f, 0.0f, 0.0f, 1.0f, -1.0f};
  ASSERT_TRUE(AddMiniBatchAwareL2(0.5f, c, dim, 1, &items).ok());
  const std::vector<float> want = {0.1f + 0.5f * 1.0f / 4,  0.2f + 0.5f * -2.0f / 4,
                                   0.0f + 0.5f * 0.5f / 1,  0.0f + 0.5f * 4.0f / 1,
                                   1.0f + 0.5f * -1.0f / 2, -1.0f + 0.5f * 8.0f / 2};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(items.grads[i], want[i]) << i;
  // An id the counting pass never saw is an error naming it.
  items.keys.push_back(6);
  items.rows.resize(8, 0.0f);
  items.grads.resize(8, 0.0f);
  const Status s = AddMiniBatchAwareL2(0.5f, c, dim, 1, &items);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("id 6"), std::string::npos) << s;
}

}  // namespace
}  // namespace sift::worker
