// The CUDA backend of kernels/backend.h (issue 6): every op on one GPU, on one compute stream, in
// device memory from one caching allocator (caching_allocator.h over cudaMalloc). GEMMs go to
// cuBLAS (row-major calls mapped onto its column-major API; MathMode picks the compute type);
// everything else is hand-written kernels whose per-element arithmetic is elementwise_math.h.
// Reductions (losses, the dense layers' bias/slope gradients, the segment sums) run in a fixed
// order with no float atomics, so a run is bit-reproducible on one GPU model; SetDeterministic(
// false) trades that for speed in the embedding-gradient segment sum (float atomicAdd, no sort).
//
// Errors: ops return void; a failed launch or cuBLAS call is recorded (the first one, naming the
// call, file and line: cuda_status.h) and returned by the next Synchronize(). After a failure the
// later ops of the step are skipped (their outputs are undefined) until Synchronize() clears it;
// a sticky device error (IsStickyCudaError) is never cleared: every later Synchronize() fails.
// Thread-compatible: one thread drives a backend (kernels/backend.h).
#pragma once

#include <memory>

#include "common/status.h"
#include "kernels/backend.h"

namespace sift::cuda {

struct CudaBackendOptions {
  int device = 0;  // an index of QueryDevices() (device_query.h)
  kernels::MathMode math = kernels::MathMode::kFp32;
};

// FAILED_PRECONDITION naming the cause when there is no usable device (no driver, no GPU, the
// index out of range); the CUDA/cuBLAS error otherwise.
StatusOr<std::unique_ptr<kernels::Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace sift::cuda
