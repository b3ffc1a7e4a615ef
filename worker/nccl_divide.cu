#include "worker/nccl_divide.h"

#include <algorithm>

namespace sift::worker {
namespace {

__global__ void DivideInPlaceKernel(float* data, int64_t n, float divisor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    data[i] = __fdiv_rn(data[i], divisor);
  }
}

}  // namespace

cudaError_t LaunchDivideInPlace(cudaStream_t stream, float* data, int64_t n, float divisor) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond 1M elements
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
  DivideInPlaceKernel<<<blocks, kThreads, 0, stream>>>(data, n, divisor);
  return cudaGetLastError();
}

}  // namespace sift::worker
