#include "kernels/cpu/parallel_gemm.h"

#include <cblas.h>

#include <algorithm>

namespace sift::kernels {
namespace {

// Below this many multiply-adds a product runs as one call on the calling thread.
constexpr int64_t kParallelMacs = int64_t{1} << 18;
// The least rows (or columns) of C per thread worth a separate call.
constexpr int64_t kMinBlock = 16;

void Call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

}  // namespace

void ParallelSgemm(ThreadPool& pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc) {
  const int64_t t = pool.num_threads();
  const bool split_rows = m >= t * kMinBlock && m >= n;
  const bool split_cols = !split_rows && n >= t * kMinBlock;
  if (t == 1 || m * n * k < kParallelMacs || (!split_rows && !split_cols)) {
    Call(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t extent = split_rows ? m : n;
  const int64_t block = (extent + t - 1) / t;
  pool.ParallelFor(t, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t lo = i * block, hi = std::min(extent, lo + block);
      if (lo >= hi) continue;
      if (split_rows) {  // C rows [lo, hi): A's rows (columns when transposed)
        const float* ai = trans_a ? a + lo : a + lo * lda;
        Call(trans_a, trans_b, hi - lo, n, k, alpha, ai, lda, b, ldb, beta, c + lo * ldc, ldc);
      } else {  // C columns [lo, hi): B's columns (rows when transposed)
        const float* bi = trans_b ? b + lo * ldb : b + lo;
        Call(trans_a, trans_b, m, hi - lo, k, alpha, a, lda, bi, ldb, beta, c + lo, ldc);
      }
    }
  });
}

}  // namespace sift::kernels
