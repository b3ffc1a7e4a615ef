// DeviceBuffer<T>: an RAII handle on `count` elements of T in a block of a CachingAllocator
// (device memory, or pinned host memory, whatever the allocator's raw source is). Move-only; the
// destructor (or Reset) returns the block to the allocator's cache. The contents start
// uninitialised. Free of CUDA includes so that CPU tests build it.
// Thread-safety: one buffer is used by one thread at a time; buffers of one allocator may be
// created and destroyed on any threads.
// REQUIRES: the allocator outlives the buffer; T is trivially copyable (the memory is raw bytes
// that kernels and cudaMemcpy fill).
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/status.h"
#include "kernels/cuda/caching_allocator.h"

namespace sift::cuda {

template <typename T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "DeviceBuffer holds raw bytes");
  static_assert(alignof(T) <= 256, "raw allocators align to 256 bytes");

 public:
  // A buffer of `count` elements from `allocator` (count 0 gives an empty buffer). Errors:
  // INVALID_ARGUMENT when count * sizeof(T) overflows; the allocator's errors.
  static StatusOr<DeviceBuffer> Allocate(CachingAllocator* allocator, size_t count) {
    if (count > std::numeric_limits<size_t>::max() / sizeof(T)) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceBuffer of ", count, " elements of ",
                                                     sizeof(T), " bytes overflows size_t"));
    }
    SIFT_ASSIGN_OR_RETURN(MemoryBlock block, allocator->Allocate(count * sizeof(T)));
    return DeviceBuffer(allocator, block, count);
  }

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : allocator_(std::exchange(other.allocator_, nullptr)),
        block_(std::exchange(other.block_, MemoryBlock{})),
        count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      allocator_ = std::exchange(other.allocator_, nullptr);
      block_ = std::exchange(other.block_, MemoryBlock{});
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  // Returns the block to the allocator; the buffer becomes empty.
  void Reset() {
    if (allocator_ != nullptr) allocator_->Release(block_);
    allocator_ = nullptr;
    block_ = MemoryBlock{};
    count_ = 0;
  }

  T* data() const { return static_cast<T*>(block_.ptr); }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  // The size class of the underlying block (>= bytes()).
  size_t capacity_bytes() const { return block_.bytes; }
  bool empty() const { return count_ == 0; }

 private:
  DeviceBuffer(CachingAllocator* allocator, MemoryBlock block, size_t count)
      : allocator_(allocator), block_(block), count_(count) {}

  CachingAllocator* allocator_ = nullptr;
  MemoryBlock block_;
  size_t count_ = 0;
};

}  // namespace sift::cuda
