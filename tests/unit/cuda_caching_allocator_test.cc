// The CUDA backend's caching allocator and DeviceBuffer, on the CPU: a host raw allocator with a
// byte capacity stands in for cudaMalloc (and runs out of memory on demand).
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/device_buffer.h"

namespace sift::cuda {
namespace {

using ::testing::HasSubstr;

// Host memory with a capacity: Allocate fails with RESOURCE_EXHAUSTED when the live bytes would
// exceed it (or with `error` when set). Tracks every live pointer; thread-safe.
class HostRawAllocator final : public RawAllocator {
 public:
  explicit HostRawAllocator(size_t capacity = size_t{1} << 30) : capacity_(capacity) {}
  ~HostRawAllocator() override {
    for (const auto& [p, bytes] : live_) std::free(p);
  }

  StatusOr<void*> Allocate(size_t bytes) override {
    absl::MutexLock lock(&mu_);
    ++allocate_calls_;
    if (!error_.ok()) return error_;
    if (live_bytes_ + bytes > capacity_) {
      return absl::ResourceExhaustedError(absl::StrCat("host: out of memory for ", bytes));
    }
    void* p = std::aligned_alloc(256, bytes);
    if (p == nullptr) return absl::ResourceExhaustedError("aligned_alloc");
    live_[p] = bytes;
    live_bytes_ += bytes;
    return p;
  }
  Status Free(void* p) override {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return absl::InternalError("host: freeing an unknown pointer");
    live_bytes_ -= it->second;
    live_.erase(it);
    std::free(p);
    ++frees_;
    return absl::OkStatus();
  }

  void set_error(Status s) {
    absl::MutexLock lock(&mu_);
    error_ = std::move(s);
  }
  size_t live_blocks() const {
    absl::MutexLock lock(&mu_);
    return live_.size();
  }
  size_t live_bytes() const {
    absl::MutexLock lock(&mu_);
    return live_bytes_;
  }
  int64_t allocate_calls() const {
    absl::MutexLock lock(&mu_);
    return allocate_calls_;
  }
  int64_t frees() const {
    absl::MutexLock lock(&mu_);
    return frees_;
  }

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::map<void*, size_t> live_ ABSL_GUARDED_BY(mu_);
  size_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocate_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t frees_ ABSL_GUARDED_BY(mu_) = 0;
  Status error_ ABSL_GUARDED_BY(mu_);
};

TEST(CachingAllocatorSizeClass, RoundsUpByAtMostAQuarter) {
  EXPECT_EQ(CachingAllocator::SizeClass(1), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(512), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(513), 640u);
  EXPECT_EQ(CachingAllocator::SizeClass(1000), 1024u);
  EXPECT_EQ(CachingAllocator::SizeClass(1024), 1024u);
  EXPECT_EQ(CachingAllocator::SizeClass(1025), 1280u);
  EXPECT_EQ(CachingAllocator::SizeClass((size_t{1} << 20) + 1), (size_t{5} << 18));
  Rng rng(17);
  for (int i = 0; i < 10000; ++i) {
    const size_t n = 1 + rng.Below(uint64_t{1} << (1 + rng.Below(40)));
    const size_t c = CachingAllocator::SizeClass(n);
    ASSERT_GE(c, n) << n;
    ASSERT_LE(c, std::max<size_t>(512, n + n / 4)) << n;
    ASSERT_EQ(c % 128, 0u) << n;
    ASSERT_EQ(CachingAllocator::SizeClass(c), c) << n;  // a class is its own class
  }
}

TEST(CachingAllocator, ZeroBytesIsAnEmptyBlockWithoutRawCalls) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto b = alloc.Allocate(0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ptr, nullptr);
  EXPECT_EQ(b->bytes, 0u);
  alloc.Release(*b);
  EXPECT_EQ(raw.allocate_calls(), 0);
  EXPECT_EQ(alloc.stats().num_allocations, 0);
}

TEST(CachingAllocator, ReusesAReleasedBlockOfTheSameClass) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto a = alloc.Allocate(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bytes, 1024u);
  void* first = a->ptr;
  alloc.Release(*a);
  auto b = alloc.Allocate(900);  // also the 1024 class
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ptr, first);
  EXPECT_EQ(raw.allocate_calls(), 1);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_allocations, 2);
  EXPECT_EQ(s.num_cache_hits, 1);
  EXPECT_EQ(s.num_raw_allocations, 1);
  alloc.Release(*b);
}

TEST(CachingAllocator, DoesNotReuseAcrossClasses) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto small = alloc.Allocate(4096);
  ASSERT_TRUE(small.ok());
  alloc.Release(*small);
  auto larger = alloc.Allocate(4097);  // 5120 class: the cached 4096 block cannot serve it
  ASSERT_TRUE(larger.ok());
  EXPECT_NE(larger->ptr, small->ptr);
  EXPECT_EQ(larger->bytes, 5120u);
  auto smaller = alloc.Allocate(100);  // 512 class: not served by the 4096 block either
  ASSERT_TRUE(smaller.ok());
  EXPECT_NE(smaller->ptr, small->ptr);
  EXPECT_EQ(raw.allocate_calls(), 3);
  EXPECT_EQ(alloc.stats().num_cache_hits, 0);
  EXPECT_EQ(alloc.stats().bytes_cached, 4096u);
  alloc.Release(*larger);
  alloc.Release(*smaller);
}

TEST(CachingAllocator, AccountsInUseCachedAndPeak) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto a = alloc.Allocate(2048);
  auto b = alloc.Allocate(8192);
  ASSERT_TRUE(a.ok() && b.ok());
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 2048u + 8192u);
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, 2048u + 8192u);
  alloc.Release(*b);
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 2048u);
  EXPECT_EQ(s.bytes_cached, 8192u);
  EXPECT_EQ(s.peak_bytes_in_use, 2048u + 8192u);
  EXPECT_EQ(s.peak_bytes_reserved, 2048u + 8192u);
  auto c = alloc.Allocate(512);
  ASSERT_TRUE(c.ok());
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 2048u + 512u);
  EXPECT_EQ(s.peak_bytes_in_use, 2048u + 8192u);
  EXPECT_EQ(s.peak_bytes_reserved, 2048u + 8192u + 512u);
  alloc.Release(*a);
  alloc.Release(*c);
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_cached, 2048u + 8192u + 512u);
  EXPECT_EQ(raw.live_bytes(), s.bytes_cached);
}

TEST(CachingAllocator, TrimFreesCachedBlocksThroughTheRawAllocator) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto held = alloc.Allocate(1 << 16);
  auto a = alloc.Allocate(1 << 12);
  auto b = alloc.Allocate(1 << 12);
  ASSERT_TRUE(held.ok() && a.ok() && b.ok());
  alloc.Release(*a);
  alloc.Release(*b);
  EXPECT_EQ(raw.live_blocks(), 3u);
  ASSERT_TRUE(alloc.Trim().ok());
  EXPECT_EQ(raw.live_blocks(), 1u);  // the held block stays
  EXPECT_EQ(raw.frees(), 2);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.bytes_in_use, size_t{1} << 16);
  EXPECT_EQ(s.num_raw_frees, 2);
  auto again = alloc.Allocate(1 << 12);  // nothing cached now: a raw allocation
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(raw.allocate_calls(), 4);
  alloc.Release(*again);
  alloc.Release(*held);
}

TEST(CachingAllocator, DestructorFreesTheCache) {
  HostRawAllocator raw;
  {
    CachingAllocator alloc(&raw);
    auto a = alloc.Allocate(3000);
    ASSERT_TRUE(a.ok());
    alloc.Release(*a);
    EXPECT_EQ(raw.live_blocks(), 1u);
  }
  EXPECT_EQ(raw.live_blocks(), 0u);
}

TEST(CachingAllocator, OutOfMemoryTrimsAndRetriesOnce) {
  HostRawAllocator raw(/*capacity=*/8192);
  CachingAllocator alloc(&raw);
  auto a = alloc.Allocate(4096);
  auto b = alloc.Allocate(4096);
  ASSERT_TRUE(a.ok() && b.ok());
  alloc.Release(*a);
  alloc.Release(*b);
  // 6144 is a new class; the raw allocator is full of cached 4096 blocks until they are trimmed.
  auto c = alloc.Allocate(6144);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(raw.allocate_calls(), 4);  // a, b, the refused attempt, the retry
  EXPECT_EQ(raw.frees(), 2);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_oom_retries, 1);
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.bytes_in_use, 6144u);
  alloc.Release(*c);
}

TEST(CachingAllocator, OutOfMemoryAfterTheRetryNamesTheSizeAndStats) {
  HostRawAllocator raw(/*capacity=*/8192);
  CachingAllocator alloc(&raw);
  auto held = alloc.Allocate(4096);
  auto cached = alloc.Allocate(2048);
  ASSERT_TRUE(held.ok() && cached.ok());
  alloc.Release(*cached);
  auto big = alloc.Allocate(5000);  // class 5120: 4096 held + 5120 > 8192 even after the trim
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(big.status())) << big.status();
  EXPECT_THAT(big.status().message(), HasSubstr("allocating 5000 bytes (size class 5120 B)"));
  EXPECT_THAT(big.status().message(), HasSubstr("host: out of memory for 5120"));
  EXPECT_THAT(big.status().message(), HasSubstr("in use 4096 B"));
  EXPECT_THAT(big.status().message(), HasSubstr("1 out-of-memory retries"));
  EXPECT_EQ(raw.allocate_calls(), 4);  // held, cached, the attempt, one retry
  EXPECT_EQ(raw.live_blocks(), 1u);    // the cached block was trimmed
  // Nothing cached now: the next refusal fails at once, without a retry.
  auto again = alloc.Allocate(5000);
  EXPECT_TRUE(absl::IsResourceExhausted(again.status()));
  EXPECT_EQ(raw.allocate_calls(), 5);
  EXPECT_EQ(alloc.stats().num_oom_retries, 1);
  alloc.Release(*held);
}

TEST(CachingAllocator, OtherRawErrorsAreNotRetriedAndKeepTheirCode) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto a = alloc.Allocate(512);
  ASSERT_TRUE(a.ok());
  alloc.Release(*a);
  raw.set_error(absl::FailedPreconditionError("no device"));
  auto b = alloc.Allocate(4096);
  EXPECT_TRUE(absl::IsFailedPrecondition(b.status())) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("allocating 4096 bytes"));
  EXPECT_THAT(b.status().message(), HasSubstr("no device"));
  EXPECT_EQ(raw.allocate_calls(), 2);
  EXPECT_EQ(alloc.stats().bytes_cached, 512u);  // no trim for an error that is not OOM
}

TEST(CachingAllocator, RefusesRequestsLargerThanAnyClass) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto b = alloc.Allocate(CachingAllocator::kMaxBlockBytes + 1);
  EXPECT_TRUE(absl::IsResourceExhausted(b.status())) << b.status();
  EXPECT_EQ(raw.allocate_calls(), 0);
}

TEST(DeviceBuffer, AllocatesAndReturnsItsBlockOnDestruction) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  void* ptr = nullptr;
  {
    auto buf = DeviceBuffer<float>::Allocate(&alloc, 300);
    ASSERT_TRUE(buf.ok()) << buf.status();
    EXPECT_EQ(buf->size(), 300u);
    EXPECT_EQ(buf->bytes(), 1200u);
    EXPECT_EQ(buf->capacity_bytes(), 1280u);
    EXPECT_FALSE(buf->empty());
    ptr = buf->data();
    for (int i = 0; i < 300; ++i) buf->data()[i] = static_cast<float>(i);
    EXPECT_EQ(alloc.stats().bytes_in_use, 1280u);
  }
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  EXPECT_EQ(alloc.stats().bytes_cached, 1280u);
  auto again = DeviceBuffer<int32_t>::Allocate(&alloc, 320);  // 1280 bytes: the same block
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(static_cast<void*>(again->data()), ptr);
}

TEST(DeviceBuffer, MoveTransfersOwnershipOnce) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto made = DeviceBuffer<double>::Allocate(&alloc, 100);
  ASSERT_TRUE(made.ok());
  DeviceBuffer<double> a = std::move(made).value();
  double* p = a.data();
  DeviceBuffer<double> b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_TRUE(a.empty());
  auto other = DeviceBuffer<double>::Allocate(&alloc, 1000);
  ASSERT_TRUE(other.ok());
  DeviceBuffer<double> c = std::move(other).value();
  c = std::move(b);  // c's old block goes back to the cache, b's moves in
  EXPECT_EQ(c.data(), p);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, CachingAllocator::SizeClass(800));
  EXPECT_EQ(s.bytes_cached, CachingAllocator::SizeClass(8000));
  c = std::move(c);  // self-move keeps the buffer
  EXPECT_EQ(c.data(), p);
  c.Reset();
  EXPECT_TRUE(c.empty());
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.num_raw_allocations, 2);
}

TEST(DeviceBuffer, EmptyAndOverflowingRequests) {
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  auto empty = DeviceBuffer<float>::Allocate(&alloc, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->data(), nullptr);
  auto huge = DeviceBuffer<double>::Allocate(&alloc, std::numeric_limits<size_t>::max() / 4);
  EXPECT_TRUE(absl::IsInvalidArgument(huge.status())) << huge.status();
  EXPECT_EQ(raw.allocate_calls(), 0);
}

// Threads allocate, fill with their own pattern, check and release buffers of random classes.
// A block handed to two owners at once would show as a corrupted pattern; a lost block as a
// raw block left after the final Trim().
TEST(CachingAllocator, ManyThreadsLoseNoBlock) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 2000;
  constexpr uint64_t kSeed = 2024;
  HostRawAllocator raw;
  CachingAllocator alloc(&raw);
  std::vector<std::thread> threads;
  std::vector<int> corrupt(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(kSeed + t);
      std::vector<DeviceBuffer<uint32_t>> held;
      for (int r = 0; r < kRounds; ++r) {
        if (!held.empty() && (held.size() > 6 || rng.Below(2) == 0)) {
          const size_t i = rng.Below(held.size());
          const uint32_t tag =
              static_cast<uint32_t>(t) << 24 | static_cast<uint32_t>(held[i].size());
          for (size_t j = 0; j < held[i].size(); ++j) corrupt[t] += held[i].data()[j] != tag;
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
          if (rng.Below(64) == 0) corrupt[t] += !alloc.Trim().ok();
        } else {
          const size_t n = 1 + rng.Below(4096);
          auto buf = DeviceBuffer<uint32_t>::Allocate(&alloc, n);
          if (!buf.ok()) {
            ++corrupt[t];
            continue;
          }
          const uint32_t tag = static_cast<uint32_t>(t) << 24 | static_cast<uint32_t>(n);
          for (size_t j = 0; j < n; ++j) buf->data()[j] = tag;
          held.push_back(std::move(buf).value());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(corrupt[t], 0) << "thread " << t << " seed " << kSeed;
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(raw.live_bytes(), s.bytes_cached);
  EXPECT_EQ(static_cast<int64_t>(raw.live_blocks()), s.num_raw_allocations - s.num_raw_frees);
  EXPECT_GT(s.num_cache_hits, 0);
  ASSERT_TRUE(alloc.Trim().ok());
  EXPECT_EQ(raw.live_blocks(), 0u);
  s = alloc.stats();
  EXPECT_EQ(s.num_raw_allocations, s.num_raw_frees);
}

}  // namespace
}  // namespace sift::cuda
