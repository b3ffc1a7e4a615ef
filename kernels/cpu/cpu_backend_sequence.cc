// CpuBackend's sequence ops (DIEN attention features, GRU, AUGRU). The recurrences are organised
// around big GEMMs: the input projections of all B*T rows in one sgemm before the time loop, one
// sgemm per step for the recurrent term over the B rows of that step (strided views into [B,T,*]),
// and fused element-wise gate maths per step over batch rows (FastSigmoid / FastTanh, contiguous
// loops that vectorise) on the thread pool. Backward stores the gate gradients of every step in
// the workspace so the weight gradients of the input side (and dx) are single sgemms over all B*T
// rows after the time loop. Bias gradients are summed per fixed chunk of batch rows (partials
// independent of the thread count) and combined in chunk order: bit-identical for a fixed thread
// count (OpenBLAS's partition is fixed by its thread count).

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel_gemm.h"
#include "kernels/cpu/vector_math.h"

namespace sift::kernels {
namespace {

// Batch rows per ParallelFor chunk in the recurrences: a fixed grain, so chunk c always covers
// rows [c * kRowGrain, (c + 1) * kRowGrain) and its bias partials do not depend on the threads.
constexpr int64_t kRowGrain = 32;

// C = op(A) op(B) + beta C, row-major, on the pool (parallel_gemm.h).
void Sgemm(ThreadPool& pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  ParallelSgemm(pool, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

int64_t NumChunks(int64_t rows) { return (rows + kRowGrain - 1) / kRowGrain; }

// dst[col] += sum over chunks (in order) of partials[chunk * width + col], in double.
void CombinePartials(int64_t chunks, int64_t width, const float* partials, int64_t offset,
                     int64_t count, float* dst) {
  for (int64_t col = 0; col < count; ++col) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partials[c * width + offset + col];
    dst[col] += static_cast<float>(s);
  }
}

// One GRU step for one batch row from the pre-activations xw = x W_in and hu = h_{t-1} U (no
// biases, [z | r | n] blocks of H): writes the cache row [z | r | n | hn] and h_t. Every block is
// its own __restrict pointer so the loop vectorises without alias checks.
void GruStepRow(int64_t H, const float* __restrict xz, const float* __restrict xr,
                const float* __restrict xn, const float* __restrict hz, const float* __restrict hr,
                const float* __restrict hnr, const float* __restrict biz,
                const float* __restrict bir, const float* __restrict bin,
                const float* __restrict brz, const float* __restrict brr,
                const float* __restrict brn, const float* __restrict prev, float* __restrict cz,
                float* __restrict cr, float* __restrict cn, float* __restrict chn,
                float* __restrict h) {
  for (int64_t j = 0; j < H; ++j) {
    const float z = FastSigmoid(xz[j] + biz[j] + hz[j] + brz[j]);
    const float r = FastSigmoid(xr[j] + bir[j] + hr[j] + brr[j]);
    const float hn = hnr[j] + brn[j];
    const float n = FastTanh(xn[j] + bin[j] + r * hn);
    cz[j] = z;
    cr[j] = r;
    cn[j] = n;
    chn[j] = hn;
    h[j] = z * prev[j] + (1.0f - z) * n;
  }
}

// One GRU backward step for one batch row: dht = dh + carry; writes the gate gradients gx
// ([daz | dar | dan]) and gh ([daz | dar | dan * r]), carry = the direct-path gradient dht * z,
// and adds gx, gh to the bias partials px, ph.
void GruBackRow(int64_t H, const float* __restrict cz, const float* __restrict cr,
                const float* __restrict cn, const float* __restrict chn,
                const float* __restrict prev, const float* __restrict dh, float* __restrict carry,
                float* __restrict gxz, float* __restrict gxr, float* __restrict gxn,
                float* __restrict ghz, float* __restrict ghr, float* __restrict ghn,
                float* __restrict pxz, float* __restrict pxr, float* __restrict pxn,
                float* __restrict phz, float* __restrict phr, float* __restrict phn) {
  for (int64_t j = 0; j < H; ++j) {
    const float z = cz[j], r = cr[j], n = cn[j], hn = chn[j];
    const float dht = dh[j] + carry[j];
    const float daz = dht * (prev[j] - n) * z * (1.0f - z);
    const float dan = dht * (1.0f - z) * (1.0f - n * n);
    const float dar = dan * hn * r * (1.0f - r);
    const float dhn = dan * r;
    gxz[j] = daz;
    gxr[j] = dar;
    gxn[j] = dan;
    ghz[j] = daz;
    ghr[j] = dar;
    ghn[j] = dhn;
    carry[j] = dht * z;
    pxz[j] += daz;
    pxr[j] += dar;
    pxn[j] += dan;
    phz[j] += daz;
    phr[j] += dar;
    phn[j] += dhn;
  }
}

// The four blocks of one attention-feature row: [q; h; q - h; q * h].
void FeaturesRow(int64_t H, const float* __restrict q, const float* __restrict h,
                 float* __restrict c0, float* __restrict c1, float* __restrict c2,
                 float* __restrict c3) {
  for (int64_t j = 0; j < H; ++j) {
    c0[j] = q[j];
    c1[j] = h[j];
    c2[j] = q[j] - h[j];
    c3[j] = q[j] * h[j];
  }
}

// dst[j] += a[j] + s * b[j] + c[j] * m[j] (s = +1 or -1).
void AddFeatureGrad(int64_t H, const float* __restrict a, const float* __restrict b, float s,
                    const float* __restrict c, const float* __restrict m, float* __restrict dst) {
  for (int64_t j = 0; j < H; ++j) dst[j] += a[j] + s * b[j] + c[j] * m[j];
}

// out[j] = sigmoid(pre[j] + bias[j]).
void SigmoidBiasRow(int64_t n, const float* __restrict pre, const float* __restrict bias,
                    float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = FastSigmoid(pre[j] + bias[j]);
}

// out[j] = a[j] * b[j].
void MulRow(int64_t n, const float* __restrict a, const float* __restrict b,
            float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = a[j] * b[j];
}

// The AUGRU state update of one row: c = tanh(pre + c_b), u' = keep * u,
// h'_t = u' prev + (1 - u') c.
void AugruStateRow(int64_t H, float keep, const float* __restrict pre, const float* __restrict c_b,
                   const float* __restrict u, const float* __restrict prev, float* __restrict c_out,
                   float* __restrict h_out) {
  for (int64_t j = 0; j < H; ++j) {
    const float c = FastTanh(pre[j] + c_b[j]);
    const float uk = keep * u[j];
    c_out[j] = c;
    h_out[j] = uk * prev[j] + (1.0f - uk) * c;
  }
}

// AUGRU backward through h'_t = u' h'_{t-1} + (1 - u') c for one row: carry holds dh'_t on entry
// and the direct-path gradient dh'_t * u' on exit; writes the candidate and update-gate
// pre-activation gradients (added to their bias partials) and the per-unit datt terms
// duk * u (summed by the caller in a fixed order).
void AugruStateBackRow(int64_t H, float keep, const float* __restrict u, const float* __restrict c,
                       const float* __restrict prev, float* __restrict carry, float* __restrict dcp,
                       float* __restrict dgu, float* __restrict datt_terms,
                       float* __restrict part_u, float* __restrict part_c) {
  for (int64_t j = 0; j < H; ++j) {
    const float uk = keep * u[j];
    const float dht = carry[j];
    const float duk = dht * (prev[j] - c[j]);
    const float dcv = dht * (1.0f - uk) * (1.0f - c[j] * c[j]);
    const float duv = duk * keep * u[j] * (1.0f - u[j]);
    dcp[j] = dcv;
    dgu[j] = duv;
    datt_terms[j] = duk * u[j];
    carry[j] = dht * uk;
    part_u[j] += duv;
    part_c[j] += dcv;
  }
}

// AUGRU backward through the reset gate for one row, from dgh = d(gamma * h'_{t-1}).
void AugruResetBackRow(int64_t H, const float* __restrict dgh, const float* __restrict gamma,
                       const float* __restrict prev, float* __restrict dgg, float* __restrict carry,
                       float* __restrict part_g) {
  for (int64_t j = 0; j < H; ++j) {
    const float dgv = dgh[j] * prev[j] * gamma[j] * (1.0f - gamma[j]);
    dgg[j] = dgv;
    carry[j] += dgh[j] * gamma[j];
    part_g[j] += dgv;
  }
}

}  // namespace

void CpuBackend::AttentionFeaturesForward(int64_t batch, int time, int hidden, const float* qp,
                                          const float* h, float* c) {
  const int64_t H = hidden, T = time;
  pool_.ParallelFor(batch, kRowGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        float* cr = c + (b * T + t) * 4 * H;
        FeaturesRow(H, qp + b * H, h + (b * T + t) * H, cr, cr + H, cr + 2 * H, cr + 3 * H);
      }
    }
  });
}

void CpuBackend::AttentionFeaturesBackward(int64_t batch, int time, int hidden, const float* qp,
                                           const float* h, const float* dc, float* dqp, float* dh) {
  const int64_t H = hidden, T = time;
  pool_.ParallelFor(batch, kRowGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = b * T + t;
        const float* dcr = dc + row * 4 * H;
        if (dqp != nullptr) {
          AddFeatureGrad(H, dcr, dcr + 2 * H, 1.0f, dcr + 3 * H, h + row * H, dqp + b * H);
        }
        if (dh != nullptr) {
          AddFeatureGrad(H, dcr + H, dcr + 2 * H, -1.0f, dcr + 3 * H, qp + b * H, dh + row * H);
        }
      }
    }
  });
}

void CpuBackend::GruForward(const RnnDims& d, const float* x, const float* w_in, const float* w_rec,
                            const float* b_in, const float* b_rec, float* h, float* cache,
                            float* workspace) {
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden, G = 3 * H;
  if (B <= 0 || T <= 0) return;
  float* xw = workspace;       // [B*T, 3H] = x W_in
  float* hu = xw + B * T * G;  // [B, 3H] = h_{t-1} U of the current step
  float* zero = hu + B * G;    // [H] zeros: the state before step 0
  std::memset(zero, 0, sizeof(float) * H);
  Sgemm(pool_, false, false, B * T, G, I, x, I, w_in, G, 0.0f, xw, G);
  for (int64_t t = 0; t < T; ++t) {
    if (t > 0) {
      Sgemm(pool_, false, false, B, G, H, h + (t - 1) * H, T * H, w_rec, G, 0.0f, hu, G);
    } else {
      std::memset(hu, 0, sizeof(float) * B * G);  // h_{-1} = 0: only the biases remain
    }
    pool_.ParallelFor(B, kRowGrain, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t row = b * T + t;
        const float* prev = t > 0 ? h + (row - 1) * H : zero;
        const float* x3 = xw + row * G;
        const float* h3 = hu + b * G;
        float* c4 = cache + row * 4 * H;
        GruStepRow(H, x3, x3 + H, x3 + 2 * H, h3, h3 + H, h3 + 2 * H, b_in, b_in + H, b_in + 2 * H,
                   b_rec, b_rec + H, b_rec + 2 * H, prev, c4, c4 + H, c4 + 2 * H, c4 + 3 * H,
                   h + row * H);
      }
    });
  }
}

void CpuBackend::GruBackward(const RnnDims& d, const float* x, const float* w_in,
                             const float* w_rec, const float* h, const float* cache,
                             const float* dh, float* dx, float* dw_in, float* dw_rec, float* db_in,
                             float* db_rec, float* workspace) {
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden, G = 3 * H;
  if (B <= 0 || T <= 0) return;
  float* gx = workspace;          // [B*T, 3H] input-side gate gradients
  float* gh = gx + B * T * G;     // [B*T, 3H] recurrent-side gate gradients
  float* carry = gh + B * T * G;  // [B, H] gradient w.r.t. h_{t-1}
  float* zero = carry + B * H;    // [H]
  std::memset(zero, 0, sizeof(float) * H);
  std::memset(carry, 0, sizeof(float) * B * H);
  const int64_t chunks = NumChunks(B), width = 2 * G;
  reduce_scratch_f_.assign(chunks * width, 0.0f);
  float* partials = reduce_scratch_f_.data();
  for (int64_t t = T - 1; t >= 0; --t) {
    pool_.ParallelFor(B, kRowGrain, [&](int64_t b0, int64_t b1) {
      float* part = partials + (b0 / kRowGrain) * width;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t row = b * T + t;
        const float* prev = t > 0 ? h + (row - 1) * H : zero;
        const float* c4 = cache + row * 4 * H;
        float* x3 = gx + row * G;
        float* h3 = gh + row * G;
        GruBackRow(H, c4, c4 + H, c4 + 2 * H, c4 + 3 * H, prev, dh + row * H, carry + b * H, x3,
                   x3 + H, x3 + 2 * H, h3, h3 + H, h3 + 2 * H, part, part + H, part + 2 * H,
                   part + G, part + G + H, part + G + 2 * H);
      }
    });
    // carry += gh_t U^T (the recurrent path into h_{t-1}).
    if (t > 0) Sgemm(pool_, false, true, B, H, G, gh + t * G, T * G, w_rec, G, 1.0f, carry, H);
  }
  if (dx != nullptr) Sgemm(pool_, false, true, B * T, I, G, gx, G, w_in, G, 1.0f, dx, I);
  Sgemm(pool_, true, false, I, G, B * T, x, I, gx, G, 1.0f, dw_in, G);
  for (int64_t t = 1; t < T; ++t) {
    Sgemm(pool_, true, false, H, G, B, h + (t - 1) * H, T * H, gh + t * G, T * G, 1.0f, dw_rec, G);
  }
  CombinePartials(chunks, width, partials, 0, G, db_in);
  CombinePartials(chunks, width, partials, G, G, db_rec);
}

void CpuBackend::AugruForward(const RnnDims& d, const float* x, const float* att, const float* g_w,
                              const float* g_b, const float* c_w, const float* c_b, float* hs,
                              float* cache, float* workspace) {
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden;
  if (B <= 0 || T <= 0) return;
  float* xg = workspace;           // [B*T, 2H] gate pre-activations (x G_x, then + h' G_h)
  float* xc = xg + B * T * 2 * H;  // [B*T, H] candidate pre-activations
  float* zero = xc + B * T * H;    // [H]
  std::memset(zero, 0, sizeof(float) * H);
  const float* g_h = g_w + I * 2 * H;  // the h' rows of G
  const float* c_h = c_w + I * H;      // the (gamma * h') rows of C
  Sgemm(pool_, false, false, B * T, 2 * H, I, x, I, g_w, 2 * H, 0.0f, xg, 2 * H);
  Sgemm(pool_, false, false, B * T, H, I, x, I, c_w, H, 0.0f, xc, H);
  for (int64_t t = 0; t < T; ++t) {
    if (t > 0) {
      Sgemm(pool_, false, false, B, 2 * H, H, hs + (t - 1) * H, T * H, g_h, 2 * H, 1.0f,
            xg + t * 2 * H, T * 2 * H);
    }
    pool_.ParallelFor(B, kRowGrain, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t row = b * T + t;
        const float* prev = t > 0 ? hs + (row - 1) * H : zero;
        float* cr = cache + row * 4 * H;
        SigmoidBiasRow(2 * H, xg + row * 2 * H, g_b, cr);
        MulRow(H, cr, prev, cr + 3 * H);
      }
    });
    if (t > 0) {
      Sgemm(pool_, false, false, B, H, H, cache + t * 4 * H + 3 * H, T * 4 * H, c_h, H, 1.0f,
            xc + t * H, T * H);
    }
    pool_.ParallelFor(B, kRowGrain, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t row = b * T + t;
        const float* prev = t > 0 ? hs + (row - 1) * H : zero;
        float* cr = cache + row * 4 * H;
        AugruStateRow(H, 1.0f - att[row], xc + row * H, c_b, cr + H, prev, cr + 2 * H,
                      hs + row * H);
      }
    });
  }
}

void CpuBackend::AugruBackward(const RnnDims& d, const float* x, const float* att, const float* g_w,
                               const float* c_w, const float* hs, const float* cache,
                               const float* dlast, float* dx, float* datt, float* dg_w, float* dg_b,
                               float* dc_w, float* dc_b, float* workspace) {
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden;
  if (B <= 0 || T <= 0) return;
  float* dg = workspace;            // [B*T, 2H] gate pre-activation gradients
  float* dcp = dg + B * T * 2 * H;  // [B*T, H] candidate pre-activation gradients
  float* carry = dcp + B * T * H;   // [B, H] gradient w.r.t. h'_{t-1}
  float* dgh = carry + B * H;       // [B, H] gradient w.r.t. gamma * h'_{t-1}
  float* zero = dgh + B * H;        // [H]
  std::memset(zero, 0, sizeof(float) * H);
  std::memcpy(carry, dlast, sizeof(float) * B * H);
  const float* g_h = g_w + I * 2 * H;
  const float* c_h = c_w + I * H;
  const int64_t chunks = NumChunks(B), width = 3 * H;  // partials: [dg_b (2H) | dc_b (H)]
  reduce_scratch_f_.assign(chunks * width, 0.0f);
  float* partials = reduce_scratch_f_.data();
  for (int64_t t = T - 1; t >= 0; --t) {
    // Through h'_t = u' h'_{t-1} + (1 - u') c: candidate and update-gate gradients, datt, and
    // the direct path into carry.
    pool_.ParallelFor(B, kRowGrain, [&](int64_t b0, int64_t b1) {
      float* part = partials + (b0 / kRowGrain) * width;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t row = b * T + t;
        const float* prev = t > 0 ? hs + (row - 1) * H : zero;
        const float* cr = cache + row * 4 * H;
        float* dgr = dg + row * 2 * H;
        float* terms = dgh + b * H;  // free until the dgh sgemm below
        AugruStateBackRow(H, 1.0f - att[row], cr + H, cr + 2 * H, prev, carry + b * H,
                          dcp + row * H, dgr + H, terms, part + H, part + 2 * H);
        if (datt != nullptr) {
          float da = 0.0f;
          for (int64_t j = 0; j < H; ++j) da += terms[j];
          datt[row] -= da;
        }
        if (t == 0) std::memset(dgr, 0, sizeof(float) * H);  // gamma multiplies h'_{-1} = 0
      }
    });
    if (t == 0) break;
    // Through c = tanh([x; gamma h'] C + c_b): dgh = dcp_t C_h^T, then the reset gate.
    Sgemm(pool_, false, true, B, H, H, dcp + t * H, T * H, c_h, H, 0.0f, dgh, H);
    pool_.ParallelFor(B, kRowGrain, [&](int64_t b0, int64_t b1) {
      float* part = partials + (b0 / kRowGrain) * width;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t row = b * T + t;
        AugruResetBackRow(H, dgh + b * H, cache + row * 4 * H, hs + (row - 1) * H, dg + row * 2 * H,
                          carry + b * H, part);
      }
    });
    // Through the gates: carry += dg_t G_h^T.
    Sgemm(pool_, false, true, B, H, 2 * H, dg + t * 2 * H, T * 2 * H, g_h, 2 * H, 1.0f, carry, H);
  }
  if (dx != nullptr) {
    Sgemm(pool_, false, true, B * T, I, 2 * H, dg, 2 * H, g_w, 2 * H, 1.0f, dx, I);
    Sgemm(pool_, false, true, B * T, I, H, dcp, H, c_w, H, 1.0f, dx, I);
  }
  Sgemm(pool_, true, false, I, 2 * H, B * T, x, I, dg, 2 * H, 1.0f, dg_w, 2 * H);
  for (int64_t t = 1; t < T; ++t) {
    Sgemm(pool_, true, false, H, 2 * H, B, hs + (t - 1) * H, T * H, dg + t * 2 * H, T * 2 * H, 1.0f,
          dg_w + I * 2 * H, 2 * H);
  }
  Sgemm(pool_, true, false, I, H, B * T, x, I, dcp, H, 1.0f, dc_w, H);
  // gamma * h' is 0 at t = 0, so all B*T rows of the cached product can take part at once.
  Sgemm(pool_, true, false, H, H, B * T, cache + 3 * H, 4 * H, dcp, H, 1.0f, dc_w + I * H, H);
  CombinePartials(chunks, width, partials, 0, 2 * H, dg_b);
  CombinePartials(chunks, width, partials, 2 * H, H, dc_b);
}

}  // namespace sift::kernels
