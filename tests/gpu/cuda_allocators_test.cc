// The caching allocator over real CUDA memory: device buffers, pinned host buffers, and CUDA
// failures as Status. Skips itself where no GPU is visible.
#include "kernels/cuda/cuda_allocators.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_query.h"

namespace sift::cuda {
namespace {

using ::testing::HasSubstr;

class CudaAllocatorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto devices = QueryDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    if (devices->empty()) GTEST_SKIP() << "no CUDA device visible";
  }
};

TEST_F(CudaAllocatorsTest, DeviceBufferRoundTrip) {
  CudaRawAllocator raw(0);
  CachingAllocator alloc(&raw);
  std::vector<float> host(10000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  auto a = DeviceBuffer<float>::Allocate(&alloc, host.size());
  auto b = DeviceBuffer<float>::Allocate(&alloc, host.size());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  cudaPointerAttributes attr{};
  ASSERT_TRUE(SIFT_CUDA_STATUS(cudaPointerGetAttributes(&attr, a->data())).ok());
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  ASSERT_TRUE(
      SIFT_CUDA_STATUS(cudaMemcpy(a->data(), host.data(), a->bytes(), cudaMemcpyHostToDevice))
          .ok());
  ASSERT_TRUE(
      SIFT_CUDA_STATUS(cudaMemcpy(b->data(), a->data(), a->bytes(), cudaMemcpyDeviceToDevice))
          .ok());
  std::vector<float> back(host.size(), 0.0f);
  ASSERT_TRUE(
      SIFT_CUDA_STATUS(cudaMemcpy(back.data(), b->data(), b->bytes(), cudaMemcpyDeviceToHost))
          .ok());
  EXPECT_EQ(back, host);
  // A released device block is reused by the next request of its class.
  float* old = a->data();
  a->Reset();
  auto c = DeviceBuffer<float>::Allocate(&alloc, host.size());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data(), old);
  EXPECT_EQ(alloc.stats().num_raw_allocations, 2);
  c->Reset();
  b->Reset();
  EXPECT_TRUE(alloc.Trim().ok());
}

TEST_F(CudaAllocatorsTest, PinnedHostBufferCopiesAsynchronously) {
  PinnedHostRawAllocator pinned_raw;
  CachingAllocator pinned(&pinned_raw);
  CudaRawAllocator device_raw(0);
  CachingAllocator device(&device_raw);
  constexpr size_t kN = 1 << 16;
  auto h = DeviceBuffer<int32_t>::Allocate(&pinned, kN);
  auto d = DeviceBuffer<int32_t>::Allocate(&device, kN);
  auto h2 = DeviceBuffer<int32_t>::Allocate(&pinned, kN);
  ASSERT_TRUE(h.ok() && d.ok() && h2.ok());
  cudaPointerAttributes attr{};
  ASSERT_TRUE(SIFT_CUDA_STATUS(cudaPointerGetAttributes(&attr, h->data())).ok());
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  for (size_t i = 0; i < kN; ++i) h->data()[i] = static_cast<int32_t>(i * 2654435761u);
  cudaStream_t stream = nullptr;
  ASSERT_TRUE(SIFT_CUDA_STATUS(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)).ok());
  EXPECT_TRUE(SIFT_CUDA_STATUS(
                  cudaMemcpyAsync(d->data(), h->data(), h->bytes(), cudaMemcpyHostToDevice, stream))
                  .ok());
  EXPECT_TRUE(SIFT_CUDA_STATUS(cudaMemcpyAsync(h2->data(), d->data(), d->bytes(),
                                               cudaMemcpyDeviceToHost, stream))
                  .ok());
  EXPECT_TRUE(SIFT_CUDA_STATUS(cudaStreamSynchronize(stream)).ok());
  EXPECT_TRUE(SIFT_CUDA_STATUS(cudaStreamDestroy(stream)).ok());
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(h2->data()[i], h->data()[i]) << i;
}

TEST_F(CudaAllocatorsTest, OversizedCudaMallocIsResourceExhausted) {
  void* p = nullptr;
  const Status s = SIFT_CUDA_STATUS(cudaMalloc(&p, size_t{1} << 50));  // 1 PiB
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("cudaMalloc(&p, size_t{1} << 50) failed: "
                                     "cudaErrorMemoryAllocation"));
  // The failure was cleared from the thread's last error: a later launch check sees only its own.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(CudaAllocatorsTest, OversizedRequestThroughTheAllocatorNamesSizeAndStats) {
  CudaRawAllocator raw(0);
  CachingAllocator alloc(&raw);
  auto small = alloc.Allocate(1 << 20);
  ASSERT_TRUE(small.ok()) << small.status();
  alloc.Release(*small);
  auto huge = alloc.Allocate(size_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status())) << huge.status();
  EXPECT_THAT(huge.status().message(), HasSubstr("allocating 1125899906842624 bytes"));
  EXPECT_THAT(huge.status().message(), HasSubstr("cudaErrorMemoryAllocation"));
  EXPECT_THAT(huge.status().message(), HasSubstr("1 out-of-memory retries"));
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);  // trimmed before the retry
}

TEST_F(CudaAllocatorsTest, InvalidCallIsInvalidArgument) {
  auto buf_alloc = CudaRawAllocator(0).Allocate(4096);
  ASSERT_TRUE(buf_alloc.ok()) << buf_alloc.status();
  char host[16] = {};
  const Status s =
      SIFT_CUDA_STATUS(cudaMemcpy(*buf_alloc, host, sizeof(host), static_cast<cudaMemcpyKind>(77)));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(CudaRawAllocator(0).Free(*buf_alloc).ok());
}

TEST_F(CudaAllocatorsTest, BadDeviceIndexIsInvalidArgument) {
  CudaRawAllocator raw(1 << 20);
  auto p = raw.Allocate(1024);
  EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("cudaSetDevice"));
}

}  // namespace
}  // namespace sift::cuda
