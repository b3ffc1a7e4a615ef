// The scale step of NcclCollectives::AllreduceAverage: every element divided (correctly rounded
// IEEE division, as Collectives::AllreduceAverage on the host) by the world size, on a stream.
// Lives in its own small CUDA target (sift_nccl_kernels, worker/CMakeLists.txt).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sift::worker {

// Enqueues data[i] = data[i] / divisor for i in [0, n) on `stream` (device pointer `data`).
// Returns the launch error (cudaGetLastError()), or cudaSuccess without a launch when n == 0.
cudaError_t LaunchDivideInPlace(cudaStream_t stream, float* data, int64_t n, float divisor);

}  // namespace sift::worker
