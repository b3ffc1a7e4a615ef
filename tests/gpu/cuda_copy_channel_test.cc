// The CUDA copy channel (kernels/cuda/cuda_copy_channel.h) on a real GPU: uploads and downloads
// on their own stream through page-locked staging, ordered against the compute stream only by
// fences (cudaEvents), staging that grows, and a channel driven from another thread while the
// backend computes. Skips itself where no GPU is visible.
#include "kernels/cuda/cuda_copy_channel.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_query.h"

namespace sift::cuda {
namespace {

class CudaCopyChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto devices = QueryDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    if (devices->empty()) GTEST_SKIP() << "no CUDA device visible";
    auto be = CreateCudaBackend({});
    ASSERT_TRUE(be.ok()) << be.status();
    be_ = std::move(be).value();
  }
  std::unique_ptr<kernels::Backend> be_;
};

std::vector<float> Ramp(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i % 1000) * 0.25f;
  return v;
}

TEST_F(CudaCopyChannelTest, UploadComputeDownloadInFenceOrder) {
  constexpr size_t kN = size_t{1} << 22;  // 16 MiB: copies take long enough to race without fences
  const int64_t bytes = static_cast<int64_t>(kN * sizeof(float));
  auto buf = be_->Allocate(bytes);
  ASSERT_TRUE(buf.ok()) << buf.status();
  auto up = be_->CreateCopyChannel(0);  // no staging up front: it grows
  auto down = be_->CreateCopyChannel(bytes);
  ASSERT_TRUE(up.ok() && down.ok());
  for (int round = 0; round < 3; ++round) {
    std::vector<float> src = Ramp(kN, static_cast<float>(round)), out(kN, -1.0f);
    ASSERT_TRUE((*up)->Upload(src.data(), buf->data(), bytes).ok());
    src.assign(kN, 1e30f);  // staged: reusable at once
    auto uploaded = (*up)->RecordFence();
    ASSERT_TRUE(uploaded.ok()) << uploaded.status();
    ASSERT_TRUE(be_->WaitFence(*uploaded).ok());
    be_->Scale(static_cast<int64_t>(kN), 2.0f, buf->floats());
    auto scaled = be_->RecordFence();
    ASSERT_TRUE(scaled.ok()) << scaled.status();
    ASSERT_TRUE((*down)->WaitFence(*scaled).ok());
    ASSERT_TRUE((*down)->Download(buf->data(), out.data(), bytes).ok());
    ASSERT_TRUE((*down)->Synchronize().ok());
    ASSERT_TRUE((*up)->Synchronize().ok());
    const std::vector<float> want = Ramp(kN, static_cast<float>(round));
    size_t bad = 0;
    for (size_t i = 0; i < kN; ++i) bad += out[i] != 2.0f * want[i];
    EXPECT_EQ(bad, 0u) << "round " << round;
    // The compute's own stream is unaffected: the next op would wait on nothing it must not.
    ASSERT_TRUE(be_->Synchronize().ok());
  }
}

TEST_F(CudaCopyChannelTest, StagingGrowsAndOldBlocksStayValidUntilSynchronize) {
  auto ch = CudaCopyChannel::Create(0, 1024);
  ASSERT_TRUE(ch.ok()) << ch.status();
  std::vector<kernels::BackendBuffer> bufs;
  std::vector<std::vector<float>> srcs;
  for (int i = 0; i < 4; ++i) {
    const size_t n = size_t{1000} << (2 * i);  // 4 KB .. 256 KB: each outgrows the block
    srcs.push_back(Ramp(n, static_cast<float>(i)));
    auto b = be_->Allocate(static_cast<int64_t>(n * sizeof(float)));
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE((*ch)->Upload(srcs.back().data(), b->data(), b->bytes()).ok());
    bufs.push_back(std::move(b).value());
  }
  // Each upload outgrew the block: it is now at least the last (largest) one.
  EXPECT_GE((*ch)->staging_capacity(), static_cast<int64_t>(srcs.back().size() * sizeof(float)));
  ASSERT_TRUE((*ch)->Synchronize().ok());
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::vector<float> back(srcs[i].size());
    ASSERT_TRUE(be_->CopyToHost(bufs[i].data(), back.data(), bufs[i].bytes()).ok());
    EXPECT_EQ(back, srcs[i]) << "upload " << i;
  }
  EXPECT_EQ((*ch)->Upload(srcs[0].data(), bufs[0].data(), -4).code(),
            absl::StatusCode::kInvalidArgument);
}

// The upload is issued after the compute's work and its fence waited for right away: without
// the wait, the Copy below would read `b` while 64 MiB are still on their way.
TEST_F(CudaCopyChannelTest, AnotherThreadUploadsWhileTheBackendComputes) {
  constexpr size_t kN = size_t{1} << 24;
  const int64_t bytes = static_cast<int64_t>(kN * sizeof(float));
  auto a = be_->Allocate(bytes), b = be_->Allocate(bytes);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ch = be_->CreateCopyChannel(bytes);
  ASSERT_TRUE(ch.ok());
  be_->Fill(static_cast<int64_t>(kN), 1.0f, a->floats());
  kernels::Fence uploaded;
  Status thread_status;
  const std::vector<float> src = Ramp(kN, 3.0f);
  for (int i = 0; i < 50; ++i) be_->Scale(static_cast<int64_t>(kN), 1.0f, a->floats());
  std::thread uploader([&] {
    thread_status = (*ch)->Upload(src.data(), b->data(), bytes);
    if (!thread_status.ok()) return;
    auto f = (*ch)->RecordFence();
    thread_status = f.status();
    if (f.ok()) uploaded = *f;
  });
  uploader.join();
  ASSERT_TRUE(thread_status.ok()) << thread_status;
  ASSERT_TRUE(be_->WaitFence(uploaded).ok());
  be_->Copy(1, 1, static_cast<int64_t>(kN), b->floats(), 0, 0, a->floats(), 0, 0,
            /*accumulate=*/true);
  std::vector<float> back(kN);
  ASSERT_TRUE(be_->CopyToHost(a->data(), back.data(), bytes).ok());
  size_t bad = 0;
  for (size_t i = 0; i < kN; ++i) bad += back[i] != 1.0f + src[i];
  EXPECT_EQ(bad, 0u);
  ASSERT_TRUE((*ch)->Synchronize().ok());
}

}  // namespace
}  // namespace sift::cuda
