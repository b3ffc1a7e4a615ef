#include "kernels/cuda/cuda_allocators.h"

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_status.h"

namespace sift::cuda {
namespace {

// Makes `device` current for one scope and restores the previous device on exit.
class ScopedDevice {
 public:
  static StatusOr<ScopedDevice> Enter(int device) {
    int previous = 0;
    SIFT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous));
    if (previous != device) SIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    return ScopedDevice(previous, device);
  }
  ScopedDevice(ScopedDevice&& other) noexcept
      : previous_(other.previous_), current_(other.current_) {
    other.previous_ = other.current_;
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ScopedDevice& operator=(ScopedDevice&&) = delete;
  // Restoring a device that was current a moment ago cannot fail but for a sticky error, which
  // the next checked call reports.
  ~ScopedDevice() {
    if (previous_ != current_) (void)cudaSetDevice(previous_);
  }

 private:
  ScopedDevice(int previous, int current) : previous_(previous), current_(current) {}
  int previous_;
  int current_;
};

}  // namespace

StatusOr<void*> CudaRawAllocator::Allocate(size_t bytes) {
  SIFT_ASSIGN_OR_RETURN(ScopedDevice scope, ScopedDevice::Enter(device_));
  void* p = nullptr;
  SIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  return p;
}

Status CudaRawAllocator::Free(void* p) {
  SIFT_ASSIGN_OR_RETURN(ScopedDevice scope, ScopedDevice::Enter(device_));
  return SIFT_CUDA_STATUS(cudaFree(p));
}

StatusOr<void*> PinnedHostRawAllocator::Allocate(size_t bytes) {
  void* p = nullptr;
  SIFT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, bytes));
  return p;
}

Status PinnedHostRawAllocator::Free(void* p) { return SIFT_CUDA_STATUS(cudaFreeHost(p)); }

}  // namespace sift::cuda
