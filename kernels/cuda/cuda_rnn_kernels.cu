// The fused element-wise steps of the CUDA GRU / AUGRU (cuda_rnn_kernels.h): rnn_steps.h's element
// functions in grid-stride loops with int64 indices.
#include "kernels/cuda/cuda_rnn_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise_math.h"
#include "kernels/cuda/rnn_plan.h"
#include "kernels/cuda/rnn_steps.h"

namespace sift::cuda {
namespace {

using math::Add;

// The first element of this thread and the stride of a grid-stride loop over a 1-D grid.
__device__ __forceinline__ int64_t GridStart() {
  return int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() { return int64_t{gridDim.x} * blockDim.x; }

// Blocks of a launch over n elements (n > 0).
unsigned Blocks(int64_t n, int threads) {
  return static_cast<unsigned>(rnn::GridBlocks(n, threads));
}

__global__ void GruForwardStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                     const float* xw, const float* hu, const float* b_in,
                                     const float* b_rec, float* h, float* cache) {
  const int64_t n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    rnn::GruForwardElement(i, time, hidden, t, xw, hu, b_in, b_rec, h, cache);
  }
}

__global__ void GruBackwardStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                      const float* h, const float* cache, const float* dh,
                                      float* carry, float* gx, float* gh) {
  const int64_t n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    rnn::GruBackwardElement(i, time, hidden, t, h, cache, dh, carry, gx, gh);
  }
}

__global__ void AugruGatesStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                     const float* xg, const float* g_b, const float* hs,
                                     float* cache) {
  const int64_t n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    rnn::AugruGatesElement(i, time, hidden, t, xg, g_b, hs, cache);
  }
}

__global__ void AugruUpdateStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                      const float* xc, const float* c_b, const float* att,
                                      float* hs, float* cache) {
  const int64_t n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    rnn::AugruUpdateElement(i, time, hidden, t, xc, c_b, att, hs, cache);
  }
}

// One block (kRowThreads threads, a power of two) per batch row b; the block's threads take units
// j = threadIdx.x, + blockDim.x, ... (each summing its duk * u terms in increasing j) and the
// threads' sums are added in a fixed tree order.
__global__ void AugruUpdateBackwardStepKernel(int64_t batch, int64_t time, int64_t hidden,
                                              int64_t t, const float* att, const float* hs,
                                              const float* cache, float* carry, float* dcp,
                                              float* dg, float* datt) {
  __shared__ double terms[rnn::kRowThreads];
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    double part = 0.0;
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      part = Add(part, rnn::AugruUpdateBackwardElement(b, j, time, hidden, t, att, hs, cache, carry,
                                                       dcp, dg));
    }
    if (datt != nullptr) {  // the same for the whole block: every thread reaches __syncthreads
      terms[threadIdx.x] = part;
      __syncthreads();
      for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
          terms[threadIdx.x] = Add(terms[threadIdx.x], terms[threadIdx.x + half]);
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) {
        const int64_t row = b * time + t;
        datt[row] = Add(datt[row], static_cast<float>(-terms[0]));
      }
      __syncthreads();  // terms is rewritten for the next b
    }
  }
}

__global__ void AugruGatesBackwardStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                             const float* hs, const float* cache, const float* dgh,
                                             float* carry, float* dg) {
  const int64_t n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    rnn::AugruGatesBackwardElement(i, time, hidden, t, hs, cache, dgh, carry, dg);
  }
}

__global__ void ZeroStepRowsKernel(int64_t batch, int64_t time, int64_t width, int64_t t,
                                   float* m) {
  const int64_t n = batch * width;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    rnn::ZeroStepRowElement(i, time, width, t, m);
  }
}

}  // namespace

cudaError_t LaunchGruForwardStep(cudaStream_t stream, int64_t batch, int64_t time, int64_t hidden,
                                 int64_t t, const float* xw, const float* hu, const float* b_in,
                                 const float* b_rec, float* h, float* cache) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0) return cudaSuccess;
  GruForwardStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, xw, hu, b_in, b_rec, h, cache);
  return cudaGetLastError();
}

cudaError_t LaunchGruBackwardStep(cudaStream_t stream, int64_t batch, int64_t time, int64_t hidden,
                                  int64_t t, const float* h, const float* cache, const float* dh,
                                  float* carry, float* gx, float* gh) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0) return cudaSuccess;
  GruBackwardStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, h, cache, dh, carry, gx, gh);
  return cudaGetLastError();
}

cudaError_t LaunchAugruGatesStep(cudaStream_t stream, int64_t batch, int64_t time, int64_t hidden,
                                 int64_t t, const float* xg, const float* g_b, const float* hs,
                                 float* cache) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0) return cudaSuccess;
  AugruGatesStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, xg, g_b, hs, cache);
  return cudaGetLastError();
}

cudaError_t LaunchAugruUpdateStep(cudaStream_t stream, int64_t batch, int64_t time, int64_t hidden,
                                  int64_t t, const float* xc, const float* c_b, const float* att,
                                  float* hs, float* cache) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0) return cudaSuccess;
  AugruUpdateStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, xc, c_b, att, hs, cache);
  return cudaGetLastError();
}

cudaError_t LaunchAugruUpdateBackwardStep(cudaStream_t stream, int64_t batch, int64_t time,
                                          int64_t hidden, int64_t t, const float* att,
                                          const float* hs, const float* cache, float* carry,
                                          float* dcp, float* dg, float* datt) {
  if (batch <= 0 || hidden <= 0 || time <= 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(batch < rnn::kMaxBlocks ? batch : rnn::kMaxBlocks);
  AugruUpdateBackwardStepKernel<<<blocks, rnn::kRowThreads, 0, stream>>>(
      batch, time, hidden, t, att, hs, cache, carry, dcp, dg, datt);
  return cudaGetLastError();
}

cudaError_t LaunchAugruGatesBackwardStep(cudaStream_t stream, int64_t batch, int64_t time,
                                         int64_t hidden, int64_t t, const float* hs,
                                         const float* cache, const float* dgh, float* carry,
                                         float* dg) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0 || t <= 0) return cudaSuccess;
  AugruGatesBackwardStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, hs, cache, dgh, carry, dg);
  return cudaGetLastError();
}

cudaError_t LaunchZeroStepRows(cudaStream_t stream, int64_t batch, int64_t time, int64_t width,
                               int64_t t, float* m) {
  const int64_t n = batch * width;
  if (n <= 0 || time <= 0) return cudaSuccess;
  ZeroStepRowsKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(batch, time, width, t,
                                                                             m);
  return cudaGetLastError();
}

}  // namespace sift::cuda
