// The fused element-wise steps of the CUDA GRU / AUGRU and the fixed-order column sum
// (cuda_rnn_kernels.h). Grid-stride loops with int64 indices; the maths is elementwise_math.h.
#include "kernels/cuda/cuda_rnn_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise_math.h"
#include "kernels/cuda/rnn_plan.h"

namespace sift::cuda {
namespace {

using math::Add;
using math::Mul;

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
  const int64_t H = hidden, G = 3 * hidden, n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t b = i / H, j = i - b * H;
    const int64_t row = b * time + t;
    const float* x3 = xw + row * G;
    float hz = b_rec[j], hr = b_rec[H + j], hn = b_rec[2 * H + j];  // h_{-1} = 0: biases only
    if (hu != nullptr) {
      const float* h3 = hu + b * G;
      hz = Add(h3[j], hz);
      hr = Add(h3[H + j], hr);
      hn = Add(h3[2 * H + j], hn);
    }
    const float prev = t > 0 ? h[(row - 1) * H + j] : 0.0f;
    const math::GruUnitState<float> s =
        math::GruUnitForward(Add(x3[j], b_in[j]), Add(x3[H + j], b_in[H + j]),
                             Add(x3[2 * H + j], b_in[2 * H + j]), hz, hr, hn, prev);
    float* c4 = cache + row * 4 * H;
    c4[math::kGruCacheZ * H + j] = s.z;
    c4[math::kGruCacheR * H + j] = s.r;
    c4[math::kGruCacheN * H + j] = s.n;
    c4[math::kGruCacheHn * H + j] = s.hn;
    h[row * H + j] = s.h;
  }
}

__global__ void GruBackwardStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                      const float* h, const float* cache, const float* dh,
                                      float* carry, float* gx, float* gh) {
  const int64_t H = hidden, G = 3 * hidden, n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t b = i / H, j = i - b * H;
    const int64_t row = b * time + t;
    const float* c4 = cache + row * 4 * H;
    const float prev = t > 0 ? h[(row - 1) * H + j] : 0.0f;
    const float dht = Add(dh[row * H + j], carry[i]);
    const math::GruUnitGrad<float> g = math::GruUnitBackward(
        c4[math::kGruCacheZ * H + j], c4[math::kGruCacheR * H + j], c4[math::kGruCacheN * H + j],
        c4[math::kGruCacheHn * H + j], prev, dht);
    float* x3 = gx + row * G;
    float* h3 = gh + row * G;
    x3[j] = g.daz;
    x3[H + j] = g.dar;
    x3[2 * H + j] = g.dan;
    h3[j] = g.daz;
    h3[H + j] = g.dar;
    h3[2 * H + j] = g.dhn;
    carry[i] = g.dprev;
  }
}

__global__ void AugruGatesStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                     const float* xg, const float* g_b, const float* hs,
                                     float* cache) {
  const int64_t H = hidden, n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t b = i / H, k = i - b * H;
    const int64_t row = b * time + t;
    const float* pre = xg + row * 2 * H;
    const float prev = t > 0 ? hs[(row - 1) * H + k] : 0.0f;
    const math::AugruGates<float> g =
        math::AugruUnitGates(Add(pre[k], g_b[k]), Add(pre[H + k], g_b[H + k]), prev);
    float* c4 = cache + row * 4 * H;
    c4[math::kAugruCacheGamma * H + k] = g.gamma;
    c4[math::kAugruCacheU * H + k] = g.u;
    c4[math::kAugruCacheGh * H + k] = g.gh;
  }
}

__global__ void AugruUpdateStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                      const float* xc, const float* c_b, const float* att,
                                      float* hs, float* cache) {
  const int64_t H = hidden, n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t b = i / H, j = i - b * H;
    const int64_t row = b * time + t;
    float* c4 = cache + row * 4 * H;
    const float prev = t > 0 ? hs[(row - 1) * H + j] : 0.0f;
    const math::AugruUpdate<float> s = math::AugruUnitUpdate(
        Add(xc[row * H + j], c_b[j]), c4[math::kAugruCacheU * H + j], att[row], prev);
    c4[math::kAugruCacheC * H + j] = s.c;
    hs[row * H + j] = s.h;
  }
}

// One block (kRowThreads threads, a power of two) per batch row b; the block's threads take units
// j = threadIdx.x, + blockDim.x, ... and the datt terms are added in a fixed tree order.
__global__ void AugruUpdateBackwardStepKernel(int64_t batch, int64_t time, int64_t hidden,
                                              int64_t t, const float* att, const float* hs,
                                              const float* cache, float* carry, float* dcp,
                                              float* dg, float* datt) {
  __shared__ double terms[rnn::kRowThreads];
  const int64_t H = hidden;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const int64_t row = b * time + t;
    const float a = att[row];
    const float* c4 = cache + row * 4 * H;
    double part = 0.0;  // sum of duk * u over this thread's units, in increasing j
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
      const float u = c4[math::kAugruCacheU * H + j];
      const float prev = t > 0 ? hs[(row - 1) * H + j] : 0.0f;
      const math::AugruUpdateGrad<float> g = math::AugruUnitUpdateBackward(
          u, c4[math::kAugruCacheC * H + j], a, prev, carry[b * H + j]);
      dcp[row * H + j] = g.dpre_c;
      dg[row * 2 * H + H + j] = g.dpre_u;
      if (t == 0) dg[row * 2 * H + j] = 0.0f;  // gamma multiplies h'_{-1} = 0
      carry[b * H + j] = g.dprev;
      part = Add(part, Mul(static_cast<double>(g.duk), static_cast<double>(u)));
    }
    if (datt != nullptr) {  // the same for the whole block: __syncthreads is reached by all
      terms[threadIdx.x] = part;
      __syncthreads();
      for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
          terms[threadIdx.x] = Add(terms[threadIdx.x], terms[threadIdx.x + half]);
        __syncthreads();
      }
      if (threadIdx.x == 0) datt[row] = Add(datt[row], static_cast<float>(-terms[0]));
      __syncthreads();  // terms is rewritten for the next b
    }
  }
}

__global__ void AugruGatesBackwardStepKernel(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                                             const float* hs, const float* cache, const float* dgh,
                                             float* carry, float* dg) {
  const int64_t H = hidden, n = batch * hidden;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t b = i / H, k = i - b * H;
    const int64_t row = b * time + t;
    const math::AugruGatesGrad<float> g =
        math::AugruUnitGatesBackward(cache[row * 4 * H + math::kAugruCacheGamma * H + k],
                                     hs[(row - 1) * H + k], dgh[i], carry[i]);
    dg[row * 2 * H + k] = g.dpre_gamma;
    carry[i] = g.dprev;
  }
}

__global__ void ZeroStepRowsKernel(int64_t batch, int64_t time, int64_t width, int64_t t,
                                   float* m) {
  const int64_t n = batch * width;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t b = i / width, c = i - b * width;
    m[(b * time + t) * width + c] = 0.0f;
  }
}

// Pass 1 of the column sum: block (kSumTileCols, kSumRowLanes) for column tile blockIdx.x and
// chunk blockIdx.y.
__global__ void ColumnSumPartialsKernel(int64_t rows, int64_t cols, const float* src, int64_t ld,
                                        int64_t rows_per_chunk, double* partials) {
  __shared__ double lanes[rnn::kSumRowLanes][rnn::kSumTileCols];
  const int64_t col = int64_t{blockIdx.x} * rnn::kSumTileCols + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  lanes[threadIdx.y][threadIdx.x] =
      col < cols ? rnn::ColumnStripSum(src, ld, col, begin, end, static_cast<int>(threadIdx.y),
                                       rnn::kSumRowLanes)
                 : 0.0;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    double total = lanes[0][threadIdx.x];
    for (int y = 1; y < rnn::kSumRowLanes; ++y) total = Add(total, lanes[y][threadIdx.x]);
    partials[chunk * cols + col] = total;
  }
}

// Pass 2: one thread per column adds the chunks in increasing order.
__global__ void ColumnSumFinishKernel(int64_t cols, int64_t chunks, const double* partials,
                                      float* dst) {
  for (int64_t col = GridStart(); col < cols; col += GridStride()) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s = Add(s, partials[c * cols + col]);
    dst[col] = Add(dst[col], static_cast<float>(s));
  }
}

}  // namespace

cudaError_t LaunchGruForwardStep(cudaStream_t stream, int64_t batch, int time, int hidden, int t,
                                 const float* xw, const float* hu, const float* b_in,
                                 const float* b_rec, float* h, float* cache) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0) return cudaSuccess;
  GruForwardStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, xw, hu, b_in, b_rec, h, cache);
  return cudaGetLastError();
}

cudaError_t LaunchGruBackwardStep(cudaStream_t stream, int64_t batch, int time, int hidden, int t,
                                  const float* h, const float* cache, const float* dh, float* carry,
                                  float* gx, float* gh) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0) return cudaSuccess;
  GruBackwardStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, h, cache, dh, carry, gx, gh);
  return cudaGetLastError();
}

cudaError_t LaunchAugruGatesStep(cudaStream_t stream, int64_t batch, int time, int hidden, int t,
                                 const float* xg, const float* g_b, const float* hs, float* cache) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0) return cudaSuccess;
  AugruGatesStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, xg, g_b, hs, cache);
  return cudaGetLastError();
}

cudaError_t LaunchAugruUpdateStep(cudaStream_t stream, int64_t batch, int time, int hidden, int t,
                                  const float* xc, const float* c_b, const float* att, float* hs,
                                  float* cache) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0) return cudaSuccess;
  AugruUpdateStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, xc, c_b, att, hs, cache);
  return cudaGetLastError();
}

cudaError_t LaunchAugruUpdateBackwardStep(cudaStream_t stream, int64_t batch, int time, int hidden,
                                          int t, const float* att, const float* hs,
                                          const float* cache, float* carry, float* dcp, float* dg,
                                          float* datt) {
  if (batch <= 0 || hidden <= 0 || time <= 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(batch < rnn::kMaxBlocks ? batch : rnn::kMaxBlocks);
  AugruUpdateBackwardStepKernel<<<blocks, rnn::kRowThreads, 0, stream>>>(
      batch, time, hidden, t, att, hs, cache, carry, dcp, dg, datt);
  return cudaGetLastError();
}

cudaError_t LaunchAugruGatesBackwardStep(cudaStream_t stream, int64_t batch, int time, int hidden,
                                         int t, const float* hs, const float* cache,
                                         const float* dgh, float* carry, float* dg) {
  const int64_t n = batch * hidden;
  if (n <= 0 || time <= 0 || t <= 0) return cudaSuccess;
  AugruGatesBackwardStepKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      batch, time, hidden, t, hs, cache, dgh, carry, dg);
  return cudaGetLastError();
}

cudaError_t LaunchZeroStepRows(cudaStream_t stream, int64_t batch, int time, int64_t width, int t,
                               float* m) {
  const int64_t n = batch * width;
  if (n <= 0 || time <= 0) return cudaSuccess;
  ZeroStepRowsKernel<<<Blocks(n, rnn::kThreads), rnn::kThreads, 0, stream>>>(batch, time, width, t,
                                                                             m);
  return cudaGetLastError();
}

cudaError_t LaunchColumnSum(cudaStream_t stream, int64_t rows, int64_t cols, const float* src,
                            int64_t ld, double* partials, float* dst) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const rnn::ColumnSumPlan plan = rnn::PlanColumnSum(rows);
  const dim3 grid(static_cast<unsigned>((cols + rnn::kSumTileCols - 1) / rnn::kSumTileCols),
                  static_cast<unsigned>(plan.chunks));
  const dim3 block(rnn::kSumTileCols, rnn::kSumRowLanes);
  ColumnSumPartialsKernel<<<grid, block, 0, stream>>>(rows, cols, src, ld, plan.rows_per_chunk,
                                                      partials);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  ColumnSumFinishKernel<<<Blocks(cols, rnn::kThreads), rnn::kThreads, 0, stream>>>(
      cols, plan.chunks, partials, dst);
  return cudaGetLastError();
}

}  // namespace sift::cuda
