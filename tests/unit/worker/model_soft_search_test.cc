// SIM's soft search over long histories (ModelConfig::soft_search_chunk, docs/training.md "Lifelong
// sequences"): the streamed GSU and ESU — chunks of samples, slots gathered again in the backward
// pass — against the dense formulation on the same model and batch, up to a few thousand slots,
// with and without the time embedding; the automatic chunk beyond 4,096 slots; the config checks.
// Its gradients are checked by finite differences in model_gradient_test.cc (sim_streamed*).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/worker/model_test_util.h"
#include "worker/batch_keys.h"
#include "worker/models/model.h"

namespace sift::worker {
namespace {

using model_testing::ExpectOutcomesClose;
using model_testing::FillRows;
using model_testing::ForwardBackward;
using model_testing::InitNoisy;
using model_testing::MakeBatch;
using model_testing::Outcome;
using model_testing::SmallConfig;

// The time terms a soft search runs with: none, the ESU's time embedding, and that with the GSU's
// time term (ModelConfig::gsu_time).
enum class Time { kNone, kEsu, kEsuAndGsu };
constexpr Time kTimes[] = {Time::kNone, Time::kEsu, Time::kEsuAndGsu};
const char* TimeName(Time t) {
  return t == Time::kNone ? "" : t == Time::kEsu ? " +time" : " +time +gsu_time";
}

ModelConfig LongSoftConfig(int long_len, Time time) {
  ModelConfig c = SmallConfig(ModelType::kSim);
  c.embedding_dim = 8;
  c.long_len = long_len;
  c.short_len = 6;
  c.top_k = 50;
  c.time_embedding = time != Time::kNone;
  c.gsu_time = time == Time::kEsuAndGsu;
  return c;
}

// Rows with a full window, partial ones, fewer long slots than top_k, and none (<= T_S), in no
// order (ChunksSkipThePadding groups them).
std::vector<int> LongLens(const ModelConfig& c, int rows, uint64_t seed) {
  const int T = c.long_len + c.short_len;
  std::vector<int> lens = {T, 3, c.short_len + 20};
  Rng rng(seed);
  while (static_cast<int>(lens.size()) < rows) lens.push_back(1 + static_cast<int>(rng.Below(T)));
  return lens;
}

// The keys of `batch` as SIM reads it in training (every slot kind: KeyUsage{}), with pulled
// rows of width dim, U(-scale, scale) from `seed`.
BatchKeys TrainKeys(const data::Batch& batch, uint64_t seed, float scale, int dim = 8) {
  BatchKeys keys;
  EXPECT_TRUE(BuildBatchKeys(batch, KeyUsage{}, dim, &keys).ok());
  FillRows(&keys, seed, scale);
  return keys;
}

struct SearchRun {
  Outcome outcome;
  std::vector<ParamTensor> layout;
  int64_t long_slots = 0;  // Model::long_slots_searched of the Forward
};

// One Forward + Backward of `c` on `backend` from the same parameters (seed), batch and rows.
SearchRun RunModel(const ModelConfig& c, kernels::Backend* backend, const data::Batch& batch,
                   const BatchKeys& keys_in) {
  SearchRun r;
  auto m = Model::Create(c, backend, 40);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return r;
  InitNoisy(m->get(), 31, 0.05f);
  BatchKeys keys = keys_in;
  r.outcome = ForwardBackward(m->get(), batch, &keys);
  r.layout = (*m)->param_layout();
  r.long_slots = (*m)->long_slots_searched();
  return r;
}

// The streamed soft search is the dense one with other summation orders in two places only: the
// target rows' gradient (dq) gathers its ESU, DIEN and GSU terms in another order, and a table's
// row gradient sums its long-slot terms before its target and short ones. The forward pass, the
// losses and every dense gradient are the same ops on the same rows: bit for bit on the
// reference backend. The embedding gradients: each row's sum of m float terms in another order
// differs by at most 2(m-1)u·sum|terms| (u = 2^-24); with m up to ~B·T_L = 2·10^4 repeated ids
// here that bound is loose, and 1e-4 of the table's scale (the backends' tolerance in
// model_test.cc) holds it with a margin for cancellations.
constexpr model_testing::OutcomeTolerances kExactForward = {1e-300, 1e-300, 1e-4};

TEST(ModelSoftSearchTest, StreamedMatchesDenseUpToThousandsOfSlots) {
  auto be = kernels::CreateReferenceBackend();
  for (const int long_len : {6, 200, 2000}) {
    for (const Time time : kTimes) {
      const ModelConfig dense = LongSoftConfig(long_len, time);
      data::Batch batch = MakeBatch(dense, LongLens(dense, 10, long_len), 41, 60, 9, 5);
      const BatchKeys keys = TrainKeys(batch, 42, 0.5f);
      const SearchRun want = RunModel(dense, be.get(), batch, keys);
      for (const int chunk : {1, 3, 10, 16}) {  // 16 > B: one chunk
        ModelConfig streamed = dense;
        streamed.soft_search_chunk = chunk;
        const SearchRun got = RunModel(streamed, be.get(), batch, keys);
        const std::string what =
            absl::StrCat("N=", long_len, TimeName(time), " chunk=", chunk, " vs dense");
        ASSERT_EQ(got.outcome.logits, want.outcome.logits) << what;
        EXPECT_EQ(got.outcome.losses.total, want.outcome.losses.total) << what;
        EXPECT_EQ(got.outcome.dense, want.outcome.dense) << what;
        ExpectOutcomesClose(got.outcome, want.outcome, want.layout, kExactForward, what);
      }
    }
  }
}

// The slots the streamed search visits for rows of these history lengths (MakeBatch: the newest
// L - T_S long slots of a row with L > T_S, none otherwise), as the model documents its chunks:
// consecutive rows packed while (rows + 1) x their common window fits chunk x T_L slots, the
// window from the first to the last slot any of them fills (an empty row: the last slot alone).
int64_t WindowedSlots(const ModelConfig& c, const std::vector<int>& lens, int chunk) {
  const int64_t budget = int64_t{chunk} * c.long_len;
  int64_t total = 0, rows = 0;
  int width = 0;
  for (const int len : lens) {
    const int w = std::max(1, len - c.short_len);  // the window ends at the last slot
    const int grown = std::max(width, w);
    if (rows > 0 && (rows + 1) * grown > budget) {
      total += rows * width;
      rows = 0;
      width = w;
    } else {
      width = grown;
    }
    ++rows;
  }
  return total + rows * width;
}

// Rows grouped by history length (as the trainer's loader gives them: longest first), and the
// same rows shuffled: each chunk searches only the window its rows fill — far fewer slots than
// B x T_L once grouped — and the model is the dense one (bit for bit on the reference backend,
// within the backends' tolerances on the CPU one). Rows with no long slot, with fewer than top_k,
// and with every slot; with and without the time embedding.
TEST(ModelSoftSearchTest, ChunksSkipThePadding) {
  auto ref_be = kernels::CreateReferenceBackend();
  auto cpu_be = kernels::CreateCpuBackend(2);
  for (const Time time : kTimes) {
    const ModelConfig dense = LongSoftConfig(2000, time);
    const int T = dense.long_len + dense.short_len;
    std::vector<int> grouped = {T,  T,  1800, 1500, 1500, 900, 700, 400, 300, 120, 90, 60,
                                40, 30, 20,   12,   8,    7,   6,   6,   5,   3,   1,  1};
    std::vector<int> shuffled = grouped;
    Rng rng(77);
    for (size_t i = shuffled.size() - 1; i > 0; --i) {
      std::swap(shuffled[i], shuffled[static_cast<size_t>(rng.Below(i + 1))]);
    }
    for (const auto* lens : {&grouped, &shuffled}) {
      const bool sorted = lens == &grouped;
      data::Batch batch = MakeBatch(dense, *lens, 71, 3000, 200, 7);
      const BatchKeys keys = TrainKeys(batch, 72, 0.3f);
      const SearchRun want = RunModel(dense, ref_be.get(), batch, keys);
      const int64_t all = static_cast<int64_t>(lens->size()) * dense.long_len;
      EXPECT_EQ(want.long_slots, all);  // the dense path: every slot
      for (const int chunk : {1, 2, 5}) {
        ModelConfig streamed = dense;
        streamed.soft_search_chunk = chunk;
        const std::string what =
            absl::StrCat(sorted ? "grouped" : "shuffled", TimeName(time), " chunk=", chunk);
        const SearchRun got = RunModel(streamed, ref_be.get(), batch, keys);
        EXPECT_EQ(got.long_slots, WindowedSlots(dense, *lens, chunk)) << what;
        if (sorted) {
          EXPECT_LT(got.long_slots * 2, all) << what;
        }
        ASSERT_EQ(got.outcome.logits, want.outcome.logits) << what;
        EXPECT_EQ(got.outcome.losses.total, want.outcome.losses.total) << what;
        EXPECT_EQ(got.outcome.dense, want.outcome.dense) << what;
        ExpectOutcomesClose(got.outcome, want.outcome, want.layout, kExactForward, what);
      }
      ModelConfig streamed = dense;
      streamed.soft_search_chunk = 3;
      const SearchRun got = RunModel(streamed, cpu_be.get(), batch, keys);
      std::vector<ParamTensor> layout;  // as CpuStreamedMatchesReferenceDense below
      for (const ParamTensor& t : want.layout) {
        if (t.name.rfind("aux_mlp/", 0) != 0) layout.push_back(t);
      }
      ExpectOutcomesClose(got.outcome, want.outcome, layout, {1e-5, 1e-5, 1e-4},
                          absl::StrCat(sorted ? "grouped" : "shuffled", TimeName(time),
                                       " cpu chunk=3 vs reference dense"));
    }
  }
}

// The CPU backend's streamed search against the reference backend's dense one (the backends'
// tolerances of model_test.cc: other GEMMs, exp and summation orders; the top-k selections agree
// because the ids come from vocabularies large enough that no two different slots tie).
TEST(ModelSoftSearchTest, CpuStreamedMatchesReferenceDense) {
  auto ref_be = kernels::CreateReferenceBackend();
  auto cpu_be = kernels::CreateCpuBackend(2);
  for (const Time time : kTimes) {
    const ModelConfig dense = LongSoftConfig(3000, time);
    data::Batch batch = MakeBatch(dense, LongLens(dense, 12, 7), 51, 4000, 300, 7);
    const BatchKeys keys = TrainKeys(batch, 52, 0.3f);
    const SearchRun want = RunModel(dense, ref_be.get(), batch, keys);
    ModelConfig streamed = dense;
    streamed.soft_search_chunk = 5;
    const SearchRun got = RunModel(streamed, cpu_be.get(), batch, keys);
    // The aux net (DIEN's, 3.7) does not see the long slots; its CPU-vs-reference agreement is
    // model_test.cc's (its last layer's gradient cancels over positive and negative pairs).
    std::vector<ParamTensor> layout;
    for (const ParamTensor& t : want.layout) {
      if (t.name.rfind("aux_mlp/", 0) != 0) layout.push_back(t);
    }
    ExpectOutcomesClose(got.outcome, want.outcome, layout, {1e-5, 1e-5, 1e-4},
                        absl::StrCat("N=3000", TimeName(time), " cpu streamed vs reference"));
  }
}

// Beyond kDenseSoftSearchMax slots the search streams by itself, in chunks of at most
// kSoftSearchChunkFloats slot floats (here D = 64: 5,096 slots x 192 floats per sample -> chunks
// of 17 samples, 3 of them for 40 rows): the same model as one forced chunk of the whole batch.
TEST(ModelSoftSearchTest, LongWindowsStreamAutomatically) {
  auto be = kernels::CreateCpuBackend(2);
  ModelConfig c = LongSoftConfig(ModelConfig::kDenseSoftSearchMax, Time::kEsu);
  c.embedding_dim = 64;
  auto at_max = Model::Create(c, be.get(), 40);
  ASSERT_TRUE(at_max.ok()) << at_max.status();
  EXPECT_EQ((*at_max)->soft_search_chunk(), 0);  // dense up to the bound
  c.long_len += 1000;
  auto m = Model::Create(c, be.get(), 40);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->batch_long_len(), c.long_len);
  EXPECT_EQ((*m)->soft_search_chunk(), ModelConfig::kSoftSearchChunkFloats / (5096 * 64 * 3));
  ASSERT_EQ((*m)->soft_search_chunk(), 17);
  data::Batch batch = MakeBatch(c, LongLens(c, 40, 9), 61, 5000, 400, 7);
  const BatchKeys keys = TrainKeys(batch, 62, 0.3f, c.embedding_dim);
  ModelConfig one = c;
  one.soft_search_chunk = 40;
  const SearchRun want = RunModel(one, be.get(), batch, keys);
  const SearchRun got = RunModel(c, be.get(), batch, keys);
  ASSERT_EQ(got.outcome.logits, want.outcome.logits);
  EXPECT_EQ(got.outcome.dense, want.outcome.dense);
  ExpectOutcomesClose(got.outcome, want.outcome, want.layout, kExactForward, "auto vs one chunk");
}

TEST(ModelSoftSearchTest, ConfigChecks) {
  ModelConfig c = LongSoftConfig(1 << 16, Time::kNone);
  EXPECT_TRUE(ValidateModelConfig(c).ok());
  c.long_len = (1 << 16) + 1;
  Status st = ValidateModelConfig(c);
  EXPECT_NE(st.message().find("long_len must be in [1, 65536]"), std::string::npos) << st;
  // DIN materialises its history: bounded at 4,096.
  c = LongSoftConfig(5000, Time::kNone);
  c.type = ModelType::kDin;
  st = ValidateModelConfig(c);
  EXPECT_NE(st.message().find("long_len must be <= 4096"), std::string::npos) << st;
  c = LongSoftConfig(100, Time::kNone);
  c.soft_search_chunk = -1;
  st = ValidateModelConfig(c);
  EXPECT_NE(st.message().find("soft_search_chunk must be in [0, 2^24]"), std::string::npos) << st;
  // The GSU's time term needs the soft search and the time embedding.
  c = LongSoftConfig(100, Time::kEsuAndGsu);
  EXPECT_TRUE(ValidateModelConfig(c).ok());
  c.time_embedding = false;
  st = ValidateModelConfig(c);
  EXPECT_NE(st.message().find("gsu_time is the soft search's time term"), std::string::npos) << st;
  EXPECT_NE(st.message().find("time_embedding off"), std::string::npos) << st;
  c = LongSoftConfig(100, Time::kEsuAndGsu);
  c.gsu = Gsu::kHard;
  st = ValidateModelConfig(c);
  EXPECT_NE(st.message().find("gsu hard"), std::string::npos) << st;
}

}  // namespace
}  // namespace sift::worker
