// The key -> shard contract and the request slicer (common/sharding.h): exhaustive over small
// shard counts and key sets, stable values, order within slices, scatter as the exact inverse.
#include "common/sharding.h"

#include <cstdint>
#include <set>
#include <vector>

#include "common/hash.h"
#include "common/rng.h"
#include "gtest/gtest.h"

namespace sift {
namespace {

TEST(ShardOf, PinnedValuesNeverChange) {
  // The contract is on disk (checkpoints) and on the wire: these values must never change.
  // Computed from the formula in sharding.h when the contract was written.
  const uint64_t h = HashCombine(HashCombine(kShardSalt, 2), 12345);
  for (uint32_t s : {1u, 2u, 3u, 7u, 64u, 1000u}) EXPECT_EQ(ShardOf(2, 12345, s), h % s) << s;
  EXPECT_EQ(ShardOf(0, 0, 1), 0u);
}

TEST(ShardOf, DependsOnTableAndIdAndIsBalanced) {
  const uint32_t S = 8;
  const int n = 80000;
  std::vector<int> count(S, 0);
  int same_across_tables = 0;
  for (int id = 1; id <= n; ++id) {
    const uint32_t s = ShardOf(1, static_cast<uint64_t>(id), S);
    ASSERT_LT(s, S);
    ++count[s];
    same_across_tables += s == ShardOf(2, static_cast<uint64_t>(id), S);
  }
  // Balanced: each shard within 5% of n/S (10,000 +- 500; the binomial sd is ~94).
  for (uint32_t s = 0; s < S; ++s) EXPECT_NEAR(count[s], n / S, n / S / 20) << s;
  // Tables are hashed independently: about 1/S of ids share a shard across two tables.
  EXPECT_NEAR(same_across_tables, n / S, n / S / 10);
}

TEST(SliceByShard, EveryKeyOnceInItsShardInOrderForAnyShardCount) {
  Rng rng(20261129);
  for (uint32_t S = 1; S <= 9; ++S) {
    for (int n : {0, 1, 2, 17, 500}) {
      std::vector<uint64_t> keys(n);
      for (auto& k : keys) k = rng.Below(1000);  // duplicates on purpose
      ShardSlices slices;
      SliceByShard(3, keys, S, &slices);
      ASSERT_EQ(slices.offsets.size(), S + 1);
      ASSERT_EQ(slices.offsets[0], 0u);
      ASSERT_EQ(slices.offsets[S], static_cast<uint32_t>(n));
      std::set<uint32_t> seen;
      for (uint32_t s = 0; s < S; ++s) {
        for (uint32_t k = slices.offsets[s]; k < slices.offsets[s + 1]; ++k) {
          const uint32_t pos = slices.positions[k];
          ASSERT_LT(pos, static_cast<uint32_t>(n));
          EXPECT_TRUE(seen.insert(pos).second) << "position twice";
          EXPECT_EQ(ShardOf(3, keys[pos], S), s);
          if (k > slices.offsets[s]) {
            EXPECT_LT(slices.positions[k - 1], pos) << "order kept";
          }
        }
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(n)) << "S " << S << " n " << n;
    }
  }
}

TEST(SliceByShard, ScatterIsTheInverse) {
  const int width = 3;
  std::vector<uint64_t> keys = {5, 9, 1, 77, 1000003, 42, 8};
  for (uint32_t S : {1u, 2u, 4u}) {
    ShardSlices slices;
    SliceByShard(0, keys, S, &slices);
    // Each shard "answers" key * 10 + component for its slice, in slice order.
    std::vector<std::vector<float>> replies(S);
    for (uint32_t s = 0; s < S; ++s) {
      for (uint32_t k = slices.offsets[s]; k < slices.offsets[s + 1]; ++k) {
        for (int c = 0; c < width; ++c) {
          replies[s].push_back(static_cast<float>(keys[slices.positions[k]] * 10 + c));
        }
      }
    }
    std::vector<absl::Span<const float>> spans(replies.begin(), replies.end());
    std::vector<float> out(keys.size() * width, -1);
    ScatterShardReplies(slices, width, spans, absl::MakeSpan(out));
    for (size_t i = 0; i < keys.size(); ++i) {
      for (int c = 0; c < width; ++c) {
        EXPECT_EQ(out[i * width + c], static_cast<float>(keys[i] * 10 + c)) << S;
      }
    }
  }
}

}  // namespace
}  // namespace sift
