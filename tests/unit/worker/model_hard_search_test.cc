// SIM with the hard-search GSU (ModelConfig::gsu = kHard, docs/training.md "Lifelong sequences"):
// no GSU head and no GSU loss, and an ESU that is exactly the soft model's ESU when the soft top-k
// keeps every slot; the config and batch checks. Its gradients are checked by finite differences in
// model_gradient_test.cc (cases sim_hard, sim_hard_dropout).
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/worker/model_test_util.h"
#include "worker/batch_keys.h"
#include "worker/models/model.h"

namespace sift::worker {
namespace {

using model_testing::FillRows;
using model_testing::ForwardBackward;
using model_testing::MakeBatch;
using model_testing::Outcome;
using model_testing::SmallConfig;

ModelConfig HardConfig() {
  ModelConfig c = SmallConfig(ModelType::kSim);
  c.gsu = Gsu::kHard;
  c.top_k = 6;      // the batch's long slots
  c.long_len = 50;  // the window the loader searched
  return c;
}

TEST(ModelHardSearchTest, NoGsuHeadAndTheEsuOfTheSoftModelOverEverySlot) {
  auto be = kernels::CreateReferenceBackend();
  ModelConfig soft = SmallConfig(ModelType::kSim);
  soft.top_k = soft.long_len;  // the soft top-k keeps every valid slot
  const ModelConfig hard = HardConfig();
  auto s = Model::Create(soft, be.get(), 8);
  auto h = Model::Create(hard, be.get(), 8);
  ASSERT_TRUE(s.ok() && h.ok()) << s.status() << h.status();
  EXPECT_EQ((*h)->batch_long_len(), 6);
  EXPECT_EQ((*s)->batch_long_len(), 6);

  // The hard model's layout is the soft one without gsu_mlp; initial values depend only on the
  // seed, the name and the shape, so the shared tensors start equal.
  ASSERT_TRUE((*s)->InitParameters(5).ok());
  ASSERT_TRUE((*h)->InitParameters(5).ok());
  std::map<std::string, std::vector<float>> soft_values;
  for (const ParamTensor& t : (*s)->param_layout()) {
    const float* p = (*s)->parameters().data() + t.offset;
    soft_values[t.name].assign(p, p + t.size());
  }
  int64_t gsu = 0;
  for (const ParamTensor& t : (*s)->param_layout())
    gsu += t.name.rfind("gsu_mlp/", 0) == 0 ? t.size() : 0;
  EXPECT_GT(gsu, 0);
  EXPECT_EQ(static_cast<int64_t>((*h)->parameters().size()),
            static_cast<int64_t>((*s)->parameters().size()) - gsu);
  for (const ParamTensor& t : (*h)->param_layout()) {
    ASSERT_NE(t.name.rfind("gsu_mlp/", 0), 0u) << t.name;
    const float* p = (*h)->parameters().data() + t.offset;
    ASSERT_EQ(std::vector<float>(p, p + t.size()), soft_values[t.name]) << t.name;
  }

  // Rows with full, partial, empty long parts (hist_len <= T_S = 4 leaves it empty).
  data::Batch soft_batch = MakeBatch(soft, {10, 3, 7, 5, 2, 9}, 21);
  data::Batch hard_batch = soft_batch;
  hard_batch.hard_search_window = hard.long_len;  // the same slots, as a hard search fills them
  BatchKeys keys;
  ASSERT_TRUE(BuildBatchKeys(soft_batch, (*s)->key_usage(ForwardMode::kTrain), 4, &keys).ok());
  FillRows(&keys, 22, 0.5f);
  BatchKeys hard_keys = keys;
  const Outcome so = ForwardBackward(s->get(), soft_batch, &keys);
  const Outcome ho = ForwardBackward(h->get(), hard_batch, &hard_keys);
  ASSERT_EQ(ho.logits.size(), 6u);
  EXPECT_EQ(ho.logits, so.logits);  // bit for bit: the same ops on the same masks
  // Classification = BCE of the ESU only.
  double bce = 0;
  for (size_t b = 0; b < ho.logits.size(); ++b) {
    const double x = ho.logits[b], y = hard_batch.label[b];
    bce += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)));
  }
  bce /= static_cast<double>(ho.logits.size());
  EXPECT_NEAR(ho.losses.classification, bce, 1e-6 * bce);
  EXPECT_EQ(ho.losses.aux, so.losses.aux);
  EXPECT_NE(ho.losses.classification, so.losses.classification);  // the soft one has BCE_gsu
}

TEST(ModelHardSearchTest, ConfigAndBatchChecks) {
  auto be = kernels::CreateReferenceBackend();
  ModelConfig c = HardConfig();
  c.top_k = 51;
  Status st = ValidateModelConfig(c);
  EXPECT_NE(st.message().find("top_k must be <= long_len"), std::string::npos) << st;
  c = HardConfig();
  c.type = ModelType::kDin;
  st = ValidateModelConfig(c);
  EXPECT_NE(st.message().find("gsu hard is SIM's search unit"), std::string::npos) << st;
  // A window far longer than any allocated slot count is fine: it is never allocated.
  c = HardConfig();
  c.long_len = 1 << 20;
  EXPECT_TRUE(ValidateModelConfig(c).ok());
  c.top_k = 1 << 13;
  st = ValidateModelConfig(c);
  EXPECT_NE(st.message().find("top_k (hard search)"), std::string::npos) << st;

  // A soft batch into a hard model, and the other way round.
  for (bool hard_model : {true, false}) {
    ModelConfig mc = hard_model ? HardConfig() : SmallConfig(ModelType::kSim);
    if (!hard_model) mc.long_len = 6;
    auto m = Model::Create(mc, be.get(), 4);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*m)->InitParameters(1).ok());
    data::Batch batch = MakeBatch(mc, {8, 3}, 2);
    batch.hard_search_window = hard_model ? 0 : 50;
    BatchKeys keys;
    ASSERT_TRUE(BuildBatchKeys(batch, (*m)->key_usage(ForwardMode::kTrain), 4, &keys).ok());
    FillRows(&keys, 3, 0.5f);
    auto r = (*m)->Forward(batch, keys, ForwardMode::kTrain);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(hard_model ? "searches hard" : "GSU is soft"),
              std::string::npos)
        << r.status();
  }
  EXPECT_EQ(*ParseGsu("hard"), Gsu::kHard);
  EXPECT_EQ(std::string(GsuName(Gsu::kSoft)), "soft");
  EXPECT_FALSE(ParseGsu("medium").ok());
}

}  // namespace
}  // namespace sift::worker
