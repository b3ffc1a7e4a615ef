// Whole-model finite-difference gradient checks of SIM, DIEN and DIN (and SIM, DIN with dropout in
// their MLP heads; SIM's hard search, time embedding and streamed soft search) on the reference
// backend:
// Model::Backward's dense and embedding gradients against central differences of
// Forward(kTrain).total, along random directions and for single coordinates of every tensor.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/worker/fd_check.h"
#include "tests/unit/worker/model_test_util.h"
#include "worker/batch_keys.h"
#include "worker/models/model.h"

namespace sift::worker {
namespace {

using fd_check::BestFdError;
using fd_check::kAbsTol;
using fd_check::kRelTol;
using model_testing::FillRows;
using model_testing::InitNoisy;
using model_testing::MakeBatch;
using model_testing::SmallConfig;

struct Case {
  ModelType type;
  std::vector<int> hist_lens;  // per row; T = T_L + T_S = 10
  uint64_t seed;
  const char* name;
  float dropout = 0;  // model.dropout: the masks of one fixed seed make the loss a fixed function
  Gsu gsu = Gsu::kSoft;  // kHard: the 6 long slots are a hard search's K over a window of 50
  bool time_embedding = false;
  int soft_search_chunk = 0;  // > 0: the streamed soft search, this many samples per chunk
  bool gsu_time = false;      // the soft GSU's time term (with time_embedding)
};

// The rows cover: full history, an all-empty long history (3 <= T_S), fewer valid long items than
// top_k (5 -> 1 long item, 7 -> 3), more than top_k (10 -> 6), a short history with padding (2).
const Case kCases[] = {
    {ModelType::kSim, {10, 3, 7, 5, 2}, 11, "sim"},
    {ModelType::kSim, {8}, 12, "sim_batch1"},
    {ModelType::kDien, {10, 3, 7, 2}, 13, "dien"},
    {ModelType::kDien, {9}, 14, "dien_batch1"},
    {ModelType::kDin, {10, 3, 7, 5, 2}, 15, "din"},
    {ModelType::kDin, {6}, 16, "din_batch1"},
    {ModelType::kSim, {10, 3, 7, 5, 2}, 17, "sim_dropout", 0.3f},
    {ModelType::kDin, {10, 3, 7, 5, 2}, 18, "din_dropout", 0.3f},
    {ModelType::kSim, {10, 3, 7, 5, 2}, 19, "sim_hard", 0.0f, Gsu::kHard},
    {ModelType::kSim, {10, 3, 7, 5, 2}, 20, "sim_hard_dropout", 0.3f, Gsu::kHard},
    {ModelType::kSim, {10, 3, 7, 5, 2}, 21, "sim_time", 0.0f, Gsu::kSoft, true},
    {ModelType::kSim, {10, 3, 7, 5, 2}, 22, "sim_hard_time", 0.0f, Gsu::kHard, true},
    {ModelType::kSim, {8}, 23, "sim_hard_time_batch1", 0.0f, Gsu::kHard, true},
    {ModelType::kSim, {10, 3, 7, 5, 2}, 24, "sim_streamed", 0.0f, Gsu::kSoft, false, 2},
    {ModelType::kSim, {10, 3, 7, 5, 2}, 25, "sim_streamed_time_dropout", 0.3f, Gsu::kSoft, true, 2},
    {ModelType::kSim, {10, 3, 7, 5, 2}, 26, "sim_gsu_time", 0.0f, Gsu::kSoft, true, 0, true},
    {ModelType::kSim, {8}, 27, "sim_gsu_time_batch1", 0.0f, Gsu::kSoft, true, 0, true},
    // Seed 29: at seed 28 a unit of the classifier sits within 1e-4 of its PReLU kink (the
    // right derivative equals the analytic gradient, the left one does not), dense or streamed.
    {ModelType::kSim,
     {10, 3, 7, 5, 2},
     29,
     "sim_streamed_gsu_time",
     0.0f,
     Gsu::kSoft,
     true,
     2,
     true},
};

class ModelGradientTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    config_ = SmallConfig(c.type);
    config_.dropout = c.dropout;
    config_.time_embedding = c.time_embedding;
    config_.soft_search_chunk = c.soft_search_chunk;
    config_.gsu_time = c.gsu_time;
    if (c.gsu == Gsu::kHard) {
      config_.gsu = Gsu::kHard;
      config_.top_k = config_.long_len;  // K = the 6 long slots of the batch
      config_.long_len = 50;             // N: the window searched (the loader's business)
    }
    backend_ = kernels::CreateReferenceBackend();
    auto model = Model::Create(config_, backend_.get(), 8);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(model).value();
    model_->SetDropoutSeed(c.seed + 7);
    batch_ = MakeBatch(config_, c.hist_lens, c.seed);
    ASSERT_TRUE(BuildBatchKeys(batch_, model_->key_usage(ForwardMode::kTrain),
                               config_.embedding_dim, &keys_)
                    .ok());
    // Rows and parameters larger than the reference's init so that every path carries a
    // gradient well above float noise.
    FillRows(&keys_, c.seed + 100, 0.5f);
    InitNoisy(model_.get(), c.seed + 200, 0.1f);
  }

  double Loss() {
    auto losses = model_->Forward(batch_, keys_, ForwardMode::kTrain);
    EXPECT_TRUE(losses.ok()) << losses.status();
    return losses.ok() ? losses->total : 0.0;
  }

  // Runs Forward + Backward; copies the dense and embedding gradients out.
  void Gradients(std::vector<float>* dense, std::vector<std::vector<float>>* emb) {
    Loss();
    ASSERT_TRUE(model_->Backward(&keys_).ok());
    dense->assign(model_->gradients().begin(), model_->gradients().end());
    emb->clear();
    for (const TableKeys& t : keys_.tables) emb->push_back(t.grads);
  }

  // Central difference of the loss along v (applied to the floats `x`).
  double DirectionalFd(float* x, const std::vector<float>& v, double eps) {
    std::vector<float> saved(x, x + v.size());
    for (size_t i = 0; i < v.size(); ++i) x[i] = saved[i] + static_cast<float>(eps * v[i]);
    const double plus = Loss();
    for (size_t i = 0; i < v.size(); ++i) x[i] = saved[i] - static_cast<float>(eps * v[i]);
    const double minus = Loss();
    std::copy(saved.begin(), saved.end(), x);
    return (plus - minus) / (2 * eps);
  }

  ModelConfig config_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Model> model_;
  data::Batch batch_;
  BatchKeys keys_;
};

// Directions over every dense parameter at once and over every table's pulled rows, with
// uniform(-1, 1) components.
TEST_P(ModelGradientTest, DirectionalDerivativesMatch) {
  std::vector<float> dense;
  std::vector<std::vector<float>> emb;
  Gradients(&dense, &emb);
  Rng rng(GetParam().seed + 300);
  auto loss = [this] { return Loss(); };
  double worst = 0;
  auto check = [&](float* x, const std::vector<float>& g, const std::string& what) {
    std::vector<float> v(g.size());
    for (float& e : v) e = static_cast<float>(2.0 * rng.Uniform() - 1.0);
    double analytic = 0;
    for (size_t i = 0; i < v.size(); ++i) analytic += static_cast<double>(g[i]) * v[i];
    double fd = 0;
    const double err = BestFdError(loss, x, v, analytic, &fd);
    worst = std::max(worst, err / std::max(std::abs(analytic), 1e-12));
    EXPECT_LE(err, kRelTol * std::abs(analytic) + kAbsTol)
        << what << ": fd " << fd << " analytic " << analytic;
  };
  for (int dir = 0; dir < 3; ++dir) {
    check(model_->parameters().data(), dense, "dense direction " + std::to_string(dir));
    for (size_t t = 0; t < keys_.tables.size(); ++t) {
      check(keys_.tables[t].rows.data(), emb[t],
            "table " + std::to_string(t) + " direction " + std::to_string(dir));
    }
  }
  std::printf("[%s] directional FD: max relative error %.3g\n", GetParam().name, worst);
}

// Single coordinates: for every dense tensor its largest-gradient element and two random ones,
// and for every table its largest-gradient element and one random one.
TEST_P(ModelGradientTest, CoordinatesMatch) {
  std::vector<float> dense;
  std::vector<std::vector<float>> emb;
  Gradients(&dense, &emb);
  Rng rng(GetParam().seed + 400);
  auto loss = [this] { return Loss(); };
  double worst = 0;
  const std::vector<float> one = {1.0f};
  auto check = [&](float* x, double analytic, const std::string& what) {
    double fd = 0;
    const double err = BestFdError(loss, x, one, analytic, &fd);
    if (std::abs(analytic) > 1e-3) worst = std::max(worst, err / std::abs(analytic));
    EXPECT_LE(err, kRelTol * std::abs(analytic) + kAbsTol)
        << what << ": fd " << fd << " analytic " << analytic;
  };
  auto argmax_abs = [](const float* g, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i) {
      if (std::abs(g[i]) > std::abs(g[best])) best = i;
    }
    return best;
  };
  int nonzero_tensors = 0;
  const std::string attention_output_bias =
      "attention_mlp/dense_" + std::to_string(config_.attention_mlp.size()) + "/bias";
  for (const ParamTensor& t : model_->param_layout()) {
    const int64_t best = argmax_abs(dense.data() + t.offset, t.size());
    // The attention unit's output bias shifts every score of a softmax equally: its gradient is
    // zero in exact arithmetic (what float rounding leaves may be exactly 0 or not).
    const bool shift_invariant = t.name == attention_output_bias;
    if (dense[t.offset + best] != 0.0f || shift_invariant) ++nonzero_tensors;
    for (int64_t i : {best, static_cast<int64_t>(rng.Below(t.size())),
                      static_cast<int64_t>(rng.Below(t.size()))}) {
      check(model_->parameters().data() + t.offset + i, dense[t.offset + i],
            t.name + "[" + std::to_string(i) + "]");
    }
  }
  // Every tensor receives some gradient (no block is disconnected from the loss). With one row a
  // PReLU whose units all see positive inputs legitimately has a zero slope gradient.
  if (batch_.size > 1) {
    EXPECT_EQ(nonzero_tensors, static_cast<int>(model_->param_layout().size()));
  }
  for (size_t t = 0; t < keys_.tables.size(); ++t) {
    const std::vector<float>& g = emb[t];
    ASSERT_FALSE(g.empty());
    const int64_t n = static_cast<int64_t>(g.size());
    const int64_t best = argmax_abs(g.data(), n);
    EXPECT_NE(g[best], 0.0f) << "table " << t;
    for (int64_t i : {best, static_cast<int64_t>(rng.Below(n))}) {
      check(keys_.tables[t].rows.data() + i, g[i],
            "table " + std::to_string(t) + " row float " + std::to_string(i));
    }
  }
  std::printf("[%s] coordinate FD: max relative error %.3g (|grad| > 1e-3)\n", GetParam().name,
              worst);
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelGradientTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace sift::worker
