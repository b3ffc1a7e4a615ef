// The raw memory sources of the CUDA backend, to put behind a CachingAllocator: device memory of
// one GPU (cudaMalloc / cudaFree) and page-locked host memory (cudaMallocHost / cudaFreeHost) for
// the host<->device copies that overlap with compute. Errors are Statuses naming the CUDA call
// (cuda_status.h); out of memory is RESOURCE_EXHAUSTED.
// Thread-safety: both are thread-safe (the CUDA runtime is); CudaRawAllocator leaves the calling
// thread's current device as it found it.
#pragma once

#include "common/status.h"
#include "kernels/cuda/caching_allocator.h"

namespace sift::cuda {

// Device memory on device `device` (an index of QueryDevices()).
class CudaRawAllocator final : public RawAllocator {
 public:
  explicit CudaRawAllocator(int device) : device_(device) {}
  StatusOr<void*> Allocate(size_t bytes) override;
  Status Free(void* p) override;
  int device() const { return device_; }

 private:
  const int device_;
};

// Page-locked host memory, usable for asynchronous copies to and from every device.
class PinnedHostRawAllocator final : public RawAllocator {
 public:
  StatusOr<void*> Allocate(size_t bytes) override;
  Status Free(void* p) override;
};

}  // namespace sift::cuda
