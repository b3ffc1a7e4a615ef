// Heuristic scores (docs/data.md 5.2.7) on hand-built rows with hand-computed values, popularity
// counts, and the pooled AUCs of a small timeline dataset against a naive derivation of its test
// samples (history = the previous events, negatives from negatives.h).
#include "common/data/heuristics.h"

#include <algorithm>

#include "common/auc.h"
#include "common/data/negatives.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

HistoryOptions Window() {
  HistoryOptions h;
  h.max_history = 100;
  h.short_history = 10;
  return h;
}

// Fills row 0 with target (item, cat) and a history of `cats` (oldest first), item ids = 1.
void FillRow(Batch* b, int32_t item, int32_t cat, const std::vector<int32_t>& cats) {
  const int T = b->long_len + b->short_len;
  const int first = T - static_cast<int>(cats.size());
  b->Target(0)[0] = item;
  b->Target(1)[0] = cat;
  for (int j = 0; j < T; ++j) {
    const bool valid = j >= first;
    const int32_t c = valid ? cats[j - first] : 0;
    if (j < b->long_len) {
      b->LongHist(0, 0)[j] = valid ? 1 : 0;
      b->LongHist(1, 0)[j] = c;
      b->LongMask(0)[j] = valid ? 1.0f : 0.0f;
    } else {
      b->ShortHist(0, 0)[j - b->long_len] = valid ? 1 : 0;
      b->ShortHist(1, 0)[j - b->long_len] = c;
      b->ShortMask(0)[j - b->long_len] = valid ? 1.0f : 0.0f;
    }
  }
  b->size = 1;
}

Popularity HandPopularity() {
  Popularity p;
  p.item_count = {0, 0, 0, 0, 0, 3};         // item 5 seen 3 times
  p.category_count = {0, 1, 4, 3, 0, 0, 2};  // category 2: ĝ = 0.4
  p.total = 10;
  return p;
}

TEST(HeuristicsTest, ScoresByHand) {
  Batch b;
  b.Allocate(1, 1, 2, Window());
  // Long part: 20 valid slots, 5 of category 2. Short part: 10 slots, 4 of category 2.
  std::vector<int32_t> cats;
  for (int j = 0; j < 20; ++j) cats.push_back(j % 4 == 0 ? 2 : 3);
  for (int32_t c : {2, 2, 3, 2, 1, 1, 1, 1, 1, 2}) cats.push_back(c);
  FillRow(&b, 5, 2, cats);
  const auto s = ScoreHeuristics(b, 0, HandPopularity());
  EXPECT_DOUBLE_EQ(s[kPopItem], 3.0);
  EXPECT_DOUBLE_EQ(s[kPopCat], 0.4);
  EXPECT_DOUBLE_EQ(s[kFracShort10], 0.4);
  EXPECT_DOUBLE_EQ(s[kFracAll100], 0.3);
  EXPECT_DOUBLE_EQ(s[kFracLong90], 0.25);
  // β = 2: n = 3·4 + 5 = 17, d = 3·10 + 20 = 50, p̂ = 17.4 / 51, score = 17.4 / 37.8.
  EXPECT_NEAR(s[kSmoothRecency], 17.4 / 37.8, 1e-12);
  // β = 0: n = 9, d = 30, p̂ = 9.4 / 31, score = 9.4 / 21.8.
  EXPECT_NEAR(s[kSmoothAll100], 9.4 / 21.8, 1e-12);
  // Short only: p̂ = 4.4 / 11 = 0.4 = ĝ, score = 0.5.
  EXPECT_NEAR(s[kSmoothShort10], 0.5, 1e-12);
}

TEST(HeuristicsTest, EmptyPartsScoreZero) {
  Batch b;
  b.Allocate(1, 1, 2, Window());
  // 4 slots, all in the short part: |Lg| = 0.
  FillRow(&b, 9, 2, {2, 1, 2, 3});
  auto s = ScoreHeuristics(b, 0, HandPopularity());
  EXPECT_DOUBLE_EQ(s[kPopItem], 0.0);  // unseen item (beyond the counts)
  EXPECT_DOUBLE_EQ(s[kFracLong90], 0.0);
  EXPECT_DOUBLE_EQ(s[kFracShort10], 0.5);
  EXPECT_DOUBLE_EQ(s[kFracAll100], 0.5);
  // Smoothing with an empty long part: smooth_all100 = n 2, d 4 -> p̂ = 2.4 / 5.
  EXPECT_NEAR(s[kSmoothAll100], 0.48 / 0.88, 1e-12);

  // No history at all: fractions 0, the smoothed estimate falls back to ĝ (score 0.5).
  FillRow(&b, 5, 2, {});
  s = ScoreHeuristics(b, 0, HandPopularity());
  EXPECT_DOUBLE_EQ(s[kFracShort10], 0.0);
  EXPECT_DOUBLE_EQ(s[kFracAll100], 0.0);
  EXPECT_DOUBLE_EQ(s[kFracLong90], 0.0);
  EXPECT_NEAR(s[kSmoothRecency], 0.5, 1e-12);
  EXPECT_NEAR(s[kSmoothShort10], 0.5, 1e-12);

  // A category never counted (ĝ = 0) and absent from the history: 0, not NaN.
  FillRow(&b, 5, 4, {2, 2});
  s = ScoreHeuristics(b, 0, HandPopularity());
  EXPECT_DOUBLE_EQ(s[kPopCat], 0.0);
  EXPECT_DOUBLE_EQ(s[kSmoothRecency], 0.0);
  // ... and present in it: p̂ > 0 = ĝ, score 1.
  FillRow(&b, 5, 4, {4, 2});
  s = ScoreHeuristics(b, 0, HandPopularity());
  EXPECT_DOUBLE_EQ(s[kSmoothRecency], 1.0);
}

// A hand-made timeline: 3 users, category = item % 3 + 1.
TimelineData HandTimeline() {
  TimelineData t;
  const std::vector<std::vector<int32_t>> users = {
      {1, 2, 3, 1, 1}, {4, 4}, {5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1}};
  t.user_offsets.push_back(0);
  for (size_t u = 0; u < users.size(); ++u) {
    for (int32_t item : users[u]) {
      t.events.push_back(item);
      t.events.push_back(item % 3 + 1);
    }
    t.user_offsets.push_back(t.user_offsets.back() + users[u].size());
    t.user_features.push_back(static_cast<int32_t>(u + 1));
  }
  return t;
}

TEST(HeuristicsTest, PopularityFromTimeline) {
  testing::TempDir tmp;
  ASSERT_TRUE(WriteTimelineDataset(tmp.path(), HandTimeline(), {3}, {6, 3}, 9,
                                   YAML::Node(YAML::NodeType::Map))
                  .ok());
  auto ds = Dataset::Open(tmp.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto pop = ComputePopularity(**ds);
  ASSERT_TRUE(pop.ok()) << pop.status();
  EXPECT_EQ(pop->total, 22);
  // Item 1: 3 (user 0) + 3 (user 2) = 6; item 4: 2 + 2 = 4.
  EXPECT_EQ(pop->Item(1), 6);
  EXPECT_EQ(pop->Item(4), 4);
  EXPECT_EQ(pop->Item(7), 0);
  // Category 2 = items 1 and 4: 10 events.
  EXPECT_DOUBLE_EQ(pop->CategoryFreq(2), 10.0 / 22.0);
}

TEST(HeuristicsTest, AucsMatchANaiveDerivationOfTheTestSplit) {
  testing::TempDir tmp;
  // A larger random timeline, so the test split has both labels in quantity.
  TimelineData t;
  Rng rng(17);
  t.user_offsets.push_back(0);
  for (int u = 0; u < 300; ++u) {
    const int len = 2 + static_cast<int>(rng.Below(130));
    const int32_t fav = 1 + static_cast<int32_t>(rng.Below(5));
    for (int i = 0; i < len; ++i) {
      const int32_t cat = rng.Uniform() < 0.5 ? fav : 1 + static_cast<int32_t>(rng.Below(5));
      t.events.push_back(1 + (cat - 1) * 40 + static_cast<int32_t>(rng.Below(40)));
      t.events.push_back(cat);
    }
    t.user_offsets.push_back(t.user_offsets.back() + static_cast<uint64_t>(len));
    t.user_features.push_back(u + 1);
  }
  const uint64_t seed = 123;
  ASSERT_TRUE(
      WriteTimelineDataset(tmp.path(), t, {300}, {200, 5}, seed, YAML::Node(YAML::NodeType::Map))
          .ok());
  auto ds = Dataset::Open(tmp.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  ThreadPool pool(2);
  auto aucs = ComputeHeuristicAucs(**ds, &pool);
  ASSERT_TRUE(aucs.ok()) << aucs.status();
  EXPECT_EQ(aucs->samples, 600);

  // Naive: test sample 2u (positive) / 2u+1 (negative), history = up to 100 previous events.
  const int64_t E = t.num_events();
  std::vector<int64_t> item_count(201, 0), cat_count(6, 0);
  for (int64_t e = 0; e < E; ++e) {
    ++item_count[t.events[2 * e]];
    ++cat_count[t.events[2 * e + 1]];
  }
  std::vector<double> frac_short, frac_all, frac_long, recency, pop_item;
  std::vector<float> labels;
  for (int64_t s = 0; s < 600; ++s) {
    const int64_t u = s / 2, begin = static_cast<int64_t>(t.user_offsets[u]);
    const int64_t last = static_cast<int64_t>(t.user_offsets[u + 1]) - 1;
    const int64_t target_event =
        s % 2 == 0 ? last
                   : static_cast<int64_t>(NegativeEvent(NegativeBase(seed, Split::kTest, s), 0,
                                                        static_cast<uint64_t>(E)));
    const int32_t item = t.events[2 * target_event], cat = t.events[2 * target_event + 1];
    const int64_t h_begin = std::max(begin, last - 100);
    double ms = 0, ml = 0, ns = 0, nl = 0;
    for (int64_t e = h_begin; e < last; ++e) {
      const bool is_short = e >= last - 10;
      (is_short ? ns : nl) += 1;
      if (t.events[2 * e + 1] == cat) (is_short ? ms : ml) += 1;
    }
    const double g = static_cast<double>(cat_count[cat]) / static_cast<double>(E);
    const double p = (3 * ms + ml + g) / (3 * ns + nl + 1);
    frac_short.push_back(ns > 0 ? ms / ns : 0);
    frac_all.push_back(ms + ml > 0 ? (ms + ml) / (ns + nl) : 0);
    frac_long.push_back(nl > 0 ? ml / nl : 0);
    recency.push_back(p / (p + g));
    pop_item.push_back(static_cast<double>(item_count[item]));
    labels.push_back(s % 2 == 0 ? 1.0f : 0.0f);
  }
  EXPECT_NEAR(aucs->auc[kFracShort10], ExactAuc(frac_short, labels), 1e-12);
  EXPECT_NEAR(aucs->auc[kFracAll100], ExactAuc(frac_all, labels), 1e-12);
  EXPECT_NEAR(aucs->auc[kFracLong90], ExactAuc(frac_long, labels), 1e-12);
  EXPECT_NEAR(aucs->auc[kSmoothRecency], ExactAuc(recency, labels), 1e-12);
  EXPECT_NEAR(aucs->auc[kPopItem], ExactAuc(pop_item, labels), 1e-12);
  EXPECT_GT(aucs->auc[kFracAll100], 0.6);  // the favourite category carries signal
}

// An explicit-samples dataset (no timeline): popularity comes from the train positives only.
TEST(HeuristicsTest, ExplicitSamplesCountTrainPositives) {
  testing::TempDir tmp;
  SampleRecordShape shape;
  shape.history = 4;
  // label, hist_len, user, target item, target cat, pos items[4], pos cats[4], neg items, neg cats
  auto record = [](int32_t label, int32_t item, int32_t cat) {
    return std::vector<int32_t>{label, 2, 1, item, cat, 0, 0, 7, 8, 0, 0,
                                1,     1, 0, 0,    3,   3, 0, 0, 2, 2};
  };
  auto write = [&](const std::string& file, const std::vector<std::vector<int32_t>>& records) {
    SamplesFileWriter w;
    ASSERT_TRUE(w.Begin(tmp.Sub(file), shape).ok());
    for (const auto& r : records) {
      ASSERT_EQ(static_cast<int64_t>(r.size()), shape.record_ints());
      ASSERT_TRUE(w.Add(r.data()).ok());
    }
    ASSERT_TRUE(w.Finish().ok());
  };
  write(kTrainSamplesFile, {record(1, 2, 1), record(0, 3, 2), record(1, 2, 1), record(1, 5, 2)});
  write(kTestSamplesFile, {record(1, 2, 1), record(0, 3, 2)});
  ASSERT_TRUE(WriteSamplesDatasetSpec(tmp.path(), FeatureSpec::Reference({1}, {9, 3}, 4),
                                      YAML::Node(YAML::NodeType::Map))
                  .ok());
  auto ds = Dataset::Open(tmp.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto pop = ComputePopularity(**ds);
  ASSERT_TRUE(pop.ok()) << pop.status();
  EXPECT_EQ(pop->total, 3);
  EXPECT_EQ(pop->Item(2), 2);
  EXPECT_EQ(pop->Item(3), 0);  // only a negative target
  EXPECT_DOUBLE_EQ(pop->CategoryFreq(1), 2.0 / 3.0);
  auto aucs = ComputeHeuristicAucs(**ds, nullptr);
  ASSERT_TRUE(aucs.ok()) << aucs.status();
  EXPECT_EQ(aucs->samples, 2);
  // The positive (item 2, category 1 = both short slots) beats the negative on every count.
  EXPECT_DOUBLE_EQ(aucs->auc[kPopItem], 1.0);
  EXPECT_DOUBLE_EQ(aucs->auc[kFracShort10], 1.0);
  EXPECT_DOUBLE_EQ(aucs->auc[kFracLong90], 0.5);  // no long slots: 0 for both
}

TEST(HeuristicsTest, ForEachSampleBatchVisitsEverySampleOnce) {
  testing::TempDir tmp;
  ASSERT_TRUE(WriteTimelineDataset(tmp.path(), HandTimeline(), {3}, {6, 3}, 9,
                                   YAML::Node(YAML::NodeType::Map))
                  .ok());
  auto ds = Dataset::Open(tmp.path());
  ASSERT_TRUE(ds.ok());
  const int64_t n = (*ds)->samples().NumSamples(Split::kTrain);
  ASSERT_EQ(n, 2 * (3 + 0 + 13));
  std::vector<int> seen(n, 0);
  ThreadPool pool(3);
  ForEachSampleBatch(
      **ds, Split::kTrain, Window(), &pool,
      [&](const Batch& b) {
        for (int64_t r = 0; r < b.size; ++r) ++seen[b.index[r]];  // chunks are disjoint
      },
      /*chunk=*/5);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n);
}

}  // namespace
}  // namespace sift::data
