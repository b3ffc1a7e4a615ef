#include "server/embedding/table.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <latch>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift::embedding {
namespace {

using ::testing::HasSubstr;

TableConfig Table(uint32_t id, std::string name, int dim, uint64_t cardinality,
                  OptimizerKind kind = OptimizerKind::kSgd, float lr = 0.5f) {
  TableConfig c;
  c.table_id = id;
  c.name = std::move(name);
  c.dim = dim;
  c.cardinality = cardinality;
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = lr;
  return c;
}

std::unique_ptr<EmbeddingStore> MakeStore(std::vector<TableConfig> tables, uint64_t seed = 42,
                                          int stripes = 64) {
  auto store = EmbeddingStore::Create(std::move(tables), StoreOptions{seed, stripes});
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

std::vector<float> PullOrDie(EmbeddingStore& store, uint32_t table, std::vector<uint64_t> ids,
                             int dim) {
  std::vector<float> out(ids.size() * dim);
  Status s = store.Pull(table, ids, absl::MakeSpan(out));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(EmbeddingInit, SameRowForAnyInstanceOrderAndStripeCount) {
  std::vector<uint64_t> ids(300);
  std::iota(ids.begin(), ids.end(), uint64_t{1});
  ids.push_back(uint64_t{1} << 50);  // far beyond the cardinality: dynamic id space
  auto a = MakeStore({Table(3, "item", 16, 1000)});
  auto b = MakeStore({Table(0, "user", 8, 5), Table(3, "item_copy", 16, 1000)}, 42, 7);
  const std::vector<float> in_order = PullOrDie(*a, 3, ids, 16);
  // b: reverse order, in two batches, after its other table was used.
  PullOrDie(*b, 0, {1, 2, 3}, 8);
  std::vector<uint64_t> rev(ids.rbegin(), ids.rend());
  std::vector<uint64_t> first(rev.begin(), rev.begin() + 100), rest(rev.begin() + 100, rev.end());
  std::vector<float> r1 = PullOrDie(*b, 3, first, 16), r2 = PullOrDie(*b, 3, rest, 16);
  r1.insert(r1.end(), r2.begin(), r2.end());
  for (size_t k = 0; k < ids.size(); ++k) {
    const size_t i = ids.size() - 1 - k;  // rev[k] == ids[i]
    std::vector<float> want(16);
    InitRow(42, 3, ids[i], 1000, 16, want.data());
    for (int c = 0; c < 16; ++c) {
      ASSERT_EQ(in_order[i * 16 + c], want[c]) << "id " << ids[i] << " c " << c;
      ASSERT_EQ(r1[k * 16 + c], want[c]) << "id " << ids[i] << " c " << c;
    }
  }
  // A second pull returns the stored row, not a new draw.
  EXPECT_EQ(PullOrDie(*a, 3, ids, 16), in_order);
}

TEST(EmbeddingInit, InsideBoundCenteredAndDistinct) {
  const uint64_t cardinality = 99;  // bound 1/sqrt(100) = 0.1
  EXPECT_DOUBLE_EQ(InitBound(cardinality), 0.1);
  constexpr int kDim = 16, kRows = 4000;
  std::vector<uint64_t> ids(kRows);
  for (int i = 0; i < kRows; ++i) ids[i] = static_cast<uint64_t>(i) * 7919 + 3;
  auto store = MakeStore({Table(1, "cat", kDim, cardinality)});
  const std::vector<float> rows = PullOrDie(*store, 1, ids, kDim);
  double sum = 0, sum_sq = 0;
  for (float x : rows) {
    ASSERT_LE(std::fabs(x), 0.1f);
    sum += x;
    sum_sq += double{x} * x;
  }
  const double n = rows.size();
  // Uniform(-0.1, 0.1): mean 0 (standard error 0.0577/sqrt(64000) = 2.3e-4), variance 0.01/3.
  EXPECT_NEAR(sum / n, 0.0, 2e-3);
  EXPECT_NEAR(sum_sq / n, 0.01 / 3, 2e-4);
  // Different ids, tables and seeds give different rows.
  std::vector<float> x(kDim), y(kDim);
  for (int i = 1; i < kRows; ++i) {
    ASSERT_NE(std::vector<float>(rows.begin() + (i - 1) * kDim, rows.begin() + i * kDim),
              std::vector<float>(rows.begin() + i * kDim, rows.begin() + (i + 1) * kDim));
  }
  InitRow(42, 1, 5, cardinality, kDim, x.data());
  InitRow(42, 2, 5, cardinality, kDim, y.data());
  EXPECT_NE(x, y);
  InitRow(43, 1, 5, cardinality, kDim, y.data());
  EXPECT_NE(x, y);
  // The bound follows the cardinality (model-spec 2: item table, R = 1,209,082).
  InitRow(42, 1, 5, 1209081, kDim, y.data());
  for (float v : y) EXPECT_LE(std::fabs(v), static_cast<float>(1 / std::sqrt(1209082.0)));
}

TEST(EmbeddingStore, PullReturnsPushedUpdatesAndPushCreatesNoRow) {
  auto store = MakeStore({Table(0, "user", 4, 100, OptimizerKind::kSgd, 0.5f)});
  const std::vector<float> before = PullOrDie(*store, 0, {10, 20}, 4);
  const std::vector<float> grads = {1, 2, 3, 4, -1, -2, -3, -4, 0.5f, 0.25f, 0, 8};
  // Id 30 was never pulled: the push is refused whole, ids 10 and 20 included.
  const Status s = store->Push(0, {20, 10, 30}, grads, 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("table 'user' (id 0): id 30: push for a row this shard does not hold: a "
                        "worker pushes only rows it pulled (1 of the push's 3 ids are absent)"));
  EXPECT_EQ(store->Stats()[0].rows, 2);
  EXPECT_EQ(store->Stats()[0].refused_absent_pushes, 1u);
  EXPECT_EQ(store->Stats()[0].last_step, -1);
  EXPECT_EQ(PullOrDie(*store, 0, {10, 20}, 4), before);
  // Pulled, it is pushed like the others.
  std::vector<float> init30(4);
  InitRow(42, 0, 30, 100, 4, init30.data());
  EXPECT_EQ(PullOrDie(*store, 0, {30}, 4), init30);
  ASSERT_TRUE(store->Push(0, {20, 10, 30}, grads, 5).ok());
  const std::vector<float> after = PullOrDie(*store, 0, {10, 20, 30}, 4);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(after[c], before[c] - 0.5f * grads[4 + c]) << c;  // id 10 got the 2nd gradient
    EXPECT_EQ(after[4 + c], before[4 + c] - 0.5f * grads[c]) << c;
    EXPECT_EQ(after[8 + c], init30[c] - 0.5f * grads[8 + c]) << c;
  }
}

TEST(EmbeddingStore, BadRequestsAreInvalidArgumentNamingTheTable) {
  auto store = MakeStore({Table(4, "item", 2, 10)});
  std::vector<float> out(4);
  Status s = store->Pull(9, {1, 2}, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown table (id 9)"));
  s = store->Push(9, {1, 2}, out, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("id 9"));

  std::vector<float> short_out(3);
  s = store->Pull(4, {1, 2}, absl::MakeSpan(short_out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'item'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("needs 4 output floats, got 3"));
  s = store->Push(4, {1, 2}, std::vector<float>(5), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'item'"));

  const std::vector<float> before = PullOrDie(*store, 4, {1, 2, 3}, 2);
  s = store->Push(4, {1, 2, 3, 2}, std::vector<float>(8, 1.0f), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'item'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("id 2 twice"));
  std::vector<float> nan_grads(6, 1.0f);
  nan_grads[3] = NAN;
  s = store->Push(4, {1, 2, 3}, nan_grads, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("non-finite gradient"));
  s = store->Push(4, {1}, std::vector<float>(2, 1.0f), -1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // A rejected push changes nothing.
  EXPECT_EQ(PullOrDie(*store, 4, {1, 2, 3}, 2), before);
  EXPECT_EQ(store->Stats()[0].last_step, -1);
}

TEST(EmbeddingStore, BadConfigsAreRejected) {
  auto code = [](std::vector<TableConfig> t, int stripes = 64) {
    return EmbeddingStore::Create(std::move(t), StoreOptions{1, stripes}).status();
  };
  Status s = code({Table(1, "a", 4, 10), Table(1, "b", 4, 10)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'b'"));
  EXPECT_THAT(std::string(code({Table(1, "a", 0, 10)}).message()), HasSubstr("dim 0"));
  EXPECT_THAT(std::string(code({Table(1, "", 4, 10)}).message()), HasSubstr("empty name"));
  s = code({Table(1, "a", 4, 10, OptimizerKind::kAdam, -1.0f)});
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'a'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("learning_rate"));
  EXPECT_EQ(code({Table(1, "a", 4, 10)}, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(code({}).ok());
}

TEST(EmbeddingStore, StatsCountRowsAndBytes) {
  constexpr int kStripes = 16;
  auto store = MakeStore(
      {Table(7, "adam16", 16, 100, OptimizerKind::kAdam), Table(2, "sgd4", 4, 100)}, 1, kStripes);
  EXPECT_EQ(store->FindTable(7)->name, "adam16");
  EXPECT_EQ(store->FindTable(8), nullptr);
  std::vector<uint64_t> ids(1000);
  std::iota(ids.begin(), ids.end(), uint64_t{0});
  PullOrDie(*store, 2, ids, 4);
  PullOrDie(*store, 2, ids, 4);  // no new rows
  PullOrDie(*store, 7, {ids.begin(), ids.begin() + 10}, 16);
  PullOrDie(*store, 7, {500}, 16);
  ASSERT_TRUE(store->Push(7, {3, 500}, std::vector<float>(32, 1.0f), 9).ok());
  ASSERT_TRUE(store->Push(7, {4}, std::vector<float>(16, 1.0f), 8).ok());

  const std::vector<TableStats> stats = store->Stats();
  ASSERT_EQ(stats.size(), 2u);
  const TableStats& sgd = stats[0];  // table_id order
  const TableStats& adam = stats[1];
  EXPECT_EQ(sgd.table_id, 2u);
  EXPECT_EQ(sgd.name, "sgd4");
  EXPECT_EQ(sgd.rows, 1000);
  EXPECT_EQ(sgd.state_floats, 0);
  EXPECT_EQ(sgd.value_bytes, 1000 * 4 * 4);
  EXPECT_EQ(sgd.state_bytes, 0);
  EXPECT_EQ(sgd.last_step, -1);
  EXPECT_EQ(adam.table_id, 7u);
  EXPECT_EQ(adam.rows, 11);  // ids 0..9 and 500 pulled
  EXPECT_EQ(adam.state_floats, 33);
  EXPECT_EQ(adam.value_bytes, 11 * 16 * 4);
  EXPECT_EQ(adam.state_bytes, 11 * 33 * 4);
  EXPECT_EQ(adam.last_step, 9);
  for (const TableStats& st : stats) {
    const int64_t row_bytes = (st.dim + st.state_floats) * 4;
    // Whole 256-row blocks: at least the live rows, at most one partly used block per stripe.
    EXPECT_GE(st.arena_bytes, st.value_bytes + st.state_bytes);
    EXPECT_EQ(st.arena_bytes % (256 * row_bytes), 0);
    EXPECT_LE(st.arena_bytes, st.value_bytes + st.state_bytes + kStripes * 256 * row_bytes);
    EXPECT_GE(st.map_bytes, st.rows * 17);  // 16-byte slot + 1 control byte per row at least
    EXPECT_EQ(st.total_bytes, st.arena_bytes + st.map_bytes);
  }
  // 1000 rows over 16 stripes, ~63 per stripe: each stripe holds exactly one block.
  EXPECT_EQ(sgd.arena_bytes, kStripes * 256 * 16);
  EXPECT_EQ(store->MemoryBytes(), sgd.total_bytes + adam.total_bytes);
}

TEST(EmbeddingStore, ConcurrentPushesLoseNoUpdate) {
  // 8 threads, released together, push SGD gradients to the same 100 keys 1000 times each (one
  // 100-row push per iteration; even threads walk the keys forwards, odd ones backwards, so they
  // collide on rows) while pulling. lr = 1 and gradients are powers of two on
  // a 2^-7 grid, so every partial sum is exact in float and the result is order-independent.
  constexpr int kThreads = 8, kIters = 1000, kKeys = 100;
  auto store = MakeStore({Table(1, "hot", 2, 1000, OptimizerKind::kSgd, 1.0f)});
  std::vector<uint64_t> keys(kKeys);
  for (int k = 0; k < kKeys; ++k) keys[k] = 1000003ULL * k + 17;
  // Zero every row first (w -= 1 * w is exact), so the expected value is exactly -sum(grads).
  const std::vector<float> init = PullOrDie(*store, 1, keys, 2);
  ASSERT_TRUE(store->Push(1, keys, init, 0).ok());
  for (float v : PullOrDie(*store, 1, keys, 2)) ASSERT_EQ(v, 0.0f);

  auto grad = [](int thread, int key, int c) {
    return std::ldexp(1.0f, -4 - (thread + key + c) % 4);  // 2^-4 .. 2^-7
  };
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads);
  std::latch start(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      std::vector<uint64_t> ids(kKeys);
      std::vector<float> g(kKeys * 2), out(kKeys * 2);
      for (int it = 0; it < kIters; ++it) {
        for (int j = 0; j < kKeys; ++j) {
          const int k = (t % 2 == 0 ? j + it : 2 * kKeys - 1 - j - it % kKeys) % kKeys;
          ids[j] = keys[k];
          g[2 * j] = grad(t, k, 0);
          g[2 * j + 1] = grad(t, k, 1);
        }
        Status s = store->Push(1, ids, g, it + 1);
        if (s.ok() && it % 10 == 0) s = store->Pull(1, ids, absl::MakeSpan(out));
        if (!s.ok()) {
          results[t] = s;
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const Status& s : results) ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> final_rows = PullOrDie(*store, 1, keys, 2);
  for (int k = 0; k < kKeys; ++k) {
    for (int c = 0; c < 2; ++c) {
      double sum = 0;
      for (int t = 0; t < kThreads; ++t) sum += double{grad(t, k, c)} * kIters;
      ASSERT_EQ(final_rows[2 * k + c], static_cast<float>(-sum)) << "key " << k << " c " << c;
    }
  }
  EXPECT_EQ(store->Stats()[0].rows, kKeys);
  EXPECT_EQ(store->Stats()[0].last_step, kIters);
}

TEST(EmbeddingStore, ConcurrentFirstPullsCreateEachRowOnce) {
  constexpr int kThreads = 8, kIds = 5000;
  auto store = MakeStore({Table(5, "fresh", 4, 50)}, 3, 8);
  std::vector<std::vector<float>> seen(kThreads);
  std::vector<std::thread> threads;
  std::latch start(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      std::vector<uint64_t> ids(kIds);
      for (int i = 0; i < kIds; ++i) ids[i] = (t % 2 == 0) ? i : kIds - 1 - i;
      seen[t].resize(kIds * 4);
      if (!store->Pull(5, ids, absl::MakeSpan(seen[t])).ok()) seen[t].clear();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(store->Stats()[0].rows, kIds);
  std::vector<float> want(4);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), size_t{kIds} * 4);
    for (int i = 0; i < kIds; ++i) {
      const uint64_t id = (t % 2 == 0) ? i : kIds - 1 - i;
      InitRow(3, 5, id, 50, 4, want.data());
      for (int c = 0; c < 4; ++c) ASSERT_EQ(seen[t][i * 4 + c], want[c]);
    }
  }
}

TEST(EmbeddingStore, DumpAndLoadRoundTripRowsWithOptimizerState) {
  auto a = MakeStore({Table(2, "item", 4, 100, OptimizerKind::kAdam, 0.1f)}, 7, 3);
  const std::vector<uint64_t> ids = {90, 3, 41};
  const std::vector<float> g = {1, 2, 3, 4, -1, -2, -3, -4, 0.5f, 0.5f, 0.5f, 0.5f};
  PullOrDie(*a, 2, ids, 4);
  ASSERT_TRUE(a->Push(2, ids, g, 0).ok());
  ASSERT_TRUE(a->Push(2, {3}, {1, 1, 1, 1}, 1).ok());
  auto dump = a->DumpTable(2);
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(dump->ids, (std::vector<uint64_t>{3, 41, 90}));  // sorted
  EXPECT_EQ(dump->row_floats, 4 + 2 * 4 + 1);
  ASSERT_EQ(dump->data.size(), 3u * dump->row_floats);

  // A fresh store with a different stripe count loads them and behaves identically afterwards.
  auto b = MakeStore({Table(2, "item", 4, 100, OptimizerKind::kAdam, 0.1f)}, 7, 5);
  ASSERT_TRUE(b->LoadRows(2, dump->row_floats, dump->ids, dump->data).ok());
  for (auto* s : {a.get(), b.get()})
    ASSERT_TRUE(s->Push(2, {3, 41}, {1, 0, 0, 1, 2, 2, 2, 2}, 2).ok());
  std::vector<float> ra(12), rb(12);
  ASSERT_TRUE(a->Pull(2, {3, 41, 90}, absl::MakeSpan(ra)).ok());
  ASSERT_TRUE(b->Pull(2, {3, 41, 90}, absl::MakeSpan(rb)).ok());
  EXPECT_EQ(ra, rb);

  EXPECT_EQ(b->LoadRows(2, 5, {1}, {1, 2, 3, 4, 5}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      b->LoadRows(2, dump->row_floats, {1, 1}, std::vector<float>(2 * dump->row_floats)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->LoadRows(2, dump->row_floats, {1}, {1.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->DumpTable(9).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EmbeddingStore, StripeThreadsGiveIdenticalResultsAndErrors) {
  auto make = [](int threads) {
    auto store = EmbeddingStore::Create({Table(1, "item", 8, 5000, OptimizerKind::kAdam, 0.05f)},
                                        StoreOptions{9, 16, threads});
    EXPECT_TRUE(store.ok()) << store.status();
    return std::move(*store);
  };
  auto one = make(1), three = make(3);
  std::vector<uint64_t> ids(2000);
  std::vector<float> g(ids.size() * 8);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 7919 % 100003;
  for (size_t j = 0; j < g.size(); ++j) g[j] = static_cast<float>((j * 31) % 17) / 17 - 0.5f;
  PullOrDie(*one, 1, ids, 8);
  PullOrDie(*three, 1, ids, 8);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(one->Push(1, ids, g, step).ok());
    ASSERT_TRUE(three->Push(1, ids, g, step).ok());
  }
  EXPECT_EQ(PullOrDie(*one, 1, ids, 8), PullOrDie(*three, 1, ids, 8));
  // A duplicate or a non-finite gradient in any stripe rejects the whole push, naming it.
  std::vector<uint64_t> dup = ids;
  dup[1500] = dup[10];
  Status s = three->Push(1, dup, g, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("twice"), absl::string_view::npos) << s;
  std::vector<float> bad = g;
  bad[1999 * 8 + 3] = std::nanf("");
  s = three->Push(1, ids, bad, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("non-finite"), absl::string_view::npos) << s;
  EXPECT_EQ(PullOrDie(*one, 1, ids, 8), PullOrDie(*three, 1, ids, 8)) << "nothing applied";
  EXPECT_FALSE(EmbeddingStore::Create({}, StoreOptions{0, 4, 0}).ok());
}

TEST(EmbeddingStore, LookupReadsInitOrStoredRowsAndCreatesNothing) {
  auto store = MakeStore({Table(4, "cat", 4, 50, OptimizerKind::kSgd, 0.5f)});
  std::vector<float> looked(8);
  ASSERT_TRUE(store->Lookup(4, {7, 9}, absl::MakeSpan(looked)).ok());
  EXPECT_EQ(store->Stats()[0].rows, 0) << "a lookup creates no row";
  EXPECT_EQ(looked, PullOrDie(*store, 4, {7, 9}, 4)) << "unseen rows read as their init";
  ASSERT_TRUE(store->Push(4, {9}, {1, 1, 1, 1}, 0).ok());
  ASSERT_TRUE(store->Lookup(4, {9, 11}, absl::MakeSpan(looked)).ok());
  const std::vector<float> pulled9 = PullOrDie(*store, 4, {9}, 4);
  EXPECT_EQ(std::vector<float>(looked.begin(), looked.begin() + 4), pulled9);
  EXPECT_EQ(store->Stats()[0].rows, 2) << "7 and 9 (pulled/pushed), not 11";
  EXPECT_EQ(store->Lookup(4, {1}, absl::MakeSpan(looked)).code(),
            absl::StatusCode::kInvalidArgument);  // wrong output size
  EXPECT_EQ(store->Lookup(5, {}, {}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sift::embedding

namespace sift::embedding {
namespace {

// In the store: gradients beyond the bound or non-finite refuse the whole push
// (counted); an update that would leave a non-finite weight or state is not written (a row
// restored with an inf weight stays as it was, the push's other rows are applied, counted).
TEST(EmbeddingStore, RowsStayFiniteAndRefusalsAreCounted) {
  StoreOptions o{42, 4};
  o.max_abs_gradient = 100.0f;
  auto created = EmbeddingStore::Create({Table(1, "t", 2, 10)}, o);
  ASSERT_TRUE(created.ok()) << created.status();
  EmbeddingStore& store = **created;
  const std::vector<float> before = PullOrDie(store, 1, {5, 6}, 2);
  Status s = store.Push(1, std::vector<uint64_t>{5, 6}, std::vector<float>{1, 1, 1, 100.5f}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("gradient 100.5 for id 6 component 1 is beyond +-100"));
  EXPECT_EQ(PullOrDie(store, 1, {5, 6}, 2), before);  // nothing applied
  EXPECT_TRUE(store.Push(1, std::vector<uint64_t>{5, 6}, std::vector<float>{1, 1, 1, 100}, 1).ok());

  const float inf = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(store.LoadRows(1, 2, std::vector<uint64_t>{7}, std::vector<float>{inf, 0}).ok());
  const std::vector<float> six = PullOrDie(store, 1, {6}, 2);
  s = store.Push(1, std::vector<uint64_t>{6, 7}, std::vector<float>{1, 1, 1, 1}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("1 row(s) left unchanged (first: id 7)"));
  EXPECT_EQ(PullOrDie(store, 1, {7}, 2), (std::vector<float>{inf, 0}));  // not written
  EXPECT_NE(PullOrDie(store, 1, {6}, 2), six);                           // applied
  const TableStats st = store.Stats()[0];
  EXPECT_EQ(st.refused_pushes, 1u);
  EXPECT_EQ(st.refused_rows, 1u);
  EXPECT_EQ(st.refused_pulls, 0u);
  StoreOptions bad = o;
  bad.max_abs_gradient = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(EmbeddingStore::Create({Table(1, "t", 2, 10)}, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The budget's charge for one row of an sgd table of dim 2 (no optimizer state): its 2 floats
// plus the map slot (key, row index) and its control byte.
constexpr int64_t kSgdDim2RowBytes = 2 * 4 + sizeof(std::pair<const uint64_t, uint32_t>) + 1;

// In the store: a budget of N rows' bytes holds N rows; a pull needing one more is
// RESOURCE_EXHAUSTED naming the table; held rows are still pulled and pushed.
TEST(EmbeddingStore, TheMemoryBudgetRefusesNewRowsOnly) {
  StoreOptions o{42, 1};
  const int64_t row = kSgdDim2RowBytes;
  o.memory_budget_bytes = 10 * row;
  auto created = EmbeddingStore::Create({Table(3, "items", 2, 10)}, o);
  ASSERT_TRUE(created.ok()) << created.status();
  EmbeddingStore& store = **created;
  std::vector<uint64_t> ten(10);
  std::iota(ten.begin(), ten.end(), 0);
  const std::vector<float> held = PullOrDie(store, 3, ten, 2);
  std::vector<float> out(2);
  const Status s = store.Pull(3, std::vector<uint64_t>{99}, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'items' (id 3): no room for new rows"));
  EXPECT_EQ(PullOrDie(store, 3, ten, 2), held);
  EXPECT_TRUE(store.Push(3, ten, std::vector<float>(20, 1.0f), 1).ok());
  EXPECT_EQ(store.Push(3, std::vector<uint64_t>{100}, std::vector<float>{1, 1}, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Stats()[0].rows, 10);
  EXPECT_EQ(store.Stats()[0].refused_pulls, 1u);
}

// tables.<name>.capacity: each of S shards creates at most ceil(capacity / S) rows on Pull;
// rows already held are still served and pushed.
TEST(EmbeddingStore, ACapacityRefusesNewRowsBeyondTheShardsShare) {
  StoreOptions o{42, 4};
  o.num_shards = 3;
  TableConfig t = Table(3, "item_feat_0", 2, 10);
  t.capacity = 25;  // ceil(25 / 3) = 9 rows in this shard
  auto created = EmbeddingStore::Create({t, Table(4, "other", 2, 10)}, o);
  ASSERT_TRUE(created.ok()) << created.status();
  EmbeddingStore& store = **created;
  std::vector<uint64_t> nine(9);
  std::iota(nine.begin(), nine.end(), 0);
  const std::vector<float> held = PullOrDie(store, 3, nine, 2);
  std::vector<float> out(4);
  // A pull that needs one new row is refused (and creates none)...
  const Status s = store.Pull(3, std::vector<uint64_t>{1, 99}, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("table 'item_feat_0' (id 3): the table is full: this pull needs 1 new "
                        "rows; this shard holds 9 of its 9-row share of the table's capacity of "
                        "25 rows (job spec tables.item_feat_0.capacity)"));
  // ... the held rows are served as before, the other table is not limited.
  EXPECT_EQ(PullOrDie(store, 3, nine, 2), held);
  std::vector<uint64_t> many(100);
  std::iota(many.begin(), many.end(), 0);
  PullOrDie(store, 4, many, 2);
  EXPECT_EQ(store.Push(3, std::vector<uint64_t>{100}, std::vector<float>{1, 1}, 1).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<TableStats> stats = store.Stats();
  EXPECT_EQ(stats[0].rows, 9);
  EXPECT_EQ(stats[0].refused_pulls, 1u);
  EXPECT_EQ(stats[1].rows, 100);
  // The refused pull created nothing: the row count stayed at the share.
  EXPECT_EQ(store.Pull(3, std::vector<uint64_t>{98}, absl::MakeSpan(out).subspan(0, 2)).code(),
            absl::StatusCode::kResourceExhausted);
  o.num_shards = 0;
  EXPECT_EQ(EmbeddingStore::Create({t}, o).status().code(), absl::StatusCode::kInvalidArgument);
}

// Ids first..first+n-1.
std::vector<uint64_t> Ids(uint64_t first, size_t n) {
  std::vector<uint64_t> ids(n);
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

// Push never creates a row, so it cannot grow a table past its memory budget: a push naming ids
// the store does not hold is refused whole, and the rows, their bytes and the held rows' values
// stay as they were.
TEST(EmbeddingStore, APushOfRowsNeverPulledIsRefusedWholeUnderABudget) {
  StoreOptions o{42, 16};
  o.memory_budget_bytes = 128 << 10;
  auto created = EmbeddingStore::Create({Table(3, "items", 16, 10)}, o);
  ASSERT_TRUE(created.ok()) << created.status();
  EmbeddingStore& store = **created;
  const std::vector<uint64_t> held = Ids(0, 100);
  const std::vector<float> rows = PullOrDie(store, 3, held, 16);
  const int64_t bytes = store.MemoryBytes();
  // 100 held ids, then 4,000 new ones (about 4x the budget).
  const std::vector<uint64_t> mixed = Ids(0, 4100);
  const Status s = store.Push(3, mixed, std::vector<float>(mixed.size() * 16, 0.5f), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'items' (id 3): id "));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("push for a row this shard does not hold: a worker pushes only rows it "
                        "pulled (4000 of the push's 4100 ids are absent); the push is refused "
                        "whole"));
  const TableStats st = store.Stats()[0];
  EXPECT_EQ(st.rows, 100);
  EXPECT_EQ(store.MemoryBytes(), bytes);
  EXPECT_EQ(st.last_step, -1);
  EXPECT_EQ(st.refused_absent_pushes, 1u);
  EXPECT_EQ(st.refused_pushes, 0u);
  EXPECT_EQ(PullOrDie(store, 3, held, 16), rows);
  // The same push, new ids only (the fast path's sorted keys), is refused too.
  EXPECT_EQ(store.Push(3, Ids(100, 4000), std::vector<float>(4000 * 16, 0.5f), 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Stats()[0].rows, 100);
  EXPECT_EQ(store.Stats()[0].refused_absent_pushes, 2u);
}

// One table of a multi-table push naming an absent row: no table is touched.
TEST(EmbeddingStore, AnAbsentRowInAnyTableOfAPushAppliesNothing) {
  auto store = MakeStore({Table(1, "a", 2, 10), Table(2, "b", 2, 10)});
  const std::vector<float> a = PullOrDie(*store, 1, {1, 2}, 2);
  PullOrDie(*store, 2, {1}, 2);
  const std::vector<uint64_t> ids_a = {1, 2}, ids_b = {1, 9};
  const std::vector<float> g(4, 1.0f);
  const EmbeddingStore::TablePush pushes[] = {{1, ids_a, g}, {2, ids_b, g}};
  const Status s = store->PushMany(pushes, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("table 'b' (id 2): id 9: push for a row"));
  EXPECT_EQ(PullOrDie(*store, 1, {1, 2}, 2), a);
  EXPECT_EQ(store->Stats()[0].last_step, -1);
  EXPECT_EQ(store->Stats()[1].rows, 1);
  EXPECT_EQ(store->Stats()[1].refused_absent_pushes, 1u);
  EXPECT_EQ(store->CheckRowsHeld(2, ids_b).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->CheckRowsHeld(1, ids_a).ok());
  EXPECT_EQ(store->CheckRowsHeld(5, ids_a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Stats()[1].refused_absent_pushes, 2u);
}

// A capacity of 1,000 rows: a push of 3,000 new ids creates none of them.
TEST(EmbeddingStore, APushOfNewIdsCannotExceedTheCapacity) {
  TableConfig t = Table(4, "cap", 4, 10);
  t.capacity = 1000;
  auto created = EmbeddingStore::Create({t}, StoreOptions{42, 8});
  ASSERT_TRUE(created.ok()) << created.status();
  EmbeddingStore& store = **created;
  const Status s = store.Push(4, Ids(0, 3000), std::vector<float>(3000 * 4, 1.0f), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("push for a row this shard does not hold"));
  EXPECT_EQ(store.Stats()[0].rows, 0);
  EXPECT_EQ(store.MemoryBytes(), 0);
}

// A pull refused for the memory budget creates nothing: the row count and the memory stay, and
// a later pull that fits is served and creates exactly its rows.
TEST(EmbeddingStore, APullRefusedForTheBudgetCreatesNothing) {
  StoreOptions o{42, 16};
  const int64_t row = kSgdDim2RowBytes;
  o.memory_budget_bytes = 1000 * row;
  auto created = EmbeddingStore::Create({Table(3, "items", 2, 10)}, o);
  ASSERT_TRUE(created.ok()) << created.status();
  EmbeddingStore& store = **created;
  const std::vector<float> first = PullOrDie(store, 3, Ids(0, 600), 2);
  const int64_t bytes = store.MemoryBytes();
  // 600 held + 500 new: 100 rows over the budget.
  std::vector<float> out(1100 * 2);
  const Status s = store.Pull(3, Ids(0, 1100), absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr("table 'items' (id 3): no room for new rows: this pull needs 500 new rows"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--table-memory-budget"));
  EXPECT_EQ(store.Stats()[0].rows, 600);
  EXPECT_EQ(store.MemoryBytes(), bytes);
  EXPECT_EQ(store.Stats()[0].refused_pulls, 1u);
  // What fits is served: the 400 rows left, repeated ids counted once.
  std::vector<uint64_t> fits = Ids(600, 400);
  fits.insert(fits.end(), {600, 999, 5});
  const std::vector<float> got = PullOrDie(store, 3, fits, 2);
  std::vector<float> want(2);
  InitRow(42, 3, 999, 10, 2, want.data());
  EXPECT_EQ(std::vector<float>(got.begin() + 399 * 2, got.begin() + 400 * 2), want);
  EXPECT_EQ(std::vector<float>(got.end() - 2, got.end()),
            std::vector<float>(first.begin() + 10, first.begin() + 12));
  EXPECT_EQ(store.Stats()[0].rows, 1000);
  EXPECT_EQ(store.Pull(3, {1000}, absl::MakeSpan(out).subspan(0, 2)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.Stats()[0].rows, 1000);
}

// A capacity of 1,000 rows: a pull of 1,500 new ids is refused and creates none; a pull of
// 1,000 is served.
TEST(EmbeddingStore, APullBeyondTheCapacityCreatesNothing) {
  TableConfig t = Table(4, "cap", 4, 10);
  t.capacity = 1000;
  auto created = EmbeddingStore::Create({t}, StoreOptions{42, 8});
  ASSERT_TRUE(created.ok()) << created.status();
  EmbeddingStore& store = **created;
  std::vector<float> out(1500 * 4);
  const Status s = store.Pull(4, Ids(0, 1500), absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("table 'cap' (id 4): the table is full: this pull needs 1500 new rows; "
                        "this shard holds 0 of its 1000-row share"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("tables.cap.capacity"));
  EXPECT_EQ(store.Stats()[0].rows, 0);
  EXPECT_EQ(store.MemoryBytes(), 0);
  PullOrDie(store, 4, Ids(500, 1000), 4);
  EXPECT_EQ(store.Stats()[0].rows, 1000);
  PullOrDie(store, 4, Ids(500, 1000), 4);  // held rows: served at the bound
  EXPECT_EQ(store.Stats()[0].refused_pulls, 1u);
}

// Threads pulling new ids (overlapping between threads) against a small budget and a capacity:
// the rows never exceed either bound, every served row is its init, the rows held are exactly the
// served pulls' ids, and the reservations are exact: once the threads stop, a pull of one row
// more than the room left is refused and creates nothing, and a pull of exactly the room is
// served.
TEST(EmbeddingStore, ConcurrentPullsNeverExceedTheBounds) {
  constexpr int kThreads = 8, kBatch = 37, kRounds = 200;
  const int64_t row = kSgdDim2RowBytes;
  for (const bool by_capacity : {false, true}) {
    SCOPED_TRACE(by_capacity ? "capacity" : "budget");
    constexpr int64_t kLimit = 2000;
    StoreOptions o{11, 8, /*threads=*/2};
    TableConfig t = Table(1, "hot", 2, 10);
    if (by_capacity) {
      t.capacity = kLimit;
    } else {
      o.memory_budget_bytes = kLimit * row;
    }
    auto created = EmbeddingStore::Create({t}, o);
    ASSERT_TRUE(created.ok()) << created.status();
    EmbeddingStore& store = **created;
    std::atomic<int64_t> max_rows{0};
    std::vector<std::thread> threads;
    std::latch start(kThreads + 1);
    std::atomic<bool> stop{false};
    // A watcher samples the row count while the pullers run.
    threads.emplace_back([&] {
      start.arrive_and_wait();
      while (!stop.load()) {
        const int64_t rows = store.Stats()[0].rows;
        if (rows > max_rows.load()) max_rows.store(rows);
      }
    });
    // The first id of each thread's served batches.
    std::vector<std::vector<uint64_t>> served(kThreads);
    for (int th = 0; th < kThreads; ++th) {
      threads.emplace_back([&, th] {
        start.arrive_and_wait();
        std::vector<float> out(kBatch * 2), want(2);
        for (int r = 0; r < kRounds; ++r) {
          // Half of each batch is shared with the next thread's batch of the same round.
          const std::vector<uint64_t> ids =
              Ids(static_cast<uint64_t>(r * kThreads + th) * (kBatch / 2 + 1), kBatch);
          const Status s = store.Pull(1, ids, absl::MakeSpan(out));
          if (absl::IsResourceExhausted(s)) continue;
          ASSERT_TRUE(s.ok()) << s;
          served[th].push_back(ids[0]);
          for (int k = 0; k < kBatch; ++k) {
            InitRow(11, 1, ids[k], 10, 2, want.data());
            ASSERT_EQ(out[2 * k], want[0]);
            ASSERT_EQ(out[2 * k + 1], want[1]);
          }
        }
      });
    }
    for (size_t i = 1; i < threads.size(); ++i) threads[i].join();
    stop.store(true);
    threads[0].join();
    const TableStats st = store.Stats()[0];
    EXPECT_LE(max_rows.load(), kLimit);
    EXPECT_LE(st.rows, kLimit);
    EXPECT_GT(st.refused_pulls, 0u);
    // The rows are exactly the ids of the served pulls: a refused pull created none of its own.
    std::set<uint64_t> want_ids;
    for (const std::vector<uint64_t>& firsts : served) {
      for (uint64_t first : firsts) {
        for (uint64_t id : Ids(first, kBatch)) want_ids.insert(id);
      }
    }
    auto dump = store.DumpTable(1);
    ASSERT_TRUE(dump.ok());
    EXPECT_EQ(dump->ids, std::vector<uint64_t>(want_ids.begin(), want_ids.end()));
    // No reservation leaked: exactly the room left can still be pulled, and no more.
    const int64_t room = kLimit - st.rows;
    ASSERT_GE(room, 0);
    ASSERT_LT(room, int64_t{kBatch});  // the threads stopped being served only near the bound
    std::vector<float> out((room + 1) * 2);
    EXPECT_EQ(store.Pull(1, Ids(uint64_t{1} << 40, room + 1), absl::MakeSpan(out)).code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(store.Stats()[0].rows, st.rows) << "a refused pull created rows";
    EXPECT_TRUE(
        store.Pull(1, Ids(uint64_t{1} << 41, room), absl::MakeSpan(out).subspan(0, room * 2)).ok());
    EXPECT_EQ(store.Stats()[0].rows, kLimit);
  }
}

}  // namespace
}  // namespace sift::embedding
