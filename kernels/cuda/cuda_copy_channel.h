// The CUDA copy channel (kernels/backend.h CopyChannel) and the CUDA fences: copies on a
// non-blocking stream of their own through page-locked staging, so that a step's inputs go to the
// device, and its embedding gradients come back, while the compute stream works. Uploads are
// memcpy'd into the staging (the caller's source is free on return) and sent with
// cudaMemcpyAsync; downloads land in the staging and reach their host destination in
// Synchronize(). The staging is one page-locked block that is bump-allocated between
// Synchronize() calls; when it is full a larger block replaces it (the old one is freed at the
// next Synchronize(), after the copies that read it). Fences are cudaEvents (timing disabled),
// destroyed when the last Fence copy goes (cudaEventDestroy defers until the event completed).
// Thread-safety: one thread at a time per channel (any thread: each call selects the device).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/backend.h"

namespace sift::cuda {

// A fence after the work issued so far on `stream`.
StatusOr<kernels::Fence> RecordCudaFence(cudaStream_t stream);
// Later work on `stream` waits for `fence` (a passed fence: nothing to wait for).
Status WaitCudaFence(cudaStream_t stream, const kernels::Fence& fence);

class CudaCopyChannel final : public kernels::CopyChannel {
 public:
  // A channel on device `device` with `staging_bytes` of page-locked staging.
  static StatusOr<std::unique_ptr<CudaCopyChannel>> Create(int device, int64_t staging_bytes);
  ~CudaCopyChannel() override;
  CudaCopyChannel(const CudaCopyChannel&) = delete;
  CudaCopyChannel& operator=(const CudaCopyChannel&) = delete;

  Status Upload(const void* src, void* dst, int64_t bytes) override;
  Status Download(const void* src, void* dst, int64_t bytes) override;
  StatusOr<kernels::Fence> RecordFence() override;
  Status WaitFence(const kernels::Fence& fence) override;
  Status Synchronize() override;

  cudaStream_t stream() const { return stream_; }
  int64_t staging_capacity() const { return capacity_; }

 private:
  explicit CudaCopyChannel(int device) : device_(device) {}
  // The start of a copy of `bytes` (`op` names it in errors): the size check, a pending error,
  // the device, then its staging (nullptr for an empty copy).
  StatusOr<char*> BeginCopy(const char* op, int64_t bytes);
  // `bytes` of staging for one copy (256-byte aligned), growing the block when it is full.
  StatusOr<char*> Reserve(int64_t bytes);
  Status Grow(int64_t min_bytes);
  // The first error of the copies so far: later calls fail with it until Synchronize().
  Status Fail(Status s);

  struct PendingDownload {
    const char* staged;
    void* dst;
    int64_t bytes;
  };

  const int device_;
  cudaStream_t stream_ = nullptr;
  char* block_ = nullptr;  // page-locked
  int64_t capacity_ = 0, used_ = 0;
  std::vector<char*> retired_;  // full blocks still read by queued copies
  std::vector<PendingDownload> downloads_;
  Status error_;
};

}  // namespace sift::cuda
