// CachingAllocator: the one place the CUDA backend gets memory from. It rounds every request up to
// a size class, serves it from a free list of that class when one is cached, and otherwise asks a
// pluggable RawAllocator (cudaMalloc, cudaMallocHost, or host memory in tests). Blocks are cached
// on release, never split or merged; Trim() returns the cached ones to the raw allocator, and an
// allocation the raw allocator refuses with RESOURCE_EXHAUSTED is retried once after a Trim().
//
// Stream-unaware by design: a released block is reused at once by the next request of its class.
// REQUIRES: GPU work that touches a block is ordered before any use of its next owner (true when
// every user is on one stream, or after the stream that used it was synchronised).
// Thread-safety: CachingAllocator is thread-safe; raw allocator calls run outside its lock, so a
// RawAllocator must itself be thread-safe. Header-only and free of CUDA includes so that CPU tests
// build it (and C++17, for nvcc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"

namespace sift::cuda {

// The source of memory behind a CachingAllocator. Allocate(bytes) (bytes > 0) returns memory
// aligned to at least 256 bytes or an error (RESOURCE_EXHAUSTED when out of memory); Free(p) takes
// back exactly a pointer Allocate returned. Implementations are thread-safe.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual Status Free(void* p) = 0;
};

// A block handed out by CachingAllocator: `bytes` is its size class (>= the request). An empty
// block (ptr null, bytes 0) is what a request of 0 bytes gets.
struct MemoryBlock {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// Byte counts are in size-class bytes (what the blocks really occupy).
struct AllocatorStats {
  size_t bytes_in_use = 0;          // held by callers
  size_t bytes_cached = 0;          // released, kept for reuse
  size_t peak_bytes_in_use = 0;     // the maximum of bytes_in_use so far
  size_t peak_bytes_reserved = 0;   // the maximum of bytes_in_use + bytes_cached so far
  int64_t num_allocations = 0;      // non-empty blocks handed out (cache hits included)
  int64_t num_cache_hits = 0;       // of those, served from a free list
  int64_t num_raw_allocations = 0;  // successful RawAllocator::Allocate calls
  int64_t num_raw_frees = 0;        // RawAllocator::Free calls
  int64_t num_oom_retries = 0;      // allocations retried after a Trim()

  std::string ToString() const {
    return absl::StrCat("in use ", bytes_in_use, " B, cached ", bytes_cached, " B, peak in use ",
                        peak_bytes_in_use, " B, peak reserved ", peak_bytes_reserved, " B, ",
                        num_allocations, " allocations (", num_cache_hits, " cache hits), ",
                        num_raw_allocations, " raw allocations, ", num_raw_frees, " raw frees, ",
                        num_oom_retries, " out-of-memory retries");
  }
};

class CachingAllocator {
 public:
  // The smallest size class; every class is a multiple of it.
  static constexpr size_t kMinBlockBytes = 512;
  // Requests above this are refused with RESOURCE_EXHAUSTED (no size class can hold them).
  static constexpr size_t kMaxBlockBytes = size_t{1} << 60;

  // The size class of a request of `bytes` (> 0, <= kMaxBlockBytes): kMinBlockBytes for small
  // requests, else rounded up to a quarter of the largest power of two <= bytes (at most 25%
  // waste): 512, 640, 768, 896, 1024, 1280, ... 1 MiB, 1.25 MiB, ...
  static constexpr size_t SizeClass(size_t bytes) {
    if (bytes <= kMinBlockBytes) return kMinBlockBytes;
    size_t floor_pow2 = kMinBlockBytes;  // the largest power of two <= bytes (C++17: no bit_floor)
    while (floor_pow2 <= bytes / 2) floor_pow2 *= 2;
    const size_t step = floor_pow2 / 4;
    return (bytes + step - 1) / step * step;
  }

  // `raw` is not owned and must outlive this allocator.
  explicit CachingAllocator(RawAllocator* raw) : raw_(raw) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  // Frees the cached blocks. REQUIRES: every block was released (blocks still held are leaked).
  ~CachingAllocator() { (void)Trim(); }

  // A block of at least `bytes` (0 gives an empty block and touches nothing). Errors:
  // RESOURCE_EXHAUSTED naming the request and the stats when the raw allocator is out of memory
  // even after a Trim(); the raw allocator's other errors, annotated with the request.
  StatusOr<MemoryBlock> Allocate(size_t bytes) {
    if (bytes == 0) return MemoryBlock{};
    if (bytes > kMaxBlockBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("allocating ", bytes, " bytes: larger than any size class (", kMaxBlockBytes,
                       " B); ", stats().ToString()));
    }
    const size_t size = SizeClass(bytes);
    if (void* cached = TakeCached(size)) return MemoryBlock{cached, size};

    StatusOr<void*> p = raw_->Allocate(size);
    if (p.ok()) return Account(*p, size);
    if (!absl::IsResourceExhausted(p.status()) || CachedBytes() == 0) {
      return Failed(bytes, size, p.status());
    }
    {
      absl::MutexLock lock(&mu_);
      ++stats_.num_oom_retries;
    }
    const Status trimmed = Trim();
    StatusOr<void*> retried = raw_->Allocate(size);
    if (retried.ok()) return Account(*retried, size);
    return Failed(bytes, size,
                  trimmed.ok() ? retried.status() : Annotate(retried.status(), trimmed.ToString()));
  }

  // Returns `block` to its class's free list (an empty block is ignored).
  // REQUIRES: `block` came from Allocate on this allocator and is released once.
  void Release(MemoryBlock block) {
    if (block.ptr == nullptr) return;
    absl::MutexLock lock(&mu_);
    free_[block.bytes].push_back(block.ptr);
    stats_.bytes_in_use -= block.bytes;
    stats_.bytes_cached += block.bytes;
  }

  // Frees every cached block through the raw allocator. Returns the first Free error (the
  // remaining blocks are still freed and dropped from the cache either way).
  Status Trim() {
    std::map<size_t, std::vector<void*>> taken;
    {
      absl::MutexLock lock(&mu_);
      taken.swap(free_);
      stats_.bytes_cached = 0;
    }
    Status first;
    int64_t frees = 0;
    for (auto& [size, ptrs] : taken) {
      for (void* p : ptrs) {
        Status s = raw_->Free(p);
        ++frees;
        // Update keeps the first error (and avoids assigning a [[nodiscard]] Status&, which
        // nvcc warns about).
        if (!s.ok()) first.Update(Annotate(s, absl::StrCat("freeing a cached ", size, " B block")));
      }
    }
    absl::MutexLock lock(&mu_);
    stats_.num_raw_frees += frees;
    return first;
  }

  AllocatorStats stats() const {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  MemoryBlock Account(void* p, size_t size) {
    absl::MutexLock lock(&mu_);
    ++stats_.num_raw_allocations;
    ++stats_.num_allocations;
    stats_.bytes_in_use += size;
    UpdatePeaks();
    return MemoryBlock{p, size};
  }

  // The raw allocator's error for a request of `bytes` (class `size`), naming both and the stats;
  // out of memory stays RESOURCE_EXHAUSTED, other codes are kept.
  Status Failed(size_t bytes, size_t size, const Status& raw_error) const {
    return Status(raw_error.code(),
                  absl::StrCat("allocating ", bytes, " bytes (size class ", size,
                               " B): ", raw_error.message(), "; ", stats().ToString()));
  }

  void* TakeCached(size_t size) {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    stats_.bytes_cached -= size;
    stats_.bytes_in_use += size;
    ++stats_.num_allocations;
    ++stats_.num_cache_hits;
    UpdatePeaks();
    return p;
  }

  size_t CachedBytes() const {
    absl::MutexLock lock(&mu_);
    return stats_.bytes_cached;
  }

  void UpdatePeaks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    stats_.peak_bytes_reserved =
        std::max(stats_.peak_bytes_reserved, stats_.bytes_in_use + stats_.bytes_cached);
  }

  RawAllocator* const raw_;
  mutable absl::Mutex mu_;
  // Size class -> released blocks of exactly that class.
  std::map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sift::cuda
