// The per-element bodies of the CUDA recurrences' step kernels (cuda_rnn_kernels.cu runs each in a
// grid-stride loop; the host test of rnn_schedule.h runs them in plain loops): index maths over
// the [B, T, ...] row-major tensors (row = b * T + t) around elementwise_math.h's unit steps.
// Header-only, no CUDA or Abseil include. Pure functions of their arguments; each call writes
// only element i's outputs (so calls for different i never conflict).
#pragma once

#include <cstdint>

#include "kernels/cuda/elementwise_math.h"

namespace sift::cuda::rnn {

// GRU forward, element i = b * H + j of step t: xw [B*T, 3H] = x W_in (no bias), hu [B, 3H] =
// h_{t-1} W_rec (nullptr at t = 0, the zero state: the recurrent bias alone). Writes h[row, j]
// and the cache's [z | r | n | hn] of (row, j).
SIFT_HD void GruForwardElement(int64_t i, int64_t time, int64_t hidden, int64_t t, const float* xw,
                               const float* hu, const float* b_in, const float* b_rec, float* h,
                               float* cache) {
  using math::Add;
  const int64_t H = hidden, G = 3 * hidden;
  const int64_t b = i / H, j = i - b * H;
  const int64_t row = b * time + t;
  const float* x3 = xw + row * G;
  float hz = b_rec[j], hr = b_rec[H + j], hn = b_rec[2 * H + j];
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

// GRU backward, element i = b * H + j of step t: dht = dh[row, j] + carry[i] (carry [B, H]).
// Writes gx[row] [daz | dar | dan], gh[row] [daz | dar | dhn] at unit j (rows of [B*T, 3H]) and
// carry[i] = dht * z.
SIFT_HD void GruBackwardElement(int64_t i, int64_t time, int64_t hidden, int64_t t, const float* h,
                                const float* cache, const float* dh, float* carry, float* gx,
                                float* gh) {
  const int64_t H = hidden, G = 3 * hidden;
  const int64_t b = i / H, j = i - b * H;
  const int64_t row = b * time + t;
  const float* c4 = cache + row * 4 * H;
  const float prev = t > 0 ? h[(row - 1) * H + j] : 0.0f;
  const float dht = math::Add(dh[row * H + j], carry[i]);
  const math::GruUnitGrad<float> g =
      math::GruUnitBackward(c4[math::kGruCacheZ * H + j], c4[math::kGruCacheR * H + j],
                            c4[math::kGruCacheN * H + j], c4[math::kGruCacheHn * H + j], prev, dht);
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

// AUGRU phase 1, element i = b * H + k of step t: xg [B*T, 2H] holds x G_x + h'_{t-1} G_h (no
// bias). Writes the cache's gamma, u and gh = gamma * h'_{t-1} of (row, k).
SIFT_HD void AugruGatesElement(int64_t i, int64_t time, int64_t hidden, int64_t t, const float* xg,
                               const float* g_b, const float* hs, float* cache) {
  using math::Add;
  const int64_t H = hidden;
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

// AUGRU phase 2, element i = b * H + j of step t: xc [B*T, H] holds x C_x + gh C_h (no bias).
// Writes the cache's c of (row, j) and hs[row, j].
SIFT_HD void AugruUpdateElement(int64_t i, int64_t time, int64_t hidden, int64_t t, const float* xc,
                                const float* c_b, const float* att, float* hs, float* cache) {
  const int64_t H = hidden;
  const int64_t b = i / H, j = i - b * H;
  const int64_t row = b * time + t;
  float* c4 = cache + row * 4 * H;
  const float prev = t > 0 ? hs[(row - 1) * H + j] : 0.0f;
  const math::AugruUpdate<float> s = math::AugruUnitUpdate(
      math::Add(xc[row * H + j], c_b[j]), c4[math::kAugruCacheU * H + j], att[row], prev);
  c4[math::kAugruCacheC * H + j] = s.c;
  hs[row * H + j] = s.h;
}

// AUGRU backward through phase 2, unit j of batch row b at step t: dht = carry[b, j]. Writes
// dcp[row, j], dg[row, H + j] (the u block), carry[b, j] = dht * u', and at t = 0 dg[row, j] = 0
// (gamma multiplies h'_{-1} = 0). Returns this unit's duk * u in double (d att[row] is minus the
// sum of these over j).
SIFT_HD double AugruUpdateBackwardElement(int64_t b, int64_t j, int64_t time, int64_t hidden,
                                          int64_t t, const float* att, const float* hs,
                                          const float* cache, float* carry, float* dcp, float* dg) {
  const int64_t H = hidden;
  const int64_t row = b * time + t;
  const float* c4 = cache + row * 4 * H;
  const float u = c4[math::kAugruCacheU * H + j];
  const float prev = t > 0 ? hs[(row - 1) * H + j] : 0.0f;
  const math::AugruUpdateGrad<float> g = math::AugruUnitUpdateBackward(
      u, c4[math::kAugruCacheC * H + j], att[row], prev, carry[b * H + j]);
  dcp[row * H + j] = g.dpre_c;
  dg[row * 2 * H + H + j] = g.dpre_u;
  if (t == 0) dg[row * 2 * H + j] = 0.0f;
  carry[b * H + j] = g.dprev;
  return math::Mul(static_cast<double>(g.duk), static_cast<double>(u));
}

// AUGRU backward through phase 1, element i = b * H + k of step t >= 1: dgh [B, H] = dcp_t
// C_h^T. Writes dg[row, k] (the gamma block) and carry[i] = carry[i] + dgh * gamma.
SIFT_HD void AugruGatesBackwardElement(int64_t i, int64_t time, int64_t hidden, int64_t t,
                                       const float* hs, const float* cache, const float* dgh,
                                       float* carry, float* dg) {
  const int64_t H = hidden;
  const int64_t b = i / H, k = i - b * H;
  const int64_t row = b * time + t;
  const math::AugruGatesGrad<float> g = math::AugruUnitGatesBackward(
      cache[row * 4 * H + math::kAugruCacheGamma * H + k], hs[(row - 1) * H + k], dgh[i], carry[i]);
  dg[row * 2 * H + k] = g.dpre_gamma;
  carry[i] = g.dprev;
}

// Element i = b * width + c of zeroing row b * T + t of m [B*T, width].
SIFT_HD void ZeroStepRowElement(int64_t i, int64_t time, int64_t width, int64_t t, float* m) {
  const int64_t b = i / width, c = i - b * width;
  m[(b * time + t) * width + c] = 0.0f;
}

}  // namespace sift::cuda::rnn
