// The model's device path (worker/models/model.cc with a backend whose memory_space() is kDevice:
// inputs staged into backend buffers, embedding gradients and logits copied back, parameters and
// gradients only through the host copies) checked on the CPU: a DeviceSimBackend
// (tests/util/device_sim_backend.h) runs the CPU backend's ops on tracked memory and fails on any
// pointer that is not backend memory. The same parameters and batch on it and on the plain CPU
// backend must give BIT-identical losses, logits, dense and embedding gradients (the very same
// ops run; staging must not change a bit), for SIM, DIEN and DIN, in kTrain, kEval and kInference,
// with padding (-1 inverses), and for batches of different sizes through one model (the staging
// buffers are reused). The first tests check that the simulator itself catches what it must.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/worker/model_test_util.h"
#include "tests/util/device_sim_backend.h"
#include "worker/batch_keys.h"
#include "worker/models/model.h"

namespace sift::worker {
namespace {

using model_testing::FillRows;
using model_testing::ForwardBackward;
using model_testing::InitNoisy;
using model_testing::MakeBatch;
using model_testing::Outcome;
using model_testing::SmallConfig;
using testing::CreateDeviceSimBackend;
using testing::DeviceSimBackend;

constexpr int kThreads = 2;

// ---- The simulator catches host pointers, overruns and swapped copies ----------------------

TEST(DeviceSimBackendTest, AcceptsItsOwnMemoryAndCountsTheWork) {
  auto be = CreateDeviceSimBackend(kThreads);
  EXPECT_EQ(be->memory_space(), kernels::MemorySpace::kDevice);
  auto buf = be->Allocate(8 * sizeof(float));
  ASSERT_TRUE(buf.ok());
  const std::vector<float> host = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(be->CopyToBackend(host.data(), buf->data(), 8 * sizeof(float)).ok());
  be->Scale(8, 2.0f, buf->floats());
  be->Copy(1, 2, 2, buf->floats(), 0, 4, buf->floats() + 2, 0, 4, false);  // cols 0-1 -> 2-3
  std::vector<float> back(8);
  ASSERT_TRUE(be->CopyToHost(buf->data(), back.data(), 8 * sizeof(float)).ok());
  EXPECT_EQ(back, (std::vector<float>{2, 4, 2, 4, 10, 12, 10, 12}));
  EXPECT_TRUE(be->Synchronize().ok());
  EXPECT_TRUE(be->stats()->failures.empty());
  EXPECT_EQ(be->stats()->ops, 2);
  EXPECT_EQ(be->stats()->copies_to_backend, 1);
  EXPECT_EQ(be->stats()->copies_to_host, 1);
  EXPECT_EQ(be->stats()->live_allocations, 1);
  for (kernels::MathMode m : {kernels::MathMode::kTf32, kernels::MathMode::kBf16,
                              kernels::MathMode::kFp16, kernels::MathMode::kFp32}) {
    EXPECT_TRUE(be->SetMathMode(m).ok());
    EXPECT_EQ(be->math_mode(), m);
  }
  EXPECT_EQ(be->stats()->math_modes.size(), 4u);
  buf->Reset();
  EXPECT_EQ(be->stats()->live_allocations, 0);
}

TEST(DeviceSimBackendTest, FlagsAHostPointerPassedToAnOp) {
  auto be = CreateDeviceSimBackend(kThreads);
  auto buf = be->Allocate(4 * sizeof(float));
  ASSERT_TRUE(buf.ok());
  std::vector<float> host(4, 1.0f);
  EXPECT_NONFATAL_FAILURE(be->Copy(1, 1, 4, host.data(), 0, 4, buf->floats(), 0, 4, false),
                          "Copy: argument src: 16 bytes at");
  EXPECT_EQ(host, std::vector<float>(4, 1.0f));
  std::vector<float> back(4, -1.0f);
  ASSERT_TRUE(be->CopyToHost(buf->data(), back.data(), 4 * sizeof(float)).ok());
  EXPECT_EQ(back, std::vector<float>(4, 0.0f)) << "the failed op must not run";
  const Status s = be->Synchronize();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("host memory, not from Allocate"), std::string::npos) << s;
  EXPECT_TRUE(be->Synchronize().ok()) << "Synchronize reports a failure once";
  ASSERT_EQ(be->stats()->failures.size(), 1u);
}

TEST(DeviceSimBackendTest, FlagsAnExtentPastTheAllocation) {
  auto be = CreateDeviceSimBackend(kThreads);
  auto buf = be->Allocate(10 * sizeof(float));
  auto src = be->Allocate(10 * sizeof(float));
  ASSERT_TRUE(buf.ok() && src.ok());
  EXPECT_NONFATAL_FAILURE(be->Fill(11, 0.0f, buf->floats()), "past its end");
  // A strided view: 3 rows of 2 floats, 4 apart, spans 10 floats; from offset 1 it spans 11.
  be->Fill(0, 0.0f, nullptr);
  be->Copy(1, 3, 2, src->floats(), 0, 4, buf->floats(), 0, 4, true);
  EXPECT_EQ(be->stats()->failures.size(), 1u);
  EXPECT_NONFATAL_FAILURE(be->Copy(1, 3, 2, src->floats(), 0, 4, buf->floats() + 1, 0, 4, true),
                          "Copy: argument dst: bytes [4, 44) of an allocation of 40 bytes");
  EXPECT_NONFATAL_FAILURE(be->Gemm(false, false, 2, 2, 3, 1.0f, buf->floats(), 3, buf->floats(), 2,
                                   0.0f, buf->floats() + 8, 2),
                          "Gemm: argument c");
  EXPECT_FALSE(be->Synchronize().ok());
}

TEST(DeviceSimBackendTest, FlagsCopiesWithTheSidesSwapped) {
  auto be = CreateDeviceSimBackend(kThreads);
  auto a = be->Allocate(16);
  auto b = be->Allocate(16);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> host(4);
  Status s;
  EXPECT_NONFATAL_FAILURE(s = be->CopyToBackend(a->data(), b->data(), 16),
                          "CopyToBackend: argument src: is backend memory");
  EXPECT_FALSE(s.ok());
  EXPECT_NONFATAL_FAILURE(s = be->CopyToBackend(host.data(), host.data(), 16),
                          "CopyToBackend: argument dst: 16 bytes at");
  EXPECT_NONFATAL_FAILURE(s = be->CopyToHost(host.data(), host.data(), 16),
                          "CopyToHost: argument src");
  EXPECT_NONFATAL_FAILURE(s = be->CopyToHost(a->data(), b->data(), 16),
                          "CopyToHost: argument dst: is backend memory");
  EXPECT_NONFATAL_FAILURE(s = be->CopyToHost(a->data(), host.data(), 20), "past its end");
  EXPECT_EQ(be->stats()->failures.size(), 5u);
  // A freed allocation is no longer backend memory.
  float* stale = a->floats();
  a->Reset();
  EXPECT_NONFATAL_FAILURE(be->Fill(1, 0.0f, stale), "Fill: argument p");
}

TEST(DeviceSimBackendTest, GatherRowsChecksTheRowsItsInversesName) {
  auto be = CreateDeviceSimBackend(kThreads);
  auto rows = be->Allocate(2 * 3 * sizeof(float));  // U = 2 rows of dim 3
  auto inv = be->Allocate(3 * sizeof(int32_t));
  auto out = be->Allocate(3 * 3 * sizeof(float));
  ASSERT_TRUE(rows.ok() && inv.ok() && out.ok());
  const std::vector<int32_t> ok_inv = {1, -1, 0}, bad_inv = {1, 2, 0};
  ASSERT_TRUE(be->CopyToBackend(ok_inv.data(), inv->data(), 12).ok());
  be->GatherRows(3, 3, rows->floats(), inv->ints(), nullptr, out->floats(), 3);
  EXPECT_TRUE(be->Synchronize().ok());
  ASSERT_TRUE(be->CopyToBackend(bad_inv.data(), inv->data(), 12).ok());
  EXPECT_NONFATAL_FAILURE(
      be->GatherRows(3, 3, rows->floats(), inv->ints(), nullptr, out->floats(), 3),
      "GatherRows: argument rows");
}

float ReadOnTheHost(const float* p) { return *static_cast<const volatile float*>(p); }

TEST(DeviceSimBackendDeathTest, TheHostTouchingBackendMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto be = CreateDeviceSimBackend(kThreads);
        auto buf = be->Allocate(4 * sizeof(float));
        be->Fill(4, 1.0f, buf->floats());  // fine: inside an op
        std::fprintf(stderr, "read %g\n", ReadOnTheHost(buf->floats()));
      },
      "DeviceSimBackend: SIGSEGV at 0x[0-9a-f]+: the host touched memory from Allocate");
  // Without protection the same read works (and sees the op's result).
  auto be = CreateDeviceSimBackend(kThreads, /*protect=*/false);
  auto buf = be->Allocate(4 * sizeof(float));
  ASSERT_TRUE(buf.ok());
  be->Fill(4, 1.0f, buf->floats());
  EXPECT_EQ(ReadOnTheHost(buf->floats()), 1.0f);
}

TEST(DeviceSimBackendTest, AllFiniteAnswersTrulyExceptOnTheInjectedCalls) {
  auto be = CreateDeviceSimBackend(kThreads);
  auto buf = be->Allocate(4 * sizeof(float));
  ASSERT_TRUE(buf.ok());
  be->FailAllFiniteOnCalls({2, 4});
  EXPECT_TRUE(be->AllFinite(4, buf->floats()));
  EXPECT_FALSE(be->AllFinite(4, buf->floats()));  // injected
  const float inf = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(be->CopyToBackend(&inf, buf->floats() + 3, sizeof(float)).ok());
  EXPECT_FALSE(be->AllFinite(4, buf->floats()));  // true answer
  EXPECT_FALSE(be->AllFinite(3, buf->floats()));  // injected
  EXPECT_TRUE(be->AllFinite(3, buf->floats()));
  EXPECT_EQ(be->stats()->all_finite_calls, 5);
  EXPECT_TRUE(be->Synchronize().ok());
}

// ---- The simulator's copy channels: a missing fence fails on the CPU --------------------------

TEST(DeviceSimBackendTest, AnUploadLandsOnlyAtTheBackendsWaitForItsFence) {
  auto be = CreateDeviceSimBackend(kThreads);
  auto buf = be->Allocate(4 * sizeof(float));
  ASSERT_TRUE(buf.ok());
  auto channel = be->CreateCopyChannel(64);
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::vector<float> src = {1, 2, 3, 4};
  ASSERT_TRUE((*channel)->Upload(src.data(), buf->data(), 16).ok());
  src.assign(4, -1.0f);  // staged: the caller may reuse its source at once
  // An op touching the memory before the backend waited for the upload.
  EXPECT_NONFATAL_FAILURE(be->Scale(4, 2.0f, buf->floats()),
                          "Scale: argument p: memory with an upload in flight");
  EXPECT_FALSE(be->Synchronize().ok());
  auto fence = (*channel)->RecordFence();
  ASSERT_TRUE(fence.ok());
  ASSERT_TRUE(be->WaitFence(*fence).ok());
  EXPECT_EQ(be->stats()->landed_by_fence, 1);
  be->Scale(4, 2.0f, buf->floats());
  std::vector<float> back(4);
  ASSERT_TRUE(be->CopyToHost(buf->data(), back.data(), 16).ok());
  EXPECT_EQ(back, (std::vector<float>{2, 4, 6, 8}));
  EXPECT_TRUE(be->Synchronize().ok());
  // Fences go one way: the backend waits for channel fences, channels for backend fences.
  auto compute = be->RecordFence();
  ASSERT_TRUE(compute.ok());
  Status s;
  EXPECT_NONFATAL_FAILURE(s = be->WaitFence(*compute), "WaitFence: argument fence");
  EXPECT_FALSE(s.ok());
  EXPECT_NONFATAL_FAILURE(s = (*channel)->WaitFence(*fence), "CopyChannel::WaitFence");
  EXPECT_FALSE(s.ok());
}

TEST(DeviceSimBackendTest, ChannelCopiesOfMemoryAnOpUsedNeedTheOpsFence) {
  auto be = CreateDeviceSimBackend(kThreads);
  auto buf = be->Allocate(4 * sizeof(float));
  ASSERT_TRUE(buf.ok());
  auto channel = be->CreateCopyChannel(0);
  ASSERT_TRUE(channel.ok());
  std::vector<float> host = {5, 6, 7, 8};
  be->Fill(4, 1.5f, buf->floats());  // op #1 writes the buffer
  Status s;
  // Without a fence the upload could overwrite, and the download read, memory the op still uses.
  EXPECT_NONFATAL_FAILURE(s = (*channel)->Upload(host.data(), buf->data(), 16),
                          "CopyChannel::Upload: argument dst: op #1 used this allocation");
  EXPECT_FALSE(s.ok());
  EXPECT_NONFATAL_FAILURE(s = (*channel)->Download(buf->data(), host.data(), 16),
                          "CopyChannel::Download: argument src: op #1");
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(be->Synchronize().ok());
  // With the op's fence: the download delivers at the channel's Synchronize, NaN before.
  auto after_fill = be->RecordFence();
  ASSERT_TRUE(after_fill.ok());
  ASSERT_TRUE((*channel)->WaitFence(*after_fill).ok());
  ASSERT_TRUE((*channel)->Download(buf->data(), host.data(), 16).ok());
  EXPECT_TRUE(std::isnan(host[0]) && std::isnan(host[3]));
  // The download may still be reading: an op writing the buffer now would race it.
  EXPECT_NONFATAL_FAILURE(be->Fill(4, 0.0f, buf->floats()),
                          "Fill: argument p: memory a channel's download may still be reading");
  EXPECT_FALSE(be->Synchronize().ok());
  ASSERT_TRUE((*channel)->Synchronize().ok());
  EXPECT_EQ(host, (std::vector<float>(4, 1.5f)));
  // A later op on the buffer needs a newer fence before the next upload.
  be->Scale(4, 2.0f, buf->floats());
  EXPECT_NONFATAL_FAILURE(s = (*channel)->Upload(host.data(), buf->data(), 16), "op #3");
  auto after_scale = be->RecordFence();
  ASSERT_TRUE(after_scale.ok());
  ASSERT_TRUE((*channel)->WaitFence(*after_scale).ok());
  EXPECT_TRUE((*channel)->Upload(host.data(), buf->data(), 16).ok());
  ASSERT_TRUE((*channel)->Synchronize().ok());  // lands it
  std::vector<float> back(4);
  ASSERT_TRUE(be->CopyToHost(buf->data(), back.data(), 16).ok());
  EXPECT_EQ(back, (std::vector<float>(4, 1.5f)));
  EXPECT_EQ(be->stats()->uploads, 1);
  EXPECT_EQ(be->stats()->downloads, 1);
}

// The host backends' channel is a memcpy and their fences have passed.
TEST(HostCopyChannelTest, CopiesAtOnce) {
  auto be = kernels::CreateCpuBackend(1);
  auto channel = be->CreateCopyChannel(0);
  ASSERT_TRUE(channel.ok());
  std::vector<float> a = {1, 2}, b(2);
  ASSERT_TRUE((*channel)->Upload(a.data(), b.data(), 8).ok());
  EXPECT_EQ(b, a);
  auto f = be->RecordFence();
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->trivial());
  EXPECT_TRUE((*channel)->WaitFence(*f).ok());
  EXPECT_FALSE((*channel)->Upload(a.data(), b.data(), -1).ok());
}

// ---- The model on the simulator vs on the CPU backend ---------------------------------------

void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) first = i;
  }
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << want.size()
                        << " values differ, the first at " << first << " ("
                        << (differ ? got[first] : 0.0f) << " vs " << (differ ? want[first] : 0.0f)
                        << ")";
}

void ExpectSameOutcome(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.losses.total, want.losses.total) << what;
  EXPECT_EQ(got.losses.classification, want.losses.classification) << what;
  EXPECT_EQ(got.losses.aux, want.losses.aux) << what;
  ExpectSameBits(got.logits, want.logits, what + " logits");
  ExpectSameBits(got.dense, want.dense, what + " dense gradients");
  ASSERT_EQ(got.emb.size(), want.emb.size());
  for (size_t t = 0; t < want.emb.size(); ++t) {
    ExpectSameBits(got.emb[t], want.emb[t], absl::StrCat(what, " embedding gradients, table ", t));
  }
}

// One model on the CPU backend and one on the simulator, with the same parameters.
class ModelPair {
 public:
  ModelPair(const ModelConfig& c, int64_t max_batch)
      : config_(c),
        cpu_be_(kernels::CreateCpuBackend(kThreads)),
        sim_(CreateDeviceSimBackend(kThreads)) {
    auto cpu = Model::Create(c, cpu_be_.get(), max_batch);
    auto sim = Model::Create(c, sim_.get(), max_batch);
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    EXPECT_TRUE(sim.ok()) << sim.status();
    if (!cpu.ok() || !sim.ok()) return;
    cpu_ = std::move(cpu).value();
    sim_model_ = std::move(sim).value();
    InitNoisy(cpu_.get(), 11, 0.05f);
    std::vector<float> params(cpu_->parameters().size());
    EXPECT_TRUE(cpu_->CopyParametersToHost(absl::MakeSpan(params)).ok());
    EXPECT_TRUE(sim_model_->CopyParametersFromHost(params).ok());
    std::vector<float> back(params.size());
    EXPECT_TRUE(sim_model_->CopyParametersToHost(absl::MakeSpan(back)).ok());
    ExpectSameBits(back, params, "parameters through the device copies");
  }
  bool ok() const { return cpu_ != nullptr && sim_model_ != nullptr; }

  // kTrain Forward + Backward, then kEval and kInference Forwards, on both; every result
  // bit-identical and no failure recorded by the simulator.
  void Compare(const data::Batch& batch, uint64_t rows_seed, const std::string& what) {
    BatchKeys cpu_keys, sim_keys;
    ASSERT_TRUE(BuildBatchKeys(batch, cpu_->key_usage(ForwardMode::kTrain), config_.embedding_dim,
                               &cpu_keys)
                    .ok());
    ASSERT_TRUE(BuildBatchKeys(batch, sim_model_->key_usage(ForwardMode::kTrain),
                               config_.embedding_dim, &sim_keys)
                    .ok());
    FillRows(&cpu_keys, rows_seed, 0.3f);
    FillRows(&sim_keys, rows_seed, 0.3f);
    const Outcome want = ForwardBackward(cpu_.get(), batch, &cpu_keys);
    const Outcome got = ForwardBackward(sim_model_.get(), batch, &sim_keys);
    ASSERT_EQ(got.logits.size(), static_cast<size_t>(batch.size));
    ExpectSameOutcome(got, want, what + " kTrain");
    std::printf("%s: %lld rows, loss %.6f (aux %.6f), %zu dense gradients, bit-identical\n",
                what.c_str(), static_cast<long long>(batch.size), want.losses.total,
                want.losses.aux, want.dense.size());

    for (ForwardMode mode : {ForwardMode::kEval, ForwardMode::kInference}) {
      const std::string m = what + (mode == ForwardMode::kEval ? " kEval" : " kInference");
      BatchKeys ck, sk;
      ASSERT_TRUE(BuildBatchKeys(batch, cpu_->key_usage(mode), config_.embedding_dim, &ck).ok());
      ASSERT_TRUE(
          BuildBatchKeys(batch, sim_model_->key_usage(mode), config_.embedding_dim, &sk).ok());
      FillRows(&ck, rows_seed + 1, 0.3f);
      FillRows(&sk, rows_seed + 1, 0.3f);
      auto lc = cpu_->Forward(batch, ck, mode);
      auto ls = sim_model_->Forward(batch, sk, mode);
      ASSERT_TRUE(lc.ok()) << lc.status();
      ASSERT_TRUE(ls.ok()) << ls.status();
      EXPECT_EQ(ls->total, lc->total) << m;
      EXPECT_EQ(ls->aux, lc->aux) << m;
      ExpectSameBits(std::vector<float>(sim_model_->logits().begin(), sim_model_->logits().end()),
                     std::vector<float>(cpu_->logits().begin(), cpu_->logits().end()),
                     m + " logits");
    }
    EXPECT_TRUE(sim_->Synchronize().ok());
    EXPECT_TRUE(sim_->stats()->failures.empty());
    EXPECT_GT(sim_->stats()->copies_to_backend, 0);
    EXPECT_GT(sim_->stats()->copies_to_host, 0);
  }

 private:
  ModelConfig config_;
  std::unique_ptr<kernels::Backend> cpu_be_;
  std::unique_ptr<DeviceSimBackend> sim_;
  std::unique_ptr<Model> cpu_, sim_model_;
};

class ModelDevicePathTest : public ::testing::TestWithParam<ModelType> {};

TEST_P(ModelDevicePathTest, SmallConfigIsBitIdenticalToTheCpuBackend) {
  const ModelConfig c = SmallConfig(GetParam());
  ModelPair pair(c, /*max_batch=*/7);
  ASSERT_TRUE(pair.ok());
  // Padding everywhere: row 3 has no history at all (every history inverse is -1), the others
  // a suffix of the T_L + T_S = 10 slots.
  pair.Compare(MakeBatch(c, {10, 4, 7, 0, 2, 9, 1}, 101), 102, "full batch of 7");
  // Smaller, then the full size again: the staging buffers are reused at other sizes.
  pair.Compare(MakeBatch(c, {3, 10, 1}, 103, 20, 6, 5), 104, "batch of 3");
  pair.Compare(MakeBatch(c, {5, 5, 6, 8, 10, 2, 0}, 105, 50, 10, 7), 106, "second batch of 7");
  pair.Compare(MakeBatch(c, {0}, 107), 108, "batch of 1 without history");
}

INSTANTIATE_TEST_SUITE_P(Models, ModelDevicePathTest,
                         ::testing::Values(ModelType::kSim, ModelType::kDien, ModelType::kDin),
                         [](const ::testing::TestParamInfo<ModelType>& p) {
                           return std::string(ModelTypeName(p.param));
                         });

TEST(ModelDevicePathBigTest, SimDefaultDimsIsBitIdenticalToTheCpuBackend) {
  ModelConfig c;  // the reference's dims: D = 16, T_L = 90, T_S = 10, H = 96
  c.type = ModelType::kSim;
  const int T = c.long_len + c.short_len;
  std::vector<int> lens;
  for (int b = 0; b < 96; ++b) lens.push_back(b % 7 == 0 ? 0 : 1 + (b * 37) % T);
  ModelPair pair(c, 96);
  ASSERT_TRUE(pair.ok());
  pair.Compare(MakeBatch(c, lens, 201, 100000, 1000, 5000), 202, "sim default dims, 96 rows");
  lens.resize(61);
  pair.Compare(MakeBatch(c, lens, 203, 300, 40, 100), 204, "sim default dims, 61 rows");
}

}  // namespace
}  // namespace sift::worker
