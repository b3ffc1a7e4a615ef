// NCCL collectives on a real device: a one-rank communicator (the lent machine has one GPU; the
// multi-rank logic is covered by the Gloo path) over a FileKvStore, and the two ways a missing
// peer surfaces as DEADLINE_EXCEEDED: rank 1 whose id never arrives, and rank 0 whose peer never
// joins NCCL's init (the watchdog aborts the communicator). Skips without a device or NCCL.
// Argument and id-format errors need no device: tests/unit/nccl_rendezvous_test.cc.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/kv_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_query.h"
#include "tests/util/test_util.h"
#include "worker/collectives.h"
#include "worker/nccl_support.h"

#if SIFT_HAVE_NCCL_COLLECTIVES
#include "worker/nccl_collectives.h"
#include "worker/nccl_divide.h"
#endif

namespace sift::worker {
namespace {

using ::testing::HasSubstr;

#if SIFT_HAVE_NCCL_COLLECTIVES

// A device float buffer, freed on destruction.
class DeviceFloats {
 public:
  explicit DeviceFloats(const std::vector<float>& host) : n_(host.size()) {
    EXPECT_TRUE(SIFT_CUDA_STATUS(cudaMalloc(&ptr_, bytes())).ok());
    EXPECT_TRUE(
        SIFT_CUDA_STATUS(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice)).ok());
    // A pageable cudaMemcpy may return before its DMA ends, and the test's stream does not
    // synchronize with the legacy default stream.
    EXPECT_TRUE(SIFT_CUDA_STATUS(cudaDeviceSynchronize()).ok());
  }
  ~DeviceFloats() { (void)cudaFree(ptr_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  absl::Span<float> span() { return absl::MakeSpan(static_cast<float*>(ptr_), n_); }
  std::vector<float> ToHost() const {
    std::vector<float> out(n_);
    EXPECT_TRUE(
        SIFT_CUDA_STATUS(cudaMemcpy(out.data(), ptr_, bytes(), cudaMemcpyDeviceToHost)).ok());
    return out;
  }

 private:
  size_t bytes() const { return n_ * sizeof(float); }
  size_t n_;
  void* ptr_ = nullptr;
};

class NcclCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto devices = cuda::QueryDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    if (devices->empty()) GTEST_SKIP() << "no CUDA device visible";
    auto store = FileKvStore::Open(dir_.path() + "/kv");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    ASSERT_TRUE(SIFT_CUDA_STATUS(cudaSetDevice(0)).ok());
    ASSERT_TRUE(SIFT_CUDA_STATUS(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)).ok());
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  NcclOptions Options(double timeout_s) const {
    NcclOptions o;
    o.device = 0;
    o.stream = stream_;
    o.timeout_s = timeout_s;
    return o;
  }

  ::sift::testing::TempDir dir_;
  std::unique_ptr<FileKvStore> store_;
  cudaStream_t stream_ = nullptr;
};

std::vector<float> Values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 97) * 0.25f - 3.0f;
  return v;
}

TEST_F(NcclCollectivesTest, OneRankCollectivesOnDeviceBuffers) {
  auto c = CreateNcclCollectives(store_.get(), "job/0", 0, 1, Options(60));
  ASSERT_TRUE(c.ok()) << c.status();
  Collectives& coll = **c;
  EXPECT_EQ(coll.rank(), 0);
  EXPECT_EQ(coll.world_size(), 1);
  EXPECT_TRUE(coll.device_memory());
  // Rank 0 published the id, hex encoded, under the prefix.
  auto id = store_->Get("job/0/nccl_id", absl::ZeroDuration());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(DecodeNcclUniqueId(*id, "job/0/nccl_id").ok());

  // Large enough for several NCCL chunks and the divide kernel's grid-stride loop.
  const std::vector<float> host = Values(3'000'001);
  DeviceFloats buf(host);
  ASSERT_TRUE(coll.AllreduceSum(buf.span()).ok());
  EXPECT_EQ(buf.ToHost(), host);  // one rank: the sum is the input
  ASSERT_TRUE(coll.AllreduceAverage(buf.span()).ok());
  EXPECT_EQ(buf.ToHost(), host);
  ASSERT_TRUE(coll.Broadcast(buf.span(), 0).ok());
  EXPECT_EQ(buf.ToHost(), host);
  EXPECT_TRUE(coll.Barrier().ok());
  EXPECT_TRUE(coll.AllreduceSum(absl::Span<float>()).ok());  // empty: nothing to do

  Status bad_root = coll.Broadcast(buf.span(), 1);
  EXPECT_EQ(bad_root.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_root.message(), HasSubstr("root 1 is outside [0, 1)"));
  // A bad argument is rejected before any NCCL call: the instance stays usable.
  EXPECT_TRUE(coll.Barrier().ok());

  // Work queued earlier on the stream is ordered before the collective.
  std::vector<float> twice(host.size());
  for (size_t i = 0; i < host.size(); ++i) twice[i] = 2 * host[i];
  ASSERT_TRUE(SIFT_CUDA_STATUS(cudaMemcpyAsync(buf.span().data(), twice.data(),
                                               twice.size() * sizeof(float), cudaMemcpyHostToDevice,
                                               stream_))
                  .ok());
  ASSERT_TRUE(coll.AllreduceSum(buf.span()).ok());
  EXPECT_EQ(buf.ToHost(), twice);
}

// A host function queued on a stream: sleeps, then raises its flag (no CUDA calls inside).
void CUDART_CB SleepThenRaise(void* flag) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  static_cast<std::atomic<bool>*>(flag)->store(true);
}

TEST_F(NcclCollectivesTest, UseStreamOrdersAfterTheBoundStreamsWork) {
  auto c = CreateNcclCollectives(store_.get(), "job/bind", 0, 1, Options(60));
  ASSERT_TRUE(c.ok()) << c.status();
  // Another stream (as the CUDA backend's compute stream) holds work the host does not wait for:
  // once bound, a collective is queued after it, and returns only when it completed, so the
  // work (a 200 ms host function) must be done when AllreduceSum returns.
  cudaStream_t compute = nullptr;
  ASSERT_TRUE(SIFT_CUDA_STATUS(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking)).ok());
  ASSERT_TRUE((*c)->UseStream(compute).ok());
  const std::vector<float> host = Values(1'000'000);
  DeviceFloats buf(host);
  std::atomic<bool> done{false};
  ASSERT_TRUE(SIFT_CUDA_STATUS(cudaLaunchHostFunc(compute, SleepThenRaise, &done)).ok());
  ASSERT_TRUE((*c)->AllreduceSum(buf.span()).ok());
  EXPECT_TRUE(done.load()) << "the collective did not follow the bound stream's work";
  EXPECT_EQ(SIFT_CUDA_STATUS(cudaStreamQuery(compute)).code(), absl::StatusCode::kOk);
  EXPECT_EQ(buf.ToHost(), host);
  // Unbound (always allowed): back on the options' stream; the instance stays usable.
  ASSERT_TRUE((*c)->UseStream(nullptr).ok());
  ASSERT_TRUE((*c)->AllreduceSum(buf.span()).ok());
  EXPECT_EQ(buf.ToHost(), host);
  (void)cudaStreamDestroy(compute);
}

TEST_F(NcclCollectivesTest, DivideKernelMatchesHostDivision) {
  // AllreduceAverage's scale step (skipped for one rank): bit-identical to the host's x / world.
  std::vector<float> host = Values(1'000'003);
  host[0] = 1e-40f;  // subnormal
  host[1] = -0.0f;
  host[2] = 3.4e38f;
  for (float divisor : {3.0f, 7.0f, 1024.0f}) {
    DeviceFloats buf(host);
    ASSERT_TRUE(SIFT_CUDA_STATUS(LaunchDivideInPlace(stream_, buf.span().data(),
                                                     static_cast<int64_t>(host.size()), divisor))
                    .ok());
    ASSERT_TRUE(SIFT_CUDA_STATUS(cudaStreamSynchronize(stream_)).ok());
    const std::vector<float> got = buf.ToHost();
    for (size_t i = 0; i < host.size(); ++i) {
      const float want = host[i] / divisor;
      ASSERT_EQ(std::memcmp(&got[i], &want, sizeof(float)), 0)
          << "element " << i << ": " << host[i] << " / " << divisor << " = " << got[i] << ", want "
          << want;
    }
  }
  EXPECT_EQ(LaunchDivideInPlace(stream_, nullptr, 0, 3.0f), cudaSuccess);  // nothing to do
}

TEST_F(NcclCollectivesTest, SecondCommunicatorUnderAFreshPrefix) {
  for (const char* prefix : {"job/1", "job/2"}) {
    auto c = CreateNcclCollectives(store_.get(), prefix, 0, 1, Options(60));
    ASSERT_TRUE(c.ok()) << prefix << ": " << c.status();
    DeviceFloats buf({1.0f, -2.5f, 1e30f});
    ASSERT_TRUE((*c)->AllreduceAverage(buf.span()).ok());
    EXPECT_EQ(buf.ToHost(), std::vector<float>({1.0f, -2.5f, 1e30f}));
  }
}

TEST_F(NcclCollectivesTest, RankWhoseIdNeverArrivesTimesOut) {
  // World 2, only rank 1: rank 0 never publishes the id.
  auto c = CreateNcclCollectives(store_.get(), "lonely/0", 1, 2, Options(0.3));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("rank 1 of 2"));
  EXPECT_THAT(c.status().message(), HasSubstr("prefix 'lonely/0'"));
}

TEST_F(NcclCollectivesTest, RankWhosePeerNeverJoinsIsAbortedByTheWatchdog) {
  // World 2, only rank 0: the id is published, NCCL's init waits for rank 1, the watchdog aborts.
  auto c = CreateNcclCollectives(store_.get(), "half/0", 0, 2, Options(2));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("nccl init (rank 0 of 2, prefix 'half/0'"));
  EXPECT_THAT(c.status().message(), HasSubstr("aborted"));
  // The device is still usable afterwards: a fresh one-rank communicator works.
  auto ok = CreateNcclCollectives(store_.get(), "half/1", 0, 1, Options(60));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE((*ok)->Barrier().ok());
}

#else  // !SIFT_HAVE_NCCL_COLLECTIVES

TEST(NcclCollectivesTest, NotBuilt) { GTEST_SKIP() << "built without NCCL"; }

#endif

}  // namespace
}  // namespace sift::worker
