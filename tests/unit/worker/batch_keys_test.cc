#include "worker/batch_keys.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"

namespace sift::worker {
namespace {

data::Batch EmptyBatch(int64_t size, int user_features, int item_features, int long_len,
                       int short_len) {
  data::Batch b;
  data::HistoryOptions h;
  h.max_history = long_len + short_len;
  h.short_history = short_len;
  b.Allocate(size + 2, user_features, item_features, h);  // capacity > size
  b.size = size;
  std::fill(b.user.begin(), b.user.end(), 0);
  std::fill(b.target.begin(), b.target.end(), 0);
  std::fill(b.long_hist.begin(), b.long_hist.end(), 0);
  std::fill(b.short_hist.begin(), b.short_hist.end(), 0);
  std::fill(b.short_neg.begin(), b.short_neg.end(), 0);
  return b;
}

// Every slot's inverse points at its id (or is -1 for id 0), and the keys are sorted and unique.
void ExpectConsistent(const std::vector<int32_t>& ids, const int32_t* inv, const TableKeys& t) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == 0) {
      EXPECT_EQ(inv[i], -1) << "slot " << i;
    } else {
      ASSERT_GE(inv[i], 0) << "slot " << i;
      ASSERT_LT(static_cast<size_t>(inv[i]), t.keys.size());
      EXPECT_EQ(t.keys[inv[i]], static_cast<uint64_t>(ids[i])) << "slot " << i;
    }
  }
}

TEST(BatchKeysTest, HandBuiltBatch) {
  // B = 2, UF = 1, F = 2, T_L = 3, T_S = 2.
  data::Batch b = EmptyBatch(2, 1, 2, 3, 2);
  b.User(0)[0] = 7;
  b.User(0)[1] = 7;
  b.Target(0)[0] = 5;
  b.Target(0)[1] = 2;
  b.Target(1)[0] = 1;
  b.Target(1)[1] = 1;
  const int32_t long0[2][3] = {{0, 9, 5}, {0, 0, 0}};
  const int32_t short0[2][2] = {{3, 9}, {0, 4}};
  const int32_t neg0[2][2] = {{11, 2}, {0, 12}};
  for (int r = 0; r < 2; ++r) {
    std::copy(long0[r], long0[r] + 3, b.LongHist(0, r));
    std::copy(short0[r], short0[r] + 2, b.ShortHist(0, r));
    std::copy(neg0[r], neg0[r] + 2, b.ShortNeg(0, r));
    for (int j = 0; j < 3; ++j) b.LongHist(1, r)[j] = long0[r][j] ? 1 : 0;
    for (int j = 0; j < 2; ++j) b.ShortHist(1, r)[j] = short0[r][j] ? 2 : 0;
    for (int j = 0; j < 2; ++j) b.ShortNeg(1, r)[j] = neg0[r][j] ? 3 : 0;
  }
  BatchKeys keys;
  ASSERT_TRUE(BuildBatchKeys(b, KeyUsage{}, 4, &keys).ok());
  EXPECT_EQ(keys.batch, 2);
  ASSERT_EQ(keys.tables.size(), 3u);
  EXPECT_EQ(keys.tables[0].keys, (std::vector<uint64_t>{7}));
  EXPECT_EQ(keys.tables[1].keys, (std::vector<uint64_t>{2, 3, 4, 5, 9, 11, 12}));
  EXPECT_EQ(keys.tables[2].keys, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(keys.user_inv, (std::vector<int32_t>{0, 0}));
  // Target: feature 0 ids {5, 2}, feature 1 ids {1, 1}.
  EXPECT_EQ(keys.target_inv, (std::vector<int32_t>{3, 0, 0, 0}));
  // Long: feature 0 rows {0,9,5},{0,0,0}; feature 1 {0,1,1},{0,0,0}.
  EXPECT_EQ(keys.long_inv, (std::vector<int32_t>{-1, 4, 3, -1, -1, -1, -1, 0, 0, -1, -1, -1}));
  EXPECT_EQ(keys.short_inv, (std::vector<int32_t>{1, 4, -1, 2, 1, 1, -1, 1}));
  EXPECT_EQ(keys.short_neg_inv, (std::vector<int32_t>{5, 0, -1, 6, 2, 2, -1, 2}));
  EXPECT_EQ(keys.tables[1].rows.size(), 7u * 4);
  EXPECT_EQ(keys.tables[1].grads.size(), 7u * 4);
  // The dedup's tally: 2 user + 4 target + 4 long + 6 short + 6 negative id slots, 1 + 7 + 3 keys.
  const KeyCounts counts = CountKeys(keys);
  EXPECT_EQ(counts.slot_ids, 22);
  EXPECT_EQ(counts.unique, 11);
}

TEST(BatchKeysTest, UsageFlagsLeaveSlotsOut) {
  data::Batch b = EmptyBatch(1, 1, 1, 2, 2);
  b.User(0)[0] = 1;
  b.Target(0)[0] = 10;
  b.LongHist(0, 0)[0] = 20;
  b.LongHist(0, 0)[1] = 21;
  b.ShortHist(0, 0)[0] = 30;
  b.ShortHist(0, 0)[1] = 31;
  b.ShortNeg(0, 0)[0] = 40;
  b.ShortNeg(0, 0)[1] = 41;
  BatchKeys keys;
  KeyUsage dien;  // no long history
  dien.long_history = false;
  ASSERT_TRUE(BuildBatchKeys(b, dien, 2, &keys).ok());
  EXPECT_TRUE(keys.long_inv.empty());
  EXPECT_EQ(keys.tables[1].keys, (std::vector<uint64_t>{10, 30, 31, 40, 41}));
  KeyUsage inference;  // no negatives
  inference.short_negatives = false;
  ASSERT_TRUE(BuildBatchKeys(b, inference, 2, &keys).ok());  // reuses keys
  EXPECT_TRUE(keys.short_neg_inv.empty());
  EXPECT_EQ(keys.long_inv.size(), 2u);
  EXPECT_EQ(keys.tables[1].keys, (std::vector<uint64_t>{10, 20, 21, 30, 31}));
  EXPECT_EQ(keys.tables[1].rows.size(), 10u);
  KeyUsage none;
  none.long_history = none.short_history = none.short_negatives = false;
  ASSERT_TRUE(BuildBatchKeys(b, none, 2, &keys).ok());
  EXPECT_EQ(keys.tables[1].keys, (std::vector<uint64_t>{10}));
  EXPECT_TRUE(keys.short_inv.empty());
}

TEST(BatchKeysTest, AllPaddingGivesNoKeys) {
  data::Batch b = EmptyBatch(3, 1, 2, 2, 2);
  BatchKeys keys;
  ASSERT_TRUE(BuildBatchKeys(b, KeyUsage{}, 8, &keys).ok());
  for (const TableKeys& t : keys.tables) {
    EXPECT_TRUE(t.keys.empty());
    EXPECT_TRUE(t.rows.empty());
  }
  for (int32_t v : keys.long_inv) EXPECT_EQ(v, -1);
  for (int32_t v : keys.target_inv) EXPECT_EQ(v, -1);
}

TEST(BatchKeysTest, NegativeIdIsRejectedWithItsSlot) {
  data::Batch b = EmptyBatch(2, 1, 2, 3, 2);
  b.LongHist(1, 1)[2] = -4;
  BatchKeys keys;
  Status s = BuildBatchKeys(b, KeyUsage{}, 4, &keys);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-4"), std::string::npos) << s;
  EXPECT_NE(s.message().find("long history feature 1 row 1 slot 2"), std::string::npos) << s;
  // Not read when the usage leaves the long history out.
  KeyUsage no_long;
  no_long.long_history = false;
  EXPECT_TRUE(BuildBatchKeys(b, no_long, 4, &keys).ok());
  b.User(0)[0] = -1;
  s = BuildBatchKeys(b, no_long, 4, &keys);
  EXPECT_NE(s.message().find("user feature 0 row 0"), std::string::npos) << s;
}

// Large random batch (ids up to 2^31 - 1, so every radix pass runs) against a std::set oracle;
// two builds are identical.
TEST(BatchKeysTest, RandomBatchMatchesOracleAndIsDeterministic) {
  const int64_t B = 300;
  data::Batch b = EmptyBatch(B, 2, 2, 20, 5);
  Rng rng(42);
  auto draw = [&](int f) -> int32_t {
    if (rng.Below(5) == 0) return 0;
    if (f == 1) return static_cast<int32_t>(1 + rng.Below(2147483646));
    return static_cast<int32_t>(1 + rng.Below(500));
  };
  for (int k = 0; k < 2; ++k) {
    for (int64_t r = 0; r < B; ++r) b.User(k)[r] = draw(k);
  }
  for (int f = 0; f < 2; ++f) {
    for (int64_t r = 0; r < B; ++r) {
      b.Target(f)[r] = draw(f);
      for (int j = 0; j < 20; ++j) b.LongHist(f, r)[j] = draw(f);
      for (int j = 0; j < 5; ++j) b.ShortHist(f, r)[j] = draw(f);
      for (int j = 0; j < 5; ++j) b.ShortNeg(f, r)[j] = draw(f);
    }
  }
  BatchKeys keys, again;
  ASSERT_TRUE(BuildBatchKeys(b, KeyUsage{}, 3, &keys).ok());
  ASSERT_TRUE(BuildBatchKeys(b, KeyUsage{}, 3, &again).ok());
  for (int f = 0; f < 2; ++f) {
    std::vector<int32_t> ids;
    auto append = [&](const int32_t* p, int64_t n) { ids.insert(ids.end(), p, p + n); };
    append(b.Target(f), B);
    const size_t target_end = ids.size();
    append(b.LongHist(f, 0), B * 20);
    const size_t long_end = ids.size();
    append(b.ShortHist(f, 0), B * 5);
    const size_t short_end = ids.size();
    append(b.ShortNeg(f, 0), B * 5);
    std::set<uint64_t> oracle;
    for (int32_t id : ids) {
      if (id != 0) oracle.insert(static_cast<uint64_t>(id));
    }
    const TableKeys& t = keys.tables[2 + f];
    EXPECT_EQ(t.keys, std::vector<uint64_t>(oracle.begin(), oracle.end()));
    std::vector<int32_t> inv(keys.target_inv.begin() + f * B,
                             keys.target_inv.begin() + (f + 1) * B);
    inv.insert(inv.end(), keys.long_inv.begin() + f * B * 20,
               keys.long_inv.begin() + (f + 1) * B * 20);
    inv.insert(inv.end(), keys.short_inv.begin() + f * B * 5,
               keys.short_inv.begin() + (f + 1) * B * 5);
    inv.insert(inv.end(), keys.short_neg_inv.begin() + f * B * 5,
               keys.short_neg_inv.begin() + (f + 1) * B * 5);
    ASSERT_EQ(inv.size(), ids.size());
    ASSERT_GT(short_end, long_end);
    ASSERT_GT(long_end, target_end);
    ExpectConsistent(ids, inv.data(), t);
  }
  for (int k = 0; k < 2; ++k) {
    std::vector<int32_t> ids(b.User(k), b.User(k) + B);
    ExpectConsistent(ids, keys.user_inv.data() + k * B, keys.tables[k]);
  }
  for (size_t t = 0; t < keys.tables.size(); ++t) {
    EXPECT_EQ(keys.tables[t].keys, again.tables[t].keys);
  }
  EXPECT_EQ(keys.long_inv, again.long_inv);
  EXPECT_EQ(keys.short_neg_inv, again.short_neg_inv);
}

// The two ways to rank a table's ids (a dense id -> rank array while every id is below 2^22, the
// radix sort otherwise, switched to mid-scan when a larger id appears) give the oracle's keys and
// inverses, and neither leaves marks behind: a later batch — also after a batch refused for a
// negative id — has exactly its own keys.
TEST(BatchKeysTest, DenseAndSortedRanksLeaveNoMarksBehind) {
  const int64_t B = 64;
  const int TL = 200;
  auto build = [&](int32_t big_id, int32_t negative_at) {
    data::Batch b = EmptyBatch(B, 1, 1, TL, 2);
    Rng rng(7);
    for (int64_t r = 0; r < B; ++r) {
      b.User(0)[r] = static_cast<int32_t>(1 + rng.Below(50));
      b.Target(0)[r] = static_cast<int32_t>(1 + rng.Below(3000));
      // Mostly padding, as a lifelong window: the newest 10 + r slots hold events.
      for (int j = TL - 10 - static_cast<int>(r); j < TL; ++j) {
        b.LongHist(0, r)[j] = static_cast<int32_t>(1 + rng.Below(3000));
      }
      b.ShortHist(0, r)[1] = static_cast<int32_t>(1 + rng.Below(3000));
    }
    if (big_id != 0) b.LongHist(0, B / 2)[TL - 1] = big_id;
    if (negative_at >= 0) b.ShortNeg(0, negative_at)[0] = -3;
    return b;
  };
  auto expect_oracle = [&](const data::Batch& b, const BatchKeys& keys) {
    std::vector<int32_t> ids(b.Target(0), b.Target(0) + B);
    ids.insert(ids.end(), b.LongHist(0, 0), b.LongHist(0, 0) + B * TL);
    ids.insert(ids.end(), b.ShortHist(0, 0), b.ShortHist(0, 0) + B * 2);
    ids.insert(ids.end(), b.ShortNeg(0, 0), b.ShortNeg(0, 0) + B * 2);
    std::set<uint64_t> oracle;
    for (int32_t id : ids) {
      if (id != 0) oracle.insert(static_cast<uint64_t>(id));
    }
    const TableKeys& t = keys.tables[1];
    ASSERT_EQ(t.keys, std::vector<uint64_t>(oracle.begin(), oracle.end()));
    std::vector<int32_t> inv(keys.target_inv.begin(), keys.target_inv.end());
    inv.insert(inv.end(), keys.long_inv.begin(), keys.long_inv.end());
    inv.insert(inv.end(), keys.short_inv.begin(), keys.short_inv.end());
    inv.insert(inv.end(), keys.short_neg_inv.begin(), keys.short_neg_inv.end());
    ExpectConsistent(ids, inv.data(), t);
    int64_t valid = 0;
    for (int32_t id : ids) valid += id != 0;
    EXPECT_EQ(t.slot_ids, valid);
  };
  const data::Batch small = build(0, -1);
  const data::Batch large = build(int32_t{1} << 22, -1);  // the first id past the dense bound
  const data::Batch huge = build(2147483647, -1);
  const data::Batch refused = build(0, B - 1);
  BatchKeys keys;
  // On a fresh thread (its scratch still empty): all padding, and an id refused before any mark.
  std::thread([&] {
    data::Batch padding = EmptyBatch(B, 1, 1, TL, 2);
    BatchKeys k;
    EXPECT_TRUE(BuildBatchKeys(padding, KeyUsage{}, 4, &k).ok());
    EXPECT_TRUE(k.tables[1].keys.empty());
    padding.User(0)[0] = -1;
    EXPECT_FALSE(BuildBatchKeys(padding, KeyUsage{}, 4, &k).ok());
  }).join();
  for (const data::Batch* b : {&small, &large, &small, &huge, &small}) {
    ASSERT_TRUE(BuildBatchKeys(*b, KeyUsage{}, 4, &keys).ok());
    expect_oracle(*b, keys);
  }
  const Status s = BuildBatchKeys(refused, KeyUsage{}, 4, &keys);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("negative id -3 in short negatives"), std::string::npos)
      << s.message();
  ASSERT_TRUE(BuildBatchKeys(small, KeyUsage{}, 4, &keys).ok());
  expect_oracle(small, keys);
}

}  // namespace
}  // namespace sift::worker
