// The dense family's kernels (cuda_dense_kernels.h). Element-wise kernels are one thread per
// element in grid-stride loops with int64 indices; the reductions follow cuda_dense_plan.h's fixed
// partitions (per-thread double sums in index order, a fixed tree or lane order inside a block,
// blocks / chunks combined in order by one thread per output): no atomics, the same bits on every
// run. Per-element arithmetic goes through elementwise_math.h (no fast-math intrinsics).
#include "kernels/cuda/cuda_dense_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_dense_plan.h"
#include "kernels/cuda/elementwise_math.h"
#include "kernels/dropout_mask.h"

namespace sift::cuda {
namespace {

// The largest finite float: |v| <= kMaxFinite is false exactly for NaN and +-inf.
constexpr float kMaxFinite = 3.40282347e38f;

__device__ __forceinline__ int64_t GlobalThread() {
  return int64_t{blockIdx.x} * int64_t{blockDim.x} + int64_t{threadIdx.x};
}
__device__ __forceinline__ int64_t GridThreads() {
  return int64_t{gridDim.x} * int64_t{blockDim.x};
}

unsigned ElementwiseGrid(int64_t n) { return static_cast<unsigned>(ElementwiseBlocks(n)); }

__global__ void FillKernel(int64_t n, float value, float* p) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) p[i] = value;
}

__global__ void ScaleKernel(int64_t n, float alpha, float* p) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) p[i] = math::Mul(p[i], alpha);
}

__global__ void CopyKernel(int64_t outer, int64_t rows, int64_t cols, const float* src,
                           int64_t src_outer, int64_t src_row, float* dst, int64_t dst_outer,
                           int64_t dst_row, bool accumulate) {
  const int64_t total = outer * rows * cols;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    int64_t t, c, o, r;
    DivMod(i, cols, &t, &c);
    DivMod(t, rows, &o, &r);
    const float v = src[o * src_outer + r * src_row + c];
    float* d = dst + o * dst_outer + r * dst_row + c;
    *d = accumulate ? math::Add(*d, v) : v;
  }
}

__global__ void ScaleMatricesKernel(int64_t batch, int64_t rows, int64_t cols, float beta, float* c,
                                    int64_t ld, int64_t stride) {
  const int64_t total = batch * rows * cols;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    int64_t t, col, b, r;
    DivMod(i, cols, &t, &col);
    DivMod(t, rows, &b, &r);
    float* x = c + b * stride + r * ld + col;
    *x = beta == 0.0f ? 0.0f : math::Mul(beta, *x);
  }
}

__global__ void DenseEpilogueKernel(int64_t rows, int out, DenseActivation act, const float* b,
                                    const float* slope, float* pre, float* y) {
  const int64_t total = rows * out;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    int64_t row, o;
    DivMod(i, out, &row, &o);
    float p = pre[i];
    if (b != nullptr) p = math::Add(p, b[o]);
    pre[i] = p;
    float v = p;
    if (act == DenseActivation::kSigmoid) {
      v = math::DenseSigmoid(p);
    } else if (act == DenseActivation::kPrelu) {
      v = math::Prelu(p, slope[o]);
    }
    y[i] = v;
  }
}

__global__ void DenseActivationBackwardKernel(int64_t rows, int out, DenseActivation act,
                                              const float* pre, const float* y, const float* slope,
                                              const float* dy, float* dpre) {
  const int64_t total = rows * out;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    const float g = dy[i];
    float d = g;
    if (act == DenseActivation::kSigmoid) {
      d = math::DenseSigmoidBackward(y[i], g);
    } else if (act == DenseActivation::kPrelu) {
      int64_t row, o;
      DivMod(i, out, &row, &o);
      d = math::PreluBackward(pre[i], slope[o], g);
    }
    dpre[i] = d;
  }
}

// Block (x, y) of PlanColumnSums: partial[y * cols + c] = the chunk's sum of column c.
__global__ void ColumnPartialKernel(bool prelu_slope, int64_t rows, int cols, int64_t chunk_rows,
                                    const float* a, const float* b, double* partial) {
  __shared__ double lanes[kColumnLanes][kColumnTile];
  const int64_t col = int64_t{blockIdx.x} * kColumnTile + int64_t{threadIdx.x};
  const int64_t begin = int64_t{blockIdx.y} * chunk_rows;
  const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  double acc = 0.0;
  if (col < cols) {
    for (int64_t r = begin + int64_t{threadIdx.y}; r < end; r += kColumnLanes) {
      const int64_t idx = r * cols + col;
      acc += prelu_slope ? math::PreluSlopeGradTerm(a[idx], b[idx]) : static_cast<double>(a[idx]);
    }
  }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    double s = lanes[0][threadIdx.x];
    for (int l = 1; l < kColumnLanes; ++l) s += lanes[l][threadIdx.x];
    partial[int64_t{blockIdx.y} * cols + col] = s;
  }
}

// out[c] += float(sum of the chunks' partials of column c, in chunk order).
__global__ void ColumnFinishKernel(int64_t chunks, int cols, const double* partial, float* out) {
  for (int64_t c = GlobalThread(); c < cols; c += GridThreads()) {
    double s = 0.0;
    for (int64_t y = 0; y < chunks; ++y) s += partial[y * cols + c];
    out[c] = math::Add(out[c], static_cast<float>(s));
  }
}

// Combines the block's per-thread sums by BlockTreeSum's tree into partial[blockIdx.x].
// REQUIRES: blockDim.x == kReduceThreads; every thread of the block calls it.
__device__ void BlockSumToPartial(double v, double* partial) {
  __shared__ double sums[kReduceThreads];
  const int t = static_cast<int>(threadIdx.x);
  sums[t] = v;
  __syncthreads();
  for (int s = kReduceThreads / 2; s >= 1; s /= 2) {
    if (t < s) sums[t] += sums[t + s];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = sums[0];
}

// partial[blocks] = partial[0] + partial[1] + ... in block order (one thread).
__global__ void SumPartialsKernel(int64_t blocks, double* partial) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = 0.0;
  for (int64_t b = 0; b < blocks; ++b) s += partial[b];
  partial[blocks] = s;
}

__global__ void BceWithLogitsKernel(int64_t n, const float* logits, const float* labels,
                                    float scale, float* dlogits, double* partial) {
  double acc = 0.0;
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const float l = logits[i], y = labels[i];
    acc += math::BceWithLogitsTerm(l, y);
    if (dlogits != nullptr)
      dlogits[i] = math::Add(dlogits[i], math::BceWithLogitsGrad(l, y, scale));
  }
  BlockSumToPartial(acc, partial);
}

__global__ void AuxLossKernel(int64_t n, const float* pos_logits, const float* neg_logits,
                              const float* mask, float scale, float* dpos, float* dneg,
                              double* partial) {
  double acc = 0.0;
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    if (mask != nullptr && mask[i] == 0.0f) continue;
    const math::AuxTerm<float> term = math::AuxLossTerm(pos_logits[i], neg_logits[i], scale);
    acc += term.loss;
    if (dpos != nullptr) dpos[i] = math::Add(dpos[i], term.dpos);
    if (dneg != nullptr) dneg[i] = math::Add(dneg[i], term.dneg);
  }
  BlockSumToPartial(acc, partial);
}

__global__ void NonFiniteBlocksKernel(int64_t n, const float* p, double* partial) {
  int bad = 0;
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    if (!(fabsf(p[i]) <= kMaxFinite)) bad = 1;
  }
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) partial[blockIdx.x] = bad != 0 ? 1.0 : 0.0;
}

__global__ void AdamUpdateKernel(int64_t n, float lr_t, float beta1, float beta2, float epsilon,
                                 const float* grad, float* param, float* m, float* v) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    math::AdamParamUpdate(lr_t, beta1, beta2, epsilon, grad[i], param + i, m + i, v + i);
  }
}

// The reductions' second step, then the launch status of both kernels.
cudaError_t FinishReduce(cudaStream_t stream, int64_t blocks, double* partial) {
  const cudaError_t first = cudaGetLastError();
  if (first != cudaSuccess) return first;
  SumPartialsKernel<<<1, 1, 0, stream>>>(blocks, partial);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* p) {
  if (n <= 0) return cudaSuccess;
  FillKernel<<<ElementwiseGrid(n), kElementwiseThreads, 0, stream>>>(n, value, p);
  return cudaGetLastError();
}

cudaError_t LaunchCopy(cudaStream_t stream, int64_t outer, int64_t rows, int64_t cols,
                       const float* src, int64_t src_outer, int64_t src_row, float* dst,
                       int64_t dst_outer, int64_t dst_row, bool accumulate) {
  if (outer <= 0 || rows <= 0 || cols <= 0) return cudaSuccess;
  CopyKernel<<<ElementwiseGrid(outer * rows * cols), kElementwiseThreads, 0, stream>>>(
      outer, rows, cols, src, src_outer, src_row, dst, dst_outer, dst_row, accumulate);
  return cudaGetLastError();
}

cudaError_t LaunchScaleMatrices(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols,
                                float beta, float* c, int64_t ld, int64_t stride) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return cudaSuccess;
  ScaleMatricesKernel<<<ElementwiseGrid(batch * rows * cols), kElementwiseThreads, 0, stream>>>(
      batch, rows, cols, beta, c, ld, stride);
  return cudaGetLastError();
}

__global__ void DropoutKernel(int64_t n, uint64_t seed, float rate, float scale, float* p) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    p[i] = math::Mul(p[i], kernels::DropoutFactor(seed, i, rate, scale));
  }
}

cudaError_t LaunchDropout(cudaStream_t stream, int64_t n, uint64_t seed, float rate, float scale,
                          float* p) {
  if (n <= 0) return cudaSuccess;
  DropoutKernel<<<ElementwiseGrid(n), kElementwiseThreads, 0, stream>>>(n, seed, rate, scale, p);
  return cudaGetLastError();
}

cudaError_t LaunchScale(cudaStream_t stream, int64_t n, float alpha, float* p) {
  if (n <= 0) return cudaSuccess;
  ScaleKernel<<<ElementwiseGrid(n), kElementwiseThreads, 0, stream>>>(n, alpha, p);
  return cudaGetLastError();
}

cudaError_t LaunchDenseEpilogue(cudaStream_t stream, int64_t rows, int out, DenseActivation act,
                                const float* b, const float* slope, float* pre, float* y) {
  if (rows <= 0 || out <= 0) return cudaSuccess;
  DenseEpilogueKernel<<<ElementwiseGrid(rows * out), kElementwiseThreads, 0, stream>>>(
      rows, out, act, b, slope, pre, y);
  return cudaGetLastError();
}

cudaError_t LaunchDenseActivationBackward(cudaStream_t stream, int64_t rows, int out,
                                          DenseActivation act, const float* pre, const float* y,
                                          const float* slope, const float* dy, float* dpre) {
  if (rows <= 0 || out <= 0) return cudaSuccess;
  DenseActivationBackwardKernel<<<ElementwiseGrid(rows * out), kElementwiseThreads, 0, stream>>>(
      rows, out, act, pre, y, slope, dy, dpre);
  return cudaGetLastError();
}

cudaError_t LaunchColumnSums(cudaStream_t stream, ColumnSumTerm term, int64_t rows, int cols,
                             const float* a, const float* b, double* partial, float* out) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const ColumnSumPlan plan = PlanColumnSums(rows);
  const dim3 grid(static_cast<unsigned>((int64_t{cols} + kColumnTile - 1) / kColumnTile),
                  static_cast<unsigned>(plan.chunks));
  const dim3 block(kColumnTile, kColumnLanes);
  ColumnPartialKernel<<<grid, block, 0, stream>>>(term == ColumnSumTerm::kPreluSlope, rows, cols,
                                                  plan.chunk_rows, a, b, partial);
  const cudaError_t first = cudaGetLastError();
  if (first != cudaSuccess) return first;
  ColumnFinishKernel<<<ElementwiseGrid(cols), kElementwiseThreads, 0, stream>>>(plan.chunks, cols,
                                                                                partial, out);
  return cudaGetLastError();
}

cudaError_t LaunchBceWithLogits(cudaStream_t stream, int64_t n, const float* logits,
                                const float* labels, float scale, float* dlogits, double* partial) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = ReduceBlocks(n);
  BceWithLogitsKernel<<<static_cast<unsigned>(blocks), kReduceThreads, 0, stream>>>(
      n, logits, labels, scale, dlogits, partial);
  return FinishReduce(stream, blocks, partial);
}

cudaError_t LaunchAuxLoss(cudaStream_t stream, int64_t n, const float* pos_logits,
                          const float* neg_logits, const float* mask, float scale, float* dpos,
                          float* dneg, double* partial) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = ReduceBlocks(n);
  AuxLossKernel<<<static_cast<unsigned>(blocks), kReduceThreads, 0, stream>>>(
      n, pos_logits, neg_logits, mask, scale, dpos, dneg, partial);
  return FinishReduce(stream, blocks, partial);
}

cudaError_t LaunchCountNonFiniteBlocks(cudaStream_t stream, int64_t n, const float* p,
                                       double* partial) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = ReduceBlocks(n);
  NonFiniteBlocksKernel<<<static_cast<unsigned>(blocks), kReduceThreads, 0, stream>>>(n, p,
                                                                                      partial);
  return FinishReduce(stream, blocks, partial);
}

cudaError_t LaunchAdamUpdate(cudaStream_t stream, int64_t n, float lr_t, float beta1, float beta2,
                             float epsilon, const float* grad, float* param, float* m, float* v) {
  if (n <= 0) return cudaSuccess;
  AdamUpdateKernel<<<ElementwiseGrid(n), kElementwiseThreads, 0, stream>>>(
      n, lr_t, beta1, beta2, epsilon, grad, param, m, v);
  return cudaGetLastError();
}

}  // namespace sift::cuda
