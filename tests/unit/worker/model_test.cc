// Model: parameter layout and counts (model-spec 3.9), initialisers, initial-loss sanity at the
// reference dims, CPU backend vs reference backend, determinism, config/input validation and the
// inference mode of all three models. Gradients are checked by finite differences in
// model_gradient_test.cc.
#include "worker/models/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/worker/model_test_util.h"
#include "worker/batch_keys.h"

namespace sift::worker {
namespace {

using model_testing::ExpectOutcomesClose;
using model_testing::FillRows;
using model_testing::ForwardBackward;
using model_testing::InitNoisy;
using model_testing::MakeBatch;
using model_testing::Outcome;
using model_testing::ScaledError;
using model_testing::SmallConfig;

std::unique_ptr<Model> MustCreate(const ModelConfig& c, kernels::Backend* be, int64_t max_batch) {
  auto m = Model::Create(c, be, max_batch);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Sum of tensor sizes per name prefix (the part before the first '/').
std::map<std::string, int64_t> BlockCounts(const Model& m) {
  std::map<std::string, int64_t> counts;
  for (const ParamTensor& t : m.param_layout()) {
    counts[t.name.substr(0, t.name.find('/'))] += t.size();
  }
  return counts;
}

TEST(ModelTest, ParameterCountsMatchTheReferenceInventory) {
  auto be = kernels::CreateReferenceBackend();
  ModelConfig c;  // reference defaults: D = 16, F = 2, UF = 1, H = 96
  auto sim = MustCreate(c, be.get(), 1);
  ASSERT_NE(sim, nullptr);
  EXPECT_EQ(sim->parameters().size(), 223212u);
  EXPECT_EQ(sim->gradients().size(), 223212u);
  auto counts = BlockCounts(*sim);
  EXPECT_EQ(counts["gsu_mlp"], 16601);         // 80x200 + 200, PReLU 200, 200x1 + 1
  EXPECT_EQ(counts["classifier_mlp"], 58241);  // 208 -> 200 -> 80 -> 1
  EXPECT_EQ(counts["aux_mlp"], 18001);         // 128 -> 100 -> 50 -> 1
  EXPECT_EQ(counts["gru"], 37440);
  EXPECT_EQ(counts["query_dense"] + counts["attention_mlp"], 37345);  // DIEN attention
  EXPECT_EQ(counts["augru"], 55584);
  EXPECT_EQ(counts.size(), 7u);

  c.type = ModelType::kDien;
  auto dien = MustCreate(c, be.get(), 1);
  counts = BlockCounts(*dien);
  EXPECT_EQ(counts["classifier_mlp"], 144 * 200 + 200 + 200 + 200 * 80 + 80 + 80 + 80 + 1);
  EXPECT_EQ(counts.count("gsu_mlp"), 0u);
  EXPECT_EQ(dien->parameters().size(), 223212u - 16601 - 58241 + 45441);
  c.type = ModelType::kDin;
  auto din = MustCreate(c, be.get(), 1);
  EXPECT_EQ(din->parameters().size(), 80u * 200 + 200 + 200 + 200 * 80 + 80 + 80 + 80 + 1);
}

// The layout is the blocks' registration order (worker/README.md), pinned tensor by tensor for
// every model type: checkpoints and the parity runs depend on it.
TEST(ModelTest, LayoutIsTheBlocksRegistrationOrder) {
  // An MLP's tensors: dense_<i>/{kernel, bias[, prelu_slope]}, the 1-unit output layer last.
  const auto mlp = [](const std::string& name, size_t hidden, bool prelu) {
    std::vector<std::string> t;
    for (size_t i = 0; i <= hidden; ++i) {
      const std::string layer = name + "/dense_" + std::to_string(i) + "/";
      t.push_back(layer + "kernel");
      t.push_back(layer + "bias");
      if (prelu && i < hidden) t.push_back(layer + "prelu_slope");
    }
    return t;
  };
  const auto cat = [](std::vector<std::vector<std::string>> parts) {
    std::vector<std::string> all;
    for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
    return all;
  };
  const std::vector<std::string> dien = cat(
      {mlp("aux_mlp", 2, false),
       {"gru/input_kernel", "gru/recurrent_kernel", "gru/input_bias", "gru/recurrent_bias",
        "query_dense/kernel", "query_dense/bias", "query_dense/prelu_slope"},
       mlp("attention_mlp", 2, false),
       {"augru/gate_kernel", "augru/gate_bias", "augru/candidate_kernel", "augru/candidate_bias"}});
  const std::vector<std::string> time = {"time_embedding/table", "time_embedding/query"};
  struct Want {
    const char* what;
    ModelConfig config;
    std::vector<std::string> names;
  };
  ModelConfig sim, sim_time, sim_gsu_time, sim_hard_time, dien_only, din;
  sim_time.time_embedding = true;
  sim_gsu_time = sim_time;
  sim_gsu_time.gsu_time = true;
  sim_hard_time = sim_time;
  sim_hard_time.gsu = Gsu::kHard;
  dien_only.type = ModelType::kDien;
  din.type = ModelType::kDin;
  const Want wants[] = {
      {"sim", sim, cat({mlp("gsu_mlp", 1, true), mlp("classifier_mlp", 2, true), dien})},
      {"sim time", sim_time,
       cat({mlp("gsu_mlp", 1, true), mlp("classifier_mlp", 2, true), dien, time})},
      {"sim gsu time", sim_gsu_time,
       cat({mlp("gsu_mlp", 1, true),
            mlp("classifier_mlp", 2, true),
            dien,
            time,
            {"gsu_time/query"}})},
      {"sim hard time", sim_hard_time, cat({mlp("classifier_mlp", 2, true), dien, time})},
      {"dien", dien_only, cat({mlp("classifier_mlp", 2, true), dien})},
      {"din", din, mlp("classifier_mlp", 2, true)},
  };
  auto be = kernels::CreateReferenceBackend();
  for (const Want& w : wants) {
    auto m = MustCreate(w.config, be.get(), 1);
    std::vector<std::string> names;
    for (const ParamTensor& t : m->param_layout()) names.push_back(t.name);
    EXPECT_EQ(names, w.names) << w.what;
  }
}

TEST(ModelTest, LayoutIsPackedAndNamed) {
  auto be = kernels::CreateReferenceBackend();
  auto m = MustCreate(ModelConfig{}, be.get(), 1);
  const auto& layout = m->param_layout();
  ASSERT_FALSE(layout.empty());
  int64_t offset = 0;
  for (const ParamTensor& t : layout) {
    EXPECT_EQ(t.offset, offset) << t.name;
    offset += t.size();
  }
  EXPECT_EQ(offset, static_cast<int64_t>(m->parameters().size()));
  EXPECT_EQ(layout.front().name, "gsu_mlp/dense_0/kernel");
  EXPECT_EQ(layout.front().shape, (std::vector<int64_t>{80, 200}));
  auto find = [&](const std::string& name) -> const ParamTensor* {
    for (const ParamTensor& t : layout) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  for (const char* name :
       {"gsu_mlp/dense_0/prelu_slope", "classifier_mlp/dense_2/kernel", "aux_mlp/dense_2/bias",
        "gru/input_kernel", "gru/recurrent_kernel", "gru/input_bias", "gru/recurrent_bias",
        "query_dense/kernel", "query_dense/prelu_slope", "attention_mlp/dense_2/kernel",
        "augru/gate_kernel", "augru/gate_bias", "augru/candidate_kernel", "augru/candidate_bias"}) {
    EXPECT_NE(find(name), nullptr) << name;
  }
  EXPECT_EQ(find("gru/recurrent_kernel")->shape, (std::vector<int64_t>{96, 288}));
  EXPECT_EQ(find("augru/gate_kernel")->shape, (std::vector<int64_t>{192, 192}));
  EXPECT_EQ(find("augru/candidate_kernel")->shape, (std::vector<int64_t>{192, 96}));
  EXPECT_EQ(find("aux_mlp/dense_0/prelu_slope"), nullptr);  // sigmoid hidden layers
}

TEST(ModelTest, InitialisersFollowTheReference) {
  auto be = kernels::CreateReferenceBackend();
  auto m = MustCreate(ModelConfig{}, be.get(), 1);
  ASSERT_TRUE(m->InitParameters(7).ok());
  const float* p = m->parameters().data();
  for (const ParamTensor& t : m->param_layout()) {
    const float* x = p + t.offset;
    const std::string& n = t.name;
    auto ends_with = [&](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with("prelu_slope")) {
      for (int64_t i = 0; i < t.size(); ++i) ASSERT_EQ(x[i], 0.1f) << n;
    } else if (n == "augru/gate_bias") {
      for (int64_t i = 0; i < t.size(); ++i) ASSERT_EQ(x[i], 1.0f) << n;
    } else if (ends_with("bias")) {
      for (int64_t i = 0; i < t.size(); ++i) ASSERT_EQ(x[i], 0.0f) << n;
    } else if (n == "gru/recurrent_kernel") {
      // Orthonormal rows: W W^T = I (H x H).
      const int64_t rows = t.shape[0], cols = t.shape[1];
      double worst = 0;
      for (int64_t a = 0; a < rows; ++a) {
        for (int64_t b = 0; b < rows; ++b) {
          double dot = 0;
          for (int64_t j = 0; j < cols; ++j) dot += double{x[a * cols + j]} * x[b * cols + j];
          worst = std::max(worst, std::abs(dot - (a == b ? 1.0 : 0.0)));
        }
      }
      EXPECT_LT(worst, 1e-5) << n;
    } else {  // Glorot-uniform kernel
      const double limit = std::sqrt(6.0 / static_cast<double>(t.shape[0] + t.shape[1]));
      double sum_sq = 0;
      for (int64_t i = 0; i < t.size(); ++i) {
        ASSERT_LE(std::abs(x[i]), limit) << n;
        sum_sq += double{x[i]} * x[i];
      }
      // Variance of U(-l, l) is l^2 / 3; loose bound for the smallest tensors (40x1).
      const double var = sum_sq / static_cast<double>(t.size());
      EXPECT_NEAR(var, limit * limit / 3, 0.5 * limit * limit / 3) << n;
    }
  }
  // A pure function of the seed; another seed differs.
  std::vector<float> first(m->parameters().begin(), m->parameters().end());
  ASSERT_TRUE(m->InitParameters(7).ok());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), m->parameters().begin()));
  ASSERT_TRUE(m->InitParameters(8).ok());
  EXPECT_FALSE(std::equal(first.begin(), first.end(), m->parameters().begin()));
}

// A tensor's initial values depend on the seed, its name and shape only: SIM and DIEN share them.
TEST(ModelTest, SharedTensorsInitialiseIdenticallyAcrossModels) {
  auto be = kernels::CreateReferenceBackend();
  ModelConfig c;
  auto sim = MustCreate(c, be.get(), 1);
  c.type = ModelType::kDien;
  auto dien = MustCreate(c, be.get(), 1);
  ASSERT_TRUE(sim->InitParameters(3).ok());
  ASSERT_TRUE(dien->InitParameters(3).ok());
  int compared = 0;
  for (const ParamTensor& a : sim->param_layout()) {
    for (const ParamTensor& b : dien->param_layout()) {
      if (a.name != b.name || a.shape != b.shape) continue;
      EXPECT_TRUE(std::equal(sim->parameters().begin() + a.offset,
                             sim->parameters().begin() + a.offset + a.size(),
                             dien->parameters().begin() + b.offset))
          << a.name;
      ++compared;
    }
  }
  EXPECT_GE(compared, 15);
}

// Reference dims and reference-like embedding init (tiny rows): classification loss ~ ln 2,
// aux ~ (>= 2 ln 2 per valid pair) * fraction of valid pairs (model-spec 4).
TEST(ModelTest, InitialLossesAreSane) {
  auto be = kernels::CreateCpuBackend(2);
  const int B = 64;
  for (ModelType type : {ModelType::kSim, ModelType::kDien, ModelType::kDin}) {
    ModelConfig c;
    c.type = type;
    auto m = MustCreate(c, be.get(), B);
    ASSERT_NE(m, nullptr);
    ASSERT_TRUE(m->InitParameters(1).ok());
    std::vector<int> lens(B);
    Rng rng(5);
    for (int& l : lens) l = 1 + static_cast<int>(rng.Below(100));
    data::Batch batch = MakeBatch(c, lens, 6, 100000, 1000, 5000);
    BatchKeys keys;
    ASSERT_TRUE(BuildBatchKeys(batch, m->key_usage(ForwardMode::kTrain), 16, &keys).ok());
    FillRows(&keys, 7, 1e-3f);  // ~ U(+-1/sqrt(R)) for R ~ 1e6 rows
    auto losses = m->Forward(batch, keys, ForwardMode::kTrain);
    ASSERT_TRUE(losses.ok()) << losses.status();
    EXPECT_NEAR(losses->classification, std::log(2.0), 0.01) << ModelTypeName(type);
    double valid = 0;
    for (int b = 0; b < B; ++b) {
      for (int t = 1; t < c.short_len; ++t) valid += batch.ShortMask(b)[t];
    }
    const double fraction = valid / (B * (c.short_len - 1));
    if (type == ModelType::kDin) {
      EXPECT_EQ(losses->aux, 0.0);
    } else {
      const double per_pair = losses->aux / fraction;
      EXPECT_GT(per_pair, 1.38) << ModelTypeName(type);
      EXPECT_LT(per_pair, 1.8) << ModelTypeName(type);
      std::printf("%s: classification %.5f aux %.5f (valid pair fraction %.3f, per pair %.4f)\n",
                  ModelTypeName(type), losses->classification, losses->aux, fraction, per_pair);
    }
    EXPECT_DOUBLE_EQ(losses->total, losses->classification + losses->aux);
  }
}

// ---- Fixtures over small dims ----

class ModelTypeTest : public ::testing::TestWithParam<ModelType> {};

// The CPU backend (oneDNN GEMMs, fast exp/sigmoid/tanh with <= 1e-6 relative error, other summation
// orders) against the reference on the same model and batch. Per array, max |cpu - ref| relative
// to the array's largest magnitude: logits/losses within 1e-5, gradients within 1e-4 (float
// rounding through ~20 ops; measured values are printed, typically ~1e-6).
TEST_P(ModelTypeTest, CpuBackendMatchesReference) {
  ModelConfig c = SmallConfig(GetParam());
  c.embedding_dim = 8;
  c.long_len = 20;
  c.short_len = 6;
  c.top_k = 5;
  c.gru_hidden = 12;
  c.stage_one_mlp = {16};
  c.stage_two_mlp = {16, 8};
  c.aux_mlp = {10, 6};
  c.attention_mlp = {10, 5};
  auto ref_be = kernels::CreateReferenceBackend();
  auto cpu_be = kernels::CreateCpuBackend(2);
  auto ref = MustCreate(c, ref_be.get(), 40);
  auto cpu = MustCreate(c, cpu_be.get(), 40);
  std::vector<int> lens;
  Rng rng(21);
  for (int b = 0; b < 33; ++b) lens.push_back(static_cast<int>(rng.Below(27)));  // 0..26 of 26
  data::Batch batch = MakeBatch(c, lens, 22, 50, 7, 9);
  BatchKeys keys;
  ASSERT_TRUE(BuildBatchKeys(batch, ref->key_usage(ForwardMode::kTrain), 8, &keys).ok());
  FillRows(&keys, 23, 0.3f);
  InitNoisy(ref.get(), 24, 0.05f);
  std::copy(ref->parameters().begin(), ref->parameters().end(), cpu->parameters().begin());
  const Outcome want = ForwardBackward(ref.get(), batch, &keys);
  const Outcome got = ForwardBackward(cpu.get(), batch, &keys);
  ExpectOutcomesClose(got, want, ref->param_layout(), {1e-5, 1e-5, 1e-4},
                      absl::StrCat(ModelTypeName(GetParam()), " cpu vs reference"));
}

// Two Forward/Backward runs (and a fresh model with the same seed) are bit-identical, on both
// backends.
TEST_P(ModelTypeTest, RunsAreBitIdentical) {
  const ModelConfig c = SmallConfig(GetParam());
  for (bool cpu : {false, true}) {
    auto be = cpu ? kernels::CreateCpuBackend(2) : kernels::CreateReferenceBackend();
    data::Batch batch = MakeBatch(c, {10, 4, 7, 1}, 31);
    BatchKeys keys;
    auto a = MustCreate(c, be.get(), 4);
    auto b = MustCreate(c, be.get(), 6);
    ASSERT_TRUE(BuildBatchKeys(batch, a->key_usage(ForwardMode::kTrain), 4, &keys).ok());
    FillRows(&keys, 32, 0.5f);
    ASSERT_TRUE(a->InitParameters(33).ok());
    ASSERT_TRUE(b->InitParameters(33).ok());
    const Outcome r1 = ForwardBackward(a.get(), batch, &keys);
    const Outcome r2 = ForwardBackward(a.get(), batch, &keys);
    const Outcome r3 = ForwardBackward(b.get(), batch, &keys);
    for (const Outcome* r : {&r2, &r3}) {
      EXPECT_EQ(r->losses.total, r1.losses.total);
      EXPECT_EQ(r->logits, r1.logits);
      EXPECT_EQ(r->dense, r1.dense);
      EXPECT_EQ(r->emb, r1.emb);
    }
  }
}

// Inference reads no negatives (key_usage says so), skips the aux branch, reports the
// classification loss only and gives the same logits as training mode.
TEST_P(ModelTypeTest, InferenceRunsWithoutNegatives) {
  const ModelConfig c = SmallConfig(GetParam());
  auto be = kernels::CreateReferenceBackend();
  auto m = MustCreate(c, be.get(), 5);
  ASSERT_TRUE(m->InitParameters(41).ok());
  data::Batch batch = MakeBatch(c, {10, 3, 6, 1, 8}, 42);
  const KeyUsage usage = m->key_usage(ForwardMode::kInference);
  EXPECT_FALSE(usage.short_negatives);
  EXPECT_EQ(usage.long_history, GetParam() != ModelType::kDien);
  BatchKeys inf_keys, train_keys;
  ASSERT_TRUE(BuildBatchKeys(batch, usage, 4, &inf_keys).ok());
  ASSERT_TRUE(inf_keys.short_neg_inv.empty());
  FillRows(&inf_keys, 43, 0.5f);
  auto inf = m->Forward(batch, inf_keys, ForwardMode::kInference);
  ASSERT_TRUE(inf.ok()) << inf.status();
  EXPECT_EQ(inf->aux, 0.0);
  EXPECT_EQ(inf->total, inf->classification);
  EXPECT_TRUE(std::isfinite(inf->total));
  const std::vector<float> inf_logits(m->logits().begin(), m->logits().end());
  ASSERT_EQ(inf_logits.size(), 5u);
  EXPECT_EQ(m->Backward(&inf_keys).code(), absl::StatusCode::kFailedPrecondition);

  // Same rows in a training batch's keys (a superset of ids): same logits and classification.
  ASSERT_TRUE(BuildBatchKeys(batch, m->key_usage(ForwardMode::kTrain), 4, &train_keys).ok());
  for (size_t t = 0; t < train_keys.tables.size(); ++t) {
    const TableKeys& small = inf_keys.tables[t];
    TableKeys& big = train_keys.tables[t];
    Rng rng(44 + t);
    for (float& x : big.rows) x = static_cast<float>(rng.Uniform());
    for (size_t k = 0; k < small.keys.size(); ++k) {
      const size_t j = static_cast<size_t>(
          std::lower_bound(big.keys.begin(), big.keys.end(), small.keys[k]) - big.keys.begin());
      ASSERT_LT(j, big.keys.size());
      std::copy(small.rows.begin() + k * 4, small.rows.begin() + (k + 1) * 4,
                big.rows.begin() + j * 4);
    }
  }
  auto eval = m->Forward(batch, train_keys, ForwardMode::kEval);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(std::vector<float>(m->logits().begin(), m->logits().end()), inf_logits);
  EXPECT_EQ(eval->classification, inf->classification);
  if (GetParam() == ModelType::kDin) {
    EXPECT_EQ(eval->aux, 0.0);
  } else {
    EXPECT_GT(eval->aux, 0.0);
  }
  // No Backward after kEval.
  EXPECT_EQ(m->Backward(&train_keys).code(), absl::StatusCode::kFailedPrecondition);
  // Training mode needs the negatives (SIM, DIEN): inference keys are rejected, naming them.
  if (GetParam() != ModelType::kDin) {
    auto bad = m->Forward(batch, inf_keys, ForwardMode::kTrain);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("short negatives"), std::string::npos) << bad.status();
  }
}

// Rows that differ only in padding slots get identical logits (padding contributes nothing).
TEST_P(ModelTypeTest, PaddingIdsDoNotMatter) {
  const ModelConfig c = SmallConfig(GetParam());
  auto be = kernels::CreateReferenceBackend();
  auto m = MustCreate(c, be.get(), 3);
  ASSERT_TRUE(m->InitParameters(51).ok());
  data::Batch batch = MakeBatch(c, {10, 5, 2}, 52);
  BatchKeys keys;
  ASSERT_TRUE(BuildBatchKeys(batch, m->key_usage(ForwardMode::kTrain), 4, &keys).ok());
  FillRows(&keys, 53, 0.5f);
  const std::vector<float> before = ForwardBackward(m.get(), batch, &keys).logits;
  // Give masked slots of row 2 (2 valid slots of 10) real ids present in the batch.
  for (int f = 0; f < c.item_features; ++f) {
    for (int j = 0; j < c.long_len; ++j) batch.LongHist(f, 2)[j] = batch.LongHist(f, 0)[j];
    for (int j = 0; j < c.short_len - 2; ++j) {
      batch.ShortHist(f, 2)[j] = batch.ShortHist(f, 0)[j];
      batch.ShortNeg(f, 2)[j] = batch.ShortNeg(f, 0)[j];
    }
  }
  BatchKeys keys2;
  ASSERT_TRUE(BuildBatchKeys(batch, m->key_usage(ForwardMode::kTrain), 4, &keys2).ok());
  ASSERT_EQ(keys2.tables[1].keys, keys.tables[1].keys);  // the same ids, so the same rows
  for (size_t t = 0; t < keys.tables.size(); ++t) keys2.tables[t].rows = keys.tables[t].rows;
  const Outcome with_ids = ForwardBackward(m.get(), batch, &keys2);
  EXPECT_EQ(with_ids.logits, before);
  // ... and the same gradients: masked uses send nothing to the tables or the dense weights.
  const Outcome without = [&] {
    data::Batch original = MakeBatch(c, {10, 5, 2}, 52);
    return ForwardBackward(m.get(), original, &keys);
  }();
  EXPECT_EQ(with_ids.dense, without.dense);
  EXPECT_EQ(with_ids.emb, without.emb);
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelTypeTest,
                         ::testing::Values(ModelType::kSim, ModelType::kDien, ModelType::kDin),
                         [](const ::testing::TestParamInfo<ModelType>& p) {
                           return std::string(ModelTypeName(p.param));
                         });

TEST(ModelTest, ConfigValidationNamesTheField) {
  struct Bad {
    const char* field;
    void (*mutate)(ModelConfig*);
  };
  const Bad cases[] = {
      {"embedding_dim", [](ModelConfig* c) { c->embedding_dim = 0; }},
      {"user_features", [](ModelConfig* c) { c->user_features = 0; }},
      {"item_features", [](ModelConfig* c) { c->item_features = -1; }},
      {"long_len", [](ModelConfig* c) { c->long_len = 0; }},
      {"short_len", [](ModelConfig* c) { c->short_len = 1; }},
      {"top_k", [](ModelConfig* c) { c->top_k = 0; }},
      {"gru_hidden", [](ModelConfig* c) { c->gru_hidden = -2; }},
      {"gru_hidden", [](ModelConfig* c) { c->gru_hidden = 9000; }},
      {"short_len", [](ModelConfig* c) { c->short_len = 5000; }},
      {"stage_one_mlp", [](ModelConfig* c) { c->stage_one_mlp.clear(); }},
      {"stage_two_mlp[1]",
       [](ModelConfig* c) {
         c->stage_two_mlp = {10, 0};
       }},
      {"aux_mlp", [](ModelConfig* c) { c->aux_mlp = {}; }},
      {"attention_mlp[0]", [](ModelConfig* c) { c->attention_mlp = {-3}; }},
  };
  EXPECT_TRUE(ValidateModelConfig(ModelConfig{}).ok());
  for (const Bad& bad : cases) {
    ModelConfig c;
    bad.mutate(&c);
    Status s = ValidateModelConfig(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.field;
    EXPECT_NE(s.message().find(bad.field), std::string::npos) << s;
    auto be = kernels::CreateReferenceBackend();
    EXPECT_FALSE(Model::Create(c, be.get(), 4).ok()) << bad.field;
  }
  // Lengths a model does not read are not checked: DIEN ignores long_len, DIN needs no aux net.
  ModelConfig dien;
  dien.type = ModelType::kDien;
  dien.long_len = 0;
  EXPECT_TRUE(ValidateModelConfig(dien).ok());
  ModelConfig din;
  din.type = ModelType::kDin;
  din.aux_mlp.clear();
  din.short_len = 0;
  EXPECT_TRUE(ValidateModelConfig(din).ok());
  auto be = kernels::CreateReferenceBackend();
  EXPECT_FALSE(Model::Create(ModelConfig{}, be.get(), 0).ok());
  EXPECT_FALSE(Model::Create(ModelConfig{}, nullptr, 4).ok());
}

// DIN reads any history split, including no short part at all.
TEST(ModelTest, DinWithoutShortHistory) {
  ModelConfig c = SmallConfig(ModelType::kDin);
  c.long_len = 7;
  c.short_len = 0;
  auto be = kernels::CreateReferenceBackend();
  auto m = MustCreate(c, be.get(), 3);
  ASSERT_TRUE(m->InitParameters(71).ok());
  data::Batch batch = MakeBatch(c, {7, 2, 0}, 72);
  BatchKeys keys;
  ASSERT_TRUE(BuildBatchKeys(batch, m->key_usage(ForwardMode::kTrain), 4, &keys).ok());
  FillRows(&keys, 73, 0.5f);
  const Outcome r = ForwardBackward(m.get(), batch, &keys);
  EXPECT_TRUE(std::isfinite(r.losses.total));
  EXPECT_EQ(r.losses.aux, 0.0);
  ASSERT_EQ(r.logits.size(), 3u);
  EXPECT_TRUE(std::any_of(r.emb[1].begin(), r.emb[1].end(), [](float g) { return g != 0.0f; }));
}

TEST(ModelTest, ModelTypeNames) {
  for (ModelType t : {ModelType::kSim, ModelType::kDien, ModelType::kDin}) {
    auto parsed = ParseModelType(ModelTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  auto bad = ParseModelType("dnn");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dnn"), std::string::npos);
}

TEST(ModelTest, MismatchedInputsAreRejected) {
  const ModelConfig c = SmallConfig(ModelType::kSim);
  auto be = kernels::CreateReferenceBackend();
  auto m = MustCreate(c, be.get(), 2);
  ASSERT_TRUE(m->InitParameters(61).ok());
  data::Batch batch = MakeBatch(c, {10, 4, 3}, 62);
  BatchKeys keys;
  ASSERT_TRUE(BuildBatchKeys(batch, m->key_usage(ForwardMode::kTrain), 4, &keys).ok());
  FillRows(&keys, 63, 0.5f);
  // 3 rows > max_batch 2.
  auto r = m->Forward(batch, keys, ForwardMode::kTrain);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("max_batch"), std::string::npos) << r.status();
  EXPECT_TRUE(m->logits().empty());
  EXPECT_EQ(m->Backward(&keys).code(), absl::StatusCode::kFailedPrecondition);
  // Keys built for 3 rows, batch cut to 2.
  batch.size = 2;
  r = m->Forward(batch, keys, ForwardMode::kTrain);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("another batch"), std::string::npos) << r.status();
  ASSERT_TRUE(BuildBatchKeys(batch, m->key_usage(ForwardMode::kTrain), 4, &keys).ok());
  FillRows(&keys, 63, 0.5f);
  EXPECT_TRUE(m->Forward(batch, keys, ForwardMode::kTrain).ok());
  // A corrupt inverse index is caught, not read out of bounds.
  keys.long_inv[3] = 1000;
  r = m->Forward(batch, keys, ForwardMode::kTrain);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("long history"), std::string::npos) << r.status();
  keys.long_inv[3] = -1;
  // Rows not sized for the embedding dim.
  keys.tables[0].rows.push_back(0.0f);
  EXPECT_FALSE(m->Forward(batch, keys, ForwardMode::kTrain).ok());
  keys.tables[0].rows.pop_back();
  // A batch shaped for other dims.
  ModelConfig other = c;
  other.short_len = 5;
  data::Batch wrong = MakeBatch(other, {3, 2}, 64);
  BatchKeys wrong_keys;
  ASSERT_TRUE(BuildBatchKeys(wrong, m->key_usage(ForwardMode::kTrain), 4, &wrong_keys).ok());
  r = m->Forward(wrong, wrong_keys, ForwardMode::kTrain);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("short_len"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace sift::worker
