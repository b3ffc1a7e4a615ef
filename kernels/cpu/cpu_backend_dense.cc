// CpuBackend: memory, GEMM, dense, embedding, attention, softmax, loss and Adam ops.
// - GEMMs (Gemm, the dense layer's x W, dx += dpre W^T, dW += x^T dpre) are ParallelSgemm calls:
//   single-threaded OpenBLAS on blocks of C rows/columns, one per pool thread.
// - Element-wise and per-row work runs over rows on the thread pool (inline when the op is small),
//   with contiguous, branch-free inner loops that vectorise, and FastExp/FastSigmoid.
// - Reductions across rows (bias / slope gradients, losses) use fixed chunks of rows whose
//   partial sums are combined in chunk order, so results do not depend on timing (nor on the
//   thread count); SegmentSumRows gives each task a fixed range of keys and adds in increasing i.
#include <cblas.h>
#include <pmmintrin.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel_gemm.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/reference/dense_ops.h"

namespace sift::kernels {
namespace {

// Work (roughly flops) below which an op runs on the calling thread, and the least work per task.
constexpr int64_t kInlineWork = 1 << 15;
constexpr int64_t kMinTaskWork = 1 << 14;
// Rows per partial sum of the deterministic column reductions (bias / slope gradients).
constexpr int64_t kReduceChunkRows = 64;
// Elements per partial sum of the loss reductions.
constexpr int64_t kLossChunk = 1024;

// Runs fn(begin, end) over [0, n) items of `work` units each: inline when small or single-
// threaded, else over the pool in chunks (each item is processed exactly once; callers only use
// this where the result does not depend on the partition).
template <typename F>
void ParallelRows(ThreadPool& pool, int64_t n, int64_t work, const F& fn) {
  if (n <= 0) return;
  work = std::max<int64_t>(1, work);
  const int t = pool.num_threads();
  if (t == 1 || n == 1 || n * work < kInlineWork) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t by_work = (kMinTaskWork + work - 1) / work;
  const int64_t by_threads = (n + 4 * t - 1) / (4 * t);
  // A one-pointer capture fits std::function's small buffer: no allocation per call.
  pool.ParallelFor(n, std::max(by_work, by_threads), [&fn](int64_t b, int64_t e) { fn(b, e); });
}

// sum_i a[i] b[i] with 16 independent lanes (vectorises without -ffast-math) and a fixed-order
// combine: deterministic.
inline float Dot(const float* a, const float* b, int n) {
  float acc[16] = {};
  int c = 0;
  for (; c + 16 <= n; c += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += a[c + l] * b[c + l];
  }
  for (int l = 0; c < n; ++c, ++l) acc[l] += a[c] * b[c];
  for (int w = 8; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

inline float Sum(const float* a, int n) {
  float acc[16] = {};
  int c = 0;
  for (; c + 16 <= n; c += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += a[c + l];
  }
  for (int l = 0; c < n; ++c, ++l) acc[l] += a[c];
  for (int w = 8; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

inline float Max(const float* a, int n) {
  float acc[16];
  for (float& v : acc) v = -std::numeric_limits<float>::infinity();
  int c = 0;
  for (; c + 16 <= n; c += 16) {
    for (int l = 0; l < 16; ++l) acc[l] = acc[l] > a[c + l] ? acc[l] : a[c + l];
  }
  for (int l = 0; c < n; ++c, ++l) acc[l] = acc[l] > a[c] ? acc[l] : a[c];
  for (int w = 8; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] = acc[l] > acc[l + w] ? acc[l] : acc[l + w];
  }
  return acc[0];
}

// p[0..n) = softmax over s (masked slots -> kMaskedScore; mask nullable = all valid); s may
// alias p.
inline void SoftmaxRow(int n, const float* s, const float* mask, float* p) {
  if (mask != nullptr) {
    for (int j = 0; j < n; ++j) p[j] = mask[j] != 0.0f ? s[j] : kMaskedScore;
  } else if (p != s) {
    std::memcpy(p, s, static_cast<size_t>(n) * sizeof(float));
  }
  const float mx = Max(p, n);
  for (int j = 0; j < n; ++j) p[j] = FastExp(p[j] - mx);
  const float inv = 1.0f / Sum(p, n);
  for (int j = 0; j < n; ++j) p[j] *= inv;
}

// One row of the PReLU backward: dp = dy * f'(pre); column partial sums pdb += dp and
// pds += dy * (pre < 0 ? pre : 0). The arrays do not overlap (restrict: lets the loop vectorise).
inline void PreluBackwardRow(int out, const float* __restrict p, const float* __restrict g,
                             const float* __restrict slope, float* __restrict dp,
                             float* __restrict pdb, float* __restrict pds) {
  for (int o = 0; o < out; ++o) {
    const float v = p[o], go = g[o], neg = go * slope[o];
    const float gd = v > 0.0f ? go : (v < 0.0f ? neg : 0.0f);
    dp[o] = gd;
    pdb[o] += gd;
    pds[o] += v < 0.0f ? go * v : 0.0f;
  }
}

// Grows `v` to at least n elements (never shrinks): scratch reused across calls.
template <typename V>
void Reserve(V* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

// Flush-to-zero and denormals-are-zero for this thread's SSE/AVX arithmetic: saturated sigmoids
// and exploding/vanishing gradients produce denormal floats, which cost ~100x per operation on
// x86 (a SIM run at lr 0.1 slowed from ~8.6k to ~3k samples/s). Like TF's CPU threads; results
// differ from IEEE only below 1.2e-38.
static void FlushDenormals() {
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}

CpuBackend::CpuBackend(int threads) : pool_(threads, FlushDenormals) {
  FlushDenormals();  // the calling thread, which takes part in every op
  // Single-threaded OpenBLAS calls, parallelised by ParallelSgemm on pool_ (parallel_gemm.h).
  openblas_set_num_threads(1);
}

void CpuBackend::Fill(int64_t n, float value, float* p) {
  ParallelRows(pool_, n, 1, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, value); });
}

void CpuBackend::Copy(int64_t outer, int64_t rows, int64_t cols, const float* src,
                      int64_t src_outer, int64_t src_row, float* dst, int64_t dst_outer,
                      int64_t dst_row, bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  ParallelRows(pool_, outer * rows, cols, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t o = i / rows, r = i % rows;
      const float* s = src + o * src_outer + r * src_row;
      float* d = dst + o * dst_outer + r * dst_row;
      if (accumulate) {
        for (int64_t c = 0; c < cols; ++c) d[c] += s[c];
      } else {
        std::memcpy(d, s, static_cast<size_t>(cols) * sizeof(float));
      }
    }
  });
}

void CpuBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {  // C = beta C (beta == 0: zeros, whatever C held)
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      if (beta == 0.0f) {
        std::fill(row, row + n, 0.0f);
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] *= beta;
      }
    }
    return;
  }
  if (beta == 0.0f) {
    // OpenBLAS treats beta == 0 as "overwrite", but make the NaN-safety independent of that.
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
  }
  ParallelSgemm(pool_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void CpuBackend::DenseForward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                              const float* b, const float* slope, float* pre, float* y) {
  if (d.rows <= 0 || d.out <= 0) return;
  Gemm(false, false, d.rows, d.out, d.in, 1.0f, x, ldx, w, d.out, 0.0f, pre, d.out);
  const int out = d.out;
  const Activation act = d.act;
  ParallelRows(pool_, d.rows, 4 * out, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* p = pre + r * out;
      float* yr = y + r * out;
      if (b != nullptr) {
        for (int o = 0; o < out; ++o) p[o] += b[o];
      }
      switch (act) {
        case Activation::kNone:
          if (yr != p) std::memcpy(yr, p, static_cast<size_t>(out) * sizeof(float));
          break;
        case Activation::kSigmoid:
          for (int o = 0; o < out; ++o) yr[o] = FastSigmoid(p[o]);
          break;
        case Activation::kPrelu:
          for (int o = 0; o < out; ++o) {
            const float v = p[o], neg = slope[o] * v;  // unconditional loads: if-convertible
            yr[o] = v > 0.0f ? v : (v < 0.0f ? neg : 0.0f);
          }
          break;
      }
    }
  });
}

void CpuBackend::DenseBackward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                               const float* slope, const float* pre, const float* y,
                               const float* dy, float* dx, int64_t lddx, float* dw, float* db,
                               float* dslope, float* workspace) {
  if (d.rows <= 0 || d.out <= 0) return;
  const int out = d.out;
  const Activation act = d.act;
  const bool want_dslope = act == Activation::kPrelu && dslope != nullptr;
  // dpre = dy * act'(pre) into the workspace (kNone: dy itself), with per-chunk column sums of
  // dpre (for db) and of dy * min(pre, 0) (for dslope).
  const float* dpre = act == Activation::kNone ? dy : workspace;
  const int64_t chunks = (d.rows + kReduceChunkRows - 1) / kReduceChunkRows;
  const int64_t per_chunk = 2 * int64_t{out};
  const bool want_sums = db != nullptr || want_dslope;
  if (want_sums) Reserve(&reduce_scratch_f_, static_cast<size_t>(chunks * per_chunk));
  float* partial = reduce_scratch_f_.data();
  ParallelRows(pool_, chunks, kReduceChunkRows * 4 * out, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float* pdb = partial + c * per_chunk;
      float* pds = pdb + out;
      if (want_sums) std::fill(pdb, pdb + per_chunk, 0.0f);
      const int64_t r1 = std::min(d.rows, (c + 1) * kReduceChunkRows);
      for (int64_t r = c * kReduceChunkRows; r < r1; ++r) {
        const float* g = dy + r * out;
        float* dp = workspace + r * out;
        switch (act) {
          case Activation::kNone:
            if (db != nullptr) {
              for (int o = 0; o < out; ++o) pdb[o] += g[o];
            }
            break;
          case Activation::kSigmoid: {
            const float* yr = y + r * out;
            for (int o = 0; o < out; ++o) {
              const float v = g[o] * yr[o] * (1.0f - yr[o]);
              dp[o] = v;
              pdb[o] += v;
            }
            break;
          }
          case Activation::kPrelu:
            PreluBackwardRow(out, pre + r * out, g, slope, dp, pdb, pds);
            break;
        }
      }
    }
  });
  if (want_sums) {
    for (int o = 0; o < out; ++o) {
      double sdb = 0.0, sds = 0.0;
      for (int64_t c = 0; c < chunks; ++c) {
        sdb += partial[c * per_chunk + o];
        sds += partial[c * per_chunk + out + o];
      }
      if (db != nullptr) db[o] += static_cast<float>(sdb);
      if (want_dslope) dslope[o] += static_cast<float>(sds);
    }
  }
  if (dx != nullptr && d.in > 0) {
    Gemm(false, true, d.rows, d.in, out, 1.0f, dpre, out, w, out, 1.0f, dx, lddx);
  }
  if (dw != nullptr && d.in > 0) {
    Gemm(true, false, d.in, out, d.rows, 1.0f, x, ldx, dpre, out, 1.0f, dw, out);
  }
}

void CpuBackend::GatherRows(int64_t n, int dim, const float* rows, const int32_t* inv,
                            const float* mask, float* out, int64_t ld_out) {
  ParallelRows(pool_, n, dim, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* o = out + i * ld_out;
      if (inv[i] < 0) {
        std::fill(o, o + dim, 0.0f);
        continue;
      }
      const float* src = rows + int64_t{inv[i]} * dim;
      const float s = mask != nullptr ? mask[i] : 1.0f;
      for (int c = 0; c < dim; ++c) o[c] = src[c] * s;
    }
  });
}

void CpuBackend::SegmentSumRows(int64_t n, int dim, const float* dout, int64_t ld_dout,
                                const int32_t* inv, const float* mask, int64_t num_unique,
                                float* drows) {
  if (n <= 0 || dim <= 0 || num_unique <= 0) return;
  // Each task owns the keys [k0, k1) and scans every i in increasing order: a key's terms are
  // always added in increasing i, whatever the partition.
  auto add_range = [&](int64_t k0, int64_t k1) {
    const uint32_t width = static_cast<uint32_t>(k1 - k0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t key = inv[i];
      if (static_cast<uint32_t>(key - k0) >= width) continue;  // padding or another task's key
      float* dst = drows + key * dim;
      const float* g = dout + i * ld_dout;
      const float s = mask != nullptr ? mask[i] : 1.0f;
      for (int c = 0; c < dim; ++c) dst[c] += g[c] * s;
    }
  };
  const int t = pool_.num_threads();
  if (t == 1 || n * dim < kInlineWork) {
    add_range(0, num_unique);
    return;
  }
  const int64_t grain = (num_unique + t - 1) / t;
  pool_.ParallelFor(num_unique, grain, [&add_range](int64_t b, int64_t e) { add_range(b, e); });
}

void CpuBackend::DotAttentionForward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                     const float* k, const float* mask, float* alpha, float* out,
                                     int64_t ldout) {
  ParallelRows(pool_, batch, 4 * int64_t{n} * d, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* qb = q + b * ldq;
      const float* kb = k + b * n * d;
      float* ab = alpha + b * n;
      for (int j = 0; j < n; ++j) ab[j] = Dot(qb, kb + int64_t{j} * d, d);
      SoftmaxRow(n, ab, mask != nullptr ? mask + b * n : nullptr, ab);
      float* ob = out + b * ldout;
      std::fill(ob, ob + d, 0.0f);
      for (int j = 0; j < n; ++j) {
        const float a = ab[j];
        const float* kj = kb + int64_t{j} * d;
        for (int c = 0; c < d; ++c) ob[c] += a * kj[c];
      }
    }
  });
}

void CpuBackend::DotAttentionBackward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                      const float* k, const float* mask, const float* alpha,
                                      const float* dout, int64_t lddout, float* dq, int64_t lddq,
                                      float* dk) {
  if (batch <= 0 || n <= 0) return;
  // One row of score gradients per task chunk; chunks are formed over fixed row blocks.
  constexpr int64_t kRowsPerBlock = 16;
  const int64_t blocks = (batch + kRowsPerBlock - 1) / kRowsPerBlock;
  Reserve(&reduce_scratch_f_, static_cast<size_t>(blocks * n));
  float* scratch = reduce_scratch_f_.data();
  ParallelRows(pool_, blocks, kRowsPerBlock * 6 * n * d, [&](int64_t k0, int64_t k1) {
    for (int64_t blk = k0; blk < k1; ++blk) {
      float* ds = scratch + blk * n;
      const int64_t b1 = std::min(batch, (blk + 1) * kRowsPerBlock);
      for (int64_t b = blk * kRowsPerBlock; b < b1; ++b) {
        const float* qb = q + b * ldq;
        const float* kb = k + b * n * d;
        const float* ab = alpha + b * n;
        const float* g = dout + b * lddout;
        for (int j = 0; j < n; ++j) ds[j] = Dot(g, kb + int64_t{j} * d, d);  // dalpha
        const float dot = Dot(ab, ds, n);
        if (mask != nullptr) {
          const float* mb = mask + b * n;
          for (int j = 0; j < n; ++j) ds[j] = mb[j] != 0.0f ? ab[j] * (ds[j] - dot) : 0.0f;
        } else {
          for (int j = 0; j < n; ++j) ds[j] = ab[j] * (ds[j] - dot);
        }
        if (dq != nullptr) {
          float* dqb = dq + b * lddq;
          for (int j = 0; j < n; ++j) {
            const float s = ds[j];
            const float* kj = kb + int64_t{j} * d;
            for (int c = 0; c < d; ++c) dqb[c] += s * kj[c];
          }
        }
        if (dk != nullptr) {
          for (int j = 0; j < n; ++j) {
            const float a = ab[j], s = ds[j];
            float* dkj = dk + (b * n + j) * d;
            for (int c = 0; c < d; ++c) dkj[c] += a * g[c] + s * qb[c];
          }
        }
      }
    }
  });
}

void CpuBackend::TopKMask(int64_t batch, int n, int k, const float* alpha, float* rho) {
  if (batch <= 0 || n <= 0) return;
  // Per row: the k-th largest value thr (nth_element on a copy, O(n)); slots above thr are in,
  // and of the slots equal to thr the lowest-indexed (k - #above) are in.
  constexpr int64_t kRowsPerBlock = 16;
  const int64_t blocks = (batch + kRowsPerBlock - 1) / kRowsPerBlock;
  Reserve(&reduce_scratch_f_, static_cast<size_t>(blocks * n));
  float* scratch = reduce_scratch_f_.data();
  ParallelRows(pool_, blocks, kRowsPerBlock * 8 * n, [&](int64_t k0, int64_t k1) {
    for (int64_t blk = k0; blk < k1; ++blk) {
      float* sorted = scratch + blk * n;
      const int64_t b1 = std::min(batch, (blk + 1) * kRowsPerBlock);
      for (int64_t b = blk * kRowsPerBlock; b < b1; ++b) {
        const float* a = alpha + b * n;
        float* r = rho + b * n;
        if (k >= n) {
          for (int j = 0; j < n; ++j) r[j] = a[j] > 0.0f ? 1.0f : 0.0f;
          continue;
        }
        if (k <= 0) {
          std::fill(r, r + n, 0.0f);
          continue;
        }
        std::memcpy(sorted, a, static_cast<size_t>(n) * sizeof(float));
        std::nth_element(sorted, sorted + (k - 1), sorted + n, std::greater<float>());
        const float thr = sorted[k - 1];
        int above = 0;
        for (int j = 0; j < n; ++j) above += a[j] > thr ? 1 : 0;
        int ties_left = k - above;
        for (int j = 0; j < n; ++j) {
          const bool tie_in = a[j] == thr && ties_left > 0;
          ties_left -= tie_in ? 1 : 0;
          r[j] = ((a[j] > thr || tie_in) && a[j] > 0.0f) ? 1.0f : 0.0f;
        }
      }
    }
  });
}

void CpuBackend::DampedMeanForward(int64_t batch, int n, int d, const float* x, const float* rho,
                                   float* out, int64_t ldout) {
  ParallelRows(pool_, batch, 2 * int64_t{n} * d, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* rb = rho + b * n;
      const float* xb = x + b * n * d;
      float* ob = out + b * ldout;
      std::fill(ob, ob + d, 0.0f);
      for (int j = 0; j < n; ++j) {
        const float s = rb[j];
        const float* xj = xb + int64_t{j} * d;
        for (int c = 0; c < d; ++c) ob[c] += s * xj[c];
      }
      const float inv = 1.0f / (Sum(rb, n) + 1.0f);
      for (int c = 0; c < d; ++c) ob[c] *= inv;
    }
  });
}

void CpuBackend::DampedMeanBackward(int64_t batch, int n, int d, const float* rho,
                                    const float* dout, int64_t lddout, float* dx) {
  ParallelRows(pool_, batch, 2 * int64_t{n} * d, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* rb = rho + b * n;
      const float* g = dout + b * lddout;
      const float inv = 1.0f / (Sum(rb, n) + 1.0f);
      for (int j = 0; j < n; ++j) {
        const float s = rb[j] * inv;
        float* dxj = dx + (b * n + j) * d;
        for (int c = 0; c < d; ++c) dxj[c] += s * g[c];
      }
    }
  });
}

void CpuBackend::MaskedSoftmaxForward(int64_t rows, int n, const float* scores, const float* mask,
                                      float* p) {
  ParallelRows(pool_, rows, 8 * int64_t{n}, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      SoftmaxRow(n, scores + r * n, mask != nullptr ? mask + r * n : nullptr, p + r * n);
    }
  });
}

void CpuBackend::MaskedSoftmaxBackward(int64_t rows, int n, const float* p, const float* mask,
                                       const float* dp, float* dscores) {
  ParallelRows(pool_, rows, 4 * int64_t{n}, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* pr = p + r * n;
      const float* g = dp + r * n;
      float* ds = dscores + r * n;
      const float dot = Dot(pr, g, n);
      if (mask != nullptr) {
        const float* mr = mask + r * n;
        for (int j = 0; j < n; ++j) ds[j] += mr[j] != 0.0f ? pr[j] * (g[j] - dot) : 0.0f;
      } else {
        for (int j = 0; j < n; ++j) ds[j] += pr[j] * (g[j] - dot);
      }
    }
  });
}

namespace {

// Sum over [0, n) of term(i0, i1) (a double partial over one fixed chunk of kLossChunk elements,
// which may also write per-element gradients), chunks on the pool, combined in chunk order:
// deterministic for any thread count.
template <typename F>
double ChunkedSum(ThreadPool& pool, std::vector<double>* scratch, int64_t n, const F& term) {
  if (n <= 0) return 0.0;
  const int64_t chunks = (n + kLossChunk - 1) / kLossChunk;
  Reserve(scratch, static_cast<size_t>(chunks));
  double* partial = scratch->data();
  ParallelRows(pool, chunks, kLossChunk * 40, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      partial[c] = term(c * kLossChunk, std::min(n, (c + 1) * kLossChunk));
    }
  });
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

}  // namespace

double CpuBackend::BceWithLogits(int64_t n, const float* logits, const float* labels, float scale,
                                 float* dlogits) {
  return ChunkedSum(pool_, &reduce_scratch_, n, [&](int64_t i0, int64_t i1) {
    double s = 0.0;
    for (int64_t i = i0; i < i1; ++i) {
      const float l = logits[i], y = labels[i];
      s += static_cast<double>(std::max(l, 0.0f) - l * y) +
           std::log1p(std::exp(-std::abs(static_cast<double>(l))));
    }
    if (dlogits != nullptr) {
      for (int64_t i = i0; i < i1; ++i) {
        dlogits[i] += scale * (FastSigmoid(logits[i]) - labels[i]);
      }
    }
    return s;
  });
}

double CpuBackend::AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits,
                           const float* mask, float scale, float* dpos, float* dneg) {
  return ChunkedSum(pool_, &reduce_scratch_, n, [&](int64_t i0, int64_t i1) {
    double s = 0.0;
    for (int64_t i = i0; i < i1; ++i) {
      if (mask != nullptr && mask[i] == 0.0f) continue;  // exactly 0, whatever the logits
      const float sp = FastSigmoid(pos_logits[i]);
      const float un = FastSigmoid(-neg_logits[i]);  // 1 - sigmoid(ln)
      const bool clamped = un - kAuxEps <= kAuxEps;
      s += -std::log(static_cast<double>(sp) + kAuxEps) -
           std::log(clamped ? static_cast<double>(kAuxEps) : static_cast<double>(un - kAuxEps));
      if (dpos != nullptr) dpos[i] += scale * (-sp * (1.0f - sp) / (sp + kAuxEps));
      if (dneg != nullptr) dneg[i] += clamped ? 0.0f : scale * (un * (1.0f - un) / (un - kAuxEps));
    }
    return s;
  });
}

void CpuBackend::AdamUpdate(int64_t n, const AdamHyper& h, int64_t t, const float* grad,
                            float* param, float* m, float* v) {
  const float lr_t = static_cast<float>(reference::AdamStepSize(h, t));
  const float b1 = h.beta1, b2 = h.beta2, eps = h.epsilon;
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  ParallelRows(pool_, n, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = grad[i];
      const float mi = b1 * m[i] + c1 * g;
      const float vi = b2 * v[i] + c2 * g * g;
      m[i] = mi;
      v[i] = vi;
      param[i] -= lr_t * mi / (std::sqrt(vi) + eps);
    }
  });
}

}  // namespace sift::kernels
