// The sequence family's kernels (cuda_sequence_kernels.h). Shapes, all with grid-stride loops so
// a grid never exceeds kMaxBlocks and no launch has 0 blocks (launchers return early on empty
// work):
// - element-wise ops (gather, attention features): one thread per output element;
// - per-row ops (dot attention, top-k, damped mean): one block per batch row, warps over slots
//   for dot products (lanes over the feature dimension, coalesced), threads over features for
//   weighted sums over slots (in increasing slot order);
// - masked softmax: one warp per row;
// - segment sum: a stable CUB radix sort of (key, i), segment bounds by binary search, then one
//   thread per (unique key, column) adding its rows in increasing i; or, when the backend is not
//   deterministic, one thread per (row, column) with a float atomicAdd (no sort).
// Reductions: per-thread partials, then a fixed shuffle tree and the warps' results combined in
// warp order (BlockAllReduce) — deterministic, no atomics (but for that segment-sum option). Sums
// of products are formed in double as the reference forms them, through math::Add / math::Mul (no
// FMA contraction), with CUDA's exp (never __expf). The selection rules and element formulas are
// sequence_index_math.h's.
#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_sequence_kernels.h"
#include "kernels/cuda/elementwise_math.h"
#include "kernels/cuda/sequence_index_math.h"

namespace sift::cuda {
namespace {

constexpr int kThreads = 256;           // element-wise kernels, masked softmax
constexpr int kAttentionThreads = 128;  // one block per attention row
constexpr int kMaxRowThreads = 256;     // other per-row kernels
constexpr int64_t kMaxBlocks = 65535;   // grid.x cap; kernels loop over the rest
constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

struct SumOp {
  __device__ __forceinline__ double operator()(double a, double b) const { return math::Add(a, b); }
};
struct MaxOp {
  __device__ __forceinline__ double operator()(double a, double b) const {
    return seq::MaxOf(a, b);
  }
};

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// The warp's values combined by a fixed shuffle tree; every lane gets lane 0's result.
template <typename Op>
__device__ __forceinline__ double WarpAllReduce(double v, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v = op(v, __shfl_down_sync(kFullMask, v, offset));
  }
  return __shfl_sync(kFullMask, v, 0);
}

// The block's values combined: each warp's by WarpAllReduce, then the warps' in warp order; every
// thread gets the same result. `shared` holds kWarpSize doubles. REQUIRES: every thread of the
// block calls it; blockDim.x is a multiple of kWarpSize.
template <typename Op>
__device__ double BlockAllReduce(double v, Op op, double* shared) {
  v = WarpAllReduce(v, op);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  __syncthreads();  // readers of an earlier call are done with `shared`
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double r = shared[0];
  const int warps = blockDim.x / kWarpSize;
  for (int w = 1; w < warps; ++w) r = op(r, shared[w]);
  return r;
}

__device__ __forceinline__ double NegativeInfinity() { return -static_cast<double>(INFINITY); }

// ---- Gather -----------------------------------------------------------------------------------
__global__ void GatherRowsKernel(int64_t n, int dim, const float* rows, const int32_t* inv,
                                 const float* mask, float* out, int64_t ld_out) {
  const int64_t total = n * dim;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t i = e / dim;
    const int64_t c = e - i * dim;
    const int32_t r = inv[i];
    out[i * ld_out + c] =
        r < 0 ? 0.0f : math::Mul(rows[int64_t{r} * dim + c], mask != nullptr ? mask[i] : 1.0f);
  }
}

// ---- Segment sum ------------------------------------------------------------------------------
__global__ void SegmentKeysKernel(int64_t n, const int32_t* inv, int64_t num_unique, uint32_t* keys,
                                  int64_t* order) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    keys[i] = seq::SegmentSumKey(inv[i], num_unique);
    order[i] = i;
  }
}

// bounds[u] = the first sorted position of key u + 1 (unique key u), for u in [0, num_unique].
__global__ void SegmentBoundsKernel(const uint32_t* sorted_keys, int64_t n, int64_t num_unique,
                                    int64_t* bounds) {
  for (int64_t u = GlobalThread(); u <= num_unique; u += GridThreads()) {
    bounds[u] = seq::LowerBound(sorted_keys, n, static_cast<uint32_t>(u + 1));
  }
}

__global__ void SegmentSumKernel(int64_t num_unique, int dim, const int64_t* bounds,
                                 const int64_t* order, const float* dout, int64_t ld_dout,
                                 const float* mask, float* drows) {
  const int64_t total = num_unique * dim;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t u = e / dim;
    const int c = static_cast<int>(e - u * dim);
    const int64_t begin = bounds[u], end = bounds[u + 1];
    if (begin == end) continue;
    drows[e] = seq::SegmentSumColumn(drows[e], order, begin, end, dout, ld_dout, c, mask);
  }
}

// The non-deterministic option: one thread per element (i, c) of dout's n x dim rows; padding rows
// (key 0) add nothing. The term is the deterministic path's (SegmentSumTerm's product).
__global__ void SegmentSumAtomicKernel(int64_t n, int dim, const float* dout, int64_t ld_dout,
                                       const int32_t* inv, const float* mask, int64_t num_unique,
                                       float* drows) {
  const int64_t total = n * dim;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t i = e / dim;
    const int c = static_cast<int>(e - i * dim);
    const uint32_t key = seq::SegmentSumKey(inv[i], num_unique);
    if (key == 0u) continue;
    const float term = math::Mul(dout[i * ld_dout + c], mask != nullptr ? mask[i] : 1.0f);
    atomicAdd(drows + static_cast<int64_t>(key - 1u) * dim + c, term);
  }
}

cudaError_t SortPairs(void* temp, size_t& temp_bytes, const uint32_t* keys_in, uint32_t* keys_out,
                      const int64_t* order_in, int64_t* order_out, int64_t n, int bits,
                      cudaStream_t stream) {
  return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, order_in, order_out,
                                         n, 0, bits, stream);
}

// ---- Dot attention ----------------------------------------------------------------------------
// <a, b> over d floats by one warp (lanes over the dimension), in double; every lane gets it.
__device__ __forceinline__ double WarpDot(const float* a, const float* b, int d) {
  const int lane = threadIdx.x % kWarpSize;
  double s = 0.0;
  for (int c = lane; c < d; c += kWarpSize) {
    s = math::Add(s, math::Mul(static_cast<double>(a[c]), static_cast<double>(b[c])));
  }
  return WarpAllReduce(s, SumOp());
}

__global__ void DotAttentionForwardKernel(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                          const float* k, const float* mask, float* alpha,
                                          float* out, int64_t ldout) {
  __shared__ double reduce[kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float* qb = q + b * ldq;
    const float* kb = k + b * n * d;
    const float* mb = mask != nullptr ? mask + b * n : nullptr;
    float* ab = alpha + b * n;
    // Raw scores, rounded to float as the reference stores them in alpha.
    for (int j = warp; j < n; j += warps) {
      const double s = WarpDot(qb, kb + int64_t{j} * d, d);
      if (lane == 0) ab[j] = static_cast<float>(s);
    }
    __syncthreads();
    // Masked softmax in double (max-subtracted); each thread owns slots j = tid (mod blockDim).
    double mx = NegativeInfinity();
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      mx = seq::MaxOf(mx, seq::SoftmaxInput(ab[j], mb, j));
    }
    mx = BlockAllReduce(mx, MaxOp(), reduce);
    double sum = 0.0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      sum = math::Add(sum, math::Exp(math::Sub(seq::SoftmaxInput(ab[j], mb, j), mx)));
    }
    sum = BlockAllReduce(sum, SumOp(), reduce);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      ab[j] = static_cast<float>(math::Exp(math::Sub(seq::SoftmaxInput(ab[j], mb, j), mx)) / sum);
    }
    __syncthreads();
    // out_c = sum_j alpha_j k_jc in increasing j.
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      double s = 0.0;
      for (int j = 0; j < n; ++j) {
        s = math::Add(
            s, math::Mul(static_cast<double>(ab[j]), static_cast<double>(kb[int64_t{j} * d + c])));
      }
      out[b * ldout + c] = static_cast<float>(s);
    }
  }
}

__global__ void DotAttentionBackwardKernel(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                           const float* k, const float* mask, const float* alpha,
                                           const float* dout, int64_t lddout, float* dq,
                                           int64_t lddq, float* dk, double* ds) {
  __shared__ double reduce[kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float* qb = q + b * ldq;
    const float* kb = k + b * n * d;
    const float* mb = mask != nullptr ? mask + b * n : nullptr;
    const float* ab = alpha + b * n;
    const float* g = dout + b * lddout;
    double* dsb = ds + b * n;
    // dalpha_j = <dout_b, k_j>.
    for (int j = warp; j < n; j += warps) {
      const double da = WarpDot(g, kb + int64_t{j} * d, d);
      if (lane == 0) dsb[j] = da;
    }
    __syncthreads();
    double dot = 0.0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      dot = math::Add(dot, math::Mul(static_cast<double>(ab[j]), dsb[j]));
    }
    dot = BlockAllReduce(dot, SumOp(), reduce);
    // ds_j (0 at masked slots); each thread rewrites only the slots it read above.
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      dsb[j] = seq::AttentionScoreGrad(ab[j], dsb[j], dot, seq::SlotValid(mb, j));
    }
    __syncthreads();
    if (dq != nullptr) {
      for (int c = threadIdx.x; c < d; c += blockDim.x) {
        double s = 0.0;
        for (int j = 0; j < n; ++j) {
          s = math::Add(s, math::Mul(dsb[j], static_cast<double>(kb[int64_t{j} * d + c])));
        }
        float* dst = dq + b * lddq + c;
        *dst = math::Add(*dst, static_cast<float>(s));
      }
    }
    if (dk != nullptr) {
      const int64_t elements = int64_t{n} * d;
      for (int64_t e = threadIdx.x; e < elements; e += blockDim.x) {
        const int64_t j = e / d;
        const int64_t c = e - j * d;
        const double term = seq::AttentionKeyGradTerm(ab[j], g[c], dsb[j], qb[c]);
        float* dst = dk + b * n * d + e;
        *dst = math::Add(*dst, static_cast<float>(term));
      }
    }
  }
}

// ---- Top-k mask -------------------------------------------------------------------------------
__global__ void TopKMaskKernel(int64_t batch, int n, int k, const float* alpha, float* rho) {
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float* ab = alpha + b * n;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      rho[b * n + j] = seq::TopKSelected(ab, n, k, j) ? 1.0f : 0.0f;
    }
  }
}

// ---- Damped mean ------------------------------------------------------------------------------
__global__ void DampedMeanForwardKernel(int64_t batch, int n, int d, const float* x,
                                        const float* rho, float* out, int64_t ldout) {
  __shared__ double den_shared;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float* rb = rho + b * n;
    const float* xb = x + b * n * d;
    if (threadIdx.x == 0) den_shared = seq::DampedMeanDenominator(rb, n);
    __syncthreads();
    const double den = den_shared;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      double s = 0.0;
      for (int j = 0; j < n; ++j) {
        s = math::Add(
            s, math::Mul(static_cast<double>(rb[j]), static_cast<double>(xb[int64_t{j} * d + c])));
      }
      out[b * ldout + c] = static_cast<float>(s / den);
    }
    __syncthreads();  // every thread has read den_shared before thread 0 rewrites it
  }
}

__global__ void DampedMeanBackwardKernel(int64_t batch, int n, int d, const float* rho,
                                         const float* dout, int64_t lddout, float* dx) {
  __shared__ double den_shared;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float* rb = rho + b * n;
    const float* g = dout + b * lddout;
    if (threadIdx.x == 0) den_shared = seq::DampedMeanDenominator(rb, n);
    __syncthreads();
    const double den = den_shared;
    const int64_t elements = int64_t{n} * d;
    for (int64_t e = threadIdx.x; e < elements; e += blockDim.x) {
      const int64_t j = e / d;
      const int64_t c = e - j * d;
      float* dst = dx + b * n * d + e;
      *dst = math::Add(*dst, seq::DampedMeanGradTerm(rb[j], g[c], den));
    }
    __syncthreads();
  }
}

// ---- Masked softmax (one warp per row) ------------------------------------------------------
__global__ void MaskedSoftmaxForwardKernel(int64_t rows, int n, const float* scores,
                                           const float* mask, float* p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first = GlobalThread() / kWarpSize, stride = GridThreads() / kWarpSize;
  for (int64_t r = first; r < rows; r += stride) {
    const float* s = scores + r * n;
    const float* m = mask != nullptr ? mask + r * n : nullptr;
    float* pr = p + r * n;
    double mx = NegativeInfinity();
    for (int j = lane; j < n; j += kWarpSize) mx = seq::MaxOf(mx, seq::SoftmaxInput(s[j], m, j));
    mx = WarpAllReduce(mx, MaxOp());
    double sum = 0.0;
    for (int j = lane; j < n; j += kWarpSize) {
      sum = math::Add(sum, math::Exp(math::Sub(seq::SoftmaxInput(s[j], m, j), mx)));
    }
    sum = WarpAllReduce(sum, SumOp());
    // Each lane reads and writes only its own slots: scores == p is safe.
    for (int j = lane; j < n; j += kWarpSize) {
      pr[j] = static_cast<float>(math::Exp(math::Sub(seq::SoftmaxInput(s[j], m, j), mx)) / sum);
    }
  }
}

__global__ void MaskedSoftmaxBackwardKernel(int64_t rows, int n, const float* p, const float* mask,
                                            const float* dp, float* dscores) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first = GlobalThread() / kWarpSize, stride = GridThreads() / kWarpSize;
  for (int64_t r = first; r < rows; r += stride) {
    const float* pr = p + r * n;
    const float* g = dp + r * n;
    const float* m = mask != nullptr ? mask + r * n : nullptr;
    double dot = 0.0;
    for (int j = lane; j < n; j += kWarpSize) {
      dot = math::Add(dot, math::Mul(static_cast<double>(pr[j]), static_cast<double>(g[j])));
    }
    dot = WarpAllReduce(dot, SumOp());
    for (int j = lane; j < n; j += kWarpSize) {
      if (!seq::SlotValid(m, j)) continue;
      const double v = seq::SoftmaxGradTerm(pr[j], g[j], dot);
      float* dst = dscores + r * n + j;
      *dst = math::Add(*dst, static_cast<float>(v));
    }
  }
}

// ---- Attention features -------------------------------------------------------------------
__global__ void AttentionFeaturesForwardKernel(int64_t batch, int time, int hidden, const float* qp,
                                               const float* h, float* c) {
  const int64_t total = batch * time * hidden;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t row = e / hidden;  // b * time + t
    const int64_t j = e - row * hidden;
    const int64_t b = row / time;
    const seq::FeatureEntries f = seq::AttentionFeatureEntries(qp[b * hidden + j], h[e]);
    float* cr = c + row * 4 * hidden;
    cr[j] = f.q;
    cr[hidden + j] = f.h;
    cr[2 * hidden + j] = f.diff;
    cr[3 * hidden + j] = f.prod;
  }
}

__global__ void AttentionFeaturesDhKernel(int64_t batch, int time, int hidden, const float* qp,
                                          const float* dc, float* dh) {
  const int64_t total = batch * time * hidden;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t row = e / hidden;
    const int64_t j = e - row * hidden;
    const int64_t b = row / time;
    const float* dcr = dc + row * 4 * hidden;
    dh[e] = math::Add(dh[e], seq::AttentionFeatureDh(dcr[hidden + j], dcr[2 * hidden + j],
                                                     dcr[3 * hidden + j], qp[b * hidden + j]));
  }
}

// dqp[b, j] += sum over t (in increasing t, in double) of dc0 + dc2 + dc3 * h.
__global__ void AttentionFeaturesDqpKernel(int64_t batch, int time, int hidden, const float* h,
                                           const float* dc, float* dqp) {
  const int64_t total = batch * hidden;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t b = e / hidden;
    const int64_t j = e - b * hidden;
    double sum = 0.0;
    for (int t = 0; t < time; ++t) {
      const int64_t row = b * time + t;
      const float* dcr = dc + row * 4 * hidden;
      sum = math::Add(sum, seq::AttentionFeatureDqpTerm(dcr[j], dcr[2 * hidden + j],
                                                        dcr[3 * hidden + j], h[row * hidden + j]));
    }
    dqp[e] = math::Add(dqp[e], static_cast<float>(sum));
  }
}

unsigned Blocks(int64_t work, int64_t per_block) {
  return static_cast<unsigned>(seq::GridBlocks(work, per_block, kMaxBlocks));
}

}  // namespace

cudaError_t LaunchGatherRows(cudaStream_t stream, int64_t n, int dim, const float* rows,
                             const int32_t* inv, const float* mask, float* out, int64_t ld_out) {
  if (n <= 0 || dim <= 0) return cudaSuccess;
  GatherRowsKernel<<<Blocks(n * dim, kThreads), kThreads, 0, stream>>>(n, dim, rows, inv, mask, out,
                                                                       ld_out);
  return cudaGetLastError();
}

cudaError_t SegmentSumSortTempBytes(int64_t n, int64_t num_unique, int64_t* bytes) {
  size_t temp = 0;
  const cudaError_t err = SortPairs(nullptr, temp, nullptr, nullptr, nullptr, nullptr, n,
                                    seq::SegmentSumKeyBits(num_unique), nullptr);
  *bytes = static_cast<int64_t>(temp);
  return err;
}

cudaError_t LaunchSegmentSumRows(cudaStream_t stream, int64_t n, int dim, const float* dout,
                                 int64_t ld_dout, const int32_t* inv, const float* mask,
                                 int64_t num_unique, float* drows, void* scratch,
                                 const seq::SegmentSumLayout& layout) {
  if (n <= 0 || dim <= 0 || num_unique <= 0) return cudaSuccess;
  char* base = static_cast<char*>(scratch);
  auto* keys_in = reinterpret_cast<uint32_t*>(base + layout.keys_in);
  auto* keys_out = reinterpret_cast<uint32_t*>(base + layout.keys_out);
  auto* order_in = reinterpret_cast<int64_t*>(base + layout.order_in);
  auto* order_out = reinterpret_cast<int64_t*>(base + layout.order_out);
  auto* bounds = reinterpret_cast<int64_t*>(base + layout.bounds);
  SegmentKeysKernel<<<Blocks(n, kThreads), kThreads, 0, stream>>>(n, inv, num_unique, keys_in,
                                                                  order_in);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  size_t temp_bytes = static_cast<size_t>(layout.sort_temp_bytes);
  err = SortPairs(base + layout.sort_temp, temp_bytes, keys_in, keys_out, order_in, order_out, n,
                  seq::SegmentSumKeyBits(num_unique), stream);
  if (err != cudaSuccess) return err;
  SegmentBoundsKernel<<<Blocks(num_unique + 1, kThreads), kThreads, 0, stream>>>(
      keys_out, n, num_unique, bounds);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  SegmentSumKernel<<<Blocks(num_unique * dim, kThreads), kThreads, 0, stream>>>(
      num_unique, dim, bounds, order_out, dout, ld_dout, mask, drows);
  return cudaGetLastError();
}

cudaError_t LaunchSegmentSumRowsAtomic(cudaStream_t stream, int64_t n, int dim, const float* dout,
                                       int64_t ld_dout, const int32_t* inv, const float* mask,
                                       int64_t num_unique, float* drows) {
  if (n <= 0 || dim <= 0 || num_unique <= 0) return cudaSuccess;
  SegmentSumAtomicKernel<<<Blocks(n * dim, kThreads), kThreads, 0, stream>>>(
      n, dim, dout, ld_dout, inv, mask, num_unique, drows);
  return cudaGetLastError();
}

cudaError_t LaunchDotAttentionForward(cudaStream_t stream, int64_t batch, int n, int d,
                                      const float* q, int64_t ldq, const float* k,
                                      const float* mask, float* alpha, float* out, int64_t ldout) {
  if (batch <= 0) return cudaSuccess;
  DotAttentionForwardKernel<<<Blocks(batch, 1), kAttentionThreads, 0, stream>>>(
      batch, n, d, q, ldq, k, mask, alpha, out, ldout);
  return cudaGetLastError();
}

cudaError_t LaunchDotAttentionBackward(cudaStream_t stream, int64_t batch, int n, int d,
                                       const float* q, int64_t ldq, const float* k,
                                       const float* mask, const float* alpha, const float* dout,
                                       int64_t lddout, float* dq, int64_t lddq, float* dk,
                                       double* ds) {
  if (batch <= 0 || n <= 0 || d <= 0 || (dq == nullptr && dk == nullptr)) return cudaSuccess;
  DotAttentionBackwardKernel<<<Blocks(batch, 1), kAttentionThreads, 0, stream>>>(
      batch, n, d, q, ldq, k, mask, alpha, dout, lddout, dq, lddq, dk, ds);
  return cudaGetLastError();
}

cudaError_t LaunchTopKMask(cudaStream_t stream, int64_t batch, int n, int k, const float* alpha,
                           float* rho) {
  if (batch <= 0 || n <= 0) return cudaSuccess;
  TopKMaskKernel<<<Blocks(batch, 1), seq::RowThreads(n, kMaxRowThreads), 0, stream>>>(batch, n, k,
                                                                                      alpha, rho);
  return cudaGetLastError();
}

cudaError_t LaunchDampedMeanForward(cudaStream_t stream, int64_t batch, int n, int d,
                                    const float* x, const float* rho, float* out, int64_t ldout) {
  if (batch <= 0 || d <= 0) return cudaSuccess;
  DampedMeanForwardKernel<<<Blocks(batch, 1), seq::RowThreads(d, kMaxRowThreads), 0, stream>>>(
      batch, n, d, x, rho, out, ldout);
  return cudaGetLastError();
}

cudaError_t LaunchDampedMeanBackward(cudaStream_t stream, int64_t batch, int n, int d,
                                     const float* rho, const float* dout, int64_t lddout,
                                     float* dx) {
  if (batch <= 0 || n <= 0 || d <= 0) return cudaSuccess;
  DampedMeanBackwardKernel<<<Blocks(batch, 1), seq::RowThreads(int64_t{n} * d, kMaxRowThreads), 0,
                             stream>>>(batch, n, d, rho, dout, lddout, dx);
  return cudaGetLastError();
}

cudaError_t LaunchMaskedSoftmaxForward(cudaStream_t stream, int64_t rows, int n,
                                       const float* scores, const float* mask, float* p) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  MaskedSoftmaxForwardKernel<<<Blocks(rows, kThreads / kWarpSize), kThreads, 0, stream>>>(
      rows, n, scores, mask, p);
  return cudaGetLastError();
}

cudaError_t LaunchMaskedSoftmaxBackward(cudaStream_t stream, int64_t rows, int n, const float* p,
                                        const float* mask, const float* dp, float* dscores) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  MaskedSoftmaxBackwardKernel<<<Blocks(rows, kThreads / kWarpSize), kThreads, 0, stream>>>(
      rows, n, p, mask, dp, dscores);
  return cudaGetLastError();
}

cudaError_t LaunchAttentionFeaturesForward(cudaStream_t stream, int64_t batch, int time, int hidden,
                                           const float* qp, const float* h, float* c) {
  if (batch <= 0 || time <= 0 || hidden <= 0) return cudaSuccess;
  const int64_t total = batch * time * hidden;
  AttentionFeaturesForwardKernel<<<Blocks(total, kThreads), kThreads, 0, stream>>>(
      batch, time, hidden, qp, h, c);
  return cudaGetLastError();
}

cudaError_t LaunchAttentionFeaturesBackward(cudaStream_t stream, int64_t batch, int time,
                                            int hidden, const float* qp, const float* h,
                                            const float* dc, float* dqp, float* dh) {
  if (batch <= 0 || time <= 0 || hidden <= 0) return cudaSuccess;
  if (dh != nullptr) {
    AttentionFeaturesDhKernel<<<Blocks(batch * time * hidden, kThreads), kThreads, 0, stream>>>(
        batch, time, hidden, qp, dc, dh);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  if (dqp != nullptr) {
    AttentionFeaturesDqpKernel<<<Blocks(batch * hidden, kThreads), kThreads, 0, stream>>>(
        batch, time, hidden, h, dc, dqp);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace sift::cuda
