// The model's inputs uploaded ahead into input slots (Model::UploadBatch / UploadRows /
// FinishUpload, then Forward(..., slot)) and its embedding gradients brought back in two halves
// (StartBackward / FinishBackward), on the DeviceSimBackend: its copy channels land an upload
// only when the backend waits for the channel's fence and fail any op touching memory with an
// upload in flight, or any copy of memory an op used after the last fence the channel waited for
// (tests/util/device_sim_backend.h) — so a missing fence in the model fails here, on the CPU.
// The steps run as the trainer's pipeline runs them: step s+1 is uploaded on another thread while
// step s computes, slot s % 2. Every result must be bit-identical to the CPU backend's.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One step's inputs: the batch and its keys with pulled rows.
struct StepInputs {
  data::Batch batch;
  BatchKeys keys;
};

StepInputs MakeStep(const Model& m, const ModelConfig& c, ForwardMode mode, int step) {
  StepInputs in;
  const std::vector<int> lens = {10, 4, 7, 0, 2, 9, 1, 5};
  // Batches of different sizes (7, 8, 5, ...): a slot is reused at other sizes.
  const std::vector<int> rows(lens.begin(), lens.begin() + 5 + (step * 3) % 4);
  in.batch = MakeBatch(c, rows, 300 + step, 30 + step, 8, 6);
  EXPECT_TRUE(BuildBatchKeys(in.batch, m.key_usage(mode), c.embedding_dim, &in.keys).ok());
  FillRows(&in.keys, 400 + step, 0.3f);
  return in;
}

Status Upload(Model* m, int slot, const StepInputs& in, ForwardMode mode) {
  SIFT_RETURN_IF_ERROR(m->UploadBatch(slot, in.batch, in.keys, mode));
  for (int t = 0; t < static_cast<int>(in.keys.tables.size()); ++t) {
    SIFT_RETURN_IF_ERROR(m->UploadRows(slot, t, in.keys));
  }
  return m->FinishUpload(slot);
}

class ModelUploadTest : public ::testing::TestWithParam<ModelType> {};

TEST_P(ModelUploadTest, StepsUploadedOnAnotherThreadAreBitIdenticalToTheCpuBackend) {
  const ModelConfig c = SmallConfig(GetParam());
  auto cpu_be = kernels::CreateCpuBackend(kThreads);
  std::unique_ptr<DeviceSimBackend> sim = CreateDeviceSimBackend(kThreads);
  auto cpu_or = Model::Create(c, cpu_be.get(), 8);
  auto sim_or = Model::Create(c, sim.get(), 8);
  ASSERT_TRUE(cpu_or.ok() && sim_or.ok());
  std::unique_ptr<Model> cpu = std::move(cpu_or).value(), dev = std::move(sim_or).value();
  ASSERT_TRUE(dev->uploads_inputs());
  ASSERT_FALSE(cpu->uploads_inputs());
  InitNoisy(cpu.get(), 11, 0.05f);
  std::vector<float> params(cpu->parameters().size());
  ASSERT_TRUE(cpu->CopyParametersToHost(absl::MakeSpan(params)).ok());
  ASSERT_TRUE(dev->CopyParametersFromHost(params).ok());

  // Steps 0..5: train, train, eval, train, inference, train — each step s in slot s % 2, step
  // s + 1 uploaded by a second thread while step s computes (as StepPipeline with k >= 1).
  const ForwardMode modes[] = {ForwardMode::kTrain, ForwardMode::kTrain,     ForwardMode::kEval,
                               ForwardMode::kTrain, ForwardMode::kInference, ForwardMode::kTrain};
  constexpr int kSteps = 6;
  std::vector<StepInputs> cpu_in, dev_in;
  for (int s = 0; s < kSteps; ++s) {
    cpu_in.push_back(MakeStep(*cpu, c, modes[s], s));
    dev_in.push_back(MakeStep(*dev, c, modes[s], s));
  }
  ASSERT_TRUE(Upload(dev.get(), 0, dev_in[0], modes[0]).ok());
  for (int s = 0; s < kSteps; ++s) {
    const std::string what = absl::StrCat("step ", s);
    Status next_upload;
    std::thread uploader;
    if (s + 1 < kSteps) {
      uploader = std::thread([&, s] {
        next_upload = Upload(dev.get(), (s + 1) % Model::kInputSlots, dev_in[s + 1], modes[s + 1]);
      });
    }
    const int slot = s % Model::kInputSlots;
    auto want = cpu->Forward(cpu_in[s].batch, cpu_in[s].keys, modes[s]);
    auto got = dev->Forward(dev_in[s].batch, dev_in[s].keys, modes[s], slot);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    EXPECT_EQ(got->total, want->total) << what;
    EXPECT_EQ(got->aux, want->aux) << what;
    EXPECT_TRUE(SameBits({dev->logits().begin(), dev->logits().end()},
                         {cpu->logits().begin(), cpu->logits().end()}))
        << what << " logits";
    if (modes[s] == ForwardMode::kTrain) {
      ASSERT_TRUE(cpu->Backward(&cpu_in[s].keys).ok());
      ASSERT_TRUE(dev->StartBackward(&dev_in[s].keys, 1.0f).ok());
      ASSERT_TRUE(dev->FinishBackward().ok());
      for (size_t t = 0; t < cpu_in[s].keys.tables.size(); ++t) {
        EXPECT_TRUE(SameBits(dev_in[s].keys.tables[t].grads, cpu_in[s].keys.tables[t].grads))
            << what << " embedding gradients of table " << t;
      }
      std::vector<float> gc(cpu->gradients().size()), gd(gc.size());
      ASSERT_TRUE(cpu->CopyGradientsToHost(absl::MakeSpan(gc)).ok());
      ASSERT_TRUE(dev->CopyGradientsToHost(absl::MakeSpan(gd)).ok());
      EXPECT_TRUE(SameBits(gd, gc)) << what << " dense gradients";
    }
    if (uploader.joinable()) uploader.join();
    ASSERT_TRUE(next_upload.ok()) << "upload of step " << s + 1 << ": " << next_upload;
  }
  EXPECT_TRUE(sim->Synchronize().ok());
  const auto stats = sim->stats();
  EXPECT_TRUE(stats->failures.empty());
  // Every input array went through the channels (none through CopyToBackend), and the uploads
  // landed at Forward's wait for their fence.
  EXPECT_GT(stats->uploads, 8 * kSteps);
  EXPECT_EQ(stats->landed_by_fence, stats->uploads);
  EXPECT_EQ(stats->downloads, 4 * static_cast<int64_t>(c.user_features + c.item_features));
}

INSTANTIATE_TEST_SUITE_P(Models, ModelUploadTest,
                         ::testing::Values(ModelType::kSim, ModelType::kDien, ModelType::kDin),
                         [](const ::testing::TestParamInfo<ModelType>& p) {
                           return std::string(ModelTypeName(p.param));
                         });

TEST(ModelUploadOrderTest, OutOfOrderCallsAreRejected) {
  const ModelConfig c = SmallConfig(ModelType::kSim);
  std::unique_ptr<DeviceSimBackend> sim = CreateDeviceSimBackend(kThreads);
  auto m_or = Model::Create(c, sim.get(), 8);
  ASSERT_TRUE(m_or.ok());
  Model& m = **m_or;
  ASSERT_TRUE(m.InitParameters(1).ok());
  StepInputs a = MakeStep(m, c, ForwardMode::kTrain, 0), b = MakeStep(m, c, ForwardMode::kTrain, 1);
  ASSERT_NE(a.batch.size, b.batch.size);

  EXPECT_EQ(m.UploadBatch(2, a.batch, a.keys, ForwardMode::kTrain).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.UploadRows(0, 0, a.keys).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.UploadBatch(0, a.batch, a.keys, ForwardMode::kTrain).ok());
  EXPECT_EQ(m.UploadRows(0, 7, a.keys).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.UploadRows(0, 0, a.keys).ok());
  // Rows of one table missing: no finish, and a Forward of the slot is refused.
  Status s = m.FinishUpload(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("no rows of table 1"), std::string::npos) << s;
  EXPECT_EQ(m.Forward(a.batch, a.keys, ForwardMode::kTrain, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (int t = 1; t < 3; ++t) ASSERT_TRUE(m.UploadRows(0, t, a.keys).ok());
  ASSERT_TRUE(m.FinishUpload(0).ok());
  // The slot holds batch a: b (another size) and another mode (no negatives) are refused.
  s = m.Forward(b.batch, b.keys, ForwardMode::kTrain, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("input slot 0 holds no finished upload of this batch"),
            std::string::npos)
      << s;
  EXPECT_EQ(m.Forward(a.batch, a.keys, ForwardMode::kTrain, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Forward(a.batch, a.keys, ForwardMode::kTrain, 0).ok());
  ASSERT_TRUE(m.StartBackward(&a.keys, 1.0f).ok());
  EXPECT_EQ(m.StartBackward(&a.keys, 1.0f).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.FinishBackward().ok());
  ASSERT_TRUE(m.FinishBackward().ok());  // nothing pending: only waits
  // An upload whose keys overflow a table's capacity is refused before any copy.
  StepInputs big = MakeStep(m, c, ForwardMode::kTrain, 2);
  big.keys.tables[0].keys.resize(9);
  big.keys.tables[0].rows.resize(9 * c.embedding_dim);
  EXPECT_FALSE(m.UploadBatch(1, big.batch, big.keys, ForwardMode::kTrain).ok());
  // So is an inverse outside its table (a device read out of bounds otherwise), uploaded ahead
  // or staged by Forward itself.
  StepInputs bad = MakeStep(m, c, ForwardMode::kTrain, 3);
  bad.keys.short_inv[2] = static_cast<int32_t>(bad.keys.tables[1].keys.size());
  s = m.UploadBatch(1, bad.batch, bad.keys, ForwardMode::kTrain);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("short history feature 0 slot 2 has inverse"), std::string::npos) << s;
  EXPECT_EQ(m.Forward(bad.batch, bad.keys, ForwardMode::kTrain).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(sim->stats()->failures.empty());
}

}  // namespace
}  // namespace sift::worker
