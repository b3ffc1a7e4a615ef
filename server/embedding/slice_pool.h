// SlicePool: reusable memory for the large gRPC messages of the embedding servers and their
// clients (multi-MB Pull replies and Push requests). A fresh multi-MB allocation costs a page
// fault per 4 KiB on first touch — more than writing the bytes — so big blocks are handed out as
// grpc::Slice and come back to the pool when gRPC drops its last reference (after the bytes went
// to the socket). Small sizes are plain heap slices.
//
// One process-wide pool (SlicePool::Get()), never destroyed: slices may outlive any server or
// client. Keeps at most 16 free blocks and 256 MiB. Thread-safe.
//
// KeepFreedHeapMemory() does the same for the buffers gRPC itself allocates (every received
// message lands in fresh malloc'd slices): it makes glibc keep freed memory instead of returning
// it to the kernel and faulting it in again on the next message. Process-wide, once; called by
// EmbeddingServer::Start and EmbeddingClient::Connect.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <grpcpp/support/slice.h>

namespace sift::embedding {

class SlicePool {
 public:
  static SlicePool& Get() {
    static SlicePool* const pool = new SlicePool();
    return *pool;
  }

  // A slice of exactly n bytes; *data is its writable memory, aligned for any scalar (64 bytes
  // for pooled blocks), to be written before the slice is handed to gRPC.
  grpc::Slice Take(size_t n, char** data) {
    if (n < kMinPooledBytes) {
      // Not grpc::Slice(n): a small one keeps its bytes inline, and they move with the object.
      char* memory = new char[std::max<size_t>(n, 1)];
      *data = memory;
      return grpc::Slice(memory, n, [](void* p) { delete[] static_cast<char*>(p); });
    }
    Block* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if ((*it)->capacity >= n && (best == free_.end() || (*it)->capacity < (*best)->capacity)) {
          best = it;
        }
      }
      if (best != free_.end()) {
        block = *best;
        free_bytes_ -= block->capacity;
        free_.erase(best);
      }
    }
    if (block == nullptr) block = new Block(this, n);
    *data = block->memory;
    return grpc::Slice(block->memory, n, &SlicePool::Release, block);
  }

 private:
  static constexpr size_t kMinPooledBytes = size_t{64} << 10;
  static constexpr size_t kMaxFreeBytes = size_t{256} << 20;
  static constexpr size_t kMaxFreeBlocks = 16;
  static constexpr size_t kAlign = 64;

  struct Block {
    Block(SlicePool* p, size_t n)
        : pool(p),
          capacity(n),
          memory(static_cast<char*>(::operator new (n, std::align_val_t{kAlign}))) {}
    ~Block() { ::operator delete (memory, std::align_val_t{kAlign}); }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    SlicePool* pool;
    size_t capacity;
    char* memory;
  };

  static void Release(void* user_data) {
    Block* block = static_cast<Block*>(user_data);
    SlicePool* pool = block->pool;
    {
      std::lock_guard<std::mutex> lock(pool->mu_);
      if (pool->free_.size() < kMaxFreeBlocks &&
          pool->free_bytes_ + block->capacity <= kMaxFreeBytes) {
        pool->free_.push_back(block);
        pool->free_bytes_ += block->capacity;
        return;
      }
    }
    delete block;
  }

  std::mutex mu_;
  std::vector<Block*> free_;  // guarded by mu_
  size_t free_bytes_ = 0;     // guarded by mu_
};

// glibc malloc: blocks up to 32 MiB come from the heap (not a fresh mmap each), the heap keeps up
// to 256 MiB of free memory at its top and grows by 64 MiB extra. A measured 25-30% of Pull and
// Push throughput at 64K keys (4 MiB messages) went to page faults without it.
inline void KeepFreedHeapMemory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_TOP_PAD, 64 << 20);
  });
#endif
}

}  // namespace sift::embedding
