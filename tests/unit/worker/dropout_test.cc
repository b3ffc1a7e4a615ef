// Dropout (kernels/dropout_mask.h, Backend::Dropout, the MLP heads' model.dropout): the mask
// against its formula, its rate within a binomial bound, the same factors on the cpu and reference
// backends, and a model with dropout whose evaluation equals the model without it while its
// training forward differs and is reproducible for a fixed seed.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/hash.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/dropout_mask.h"
#include "tests/unit/worker/model_test_util.h"
#include "worker/batch_keys.h"
#include "worker/models/model.h"

namespace sift::worker {
namespace {

TEST(DropoutTest, TheMaskIsItsFormulaOnEveryHostBackend) {
  const int64_t n = 100000;
  const float rate = 0.3f, scale = 1.0f / (1.0f - rate);
  auto cpu = kernels::CreateBackend("cpu", 2);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto ref = kernels::CreateReferenceBackend();
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] = 1.0f + static_cast<float>(i % 7);
  (*cpu)->Dropout(n, 42, rate, scale, a.data());
  ref->Dropout(n, 42, rate, scale, b.data());
  EXPECT_EQ(a, b);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double u = UnitFromHash(HashCombine(42, static_cast<uint64_t>(i)));  // common/hash.h
    const float want = u < rate ? 0.0f : (1.0f + static_cast<float>(i % 7)) * scale;
    ASSERT_EQ(a[i], want) << i;
    dropped += a[i] == 0.0f;
  }
  // Binomial(n, rate): 6 standard deviations either side.
  EXPECT_NEAR(static_cast<double>(dropped), n * rate, 6 * std::sqrt(n * rate * (1 - rate)));
  // Another seed, another mask.
  std::vector<float> c(n, 1.0f);
  ref->Dropout(n, 43, rate, scale, c.data());
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += (c[i] == 0.0f) == (a[i] == 0.0f);
  EXPECT_LT(same, n - 1000);
}

TEST(DropoutTest, OnlyTrainingForwardsDropAndAFixedSeedReproduces) {
  for (ModelType type : {ModelType::kSim, ModelType::kDin}) {
    ModelConfig plain_config = model_testing::SmallConfig(type);
    ModelConfig drop_config = plain_config;
    drop_config.dropout = 0.5f;
    auto be = kernels::CreateReferenceBackend();
    auto plain = Model::Create(plain_config, be.get(), 8);
    auto drop = Model::Create(drop_config, be.get(), 8);
    ASSERT_TRUE(plain.ok() && drop.ok());
    ASSERT_TRUE((*plain)->InitParameters(3).ok());
    ASSERT_TRUE((*drop)->InitParameters(3).ok());
    data::Batch batch = model_testing::MakeBatch(plain_config, {10, 3, 7, 5, 2}, 9);
    BatchKeys keys;
    ASSERT_TRUE(BuildBatchKeys(batch, (*plain)->key_usage(ForwardMode::kTrain),
                               plain_config.embedding_dim, &keys)
                    .ok());
    model_testing::FillRows(&keys, 5, 0.5f);
    auto loss = [&](Model* m, ForwardMode mode) {
      auto l = m->Forward(batch, keys, mode);
      EXPECT_TRUE(l.ok()) << l.status();
      return l.ok() ? l->total : 0.0;
    };
    EXPECT_EQ(loss(drop->get(), ForwardMode::kEval), loss(plain->get(), ForwardMode::kEval));
    (*drop)->SetDropoutSeed(1);
    const double a = loss(drop->get(), ForwardMode::kTrain);
    EXPECT_NE(a, loss(plain->get(), ForwardMode::kTrain));
    EXPECT_EQ(loss(drop->get(), ForwardMode::kTrain), a);  // the same seed, the same masks
    (*drop)->SetDropoutSeed(2);
    EXPECT_NE(loss(drop->get(), ForwardMode::kTrain), a);
  }
}

TEST(DropoutTest, RatesOutsideTheRangeAreRefused) {
  ModelConfig c = model_testing::SmallConfig(ModelType::kDin);
  c.dropout = 0.95f;
  const Status s = ValidateModelConfig(c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("model.dropout"), std::string::npos);
}

}  // namespace
}  // namespace sift::worker
