// StepAggregator: a step is held until every part of every rank is in, summed in rank order
// whatever the arrival order, applied whole or dropped whole; stale generations are refused.
#include "server/embedding/step_aggregator.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift::embedding {
namespace {

using ::testing::HasSubstr;

StepTag Tag(uint32_t rank, uint32_t world, int64_t step = 5, uint32_t part = 0, uint32_t parts = 1,
            uint64_t generation = 1) {
  StepTag t;
  t.group = 0xabc;
  t.generation = generation;
  t.step = step;
  t.rank = rank;
  t.world = world;
  t.part = part;
  t.parts = parts;
  return t;
}

HeldTable Table(uint32_t id, int dim, std::vector<uint64_t> keys, std::vector<float> grads,
                std::vector<float> l2 = {}) {
  HeldTable t;
  t.table_id = id;
  t.dim = dim;
  t.keys = std::move(keys);
  t.grads = std::move(grads);
  t.l2 = std::move(l2);
  return t;
}

std::vector<HeldTable> One(HeldTable t) {
  std::vector<HeldTable> v;
  v.push_back(std::move(t));
  return v;
}

TEST(StepAggregatorTest, HoldsUntilEveryRankAndSumsInRankOrder) {
  StepAggregator agg;
  auto r1 = agg.Add(Tag(1, 2), 1.0f, One(Table(0, 2, {3, 7}, {1, 2, 3, 4})));
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_FALSE(r1->has_value());
  EXPECT_EQ(agg.pending(), 1u);
  auto r0 = agg.Add(Tag(0, 2), 1.0f, One(Table(0, 2, {1, 7}, {10, 20, 30, 40})));
  ASSERT_TRUE(r0.ok()) << r0.status();
  ASSERT_TRUE(r0->has_value());
  EXPECT_EQ(agg.pending(), 0u);
  const SummedStep& s = **r0;
  EXPECT_EQ(s.step, 5);
  ASSERT_EQ(s.tables.size(), 1u);
  EXPECT_EQ(s.tables[0].keys, (std::vector<uint64_t>{1, 3, 7}));
  EXPECT_EQ(s.tables[0].grads, (std::vector<float>{10, 20, 1, 2, 33, 44}));
  EXPECT_EQ(s.keys(), 3u);
}

// The sum of a key is ((g_0 + g_1) + g_2) + ... in rank order, bit for bit, for any arrival
// order of the ranks and parts (float addition is not associative: the order is observable).
TEST(StepAggregatorTest, ArrivalOrderDoesNotChangeABit) {
  const uint32_t world = 4, parts = 3;
  std::mt19937_64 rng(17);  // fixed seed
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  // rank r part p: keys {p*10 + k : k in 0..4} (each rank sends every key once).
  std::vector<std::vector<std::vector<HeldTable>>> input(world);
  for (uint32_t r = 0; r < world; ++r) {
    for (uint32_t p = 0; p < parts; ++p) {
      std::vector<uint64_t> keys;
      std::vector<float> grads;
      for (uint64_t k = 0; k < 5; ++k) {
        keys.push_back(p * 10 + k);
        grads.push_back(u(rng) * (k % 2 ? 1e-4f : 1.0f));
      }
      input[r].push_back(One(Table(2, 1, keys, grads)));
    }
  }
  std::vector<float> want;
  for (uint32_t p = 0; p < parts; ++p) {
    for (size_t k = 0; k < 5; ++k) {
      float acc = input[0][p][0].grads[k];
      for (uint32_t r = 1; r < world; ++r) acc += input[r][p][0].grads[k];
      want.push_back(acc);
    }
  }
  std::vector<std::pair<uint32_t, uint32_t>> order;
  for (uint32_t r = 0; r < world; ++r) {
    for (uint32_t p = 0; p < parts; ++p) order.emplace_back(r, p);
  }
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    StepAggregator agg;
    std::optional<SummedStep> got;
    for (size_t i = 0; i < order.size(); ++i) {
      const auto [r, p] = order[i];
      auto res = agg.Add(Tag(r, world, 9, p, parts), 0.5f, input[r][p]);
      ASSERT_TRUE(res.ok()) << res.status();
      EXPECT_EQ(res->has_value(), i + 1 == order.size());
      if (res->has_value()) got = std::move(*res);
    }
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->lr_multiplier, 0.5f);
    ASSERT_EQ(got->tables.size(), 1u);
    ASSERT_EQ(got->tables[0].grads.size(), want.size());
    EXPECT_EQ(std::memcmp(got->tables[0].grads.data(), want.data(), want.size() * 4), 0)
        << "trial " << trial;
  }
}

TEST(StepAggregatorTest, EmptyPartsCountAndTablesAreUnited) {
  StepAggregator agg;
  ASSERT_FALSE(agg.Add(Tag(0, 3), 1.0f, {})->has_value());  // rank 0: nothing on this shard
  ASSERT_FALSE(agg.Add(Tag(2, 3), 1.0f, One(Table(4, 1, {9}, {1})))->has_value());
  auto done = agg.Add(Tag(1, 3), 1.0f, One(Table(1, 1, {9}, {2})));
  ASSERT_TRUE(done.ok() && done->has_value());
  ASSERT_EQ((*done)->tables.size(), 2u);
  EXPECT_EQ((*done)->tables[0].table_id, 1u);  // ascending table ids
  EXPECT_EQ((*done)->tables[1].table_id, 4u);
}

TEST(StepAggregatorTest, L2CoefficientComesOnceFromTheLowestRankThatSentOne) {
  StepAggregator agg;
  ASSERT_FALSE(
      agg.Add(Tag(1, 2), 1.0f, One(Table(0, 1, {5, 6}, {1, 1}, {0.25f, 0.5f})))->has_value());
  auto done = agg.Add(Tag(0, 2), 1.0f, One(Table(0, 1, {4, 5}, {1, 1}, {0.125f, 0.25f})));
  ASSERT_TRUE(done.ok() && done->has_value());
  const HeldTable& t = (*done)->tables[0];
  EXPECT_EQ(t.keys, (std::vector<uint64_t>{4, 5, 6}));
  EXPECT_EQ(t.l2, (std::vector<float>{0.125f, 0.25f, 0.5f}));  // not 0.5 for key 5
  EXPECT_EQ(t.grads, (std::vector<float>{1, 2, 1}));
}

TEST(StepAggregatorTest, RefusesWhatCannotBelongToTheStep) {
  StepAggregator agg;
  EXPECT_EQ(agg.Add(Tag(2, 2), 1.0f, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.Add(Tag(0, 1), 1.0f, {}).status().code(), absl::StatusCode::kInvalidArgument);
  // Sizes a server would allocate for: refused before anything is held.
  EXPECT_EQ(agg.Add(Tag(0, 0xffffffffu), 1.0f, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.Add(Tag(0, 2, 5, 0, 0xffffffffu), 1.0f, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.Add(Tag(0, 2, 5, 1, 1), 1.0f, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_FALSE(agg.Add(Tag(0, 3, 5, 0, 2), 1.0f, {})->has_value());
  // The same part twice, another parts count, another world, another lr multiplier.
  EXPECT_THAT(agg.Add(Tag(0, 3, 5, 0, 2), 1.0f, {}).status().message(), HasSubstr("already held"));
  EXPECT_THAT(agg.Add(Tag(0, 3, 5, 1, 3), 1.0f, {}).status().message(),
              HasSubstr("an earlier part said 2"));
  EXPECT_THAT(agg.Add(Tag(1, 4), 1.0f, {}).status().message(), HasSubstr("world 4"));
  EXPECT_THAT(agg.Add(Tag(1, 3), 0.5f, {}).status().message(), HasSubstr("lr_multiplier"));
  EXPECT_EQ(agg.pending(), 1u);
}

TEST(StepAggregatorTest, AKeyOneRankSentTwiceDropsTheStep) {
  StepAggregator agg;
  ASSERT_FALSE(agg.Add(Tag(0, 2, 5, 0, 2), 1.0f, One(Table(0, 1, {8}, {1})))->has_value());
  ASSERT_FALSE(agg.Add(Tag(0, 2, 5, 1, 2), 1.0f, One(Table(0, 1, {8}, {1})))->has_value());
  auto done = agg.Add(Tag(1, 2), 1.0f, {});
  EXPECT_EQ(done.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(done.status().message(), HasSubstr("rank 0 sent id 8"));
  EXPECT_EQ(agg.pending(), 0u);
}

TEST(StepAggregatorTest, ANewerGenerationDropsTheOlderAndFencesItOff) {
  StepAggregator agg;
  ASSERT_FALSE(agg.Add(Tag(0, 2, 5, 0, 1, /*generation=*/1), 1.0f, {})->has_value());
  ASSERT_FALSE(agg.Add(Tag(1, 2, 3, 0, 1, /*generation=*/2), 1.0f, {})->has_value());
  EXPECT_EQ(agg.pending(), 1u);  // generation 1's step 5 can never complete
  auto stale = agg.Add(Tag(1, 2, 5, 0, 1, /*generation=*/1), 1.0f, {});
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("stale"));
  agg.Clear();
  EXPECT_EQ(agg.pending(), 0u);
  // After Clear (new tables) any generation starts over.
  EXPECT_TRUE(agg.Add(Tag(1, 2, 5, 0, 1, /*generation=*/1), 1.0f, {}).ok());
}

TEST(StepAggregatorTest, HoldsAtMostTheLimit) {
  StepAggregator agg;
  for (size_t i = 0; i < kMaxPendingSteps; ++i) {
    ASSERT_TRUE(agg.Add(Tag(0, 2, static_cast<int64_t>(i)), 1.0f, {}).ok());
  }
  EXPECT_EQ(agg.Add(Tag(0, 2, 1000), 1.0f, {}).status().code(),
            absl::StatusCode::kResourceExhausted);
  // A held step still completes.
  auto done = agg.Add(Tag(1, 2, 3), 1.0f, {});
  ASSERT_TRUE(done.ok() && done->has_value());
}

}  // namespace
}  // namespace sift::embedding
