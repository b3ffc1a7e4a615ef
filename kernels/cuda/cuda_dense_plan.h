// Host-testable planning of the CUDA dense family (cuda_backend.cc, cuda_dense_kernels.cu): the
// mapping of a row-major GEMM onto cuBLAS's column-major API, and the fixed partitions of the
// deterministic reductions (losses, bias / slope gradients). A partition depends only on the
// problem size, never on the device or on timing, so the summation order (and the bits) of a
// reduction is the same on every run. Pure functions, thread-safe; no CUDA include (CPU tests use
// it: tests/unit/cuda_dense_plan_test.cc), C++17 for nvcc.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kernels/cuda/elementwise_math.h"  // SIFT_HD

namespace sift::cuda {

// The dense activations as the kernels see them: the values of kernels::Activation (a
// static_assert in cuda_backend.cc keeps them equal; kernels/backend.h pulls Abseil, which
// device code avoids).
enum class DenseActivation : int { kNone = 0, kSigmoid = 1, kPrelu = 2 };

// What a column reduction sums per element (r, c) of [rows, cols] inputs a (and b):
//   kValue:      a[r, c]                                        (bias gradient: a = dpre)
//   kPreluSlope: a[r, c] < 0 ? b[r, c] * a[r, c] : 0 in double  (slope gradient: a = pre, b = dy)
enum class ColumnSumTerm : int { kValue = 0, kPreluSlope = 1 };

// ---- Row-major GEMM on cuBLAS ---------------------------------------------------------------
// A row-major matrix with leading dimension ld is, read column-major with the same ld, its
// transpose. So the row-major C[m,n] = op(A) op(B) is the column-major C^T[n,m] = op(B)^T op(A)^T:
// cuBLAS gets B as its first operand and A as its second, m and n swapped, and each operand
// transposed exactly when the row-major call transposes it.
struct CublasGemmArgs {
  bool trans_a = false;  // cuBLAS's op of its first operand (true: CUBLAS_OP_T)
  bool trans_b = false;  // ... of its second operand
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;  // cuBLAS's first operand (the row-major call's B)
  int64_t lda = 0, stride_a = 0;
  const float* b = nullptr;  // cuBLAS's second operand (the row-major call's A)
  int64_t ldb = 0, stride_b = 0;
  int64_t ldc = 0, stride_c = 0;  // C is the same memory
};

inline CublasGemmArgs RowMajorGemmOnCublas(bool trans_a, bool trans_b, int64_t m, int64_t n,
                                           int64_t k, const float* a, int64_t lda, int64_t stride_a,
                                           const float* b, int64_t ldb, int64_t stride_b,
                                           int64_t ldc, int64_t stride_c) {
  CublasGemmArgs g;
  g.trans_a = trans_b;
  g.trans_b = trans_a;
  g.m = n;
  g.n = m;
  g.k = k;
  g.a = b;
  g.lda = ldb;
  g.stride_a = stride_b;
  g.b = a;
  g.ldb = lda;
  g.stride_b = stride_a;
  g.ldc = ldc;
  g.stride_c = stride_c;
  return g;
}

// Whether the int arguments of cublasGemmEx / cublasGemmStridedBatchedEx (m, n, k, the leading
// dimensions, the batch count) fit in int.
inline bool FitsCublasInt(const CublasGemmArgs& g, int64_t batch) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, batch}) {
    if (v < 0 || v > kMax) return false;
  }
  return true;
}

// ---- Element-wise launches ------------------------------------------------------------------
inline constexpr int kElementwiseThreads = 256;
// Grid-stride loops cover the rest; well under the grid.x limit (2^31 - 1).
inline constexpr int64_t kMaxElementwiseBlocks = 65535;

// Blocks of kElementwiseThreads for n > 0 elements (1 .. kMaxElementwiseBlocks).
SIFT_HD int64_t ElementwiseBlocks(int64_t n) {
  const int64_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return blocks < 1 ? 1 : (blocks > kMaxElementwiseBlocks ? kMaxElementwiseBlocks : blocks);
}

// q = i / d, r = i % d for i >= 0, d > 0: in 32-bit arithmetic when both fit (a 64-bit division
// is a long instruction sequence on the GPU; the element kernels split a flat index into (outer,
// row, column) with one or two of these per element).
SIFT_HD void DivMod(int64_t i, int64_t d, int64_t* q, int64_t* r) {
  if (((i | d) >> 31) == 0) {
    const auto ui = static_cast<uint32_t>(i), ud = static_cast<uint32_t>(d);
    const uint32_t uq = ui / ud;
    *q = uq;
    *r = ui - uq * ud;
  } else {
    *q = i / d;
    *r = i - *q * d;
  }
}

// ---- Deterministic sums over n elements (losses, AllFinite) ---------------------------------
// ReduceBlocks(n) blocks of kReduceThreads threads; thread t (of T = blocks * kReduceThreads)
// adds elements t, t + T, t + 2T, ... in double in that order; each block combines its threads'
// sums by a fixed tree (BlockTreeSum) into partial[block]; one thread then adds the partials in
// block order into partial[blocks] (the result). Scratch: ReducePartialDoubles(n) doubles.
inline constexpr int kReduceThreads = 256;  // a power of two (the tree)
inline constexpr int64_t kMaxReduceBlocks = 1024;

SIFT_HD int64_t ReduceBlocks(int64_t n) {
  const int64_t blocks = (n + kReduceThreads - 1) / kReduceThreads;
  return blocks < 1 ? 1 : (blocks > kMaxReduceBlocks ? kMaxReduceBlocks : blocks);
}
SIFT_HD int64_t ReducePartialDoubles(int64_t n) { return ReduceBlocks(n) + 1; }

// The tree one block uses to combine its kReduceThreads sums v[0..kReduceThreads) into v[0]:
// for s = kReduceThreads/2 .. 1 (halving), v[t] += v[t + s] for t < s. The device runs each
// level in parallel (a barrier between levels); the host runs this loop: same additions, same
// order, same bits.
SIFT_HD void BlockTreeSum(double* v) {
  for (int s = kReduceThreads / 2; s >= 1; s /= 2) {
    for (int t = 0; t < s; ++t) v[t] += v[t + s];
  }
}

// ---- Deterministic column sums (bias / slope gradients over rows) ---------------------------
// Blocks of kColumnTile x kColumnLanes threads; grid (ceil(cols / kColumnTile), chunks). Block
// (x, y) covers columns [x * kColumnTile, +kColumnTile) and rows [y * chunk_rows, +chunk_rows);
// lane l adds rows begin + l, begin + l + kColumnLanes, ... in double; lanes are combined in
// lane order into partial[y * cols + c]; a second kernel adds the chunks of each column in chunk
// order and does out[c] += float(sum).
inline constexpr int kColumnTile = 32;
inline constexpr int kColumnLanes = 8;
inline constexpr int64_t kMinColumnChunkRows = 256;
inline constexpr int64_t kMaxColumnChunks = 1024;  // <= 65535 (grid.y)

struct ColumnSumPlan {
  int64_t chunk_rows = 0;  // rows per chunk (the last one may have fewer)
  int64_t chunks = 0;      // ceil(rows / chunk_rows), 1 .. kMaxColumnChunks
};

// REQUIRES: rows > 0.
SIFT_HD ColumnSumPlan PlanColumnSums(int64_t rows) {
  ColumnSumPlan p;
  const int64_t by_limit = (rows + kMaxColumnChunks - 1) / kMaxColumnChunks;
  p.chunk_rows = by_limit > kMinColumnChunkRows ? by_limit : kMinColumnChunkRows;
  p.chunks = (rows + p.chunk_rows - 1) / p.chunk_rows;
  return p;
}
SIFT_HD int64_t ColumnPartialDoubles(int64_t rows, int64_t cols) {
  return PlanColumnSums(rows).chunks * cols;
}

}  // namespace sift::cuda
