// BatchLoader: epoch orders (shuffled, reference interleave), rank shares with and without
// drop_remainder, identical batches for any thread count and prefetch depth, partial last
// batches, long histories, rows equal to a direct SampleSource::Materialize, explicit-samples
// datasets, option validation and clean shutdown mid-epoch.
#include "common/data/loader.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/negatives.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/data/dataset_fixture.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using sift::testing::RandomTimeline;
using sift::testing::TempDir;

// A timeline dataset of 60 users with 2..350 events (every 7th user has 350, longer than
// max_history 100 and 300), written and reopened with the real writer and reader.
class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TimelineData t = RandomTimeline(/*seed=*/11, /*users=*/60, /*items=*/2000, /*cats=*/37,
                                    /*min_len=*/2, /*max_len=*/350);
    ASSERT_TRUE(
        WriteTimelineDataset(dir_.path(), t, {60}, {2000, 37}, /*negative_seed=*/5, YAML::Node())
            .ok());
    auto ds = Dataset::Open(dir_.path());
    ASSERT_TRUE(ds.ok()) << ds.status();
    ds_ = std::move(ds).value();
  }
  const SampleSource* source() const { return &ds_->samples(); }
  int64_t N(Split s) const { return ds_->samples().NumSamples(s); }

  TempDir dir_;
  std::unique_ptr<Dataset> ds_;
};

std::unique_ptr<BatchLoader> MakeLoader(const SampleSource* src, const BatchLoaderOptions& o) {
  auto l = BatchLoader::Create(src, o);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? std::move(l).value() : nullptr;
}

// Sample indices of every batch of one epoch, with the batch sizes.
struct EpochIndices {
  std::vector<int64_t> indices;
  std::vector<int64_t> sizes;
};
EpochIndices RunEpoch(BatchLoader* l, int64_t epoch) {
  EpochIndices e;
  l->StartEpoch(epoch);
  while (const Batch* b = l->Next()) {
    e.sizes.push_back(b->size);
    e.indices.insert(e.indices.end(), b->index.begin(), b->index.begin() + b->size);
  }
  return e;
}

// Every array of rows [0, size) plus the padded tail, flattened, for exact comparison.
struct BatchCopy {
  int64_t size;
  std::vector<int64_t> index;
  std::vector<float> label, long_mask, short_mask;
  std::vector<int32_t> hist_len, user, target, long_hist, short_hist, short_neg, long_neg;
  bool operator==(const BatchCopy&) const = default;
};
BatchCopy Copy(const Batch& b) {
  return BatchCopy{b.size, b.index,  b.label,     b.long_mask,  b.short_mask, b.hist_len,
                   b.user, b.target, b.long_hist, b.short_hist, b.short_neg,  b.long_neg};
}

// Row `r` of `b` equals row 0 of `one` (a capacity-1 batch with the same history shape).
void ExpectRowEquals(const Batch& b, int64_t r, const Batch& one) {
  ASSERT_EQ(b.index[r], one.index[0]);
  ASSERT_EQ(b.label[r], one.label[0]);
  ASSERT_EQ(b.hist_len[r], one.hist_len[0]);
  for (int k = 0; k < b.num_user_features; ++k) ASSERT_EQ(b.User(k)[r], one.User(k)[0]);
  const int TL = b.long_len, TS = b.short_len;
  for (int f = 0; f < b.num_item_features; ++f) {
    ASSERT_EQ(b.Target(f)[r], one.Target(f)[0]);
    ASSERT_TRUE(std::equal(b.LongHist(f, r), b.LongHist(f, r) + TL, one.LongHist(f, 0)));
    ASSERT_TRUE(std::equal(b.ShortHist(f, r), b.ShortHist(f, r) + TS, one.ShortHist(f, 0)));
    ASSERT_TRUE(std::equal(b.ShortNeg(f, r), b.ShortNeg(f, r) + TS, one.ShortNeg(f, 0)));
    if (b.has_long_negatives) {
      ASSERT_TRUE(std::equal(b.LongNeg(f, r), b.LongNeg(f, r) + TL, one.LongNeg(f, 0)));
    }
  }
  ASSERT_TRUE(std::equal(b.LongMask(r), b.LongMask(r) + TL, one.LongMask(0)));
  ASSERT_TRUE(std::equal(b.ShortMask(r), b.ShortMask(r) + TS, one.ShortMask(0)));
}

// Every row of every batch of an epoch equals a direct Materialize of its index.
void ExpectRowsMatchSource(const SampleSource* src, const BatchLoaderOptions& o) {
  auto l = MakeLoader(src, o);
  ASSERT_NE(l, nullptr);
  Batch one;
  one.Allocate(1, src->num_user_features(), src->num_item_features(), o.history);
  l->StartEpoch(0);
  int64_t rows = 0;
  while (const Batch* b = l->Next()) {
    for (int64_t r = 0; r < b->size; ++r, ++rows) {
      src->Materialize(o.split, b->index[r], 0, &one);
      SCOPED_TRACE(::testing::Message() << "row " << r << " index " << b->index[r]);
      ExpectRowEquals(*b, r, one);
    }
  }
  EXPECT_EQ(rows, l->samples_per_epoch());
}

// The reference stream built literally: cut 0..n-1 into `parts` contiguous parts (the first
// n % parts one longer), then take one record from each non-exhausted part in turn.
std::vector<int64_t> LiteralInterleave(int64_t n, int parts) {
  std::vector<std::vector<int64_t>> p(parts);
  int64_t next = 0;
  for (int k = 0; k < parts; ++k) {
    const int64_t len = n / parts + (k < n % parts ? 1 : 0);
    for (int64_t i = 0; i < len; ++i) p[k].push_back(next++);
  }
  std::vector<int64_t> out;
  for (size_t round = 0; out.size() < static_cast<size_t>(n); ++round) {
    for (int k = 0; k < parts; ++k) {
      if (round < p[k].size()) out.push_back(p[k][round]);
    }
  }
  return out;
}

TEST(LoaderOrder, ReferenceStreamIsTheEightPartInterleave) {
  for (int parts : {8, 4}) {
    for (int64_t n : {0, 1, 5, 8, 9, 15, 16, 17, 63, 64, 100, 1001}) {
      const std::vector<int64_t> want = LiteralInterleave(n, parts);
      for (int64_t p = 0; p < n; ++p) {
        ASSERT_EQ(ReferenceStreamIndex(n, parts, p), want[p]) << "n " << n << " position " << p;
      }
    }
  }
  // Spot values: n = 17 in 8 parts -> part sizes 3,2,2,...; stream 0,3,5,7,9,11,13,15,1,4,...
  EXPECT_EQ(ReferenceStreamIndex(17, 8, 0), 0);
  EXPECT_EQ(ReferenceStreamIndex(17, 8, 1), 3);
  EXPECT_EQ(ReferenceStreamIndex(17, 8, 8), 1);
  EXPECT_EQ(ReferenceStreamIndex(17, 8, 16), 2);
  EXPECT_EQ(ReferenceParts(Split::kTrain), 8);
  EXPECT_EQ(ReferenceParts(Split::kTest), 4);
}

TEST(LoaderOrder, ShuffledOrderIsASeededPermutationPerEpoch) {
  const int64_t n = 5000;
  std::vector<int64_t> a, b, c, d;
  ShuffledOrder(n, 42, 0, &a);
  ShuffledOrder(n, 42, 0, &b);
  ShuffledOrder(n, 42, 1, &c);
  ShuffledOrder(n, 43, 0, &d);
  std::vector<int64_t> sorted = a, iota(n);
  std::sort(sorted.begin(), sorted.end());
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(a, iota);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  // Reusing the vector (smaller, then larger) gives the same orders.
  ShuffledOrder(10, 42, 0, &b);
  EXPECT_EQ(b.size(), 10u);
  ShuffledOrder(n, 42, 1, &b);
  EXPECT_EQ(b, c);
  ShuffledOrder(0, 1, 0, &b);
  EXPECT_TRUE(b.empty());
}

TEST(LoaderOrder, RankSharesCoverTheOrder) {
  for (SampleOrder order : {SampleOrder::kShuffled, SampleOrder::kReference}) {
    for (int64_t n : {0, 1, 7, 100, 101}) {
      for (int world : {1, 2, 3, 8}) {
        std::vector<int> hits(n, 0);
        for (int r = 0; r < world; ++r) {
          RankShare with = ComputeRankShare(n, order, r, world, /*drop_remainder=*/true);
          RankShare without = ComputeRankShare(n, order, r, world, /*drop_remainder=*/false);
          EXPECT_EQ(with.count, n / world);
          EXPECT_LE(without.count - n / world, 1);
          if (order == SampleOrder::kShuffled) {  // contiguous blocks
            EXPECT_EQ(with.first, r * (n / world));
            EXPECT_EQ(with.stride, 1);
            EXPECT_EQ(without.stride, 1);
          } else {  // round-robin over the stream, as the reference shards
            EXPECT_EQ(with.first, r);
            EXPECT_EQ(without.first, r);
            EXPECT_EQ(with.stride, world);
            EXPECT_EQ(without.stride, world);
          }
          for (int64_t k = 0; k < without.count; ++k) ++hits[without.first + k * without.stride];
        }
        EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }))
            << SampleOrderName(order) << " n " << n << " world " << world;
      }
    }
  }
}

TEST_F(LoaderTest, EverySampleOnceAcrossRanksWithoutDropRemainder) {
  for (Split split : {Split::kTrain, Split::kTest}) {
    for (SampleOrder order : {SampleOrder::kShuffled, SampleOrder::kReference}) {
      for (int world : {1, 3, 4}) {
        SCOPED_TRACE(::testing::Message()
                     << SplitName(split) << " " << SampleOrderName(order) << " world " << world);
        const int64_t n = N(split), B = 37;
        std::vector<int64_t> all;
        std::vector<int64_t> counts;
        for (int r = 0; r < world; ++r) {
          BatchLoaderOptions o;
          o.split = split;
          o.order = order;
          o.batch_size = B;
          o.rank = r;
          o.world = world;
          o.drop_remainder = false;
          o.threads = 2;
          o.seed = 9;
          auto l = MakeLoader(source(), o);
          ASSERT_NE(l, nullptr);
          EpochIndices e = RunEpoch(l.get(), 3);
          EXPECT_EQ(static_cast<int64_t>(e.indices.size()), l->samples_per_epoch());
          EXPECT_EQ(static_cast<int64_t>(e.sizes.size()), l->steps_per_epoch());
          EXPECT_EQ(l->steps_per_epoch(), (l->samples_per_epoch() + B - 1) / B);
          for (size_t i = 0; i + 1 < e.sizes.size(); ++i) EXPECT_EQ(e.sizes[i], B);
          counts.push_back(static_cast<int64_t>(e.indices.size()));
          all.insert(all.end(), e.indices.begin(), e.indices.end());
        }
        std::sort(all.begin(), all.end());
        std::vector<int64_t> iota(n);
        std::iota(iota.begin(), iota.end(), 0);
        EXPECT_EQ(all, iota);
        const auto [mn, mx] = std::minmax_element(counts.begin(), counts.end());
        EXPECT_LE(*mx - *mn, 1);
      }
    }
  }
}

TEST_F(LoaderTest, DropRemainderGivesEqualFullBatchesPerRank) {
  const int64_t n = N(Split::kTrain), B = 50;
  const int world = 3;
  const int64_t per_rank = n / world, steps = per_rank / B;
  ASSERT_GT(steps, 2);
  ASSERT_NE(per_rank % B, 0) << "the test wants a remainder to drop";
  for (SampleOrder order : {SampleOrder::kShuffled, SampleOrder::kReference}) {
    std::vector<int64_t> order_vec;
    ShuffledOrder(n, 17, 2, &order_vec);
    std::set<int64_t> seen;
    for (int r = 0; r < world; ++r) {
      BatchLoaderOptions o;
      o.order = order;
      o.batch_size = B;
      o.rank = r;
      o.world = world;
      o.seed = 17;
      o.threads = 3;
      auto l = MakeLoader(source(), o);
      ASSERT_NE(l, nullptr);
      EXPECT_EQ(l->steps_per_epoch(), steps);
      EXPECT_EQ(l->samples_per_epoch(), steps * B);
      EpochIndices e = RunEpoch(l.get(), 2);
      ASSERT_EQ(static_cast<int64_t>(e.sizes.size()), steps);
      for (int64_t s : e.sizes) EXPECT_EQ(s, B);
      // Exactly the rank's positions of the epoch order, minus the dropped tail.
      for (int64_t k = 0; k < steps * B; ++k) {
        const int64_t want = order == SampleOrder::kShuffled
                                 ? order_vec[r * per_rank + k]
                                 : ReferenceStreamIndex(n, 8, r + k * world);
        ASSERT_EQ(e.indices[k], want) << "rank " << r << " position " << k;
        EXPECT_TRUE(seen.insert(e.indices[k]).second) << "index twice: " << e.indices[k];
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), world * steps * B);
  }
}

// The synchronous sparse step's sample stream: with interleaved shares the W ranks' batch t at
// batch size B/W are, together, exactly one process's batch t at batch size B (same seed, same
// epoch), and they have as many steps — for every W that divides B, in training (drop_remainder)
// and for the train-AUC sample's first batches (without it).
TEST_F(LoaderTest, InterleavedRankBatchesTogetherAreTheOneProcessBatch) {
  const int64_t B = 60;
  for (const bool drop : {true, false}) {
    BatchLoaderOptions one;
    one.batch_size = B;
    one.seed = 23;
    one.threads = 2;
    one.drop_remainder = drop;
    auto single = MakeLoader(source(), one);
    ASSERT_NE(single, nullptr);
    single->StartEpoch(1);
    std::vector<std::multiset<int64_t>> want;
    while (const Batch* b = single->Next()) {
      if (!drop && b->size < B) break;  // a partial last batch is split unevenly
      want.emplace_back(b->index.begin(), b->index.begin() + b->size);
    }
    ASSERT_GT(want.size(), 3u);
    for (int world = 1; world <= 5; ++world) {
      if (B % world != 0) continue;
      SCOPED_TRACE(::testing::Message() << "world " << world << " drop " << drop);
      std::vector<std::multiset<int64_t>> got(want.size());
      for (int r = 0; r < world; ++r) {
        BatchLoaderOptions o = one;
        o.batch_size = B / world;
        o.rank = r;
        o.world = world;
        o.interleave = true;
        auto l = MakeLoader(source(), o);
        ASSERT_NE(l, nullptr);
        if (drop) EXPECT_EQ(l->steps_per_epoch(), single->steps_per_epoch());
        l->StartEpoch(1);
        for (size_t t = 0; t < want.size(); ++t) {
          const Batch* b = l->Next();
          ASSERT_NE(b, nullptr);
          got[t].insert(b->index.begin(), b->index.begin() + b->size);
        }
      }
      for (size_t t = 0; t < want.size(); ++t) EXPECT_EQ(got[t], want[t]) << "step " << t;
    }
  }
}

TEST_F(LoaderTest, ShuffledOrderChangesWithEpochAndRepeatsForEqualSeeds) {
  BatchLoaderOptions o;
  o.batch_size = 64;
  o.drop_remainder = false;
  o.seed = 123;
  o.threads = 2;
  auto a = MakeLoader(source(), o), b = MakeLoader(source(), o);
  o.seed = 124;
  auto c = MakeLoader(source(), o);
  ASSERT_TRUE(a && b && c);
  const EpochIndices a0 = RunEpoch(a.get(), 0), a1 = RunEpoch(a.get(), 1);
  const EpochIndices b0 = RunEpoch(b.get(), 0), c0 = RunEpoch(c.get(), 0);
  std::vector<int64_t> want;
  ShuffledOrder(N(Split::kTrain), 123, 0, &want);
  EXPECT_EQ(a0.indices, want);
  EXPECT_EQ(a0.indices, b0.indices);
  EXPECT_NE(a0.indices, a1.indices);
  EXPECT_NE(a0.indices, c0.indices);
  std::vector<int64_t> s0 = a0.indices, s1 = a1.indices;
  std::sort(s0.begin(), s0.end());
  std::sort(s1.begin(), s1.end());
  EXPECT_EQ(s0, s1);
  // Going back to epoch 0 replays it.
  EXPECT_EQ(RunEpoch(a.get(), 0).indices, a0.indices);
}

TEST_F(LoaderTest, ReferenceOrderIsTheInterleaveInEveryEpoch) {
  for (Split split : {Split::kTrain, Split::kTest}) {
    BatchLoaderOptions o;
    o.split = split;
    o.order = SampleOrder::kReference;
    o.batch_size = 10;
    o.drop_remainder = false;
    o.seed = 5;
    auto l = MakeLoader(source(), o);
    ASSERT_NE(l, nullptr);
    const std::vector<int64_t> want = LiteralInterleave(N(split), split == Split::kTrain ? 8 : 4);
    EXPECT_EQ(RunEpoch(l.get(), 0).indices, want);
    EXPECT_EQ(RunEpoch(l.get(), 1).indices, want);
  }
}

TEST_F(LoaderTest, BatchesIdenticalForAnyThreadsAndPrefetch) {
  for (SampleOrder order : {SampleOrder::kShuffled, SampleOrder::kReference}) {
    std::vector<BatchCopy> baseline;
    for (int threads : {1, 2, 4}) {
      for (int prefetch : {1, 2, 3}) {
        SCOPED_TRACE(::testing::Message() << SampleOrderName(order) << " threads " << threads
                                          << " prefetch " << prefetch);
        BatchLoaderOptions o;
        o.order = order;
        o.batch_size = 300;  // the last batch of each epoch is partial
        o.drop_remainder = false;
        o.threads = threads;
        o.prefetch = prefetch;
        o.seed = 77;
        auto l = MakeLoader(source(), o);
        ASSERT_NE(l, nullptr);
        EXPECT_EQ(l->num_threads(), threads);
        std::vector<BatchCopy> got;
        for (int64_t epoch : {0, 1}) {
          l->StartEpoch(epoch);
          while (const Batch* b = l->Next()) got.push_back(Copy(*b));
        }
        if (baseline.empty()) {
          baseline = got;
          ASSERT_EQ(static_cast<int64_t>(got.size()), 2 * l->steps_per_epoch());
        } else {
          ASSERT_EQ(got.size(), baseline.size());
          for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == baseline[i]) << i;
        }
      }
    }
  }
}

TEST_F(LoaderTest, PartialLastBatchHasZeroedTail) {
  const int64_t n = N(Split::kTest), B = 32;
  ASSERT_NE(n % B, 0);
  BatchLoaderOptions o;
  o.split = Split::kTest;
  o.batch_size = B;
  o.drop_remainder = false;
  o.threads = 2;
  o.prefetch = 1;  // the last batch reuses the buffer of a full one
  auto l = MakeLoader(source(), o);
  ASSERT_NE(l, nullptr);
  const int64_t steps = (n + B - 1) / B;
  ASSERT_EQ(l->steps_per_epoch(), steps);
  l->StartEpoch(0);
  for (int64_t i = 0; i + 1 < steps; ++i) {
    const Batch* full = l->Next();
    ASSERT_NE(full, nullptr);
    EXPECT_EQ(full->size, B);
  }
  const Batch* b = l->Next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, n % B);
  EXPECT_EQ(b->capacity, B);
  for (int64_t r = b->size; r < B; ++r) {
    EXPECT_EQ(b->index[r], -1);
    EXPECT_EQ(b->label[r], 0.f);
    EXPECT_EQ(b->hist_len[r], 0);
    EXPECT_EQ(b->Target(0)[r], 0);
    EXPECT_EQ(b->ShortHist(1, r)[b->short_len - 1], 0);
    EXPECT_EQ(b->ShortMask(r)[b->short_len - 1], 0.f);
  }
  for (int64_t r = 0; r < b->size; ++r) EXPECT_GE(b->hist_len[r], 1);
  EXPECT_EQ(l->Next(), nullptr);
  EXPECT_EQ(l->Next(), nullptr);  // stays at the end
}

TEST_F(LoaderTest, RowsMatchDirectMaterialize) {
  for (Split split : {Split::kTrain, Split::kTest}) {
    for (SampleOrder order : {SampleOrder::kShuffled, SampleOrder::kReference}) {
      BatchLoaderOptions o;
      o.split = split;
      o.order = order;
      o.batch_size = 100;
      o.drop_remainder = false;
      o.threads = 2;
      o.rank = 1;
      o.world = 2;
      SCOPED_TRACE(::testing::Message() << SplitName(split) << " " << SampleOrderName(order));
      ExpectRowsMatchSource(source(), o);
    }
  }
}

// group_by_history: each batch holds the same samples as without it, its rows in decreasing
// order of their history length (ties in the epoch order), epoch_row pointing back, and each row
// still the direct Materialize of its index; the same for every thread count.
TEST_F(LoaderTest, GroupByHistoryReordersRowsWithinEachBatch) {
  for (Split split : {Split::kTrain, Split::kTest}) {
    for (SampleOrder order : {SampleOrder::kShuffled, SampleOrder::kReference}) {
      SCOPED_TRACE(::testing::Message() << SplitName(split) << " " << SampleOrderName(order));
      BatchLoaderOptions o;
      o.split = split;
      o.order = order;
      o.batch_size = 64;
      o.drop_remainder = false;
      o.history = HistoryOptions{300, 10, false};
      o.threads = 2;
      BatchLoaderOptions g = o;
      g.group_by_history = true;
      ExpectRowsMatchSource(source(), g);
      auto plain = MakeLoader(source(), o);
      auto grouped = MakeLoader(source(), g);
      g.threads = 1;
      auto grouped1 = MakeLoader(source(), g);
      ASSERT_NE(plain, nullptr);
      ASSERT_NE(grouped, nullptr);
      ASSERT_NE(grouped1, nullptr);
      for (BatchLoader* l : {plain.get(), grouped.get(), grouped1.get()}) l->StartEpoch(3);
      int64_t batches = 0, moved = 0;
      while (const Batch* want = plain->Next()) {
        const Batch* got = grouped->Next();
        const Batch* got1 = grouped1->Next();
        ASSERT_NE(got, nullptr);
        ASSERT_NE(got1, nullptr);
        ASSERT_EQ(got->size, want->size);
        EXPECT_EQ(Copy(*got), Copy(*got1));
        EXPECT_EQ(got->epoch_row, got1->epoch_row);
        std::vector<bool> seen(static_cast<size_t>(want->size), false);
        for (int64_t r = 0; r < want->size; ++r) {
          EXPECT_EQ(want->epoch_row[r], r);
          const int32_t e = got->epoch_row[r];
          ASSERT_GE(e, 0);
          ASSERT_LT(e, want->size);
          EXPECT_FALSE(seen[static_cast<size_t>(e)]);
          seen[static_cast<size_t>(e)] = true;
          EXPECT_EQ(got->index[r], want->index[e]);
          EXPECT_EQ(got->hist_len[r], want->hist_len[e]);
          moved += e != r;
          if (r > 0) {
            ASSERT_GE(got->hist_len[r - 1], got->hist_len[r]) << "row " << r;
            if (got->hist_len[r - 1] == got->hist_len[r]) {
              EXPECT_LT(got->epoch_row[r - 1], e) << "row " << r;
            }
          }
        }
        for (int64_t r = want->size; r < want->capacity; ++r) EXPECT_EQ(got->epoch_row[r], r);
        ++batches;
      }
      EXPECT_EQ(grouped->Next(), nullptr);
      EXPECT_GT(batches, 1);
      EXPECT_GT(moved, 0);  // 2..350 events per user: the order does change
    }
  }
}

TEST_F(LoaderTest, LongHistoriesAndLongNegatives) {
  BatchLoaderOptions o;
  o.batch_size = 128;
  o.drop_remainder = false;
  o.threads = 2;
  o.history = HistoryOptions{300, 10, false};
  {
    SCOPED_TRACE("max_history 300");
    ExpectRowsMatchSource(source(), o);
  }
  o.history = HistoryOptions{1000, 50, true};
  {
    SCOPED_TRACE("max_history 1000, short 50, long negatives");
    ExpectRowsMatchSource(source(), o);
  }
  // Users with 350 events fill all 300 slots.
  o.history = HistoryOptions{300, 10, false};
  o.split = Split::kTest;
  auto l = MakeLoader(source(), o);
  ASSERT_NE(l, nullptr);
  l->StartEpoch(0);
  int32_t longest = 0;
  while (const Batch* b = l->Next()) {
    EXPECT_EQ(b->long_len, 290);
    EXPECT_EQ(b->short_len, 10);
    for (int64_t r = 0; r < b->size; ++r) longest = std::max(longest, b->hist_len[r]);
  }
  EXPECT_EQ(longest, 300);
}

TEST_F(LoaderTest, RestartAndDestroyMidEpochAreClean) {
  BatchLoaderOptions o;
  o.batch_size = 16;
  o.threads = 4;
  o.prefetch = 3;
  o.seed = 1;
  {
    auto l = MakeLoader(source(), o);  // destroyed before any epoch
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->Next(), nullptr);
  }
  {
    auto l = MakeLoader(source(), o);
    ASSERT_NE(l, nullptr);
    l->StartEpoch(0);
    ASSERT_NE(l->Next(), nullptr);
    // destroyed with batches in flight
  }
  auto l = MakeLoader(source(), o);
  ASSERT_NE(l, nullptr);
  const EpochIndices full = RunEpoch(l.get(), 4);
  l->StartEpoch(4);
  for (int i = 0; i < 3; ++i) ASSERT_NE(l->Next(), nullptr);
  l->StartEpoch(7);  // abandon epoch 4 mid-way
  l->StartEpoch(4);
  std::vector<int64_t> again;
  while (const Batch* b = l->Next()) {
    again.insert(again.end(), b->index.begin(), b->index.begin() + b->size);
  }
  EXPECT_EQ(again, full.indices);
}

TEST_F(LoaderTest, RejectsBadOptions) {
  auto expect_error = [&](const BatchLoaderOptions& o, const std::string& fragment) {
    auto l = BatchLoader::Create(source(), o);
    ASSERT_FALSE(l.ok()) << fragment;
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(l.status().message()).find(fragment), std::string::npos) << l.status();
  };
  BatchLoaderOptions o;
  o.batch_size = 0;
  expect_error(o, "batch_size");
  o = {};
  o.rank = 2;
  o.world = 2;
  expect_error(o, "rank");
  o = {};
  o.world = 0;
  expect_error(o, "world");
  o = {};
  o.history = HistoryOptions{10, 11, false};
  expect_error(o, "short_history");
  o = {};
  o.history = HistoryOptions{0, 0, false};
  expect_error(o, "max_history");
  o = {};
  o.prefetch = 0;
  expect_error(o, "prefetch");
  o = {};
  o.threads = -1;
  expect_error(o, "threads");
  o = {};
  o.split = Split::kTest;
  o.batch_size = N(Split::kTest) + 1;
  expect_error(o, "fewer than one batch");
  o.drop_remainder = false;  // evaluation: one partial batch is fine
  auto l = BatchLoader::Create(source(), o);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ((*l)->steps_per_epoch(), 1);
  EXPECT_FALSE(BatchLoader::Create(nullptr, BatchLoaderOptions{}).ok());
  EXPECT_FALSE(ParseSampleOrder("random").ok());
  EXPECT_FALSE(ParseSplit("valid").ok());
  EXPECT_EQ(*ParseSampleOrder("reference"), SampleOrder::kReference);
  EXPECT_EQ(*ParseSplit("test"), Split::kTest);
}

TEST_F(LoaderTest, ChecksumSeesEveryArray) {
  BatchLoaderOptions o;
  o.batch_size = 8;
  o.seed = 3;
  auto l = MakeLoader(source(), o);
  ASSERT_NE(l, nullptr);
  l->StartEpoch(0);
  const Batch* b = l->Next();
  ASSERT_NE(b, nullptr);
  Batch copy = *b;
  const uint64_t base = BatchChecksum(copy);
  EXPECT_EQ(BatchChecksum(*b), base);
  auto changed = [&](auto mutate) {
    Batch m = copy;
    mutate(&m);
    return BatchChecksum(m) != base;
  };
  EXPECT_TRUE(changed([](Batch* m) { m->index[3] += 1; }));
  EXPECT_TRUE(changed([](Batch* m) { m->label[0] = 1.f - m->label[0]; }));
  EXPECT_TRUE(changed([](Batch* m) { m->User(0)[5] += 1; }));
  EXPECT_TRUE(changed([](Batch* m) { m->Target(1)[2] += 1; }));
  EXPECT_TRUE(changed([](Batch* m) { m->ShortNeg(0, 7)[9] += 1; }));
  EXPECT_TRUE(changed([](Batch* m) { m->LongMask(1)[0] = 1.f - m->LongMask(1)[0]; }));
  // Swapping two different values (a permutation within an array) is seen too.
  int64_t r = 0;
  while (r + 1 < copy.size && copy.ShortHist(0, r)[9] == copy.ShortHist(0, r + 1)[9]) ++r;
  ASSERT_LT(r + 1, copy.size);
  EXPECT_TRUE(
      changed([r](Batch* m) { std::swap(m->ShortHist(0, r)[9], m->ShortHist(0, r + 1)[9]); }));
}

// `sift bench loader`: runs on a dataset, writes its JSON, and its checksum does not depend on
// the thread count (numbers are not asserted: a benchmark is a command, not a timed test).
TEST_F(LoaderTest, BenchLoaderCommandWritesJson) {
  std::map<std::string, std::string> checksums;
  for (const std::string threads : {"1", "2"}) {
    const std::string json = dir_.Sub("bench_" + threads + ".json");
    auto r = sift::testing::RunSift({"bench", "loader", dir_.path(), "--threads", threads,
                                     "--batch-size", "20", "--steps", "150", "--warmup", "3",
                                     "--split", "test", "--order", "reference", "--json", json});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("samples/s"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("bench loader " + dir_.path()), std::string::npos) << r.out;
    const nlohmann::json j = nlohmann::json::parse(sift::testing::ReadAll(json));
    EXPECT_EQ(j["benchmark"], "loader");
    EXPECT_EQ(j["steps"], 150);
    EXPECT_EQ(j["samples"], 150 * 20);
    EXPECT_EQ(j["options"]["threads"], std::stoi(threads));
    EXPECT_EQ(j["options"]["order"], "reference");
    EXPECT_EQ(j["epochs"], 26);  // 120 test samples: 6 batches of 20 per epoch, 153 batches
    EXPECT_GT(j["samples_per_second"].get<double>(), 0.0);
    EXPECT_TRUE(j.contains("build_type"));
    EXPECT_TRUE(j["machine"].contains("cpu_model"));
    checksums[threads] = j["checksum"];
  }
  EXPECT_EQ(checksums["1"], checksums["2"]);

  auto bad = sift::testing::RunSift({"bench", "loader", dir_.path(), "--order", "random"});
  EXPECT_EQ(bad.exit_code, 2);  // a usage error, caught while parsing
  EXPECT_EQ(bad.out, "");       // nothing printed before the error
  EXPECT_NE(bad.err.find("order"), std::string::npos) << bad.err;
  auto missing = sift::testing::RunSift({"bench", "loader", dir_.Sub("nope")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope"), std::string::npos) << missing.err;
}

// Three item features (the generic, not the F = 2, path of TimelineSamples) against the
// definition of docs/data.md section 1, derived straight from the in-memory timeline.
TEST(LoaderThreeFeatures, RowsMatchTheDefinition) {
  const int F = 3;
  Rng rng(21);
  TimelineData t;
  t.num_item_features = F;
  t.num_user_features = 2;
  t.user_offsets.push_back(0);
  std::vector<std::pair<int64_t, int64_t>> train;  // (user, target position) in sample order
  for (int64_t u = 0; u < 25; ++u) {
    const int64_t len = u % 5 == 0 ? 2 : 2 + static_cast<int64_t>(rng.Below(60));
    for (int64_t i = 0; i < len * F; ++i)
      t.events.push_back(1 + static_cast<int32_t>(rng.Below(99)));
    for (int64_t k = 1; k + 1 < len; ++k) train.push_back({u, k});
    t.user_offsets.push_back(t.user_offsets.back() + static_cast<uint64_t>(len));
    t.user_features.push_back(static_cast<int32_t>(u + 1));
    t.user_features.push_back(static_cast<int32_t>(100 + u));
  }
  TempDir dir;
  const uint64_t seed = 4;
  ASSERT_TRUE(
      WriteTimelineDataset(dir.path(), t, {30, 200}, {100, 100, 100}, seed, YAML::Node()).ok());
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  const uint64_t E = static_cast<uint64_t>(t.num_events());
  for (const HistoryOptions& h : {HistoryOptions{20, 5, true}, HistoryOptions{100, 10, false}}) {
    for (Split split : {Split::kTrain, Split::kTest}) {
      BatchLoaderOptions o;
      o.split = split;
      o.batch_size = 13;
      o.drop_remainder = false;
      o.threads = 2;
      o.history = h;
      auto l = MakeLoader(&(*ds)->samples(), o);
      ASSERT_NE(l, nullptr);
      const int T = h.max_history, TL = T - h.short_history;
      l->StartEpoch(0);
      int64_t rows = 0;
      while (const Batch* b = l->Next()) {
        for (int64_t r = 0; r < b->size; ++r, ++rows) {
          const int64_t idx = b->index[r];
          int64_t u, k;
          if (split == Split::kTrain) {
            std::tie(u, k) = train[static_cast<size_t>(idx / 2)];
          } else {
            u = idx / 2;
            k = static_cast<int64_t>(t.user_offsets[u + 1] - t.user_offsets[u]) - 1;
          }
          SCOPED_TRACE(::testing::Message() << SplitName(split) << " T " << T << " index " << idx);
          const uint64_t ub = t.user_offsets[u], base = NegativeBase(seed, split, idx);
          const bool positive = idx % 2 == 0;
          const uint64_t te = positive ? ub + k : NegativeEvent(base, 0, E);
          ASSERT_EQ(b->label[r], positive ? 1.f : 0.f);
          ASSERT_EQ(b->hist_len[r], std::min<int64_t>(k, T));
          ASSERT_EQ(b->User(0)[r], u + 1);
          ASSERT_EQ(b->User(1)[r], 100 + u);
          for (int f = 0; f < F; ++f) {
            ASSERT_EQ(b->Target(f)[r], t.events[te * F + f]);
            for (int j = 0; j < T; ++j) {
              const int back = T - j;  // 1 = the newest slot
              const bool valid = back <= k;
              const int32_t pos = valid ? t.events[(ub + k - back) * F + f] : 0;
              const int32_t neg =
                  valid ? t.events[NegativeEvent(base, static_cast<uint32_t>(back), E) * F + f] : 0;
              if (j < TL) {
                ASSERT_EQ(b->LongHist(f, r)[j], pos) << "slot " << j;
                if (h.long_negatives) {
                  ASSERT_EQ(b->LongNeg(f, r)[j], neg) << "slot " << j;
                }
              } else {
                ASSERT_EQ(b->ShortHist(f, r)[j - TL], pos) << "slot " << j;
                ASSERT_EQ(b->ShortNeg(f, r)[j - TL], neg) << "slot " << j;
              }
            }
          }
        }
      }
      EXPECT_EQ(rows, (*ds)->samples().NumSamples(split));
    }
  }
}

TEST(LoaderExplicit, ExplicitSamplesDatasetLoads) {
  TempDir d;
  const SampleRecordShape shape{/*history=*/20, /*item_features=*/2, /*user_features=*/1};
  const int64_t n_train = 203, n_test = 41;
  Rng rng(8);
  std::map<std::string, std::vector<std::vector<int32_t>>> stored;
  for (const auto& [file, n] : {std::pair<std::string, int64_t>{kTrainSamplesFile, n_train},
                                std::pair<std::string, int64_t>{kTestSamplesFile, n_test}}) {
    SamplesFileWriter w;
    ASSERT_TRUE(w.Begin(d.Sub(file), shape).ok());
    for (int64_t i = 0; i < n; ++i) {
      // label, hist_len, user, target[2], pos[2][20], neg[2][20], left-padded.
      std::vector<int32_t> rec(static_cast<size_t>(shape.record_ints()), 0);
      const int len = 1 + static_cast<int>(rng.Below(20));
      rec[0] = static_cast<int32_t>(i % 2 == 0);
      rec[1] = len;
      rec[2] = 1 + static_cast<int32_t>(rng.Below(30));
      rec[3] = 1 + static_cast<int32_t>(rng.Below(500));
      rec[4] = 1 + static_cast<int32_t>(rng.Below(20));
      for (int block = 0; block < 4; ++block) {
        for (int j = 20 - len; j < 20; ++j) {
          // Blocks: pos item, pos category, neg item, neg category; ids within cardinality.
          rec[5 + block * 20 + j] = 1 + static_cast<int32_t>(rng.Below(block % 2 ? 20 : 500));
        }
      }
      ASSERT_TRUE(w.Add(rec.data()).ok());
      stored[file].push_back(rec);
    }
    ASSERT_TRUE(w.Finish().ok());
  }
  ASSERT_TRUE(
      WriteSamplesDatasetSpec(d.path(), FeatureSpec::Reference({30}, {500, 20}, 20), YAML::Node())
          .ok());
  auto ds = Dataset::Open(d.path(), /*verify=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const SampleSource* src = &(*ds)->samples();
  ASSERT_EQ(src->NumSamples(Split::kTrain), n_train);
  for (const HistoryOptions& h : {HistoryOptions{10, 4, false}, HistoryOptions{30, 10, true}}) {
    for (Split split : {Split::kTrain, Split::kTest}) {
      BatchLoaderOptions o;
      o.split = split;
      o.batch_size = 16;
      o.drop_remainder = false;
      o.threads = 2;
      o.history = h;
      SCOPED_TRACE(::testing::Message() << SplitName(split) << " T " << h.max_history);
      ExpectRowsMatchSource(src, o);
      {  // Stored samples do not tell their history length: group_by_history changes nothing.
        BatchLoaderOptions g = o;
        g.group_by_history = true;
        auto a = MakeLoader(src, o);
        auto b = MakeLoader(src, g);
        ASSERT_NE(a, nullptr);
        ASSERT_NE(b, nullptr);
        a->StartEpoch(0);
        b->StartEpoch(0);
        while (const Batch* want = a->Next()) {
          const Batch* got = b->Next();
          ASSERT_NE(got, nullptr);
          EXPECT_EQ(Copy(*got), Copy(*want));
          EXPECT_EQ(got->epoch_row, want->epoch_row);
        }
      }
      // Labels, users and targets come straight from the stored records.
      auto l = MakeLoader(src, o);
      ASSERT_NE(l, nullptr);
      l->StartEpoch(0);
      const auto& recs = stored[split == Split::kTrain ? kTrainSamplesFile : kTestSamplesFile];
      int64_t rows = 0;
      while (const Batch* b = l->Next()) {
        for (int64_t r = 0; r < b->size; ++r, ++rows) {
          const auto& rec = recs[static_cast<size_t>(b->index[r])];
          EXPECT_EQ(b->label[r], static_cast<float>(rec[0]));
          EXPECT_EQ(b->hist_len[r], std::min(rec[1], h.max_history));
          EXPECT_EQ(b->User(0)[r], rec[2]);
          EXPECT_EQ(b->Target(1)[r], rec[4]);
          // Slot j of the requested T reads stored slot j + 20 - T when among the newest L.
          const int T = h.max_history, TL = T - h.short_history, L = b->hist_len[r];
          for (int f = 0; f < 2; ++f) {
            for (int j = 0; j < T; ++j) {
              const int32_t pos = j >= T - L ? rec[5 + f * 20 + j + 20 - T] : 0;
              const int32_t neg = j >= T - L ? rec[45 + f * 20 + j + 20 - T] : 0;
              if (j < TL) {
                ASSERT_EQ(b->LongHist(f, r)[j], pos) << "slot " << j;
                if (h.long_negatives) {
                  ASSERT_EQ(b->LongNeg(f, r)[j], neg) << "slot " << j;
                }
                if (f == 0) {
                  ASSERT_EQ(b->LongMask(r)[j], pos > 0 ? 1.f : 0.f);
                }
              } else {
                ASSERT_EQ(b->ShortHist(f, r)[j - TL], pos) << "slot " << j;
                ASSERT_EQ(b->ShortNeg(f, r)[j - TL], neg) << "slot " << j;
                if (f == 0) {
                  ASSERT_EQ(b->ShortMask(r)[j - TL], pos > 0 ? 1.f : 0.f);
                }
              }
            }
          }
        }
      }
      EXPECT_EQ(rows, static_cast<int64_t>(recs.size()));
    }
  }
}

}  // namespace
}  // namespace sift::data
