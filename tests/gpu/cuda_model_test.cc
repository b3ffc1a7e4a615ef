// The models on the CUDA backend (issue 6), label gpu, skipped where CreateBackend("cuda") fails
// (no device, or a build without CUDA):
// - one Forward + Backward of SIM, DIEN and DIN on the same batch and parameters as the CPU
//   backend: losses, logits, every dense gradient tensor and every table's embedding gradients,
//   in fp32 (tolerances of two float implementations summing in different orders: twice the CPU
//   backend's against the double-leaning reference) and in bf16 GEMMs (8-bit mantissas: ~0.4% per
//   rounding, compounded over a few layers and the 10 recurrent steps);
// - the same at the reference's default dims (T_L = 90, H = 96) and a batch big enough for
//   multi-block kernels;
// - a short training run on the tiny preset whose test AUC matches the CPU run's within 0.005.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/worker/model_test_util.h"
#include "tests/util/tiny_dataset_suite.h"
#include "worker/models/model.h"
#include "worker/trainer.h"

namespace sift::worker {
namespace {

using model_testing::ExpectOutcomesClose;
using model_testing::FillRows;
using model_testing::ForwardBackward;
using model_testing::InitNoisy;
using model_testing::MakeBatch;
using model_testing::Outcome;
using model_testing::OutcomeTolerances;
using model_testing::SmallConfig;

constexpr OutcomeTolerances kFp32Tol{2e-5, 2e-5, 2e-4};
constexpr OutcomeTolerances kBf16Tol{1e-2, 3e-2, 5e-2};

// The CUDA backend, or null (the caller skips) when this machine or build has none.
std::unique_ptr<kernels::Backend> CudaBackendOrNull(std::string* why) {
  auto b = kernels::CreateBackend("cuda", 1);
  if (!b.ok()) {
    *why = b.status().ToString();
    return nullptr;
  }
  return std::move(*b);
}

std::unique_ptr<Model> MustCreate(const ModelConfig& c, kernels::Backend* be, int64_t rows) {
  auto m = Model::Create(c, be, rows);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// CPU and CUDA models of `c` with the same (noisy) parameters, compared on one batch of
// `lens.size()` rows.
void CompareWithCpu(const ModelConfig& c, const std::vector<int>& lens, kernels::MathMode mode,
                    const OutcomeTolerances& tol) {
  std::string why;
  auto cuda_be = CudaBackendOrNull(&why);
  if (cuda_be == nullptr) GTEST_SKIP() << why;
  ASSERT_TRUE(cuda_be->SetMathMode(mode).ok());
  auto cpu_be = kernels::CreateCpuBackend(2);
  const int64_t rows = static_cast<int64_t>(lens.size());
  auto cpu = MustCreate(c, cpu_be.get(), rows);
  auto gpu = MustCreate(c, cuda_be.get(), rows);
  ASSERT_TRUE(cpu != nullptr && gpu != nullptr);
  data::Batch batch = MakeBatch(c, lens, 22, 50, 7, 9);
  BatchKeys keys;
  ASSERT_TRUE(BuildBatchKeys(batch, cpu->key_usage(ForwardMode::kTrain), 8, &keys).ok());
  FillRows(&keys, 23, 0.3f);
  InitNoisy(cpu.get(), 24, 0.05f);
  ASSERT_TRUE(gpu->CopyParametersFromHost(cpu->parameters()).ok());
  const Outcome want = ForwardBackward(cpu.get(), batch, &keys);
  const Outcome got = ForwardBackward(gpu.get(), batch, &keys);
  ExpectOutcomesClose(got, want, cpu->param_layout(), tol,
                      absl::StrCat(ModelTypeName(c.type), " cuda (", kernels::MathModeName(mode),
                                   ") vs cpu, ", rows, " rows"));
  // The device result is reproducible: a second pass gives the same bits.
  const Outcome again = ForwardBackward(gpu.get(), batch, &keys);
  EXPECT_EQ(again.losses.total, got.losses.total);
  EXPECT_EQ(again.logits, got.logits);
  EXPECT_EQ(again.dense, got.dense);
  EXPECT_EQ(again.emb, got.emb);
}

std::vector<int> Lengths(int rows, int max_len, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> lens;
  for (int b = 0; b < rows; ++b) lens.push_back(static_cast<int>(rng.Below(max_len + 1)));
  return lens;
}

class CudaModelTest : public ::testing::TestWithParam<ModelType> {};

TEST_P(CudaModelTest, ForwardBackwardMatchesCpuInFp32) {
  const ModelConfig c = SmallConfig(GetParam());
  CompareWithCpu(c, Lengths(33, c.long_len + c.short_len, 21), kernels::MathMode::kFp32, kFp32Tol);
}

TEST_P(CudaModelTest, ForwardBackwardMatchesCpuInBf16) {
  const ModelConfig c = SmallConfig(GetParam());
  CompareWithCpu(c, Lengths(33, c.long_len + c.short_len, 21), kernels::MathMode::kBf16, kBf16Tol);
}

TEST_P(CudaModelTest, DefaultDimsMatchCpuInFp32) {
  ModelConfig c;  // the reference's dims
  c.type = GetParam();
  CompareWithCpu(c, Lengths(300, c.long_len + c.short_len, 31), kernels::MathMode::kFp32, kFp32Tol);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModelTest,
                         ::testing::Values(ModelType::kSim, ModelType::kDien, ModelType::kDin),
                         [](const ::testing::TestParamInfo<ModelType>& p) {
                           return std::string(ModelTypeName(p.param));
                         });

class CudaTrainingTest : public testing::TinyDatasetSuite<5> {
 protected:
  void SetUp() override {
    std::string why;
    if (CudaBackendOrNull(&why) == nullptr) GTEST_SKIP() << why;
  }
  static double TestAuc(const std::string& backend, const std::string& precision) {
    TrainerOptions o;
    o.dataset = Tiny();
    o.backend = backend;
    o.precision = precision;
    o.threads = 8;
    o.epochs = 1;
    o.batch_size = 256;
    o.seed = 3;
    auto r = RunTrainer(o, RunMode::kTrain);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->epochs.empty()) return -1;
    std::printf("tiny, sim, %s (%s): test AUC %.4f\n", backend.c_str(), r->precision.c_str(),
                r->epochs.back().test_auc);
    return r->epochs.back().test_auc;
  }
};

TEST_F(CudaTrainingTest, TestAucMatchesTheCpuRun) {
  const double cpu = TestAuc("cpu", "fp32");
  ASSERT_GT(cpu, 0.6);
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    EXPECT_NEAR(TestAuc("cuda", precision), cpu, 0.005) << precision;
  }
}

}  // namespace
}  // namespace sift::worker
