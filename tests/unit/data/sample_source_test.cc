// TimelineSamples against a naive re-derivation of docs/data.md section 1 from the in-memory
// timeline: sample numbering, targets, left-padded histories, the 90/10 split, masks, and the
// deterministic negatives of negatives.h.
#include "common/data/sample_source.h"

#include <vector>

#include "common/data/dataset.h"
#include "common/data/negatives.h"
#include "gtest/gtest.h"
#include "tests/unit/data/dataset_fixture.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using sift::testing::RandomTimeline;
using sift::testing::TempDir;

// The naive oracle: one sample as full T-slot rows, derived straight from the definition.
struct NaiveSample {
  int label;
  int32_t user;
  std::vector<int32_t> target;            // [F]
  std::vector<std::vector<int32_t>> pos;  // [F][T]
  std::vector<std::vector<int32_t>> neg;  // [F][T]
};

NaiveSample Naive(const TimelineData& t, uint64_t seed, Split split, int64_t index, int T) {
  const int F = t.num_item_features;
  const uint64_t E = static_cast<uint64_t>(t.num_events());
  // Enumerate (user, target position) pairs in sample order.
  int64_t pair = index / 2, user = -1, k = -1;
  if (split == Split::kTest) {
    user = pair;
    k = static_cast<int64_t>(t.user_offsets[user + 1] - t.user_offsets[user]) - 1;
  } else {
    int64_t seen = 0;
    for (int64_t u = 0; u < t.num_users(); ++u) {
      int64_t L = static_cast<int64_t>(t.user_offsets[u + 1] - t.user_offsets[u]);
      if (pair < seen + (L - 2)) {
        user = u;
        k = 1 + (pair - seen);
        break;
      }
      seen += L - 2;
    }
  }
  NaiveSample s;
  s.label = index % 2 == 0 ? 1 : 0;
  s.user = t.user_features[user];
  const uint64_t ub = t.user_offsets[user];
  const uint64_t base = NegativeBase(seed, split, index);
  uint64_t target_event = s.label ? ub + k : NegativeEvent(base, 0, E);
  for (int f = 0; f < F; ++f) s.target.push_back(t.events[target_event * F + f]);
  s.pos.assign(F, std::vector<int32_t>(T, 0));
  s.neg.assign(F, std::vector<int32_t>(T, 0));
  // History: the up-to-T events before the target, newest in slot T-1.
  for (int back = 1; back <= T && back <= k; ++back) {
    uint64_t e = ub + k - back;
    uint64_t ne = NegativeEvent(base, static_cast<uint32_t>(back), E);
    for (int f = 0; f < F; ++f) {
      s.pos[f][T - back] = t.events[e * F + f];
      s.neg[f][T - back] = t.events[ne * F + f];
    }
  }
  return s;
}

class SampleSourceTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(SampleSourceTest, MatchesNaiveDerivation) {
  const auto [T, TS] = GetParam();
  const int TL = T - TS;
  TempDir dir;
  TimelineData t = RandomTimeline(7, 40, 500, 13, 2, 150);
  const uint64_t seed = 99;
  ASSERT_TRUE(WriteTimelineDataset(dir.path(), t, {40}, {500, 13}, seed, YAML::Node()).ok());
  auto ds = Dataset::Open(dir.path(), /*verify=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const SampleSource& src = (*ds)->samples();

  int64_t pairs = 0;
  for (int64_t u = 0; u < t.num_users(); ++u)
    pairs += static_cast<int64_t>(t.user_offsets[u + 1] - t.user_offsets[u]) - 2;
  EXPECT_EQ(src.NumSamples(Split::kTrain), 2 * pairs);
  EXPECT_EQ(src.NumSamples(Split::kTest), 2 * t.num_users());

  for (Split split : {Split::kTrain, Split::kTest}) {
    const int64_t n = src.NumSamples(split);
    Batch b;
    b.Allocate(n, 1, 2, HistoryOptions{T, TS, /*long_negatives=*/true});
    for (int64_t i = 0; i < n; ++i) src.Materialize(split, i, i, &b);
    for (int64_t i = 0; i < n; ++i) {
      NaiveSample s = Naive(t, seed, split, i, T);
      SCOPED_TRACE(::testing::Message() << SplitName(split) << " sample " << i);
      ASSERT_EQ(b.index[i], i);
      ASSERT_EQ(b.label[i], static_cast<float>(s.label));
      ASSERT_EQ(b.User(0)[i], s.user);
      int valid = 0;
      for (int j = 0; j < T; ++j) valid += s.pos[0][j] > 0;
      ASSERT_EQ(b.hist_len[i], valid);
      for (int f = 0; f < 2; ++f) {
        ASSERT_EQ(b.Target(f)[i], s.target[f]);
        for (int j = 0; j < TL; ++j) {
          ASSERT_EQ(b.LongHist(f, i)[j], s.pos[f][j]) << "long slot " << j;
          ASSERT_EQ(b.LongNeg(f, i)[j], s.neg[f][j]) << "long neg slot " << j;
        }
        for (int j = 0; j < TS; ++j) {
          ASSERT_EQ(b.ShortHist(f, i)[j], s.pos[f][TL + j]) << "short slot " << j;
          ASSERT_EQ(b.ShortNeg(f, i)[j], s.neg[f][TL + j]) << "short neg slot " << j;
        }
      }
      for (int j = 0; j < TL; ++j) ASSERT_EQ(b.LongMask(i)[j], s.pos[0][j] > 0 ? 1.f : 0.f);
      for (int j = 0; j < TS; ++j) ASSERT_EQ(b.ShortMask(i)[j], s.pos[0][TL + j] > 0 ? 1.f : 0.f);
    }
  }
}

// Reference shape, a short window, and a lifelong one (T > 100).
INSTANTIATE_TEST_SUITE_P(Shapes, SampleSourceTest,
                         ::testing::Values(std::make_pair(100, 10), std::make_pair(12, 4),
                                           std::make_pair(300, 10)));

TEST(SampleSource, NegativesDependOnSeedAndAreStable) {
  TimelineData t = RandomTimeline(3, 10, 1000, 10, 30, 30);
  TempDir a, b;
  ASSERT_TRUE(WriteTimelineDataset(a.path(), t, {10}, {1000, 10}, 1, YAML::Node()).ok());
  ASSERT_TRUE(WriteTimelineDataset(b.path(), t, {10}, {1000, 10}, 2, YAML::Node()).ok());
  auto da = Dataset::Open(a.path()), db = Dataset::Open(b.path());
  ASSERT_TRUE(da.ok() && db.ok());
  Batch x, y, z;
  HistoryOptions h;
  for (Batch* p : {&x, &y, &z}) p->Allocate(1, 1, 2, h);
  (*da)->samples().Materialize(Split::kTrain, 1, 0, &x);
  (*da)->samples().Materialize(Split::kTrain, 1, 0, &y);
  (*db)->samples().Materialize(Split::kTrain, 1, 0, &z);
  EXPECT_EQ(x.short_neg, y.short_neg);
  EXPECT_EQ(x.target, y.target);
  EXPECT_NE(x.short_neg, z.short_neg);
  // The positive twin (index 0) and the negative (index 1) share the positive history.
  Batch p;
  p.Allocate(1, 1, 2, h);
  (*da)->samples().Materialize(Split::kTrain, 0, 0, &p);
  EXPECT_EQ(p.long_hist, x.long_hist);
  EXPECT_EQ(p.short_hist, x.short_hist);
  EXPECT_NE(p.short_neg, x.short_neg);  // each row draws its own negative history
}

TEST(SampleSource, ShortestUsersHaveOneTestSampleAndNoTrainSample) {
  TimelineData t = RandomTimeline(5, 6, 100, 5, 2, 2);
  TempDir d;
  ASSERT_TRUE(WriteTimelineDataset(d.path(), t, {6}, {100, 5}, 1, YAML::Node()).ok());
  auto ds = Dataset::Open(d.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->samples().NumSamples(Split::kTrain), 0);
  EXPECT_EQ((*ds)->samples().NumSamples(Split::kTest), 12);
  Batch b;
  b.Allocate(1, 1, 2, HistoryOptions{});
  (*ds)->samples().Materialize(Split::kTest, 5, 0, &b);
  EXPECT_EQ(b.hist_len[0], 1);
  EXPECT_EQ(b.ShortMask(0)[9], 1.f);
  EXPECT_EQ(b.ShortMask(0)[8], 0.f);
}

TEST(SampleSource, ExplicitSamplesRepadToRequestedLength) {
  TempDir d;
  SampleRecordShape shape{/*history=*/6, /*item_features=*/2, /*user_features=*/1};
  SamplesFileWriter w;
  ASSERT_TRUE(w.Begin(d.Sub(kTrainSamplesFile), shape).ok());
  // label, hist_len, user, target[2], pos[2][6], neg[2][6]
  std::vector<int32_t> rec = {1, 3, 7, 11, 21, 0, 0, 0,  1, 2, 3, 0,  0,  0, 4,
                              5, 6, 0, 0,  0,  8, 9, 10, 0, 0, 0, 14, 15, 16};
  ASSERT_EQ(static_cast<int64_t>(rec.size()), shape.record_ints());
  ASSERT_TRUE(w.Add(rec.data()).ok());
  ASSERT_TRUE(w.Finish().ok());
  ASSERT_TRUE(w.Begin(d.Sub(kTestSamplesFile), shape).ok());
  ASSERT_TRUE(w.Add(rec.data()).ok());
  ASSERT_TRUE(w.Finish().ok());
  FeatureSpec spec = FeatureSpec::Reference({10}, {20, 30}, 6);
  spec.source_spec["train"] = {SourceChunk{kSourceSamples, {}, {kTrainSamplesFile}}};
  spec.source_spec["test"] = {SourceChunk{kSourceSamples, {}, {kTestSamplesFile}}};
  ASSERT_TRUE(WriteSamplesDatasetSpec(d.path(), spec, YAML::Node()).ok());
  auto ds = Dataset::Open(d.path(), true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  Batch b;
  b.Allocate(1, 1, 2, HistoryOptions{4, 2, true});  // T=4: long 2, short 2
  (*ds)->samples().Materialize(Split::kTrain, 0, 0, &b);
  EXPECT_EQ(b.hist_len[0], 3);
  EXPECT_EQ(std::vector<int32_t>(b.LongHist(0, 0), b.LongHist(0, 0) + 2),
            (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(std::vector<int32_t>(b.ShortHist(1, 0), b.ShortHist(1, 0) + 2),
            (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(std::vector<int32_t>(b.ShortNeg(0, 0), b.ShortNeg(0, 0) + 2),
            (std::vector<int32_t>{9, 10}));
  EXPECT_EQ(std::vector<int32_t>(b.LongNeg(1, 0), b.LongNeg(1, 0) + 2),
            (std::vector<int32_t>{0, 14}));
  EXPECT_EQ(b.LongMask(0)[0], 0.f);
  EXPECT_EQ(b.LongMask(0)[1], 1.f);
  EXPECT_EQ(b.Target(1)[0], 21);
}

}  // namespace
}  // namespace sift::data
