// The order of GEMMs and step kernels of the CUDA recurrences, written once over an executor so
// that cuda_backend_rnn.cc runs it on the device (cuBLAS + cuda_rnn_kernels.h) and a CPU unit test
// runs the same schedule with host loops (tests/unit/cuda_rnn_schedule_test.cc):
//   GruForward    xw = x W_in (all B*T rows); per step t: hu = h_{t-1} W_rec (t > 0), step.
//   GruBackward   per step t = T-1..0: step (gate gradients, direct path into carry), then
//                 carry += gh_t W_rec^T (t > 0); dx += gx W_in^T, dw_in += x^T gx, bias column
//                 sums, and dw_rec += h^T gh in ONE GEMM over the B*T - 1 row pairs (state r - 1,
//                 gradient row r) after zeroing the t = 0 rows of gh (r - 1 is another sequence).
//   AugruForward  xg = x G_x, xc = x C_x; per step: xg_t += h' G_h, gates, xc_t += (gamma h')
//                 C_h, update (t = 0 skips both GEMMs: h'_{-1} = 0).
//   AugruBackward carry = dlast; per step: update-backward (datt); t > 0: dgh = dcp_t C_h^T,
//                 gates-backward, carry += dg_t G_h^T; then the input / weight GEMMs and bias sums
//                 as for the GRU.
// Executor (`E`), all sizes int64_t, row-major, every call in stream order:
//   bool failed();  void Gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)  (alpha = 1; beta =
//   0 ignores c); void Zero(p, n); void CopyFloats(dst, src, n); void ZeroStepRows(B, T, width,
//   t, m); void ColumnSum(rows, cols, src, dst) (dst[c] += the sum of column c of the contiguous
//   [rows, cols] src, in cuda_dense_plan.h's PlanColumnSums order); and the steps of
//   cuda_rnn_kernels.h without the stream: GruForwardStep, GruBackwardStep, AugruGatesStep,
//   AugruUpdateStep, AugruUpdateBackwardStep, AugruGatesBackwardStep.
// Workspaces: rnn_plan.h's layouts (each fits kernels/backend.h's *WorkspaceFloats). Host-only
// header (templates, no CUDA include). Thread-compatible.
#pragma once

#include <cstdint>

#include "kernels/cuda/rnn_plan.h"

namespace sift::cuda::rnn {

struct RnnShape {
  int64_t batch = 0, time = 0, in = 0, hidden = 0;
  bool empty() const { return batch <= 0 || time <= 0 || hidden <= 0; }
};

template <typename E>
void GruForwardSchedule(E& e, const RnnShape& d, const float* x, const float* w_in,
                        const float* w_rec, const float* b_in, const float* b_rec, float* h,
                        float* cache, float* workspace) {
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden, G = 3 * H;
  if (e.failed() || d.empty()) return;
  const GruForwardLayout l = MakeGruForwardLayout(B, T, H);
  float* xw = workspace + l.xw;  // [B*T, 3H] x W_in
  float* hu = workspace + l.hu;  // [B, 3H] h_{t-1} W_rec
  if (I > 0) {
    e.Gemm(false, false, B * T, G, I, x, I, w_in, G, 0.0f, xw, G);
  } else {
    e.Zero(xw, B * T * G);
  }
  for (int64_t t = 0; t < T; ++t) {
    if (e.failed()) return;
    if (t > 0) e.Gemm(false, false, B, G, H, h + (t - 1) * H, T * H, w_rec, G, 0.0f, hu, G);
    e.GruForwardStep(B, T, H, t, xw, t > 0 ? hu : nullptr, b_in, b_rec, h, cache);
  }
}

template <typename E>
void GruBackwardSchedule(E& e, const RnnShape& d, const float* x, const float* w_in,
                         const float* w_rec, const float* h, const float* cache, const float* dh,
                         float* dx, float* dw_in, float* dw_rec, float* db_in, float* db_rec,
                         float* workspace) {
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden, G = 3 * H, rows = B * T;
  if (e.failed() || d.empty()) return;
  const GruBackwardLayout l = MakeGruBackwardLayout(B, T, H);
  float* gx = workspace + l.gx;        // [B*T, 3H] input-side gate gradients
  float* gh = workspace + l.gh;        // [B*T, 3H] recurrent-side gate gradients
  float* carry = workspace + l.carry;  // [B, H] gradient w.r.t. h_{t-1}
  e.Zero(carry, B * H);
  for (int64_t t = T - 1; t >= 0; --t) {
    if (e.failed()) return;
    e.GruBackwardStep(B, T, H, t, h, cache, dh, carry, gx, gh);
    if (t > 0) e.Gemm(false, true, B, H, G, gh + t * G, T * G, w_rec, G, 1.0f, carry, H);
  }
  if (I > 0) {
    if (dx != nullptr) e.Gemm(false, true, rows, I, G, gx, G, w_in, G, 1.0f, dx, I);
    e.Gemm(true, false, I, G, rows, x, I, gx, G, 1.0f, dw_in, G);
  }
  e.ColumnSum(rows, G, gx, db_in);
  e.ColumnSum(rows, G, gh, db_rec);
  if (T > 1) {
    e.ZeroStepRows(B, T, G, 0, gh);
    e.Gemm(true, false, H, G, rows - 1, h, H, gh + G, G, 1.0f, dw_rec, G);
  }
}

template <typename E>
void AugruForwardSchedule(E& e, const RnnShape& d, const float* x, const float* att,
                          const float* g_w, const float* g_b, const float* c_w, const float* c_b,
                          float* hs, float* cache, float* workspace) {
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden;
  if (e.failed() || d.empty()) return;
  const AugruForwardLayout l = MakeAugruForwardLayout(B, T, H);
  float* xg = workspace + l.xg;        // [B*T, 2H] gate pre-activations (no bias)
  float* xc = workspace + l.xc;        // [B*T, H] candidate pre-activations (no bias)
  const float* g_h = g_w + I * 2 * H;  // the h' rows of G
  const float* c_h = c_w + I * H;      // the (gamma h') rows of C
  if (I > 0) {
    e.Gemm(false, false, B * T, 2 * H, I, x, I, g_w, 2 * H, 0.0f, xg, 2 * H);
    e.Gemm(false, false, B * T, H, I, x, I, c_w, H, 0.0f, xc, H);
  } else {
    e.Zero(workspace, l.floats);
  }
  for (int64_t t = 0; t < T; ++t) {
    if (e.failed()) return;
    if (t > 0) {  // xg_t += h'_{t-1} G_h
      e.Gemm(false, false, B, 2 * H, H, hs + (t - 1) * H, T * H, g_h, 2 * H, 1.0f, xg + t * 2 * H,
             T * 2 * H);
    }
    e.AugruGatesStep(B, T, H, t, xg, g_b, hs, cache);
    if (t > 0) {  // xc_t += (gamma h'_{t-1}) C_h: the cache's gh block of step t
      e.Gemm(false, false, B, H, H, cache + t * 4 * H + 3 * H, T * 4 * H, c_h, H, 1.0f, xc + t * H,
             T * H);
    }
    e.AugruUpdateStep(B, T, H, t, xc, c_b, att, hs, cache);
  }
}

template <typename E>
void AugruBackwardSchedule(E& e, const RnnShape& d, const float* x, const float* att,
                           const float* g_w, const float* c_w, const float* hs, const float* cache,
                           const float* dlast, float* dx, float* datt, float* dg_w, float* dg_b,
                           float* dc_w, float* dc_b, float* workspace) {
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden, rows = B * T;
  if (e.failed() || d.empty()) return;
  const AugruBackwardLayout l = MakeAugruBackwardLayout(B, T, H);
  float* dg = workspace + l.dg;        // [B*T, 2H] gate pre-activation gradients
  float* dcp = workspace + l.dcp;      // [B*T, H] candidate pre-activation gradients
  float* carry = workspace + l.carry;  // [B, H] gradient w.r.t. h'_{t-1}
  float* dgh = workspace + l.dgh;      // [B, H] gradient w.r.t. gamma h'_{t-1}
  const float* g_h = g_w + I * 2 * H;
  const float* c_h = c_w + I * H;
  e.CopyFloats(carry, dlast, B * H);
  for (int64_t t = T - 1; t >= 0; --t) {
    if (e.failed()) return;
    // Through h'_t = u' h'_{t-1} + (1 - u') c: dcp, the u block of dg, datt, the direct path.
    e.AugruUpdateBackwardStep(B, T, H, t, att, hs, cache, carry, dcp, dg, datt);
    if (t == 0) break;  // gamma multiplies h'_{-1} = 0: nothing flows further
    // Through c = tanh([x; gamma h'] C + c_b): dgh = dcp_t C_h^T, then the reset gate.
    e.Gemm(false, true, B, H, H, dcp + t * H, T * H, c_h, H, 0.0f, dgh, H);
    e.AugruGatesBackwardStep(B, T, H, t, hs, cache, dgh, carry, dg);
    // Through the gates: carry += dg_t G_h^T.
    e.Gemm(false, true, B, H, 2 * H, dg + t * 2 * H, T * 2 * H, g_h, 2 * H, 1.0f, carry, H);
  }
  if (e.failed()) return;
  if (I > 0) {
    if (dx != nullptr) {
      e.Gemm(false, true, rows, I, 2 * H, dg, 2 * H, g_w, 2 * H, 1.0f, dx, I);
      e.Gemm(false, true, rows, I, H, dcp, H, c_w, H, 1.0f, dx, I);
    }
    e.Gemm(true, false, I, 2 * H, rows, x, I, dg, 2 * H, 1.0f, dg_w, 2 * H);
    e.Gemm(true, false, I, H, rows, x, I, dcp, H, 1.0f, dc_w, H);
  }
  // dc_w's h rows: the cache's gh = gamma h'_{t-1} is 0 at t = 0, so every row takes part.
  e.Gemm(true, false, H, H, rows, cache + 3 * H, 4 * H, dcp, H, 1.0f, dc_w + I * H, H);
  e.ColumnSum(rows, 2 * H, dg, dg_b);
  e.ColumnSum(rows, H, dcp, dc_b);
  if (T > 1) {
    // dg_w's h rows += sum over t >= 1 of h'_{t-1}^T dg_t, as dw_rec in GruBackwardSchedule.
    e.ZeroStepRows(B, T, 2 * H, 0, dg);
    e.Gemm(true, false, H, 2 * H, rows - 1, hs, H, dg + 2 * H, 2 * H, 1.0f, dg_w + I * 2 * H,
           2 * H);
  }
}

}  // namespace sift::cuda::rnn
