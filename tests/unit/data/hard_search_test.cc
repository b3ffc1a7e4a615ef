// Hard search (docs/training.md "Lifelong sequences"): the category index and the hard-search
// batches against a brute-force scan of the timeline, the train-target window, the full-history
// heuristics against a naive count, and the loader's refusals.
#include <algorithm>
#include <vector>

#include "common/auc.h"
#include "common/data/category_index.h"
#include "common/data/dataset.h"
#include "common/data/heuristics.h"
#include "common/data/loader.h"
#include "common/data/sample_source.h"
#include "common/data/samples_file.h"
#include "common/rng.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/unit/data/dataset_fixture.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using sift::testing::RandomTimeline;
using sift::testing::TempDir;

// Positions p in [lo, hi) of user u with category c, ascending: the definition, by a scan.
std::vector<uint32_t> Scan(const TimelineData& t, int64_t u, int32_t c, int64_t lo, int64_t hi) {
  std::vector<uint32_t> out;
  const uint64_t ub = t.user_offsets[u];
  for (int64_t p = lo; p < hi; ++p) {
    if (t.events[(ub + p) * 2 + 1] == c) out.push_back(static_cast<uint32_t>(p));
  }
  return out;
}

struct Fixture {
  TempDir dir;
  TimelineData t;
  std::unique_ptr<Dataset> ds;
  void Open(uint64_t seed, int64_t users, int64_t cats, int64_t min_len, int64_t max_len,
            int64_t train_targets = 0) {
    t = RandomTimeline(seed, users, 400, cats, min_len, max_len);
    YAML::Node meta(YAML::NodeType::Map);
    if (train_targets > 0) meta["sift"]["train_targets_per_user"] = train_targets;
    ASSERT_TRUE(WriteTimelineDataset(dir.path(), t, {users}, {400, cats}, seed, meta).ok());
    auto opened = Dataset::Open(dir.path());
    ASSERT_TRUE(opened.ok()) << opened.status();
    ds = std::move(opened).value();
  }
  const TimelineSamples& samples() const {
    return dynamic_cast<const TimelineSamples&>(ds->samples());
  }
};

TEST(CategoryIndexTest, SearchEqualsScanForRandomUsersCategoriesAndWindows) {
  Fixture fx;
  fx.Open(7, 30, 17, 2, 600);
  auto index = CategoryIndex::Build(fx.ds->timeline(), nullptr);
  ASSERT_TRUE(index.ok()) << index.status();
  Rng rng(11);
  std::vector<uint32_t> out(700);
  int empty = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t u = static_cast<int64_t>(rng.Below(30));
    const int64_t L = static_cast<int64_t>(fx.t.user_offsets[u + 1] - fx.t.user_offsets[u]);
    // Categories 1..17 and two that no event has (0 = padding, 18 = past the table).
    const int32_t c = static_cast<int32_t>(rng.Below(19));
    int64_t lo = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(L + 1)));
    int64_t hi = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(L + 1)));
    if (lo > hi) std::swap(lo, hi);
    const int64_t k = static_cast<int64_t>(rng.Below(40));
    const std::vector<uint32_t> all = Scan(fx.t, u, c, lo, hi);
    const std::vector<uint32_t> want(all.end() - std::min<int64_t>(k, all.size()), all.end());
    const int64_t n = (*index)->Search(u, c, lo, hi, k, out.data());
    ASSERT_EQ(std::vector<uint32_t>(out.begin(), out.begin() + n), want)
        << "user " << u << " category " << c << " [" << lo << ", " << hi << ") k " << k;
    ASSERT_EQ((*index)->Count(u, c, lo, hi), static_cast<int64_t>(all.size()));
    empty += all.empty();
  }
  EXPECT_GT(empty, 100);  // the empty retrievals were exercised
  EXPECT_EQ((*index)->bytes(), fx.t.num_events() * 4);
}

TEST(CategoryIndexTest, NeedsACategory) {
  TempDir dir;
  TimelineData t;
  t.num_item_features = 1;
  t.events = {1, 2, 3};
  t.user_offsets = {0, 3};
  t.user_features = {1};
  ASSERT_TRUE(WriteTimelineDataset(dir.path(), t, {1}, {3}, 1, YAML::Node()).ok());
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Status s = (*ds)->samples().PrepareHardSearch();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("category"), std::string::npos) << s;
}

// Every row of hard-search batches against the definition: short slots as without hard search,
// long slots = the newest K events of the target's category among the N before the short part.
void CheckHardBatches(const Fixture& fx, Split split, int K, int TS, int64_t N) {
  const SampleSource& src = fx.ds->samples();
  ASSERT_TRUE(src.PrepareHardSearch().ok());
  HistoryOptions hard{K + TS, TS, false, N}, plain{K + TS, TS, false, 0};
  Batch hb, pb;
  const int64_t n = src.NumSamples(split);
  hb.Allocate(n, 1, 2, hard);
  pb.Allocate(n, 1, 2, plain);
  int64_t empty = 0, full = 0;
  for (int64_t i = 0; i < n; ++i) {
    src.Materialize(split, i, i, &hb);
    src.Materialize(split, i, i, &pb);
    int64_t u, t0;
    fx.samples().Locate(split, i, &u, &t0);
    ASSERT_EQ(hb.index[i], i);
    ASSERT_EQ(hb.label[i], pb.label[i]);
    ASSERT_EQ(hb.User(0)[i], pb.User(0)[i]);
    for (int f = 0; f < 2; ++f) {
      ASSERT_EQ(hb.Target(f)[i], pb.Target(f)[i]);
      for (int j = 0; j < TS; ++j) {
        ASSERT_EQ(hb.ShortHist(f, i)[j], pb.ShortHist(f, i)[j]) << i;
        ASSERT_EQ(hb.ShortNeg(f, i)[j], pb.ShortNeg(f, i)[j]) << i;
      }
    }
    for (int j = 0; j < TS; ++j) ASSERT_EQ(hb.ShortMask(i)[j], pb.ShortMask(i)[j]);
    const int64_t short_n = std::min<int64_t>(t0, TS);
    const int64_t hi = t0 - short_n, lo = std::max<int64_t>(0, hi - N);
    const std::vector<uint32_t> all = Scan(fx.t, u, hb.Target(1)[i], lo, hi);
    const int64_t got = std::min<int64_t>(K, all.size());
    const uint64_t ub = fx.t.user_offsets[u];
    for (int j = 0; j < K; ++j) {
      const int64_t r = j - (K - got);  // index into the newest `got`
      const bool valid = r >= 0;
      ASSERT_EQ(hb.LongMask(i)[j], valid ? 1.0f : 0.0f) << "sample " << i << " slot " << j;
      for (int f = 0; f < 2; ++f) {
        const int32_t want = valid ? fx.t.events[(ub + all[all.size() - got + r]) * 2 + f] : 0;
        ASSERT_EQ(hb.LongHist(f, i)[j], want) << "sample " << i << " slot " << j;
      }
    }
    ASSERT_EQ(hb.hist_len[i], short_n + got);
    empty += got == 0;
    full += got == K;
  }
  EXPECT_GT(empty, 0);  // users with no behaviour of the category in the window
  EXPECT_GT(full, 0);
}

TEST(HardSearchTest, BatchesEqualTheBruteForceScan) {
  Fixture fx;
  fx.Open(3, 40, 9, 2, 900);
  CheckHardBatches(fx, Split::kTest, 8, 4, 300);
  CheckHardBatches(fx, Split::kTrain, 5, 3, 2000);  // a window longer than any history
  CheckHardBatches(fx, Split::kTrain, 1, 2, 1);
}

TEST(HardSearchTest, TrainTargetsPerUserKeepsTheLastPositions) {
  Fixture fx;
  fx.Open(5, 25, 9, 2, 60, /*train_targets=*/6);
  const TimelineSamples& s = fx.samples();
  ASSERT_EQ(s.train_targets_per_user(), 6);
  int64_t want_pairs = 0;
  for (int64_t u = 0; u < 25; ++u) {
    const int64_t L = static_cast<int64_t>(fx.t.user_offsets[u + 1] - fx.t.user_offsets[u]);
    const int64_t pairs = std::min<int64_t>(L - 2, 6);
    ASSERT_EQ(s.first_train_pair(u + 1) - s.first_train_pair(u), pairs);
    for (int64_t k = 0; k < pairs; ++k) {
      int64_t user, t0;
      s.Locate(Split::kTrain, 2 * (s.first_train_pair(u) + k) + 1, &user, &t0);
      ASSERT_EQ(user, u);
      ASSERT_EQ(t0, L - 1 - pairs + k);  // ends just before the test target L - 1
    }
    want_pairs += pairs;
  }
  EXPECT_EQ(s.NumSamples(Split::kTrain), 2 * want_pairs);
  EXPECT_EQ(s.NumSamples(Split::kTest), 50);
  CheckHardBatches(fx, Split::kTrain, 4, 2, 20);
}

TEST(HardSearchTest, BadTrainTargetsMetadataIsRefused) {
  TempDir dir;
  const TimelineData t = RandomTimeline(1, 5, 50, 5, 3, 10);
  YAML::Node meta(YAML::NodeType::Map);
  meta["sift"]["train_targets_per_user"] = -3;
  ASSERT_TRUE(WriteTimelineDataset(dir.path(), t, {5}, {50, 5}, 1, meta).ok());
  auto ds = Dataset::Open(dir.path());
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("metadata.sift.train_targets_per_user"), std::string::npos)
      << ds.status();
}

TEST(HardSearchTest, LoaderRefusesWhatItCannotServe) {
  Fixture fx;
  fx.Open(9, 20, 7, 2, 80);
  BatchLoaderOptions o;
  o.batch_size = 4;
  o.threads = 1;
  o.history = {20 + 10, 10, false, 15};  // K = 20 > N = 15
  Status s = ValidateBatchLoaderOptions(fx.ds->samples(), o);
  EXPECT_NE(s.message().find("K = max_history - short_history = 20 > hard_search_window = 15"),
            std::string::npos)
      << s;
  o.history = {20, 10, true, 100};
  s = ValidateBatchLoaderOptions(fx.ds->samples(), o);
  EXPECT_NE(s.message().find("no long negatives"), std::string::npos) << s;
  o.history = {10, 10, false, 100};
  s = ValidateBatchLoaderOptions(fx.ds->samples(), o);
  EXPECT_NE(s.message().find("needs long slots"), std::string::npos) << s;
  // The longest user has 80 events: 79 before its last target, 69 before the short part.
  EXPECT_EQ(fx.ds->samples().max_history_events(), 79);
  o.history = {20, 10, false, 70};
  s = ValidateBatchLoaderOptions(fx.ds->samples(), o);
  EXPECT_NE(s.message().find("hard_search_window = 70 reaches past every history of this "
                             "dataset: its longest user has 79 events before its last target, "
                             "69 before the short part"),
            std::string::npos)
      << s;
  o.history = {20, 10, false, 69};
  EXPECT_TRUE(ValidateBatchLoaderOptions(fx.ds->samples(), o).ok());
  auto loader = BatchLoader::Create(&fx.ds->samples(), o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  (*loader)->StartEpoch(0);
  const Batch* b = (*loader)->Next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->long_len, 10);
  EXPECT_EQ(b->hard_search_window, 69);

  // Stored samples have no timeline to search.
  ExplicitSamples explicit_samples(nullptr, nullptr);
  s = explicit_samples.PrepareHardSearch();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("needs a timeline dataset"), std::string::npos) << s;
}

TEST(TimeBucketTest, HandComputedTable) {
  const std::vector<std::pair<int64_t, int32_t>> table = {{-5, 0},
                                                          {0, 0},
                                                          {1, 1},
                                                          {2, 2},
                                                          {3, 2},
                                                          {4, 3},
                                                          {7, 3},
                                                          {8, 4},
                                                          {1000, 10},
                                                          {1023, 10},
                                                          {1024, 11},
                                                          {86400, 17},
                                                          {31536000, 25},
                                                          {int64_t{1} << 61, 62},
                                                          {int64_t{1} << 62, 63},
                                                          {INT64_MAX, 63}};
  for (const auto& [gap, bucket] : table) EXPECT_EQ(TimeBucket(gap), bucket) << gap;
}

// Every long slot's time bucket against TimeBucket(ts[target] - ts[event]) of the event the slot
// holds, -1 on padding; with and without hard search; the other arrays as without time buckets.
TEST(TimeBucketTest, LongSlotsCarryTheGapToTheSample) {
  Fixture fx;
  fx.Open(17, 30, 7, 2, 400);
  // Timestamps with gaps of 1..1000 between consecutive events (the fixture's are positions).
  Rng rng(3);
  for (int64_t u = 0; u < 30; ++u) {
    int64_t t = 1000;
    for (uint64_t e = fx.t.user_offsets[u]; e < fx.t.user_offsets[u + 1]; ++e) {
      t += 1 + static_cast<int64_t>(rng.Below(1000));
      fx.t.timestamps[e] = t;
    }
  }
  TempDir dir;
  ASSERT_TRUE(WriteTimelineDataset(dir.path(), fx.t, {30}, {400, 7}, 17, YAML::Node()).ok());
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  const auto& src = dynamic_cast<const TimelineSamples&>((*ds)->samples());
  ASSERT_TRUE(src.has_timestamps());
  ASSERT_TRUE(src.PrepareHardSearch().ok());
  for (int64_t window : {int64_t{0}, int64_t{200}}) {
    const int K = 12, TS = 4;
    HistoryOptions with{K + TS, TS, false, window, true}, without{K + TS, TS, false, window};
    for (Split split : {Split::kTrain, Split::kTest}) {
      const int64_t n = std::min<int64_t>(src.NumSamples(split), 600);
      Batch a, b;
      a.Allocate(n, 1, 2, with);
      b.Allocate(n, 1, 2, without);
      ASSERT_TRUE(a.has_long_time);
      for (int64_t i = 0; i < n; ++i) {
        src.Materialize(split, i, i, &a);
        src.Materialize(split, i, i, &b);
        int64_t u, t0;
        src.Locate(split, i, &u, &t0);
        const uint64_t ub = fx.t.user_offsets[u];
        // The events the slots hold: search them again by (item, category) is ambiguous, so
        // rebuild the slots' positions from the definition.
        std::vector<int64_t> pos;
        const int64_t short_n = std::min<int64_t>(t0, TS);
        if (window > 0) {
          const int64_t hi = t0 - short_n, lo = std::max<int64_t>(0, hi - window);
          for (uint32_t p : Scan(fx.t, u, a.Target(1)[i], lo, hi)) pos.push_back(p);
          if (static_cast<int64_t>(pos.size()) > K) pos.erase(pos.begin(), pos.end() - K);
        } else {
          const int64_t L = std::min<int64_t>(t0, K + TS);
          for (int64_t p = t0 - L; p < t0 - short_n; ++p) pos.push_back(p);
        }
        const int64_t pad = K - static_cast<int64_t>(pos.size());
        for (int j = 0; j < K; ++j) {
          const int32_t want =
              j < pad ? -1
                      : TimeBucket(fx.t.timestamps[ub + t0] - fx.t.timestamps[ub + pos[j - pad]]);
          ASSERT_EQ(a.LongTime(i)[j], want) << "sample " << i << " slot " << j;
          ASSERT_EQ(a.LongHist(0, i)[j], b.LongHist(0, i)[j]);
          ASSERT_EQ(a.LongMask(i)[j], b.LongMask(i)[j]);
        }
      }
    }
  }
  // No timestamps: refused by the loader, naming what is missing.
  TimelineData plain = RandomTimeline(2, 5, 50, 5, 3, 10);
  plain.timestamps.clear();
  TempDir dir2;
  ASSERT_TRUE(WriteTimelineDataset(dir2.path(), plain, {5}, {50, 5}, 1, YAML::Node()).ok());
  auto ds2 = Dataset::Open(dir2.path());
  ASSERT_TRUE(ds2.ok()) << ds2.status();
  BatchLoaderOptions o;
  o.batch_size = 2;
  o.history = {20, 10, false, 0, true};
  const Status s = ValidateBatchLoaderOptions((*ds2)->samples(), o);
  EXPECT_NE(s.message().find("need event timestamps"), std::string::npos) << s;
}

TEST(FullHistoryHeuristicsTest, EqualANaiveCount) {
  Fixture fx;
  fx.Open(13, 60, 11, 2, 700);
  ThreadPool pool(2);
  auto full = ComputeFullHistoryAucs(*fx.ds, &pool);
  ASSERT_TRUE(full.ok()) << full.status();
  auto pop = ComputePopularity(*fx.ds);
  ASSERT_TRUE(pop.ok());
  const SampleSource& src = fx.ds->samples();
  const int64_t n = src.NumSamples(Split::kTest);
  HistoryOptions h{100, 10, false, 0};
  Batch b;
  b.Allocate(n, 1, 2, h);
  std::vector<double> frac(n), mix(n);
  std::vector<float> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    src.Materialize(Split::kTest, i, i, &b);
    const int64_t u = i / 2;
    const int64_t t0 = static_cast<int64_t>(fx.t.user_offsets[u + 1] - fx.t.user_offsets[u]) - 1;
    const int32_t c = b.Target(1)[i];
    const double m = static_cast<double>(Scan(fx.t, u, c, 0, t0).size());
    const double g = pop->CategoryFreq(c);
    const double p = (m + g) / (static_cast<double>(t0) + 1.0);  // α = 1
    frac[i] = p / (p + g);
    mix[i] = 0.5 * (ScoreHeuristics(b, i, *pop)[kSmoothRecency] + frac[i]);
    labels[i] = b.label[i];
  }
  b.size = n;
  EXPECT_EQ(full->samples, n);
  EXPECT_DOUBLE_EQ(full->frac_full_history, ExactAuc(frac, labels));
  EXPECT_DOUBLE_EQ(full->mix_full_history, ExactAuc(mix, labels));
}

}  // namespace
}  // namespace sift::data
