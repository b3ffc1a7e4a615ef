// The reference order with prebatched records (model-spec 6.3, 6.5), against a literal build:
// group samples into records of P, cut the full records into contiguous near-equal parts,
// interleave the parts record by record, shard the stream round-robin over ranks, and append the
// remainder record on rank 0 when the remainder is not dropped.
#include <algorithm>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/loader.h"
#include "gtest/gtest.h"
#include "tests/unit/data/dataset_fixture.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

std::vector<int64_t> LiteralRankStream(int64_t n, int64_t P, int parts, int rank, int world,
                                       bool drop_remainder) {
  const int64_t G = n / P;
  std::vector<std::vector<int64_t>> files(static_cast<size_t>(parts));
  for (int64_t rec = 0, p = 0; p < parts; ++p) {
    const int64_t size = G / parts + (p < G % parts ? 1 : 0);
    for (int64_t i = 0; i < size; ++i) files[p].push_back(rec++);
  }
  std::vector<int64_t> stream;
  for (size_t round = 0; stream.size() < static_cast<size_t>(G); ++round) {
    for (const auto& f : files) {
      if (round < f.size()) stream.push_back(f[round]);
    }
  }
  std::vector<int64_t> mine;
  for (size_t pos = static_cast<size_t>(rank); pos < stream.size(); pos += world) {
    mine.push_back(stream[pos]);
  }
  if (drop_remainder) mine.resize(static_cast<size_t>(G / world));
  std::vector<int64_t> out;
  for (int64_t rec : mine) {
    for (int64_t i = 0; i < P; ++i) out.push_back(rec * P + i);
  }
  if (!drop_remainder && rank == 0) {
    for (int64_t s = G * P; s < n; ++s) out.push_back(s);
  }
  return out;
}

TEST(ReferencePrebatchOrder, MatchesTheLiteralConstruction) {
  for (int64_t n : {0, 1, 9, 37, 100, 1001}) {
    for (int64_t P : {1, 3, 7, 16}) {
      for (int parts : {8, 4}) {
        for (int world : {1, 2, 3}) {
          for (bool drop : {true, false}) {
            for (int rank = 0; rank < world; ++rank) {
              SCOPED_TRACE(::testing::Message()
                           << "n " << n << " P " << P << " parts " << parts << " rank " << rank
                           << "/" << world << " drop " << drop);
              const auto want = LiteralRankStream(n, P, parts, rank, world, drop);
              ASSERT_EQ(ReferenceRankSamples(n, P, rank, world, drop),
                        static_cast<int64_t>(want.size()));
              for (size_t k = 0; k < want.size(); ++k) {
                ASSERT_EQ(ReferenceRankIndex(n, P, parts, rank, world, static_cast<int64_t>(k)),
                          want[k])
                    << "k " << k;
              }
            }
          }
        }
      }
    }
  }
}

TEST(ReferencePrebatchOrder, WithoutPrebatchingEqualsTheSampleStream) {
  for (int64_t n : {5, 64, 1001}) {
    for (int64_t k = 0; k < n; ++k) {
      ASSERT_EQ(ReferenceRankIndex(n, 0, 8, 0, 1, k), ReferenceStreamIndex(n, 8, k));
      ASSERT_EQ(ReferenceRankIndex(n, 1, 8, 0, 1, k), ReferenceStreamIndex(n, 8, k));
    }
  }
}

TEST(ReferencePrebatchOrder, LoaderCoversEverySampleOnceAcrossRanks) {
  sift::testing::TempDir dir;
  TimelineData t = sift::testing::RandomTimeline(21, 30, 200, 9, 2, 60);
  ASSERT_TRUE(WriteTimelineDataset(dir.path(), t, {30}, {200, 9}, 4, YAML::Node()).ok());
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int64_t n = (*ds)->samples().NumSamples(Split::kTrain);
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int rank = 0; rank < 3; ++rank) {
    BatchLoaderOptions o;
    o.batch_size = 14;  // a multiple of P: whole records per batch, as the reference reads them
    o.order = SampleOrder::kReference;
    o.reference_prebatch = 7;
    o.rank = rank;
    o.world = 3;
    o.drop_remainder = false;
    o.threads = 2;
    auto loader = BatchLoader::Create(&(*ds)->samples(), o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    (*loader)->StartEpoch(0);
    int64_t k = 0;
    while (const Batch* b = (*loader)->Next()) {
      for (int64_t row = 0; row < b->size; ++row, ++k) {
        ASSERT_EQ(b->index[row], ReferenceRankIndex(n, 7, 8, rank, 3, k));
        ++seen[b->index[row]];
      }
    }
    EXPECT_EQ(k, ReferenceRankSamples(n, 7, rank, 3, false));
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

}  // namespace
}  // namespace sift::data
