// CudaBackend's recurrences (cuda_backend_impl.h): the GRU and AUGRU forward / backward as cuBLAS
// GEMMs (GemmBatched, the math mode's compute type) around fused element-wise step kernels
// (cuda_rnn_kernels.h). Per op:
//   GruForward    x W_in for all B*T rows; per step t: h_{t-1} W_rec (t > 0), step kernel.
//   GruBackward   per step t = T-1..0: step kernel (gate gradients, direct path into carry),
//                 carry += gh_t W_rec^T (t > 0); then dx += gx W_in^T, dw_in += x^T gx, the bias
//                 column sums, and dw_rec += h^T gh in ONE GEMM over B*T - 1 rows (row r paired
//                 with state r - 1; the t = 0 rows of gh are zeroed first).
//   AugruForward  x G_x and x C_x for all rows; per step: xg_t += h' G_h, gates kernel,
//                 xc_t += (gamma h') C_h, update kernel (t = 0 skips both GEMMs: h'_{-1} = 0).
//   AugruBackward per step: update-backward kernel (datt), then (t > 0) dgh = dcp_t C_h^T,
//                 gates-backward kernel, carry += dg_t G_h^T; then the input and weight GEMMs
//                 and bias sums as for the GRU.
// No float atomics: GEMMs and fixed-order reductions only, so results are bit-reproducible.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/cuda_rnn_kernels.h"
#include "kernels/cuda/rnn_plan.h"

namespace sift::cuda {

using kernels::RnnDims;

namespace {

// The scratch slot of the column sums' double partials.
constexpr int kSumScratchSlot = 0;

}  // namespace

void CudaBackend::GruForward(const RnnDims& d, const float* x, const float* w_in,
                             const float* w_rec, const float* b_in, const float* b_rec, float* h,
                             float* cache, float* workspace) {
  if (failed()) return;
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden, G = 3 * H;
  if (B <= 0 || T <= 0 || H <= 0) return;
  const rnn::GruForwardLayout l = rnn::MakeGruForwardLayout(B, T, H);
  float* xw = workspace + l.xw;  // [B*T, 3H] x W_in
  float* hu = workspace + l.hu;  // [B, 3H] h_{t-1} W_rec
  if (I > 0) {
    GemmBatched(false, false, B * T, G, I, 1.0f, x, I, 0, w_in, G, 0, 0.0f, xw, G, 0, 1);
  } else {
    SIFT_CUDA_CHECK(cudaMemsetAsync(xw, 0, sizeof(float) * B * T * G, stream_));
  }
  for (int t = 0; t < d.time; ++t) {
    if (failed()) return;
    if (t > 0) {  // rows b of h_{t-1}: h + (b*T + t-1)*H
      GemmBatched(false, false, B, G, H, 1.0f, h + (t - 1) * H, T * H, 0, w_rec, G, 0, 0.0f, hu, G,
                  0, 1);
    }
    SIFT_CUDA_CHECK_LAUNCH(LaunchGruForwardStep(stream_, B, d.time, d.hidden, t, xw,
                                                t > 0 ? hu : nullptr, b_in, b_rec, h, cache));
  }
}

void CudaBackend::GruBackward(const RnnDims& d, const float* x, const float* w_in,
                              const float* w_rec, const float* h, const float* cache,
                              const float* dh, float* dx, float* dw_in, float* dw_rec, float* db_in,
                              float* db_rec, float* workspace) {
  if (failed()) return;
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden, G = 3 * H, rows = B * T;
  if (B <= 0 || T <= 0 || H <= 0) return;
  const rnn::GruBackwardLayout l = rnn::MakeGruBackwardLayout(B, T, H);
  float* gx = workspace + l.gx;        // [B*T, 3H] input-side gate gradients
  float* gh = workspace + l.gh;        // [B*T, 3H] recurrent-side gate gradients
  float* carry = workspace + l.carry;  // [B, H] gradient w.r.t. h_{t-1}
  auto* partials = static_cast<double*>(
      Scratch(kSumScratchSlot, sizeof(double) * rnn::ColumnSumPartials(rows, G)));
  if (partials == nullptr) return;
  SIFT_CUDA_CHECK(cudaMemsetAsync(carry, 0, sizeof(float) * B * H, stream_));
  for (int t = d.time - 1; t >= 0; --t) {
    if (failed()) return;
    SIFT_CUDA_CHECK_LAUNCH(
        LaunchGruBackwardStep(stream_, B, d.time, d.hidden, t, h, cache, dh, carry, gx, gh));
    if (t > 0) {  // carry += gh_t W_rec^T (the recurrent path into h_{t-1})
      GemmBatched(false, true, B, H, G, 1.0f, gh + t * G, T * G, 0, w_rec, G, 0, 1.0f, carry, H, 0,
                  1);
    }
  }
  if (I > 0) {
    if (dx != nullptr) {
      GemmBatched(false, true, rows, I, G, 1.0f, gx, G, 0, w_in, G, 0, 1.0f, dx, I, 0, 1);
    }
    GemmBatched(true, false, I, G, rows, 1.0f, x, I, 0, gx, G, 0, 1.0f, dw_in, G, 0, 1);
  }
  SIFT_CUDA_CHECK_LAUNCH(LaunchColumnSum(stream_, rows, G, gx, G, partials, db_in));
  SIFT_CUDA_CHECK_LAUNCH(LaunchColumnSum(stream_, rows, G, gh, G, partials, db_rec));
  if (T > 1) {
    // dw_rec += sum over t >= 1 of h_{t-1}^T gh_t: pairs (h row r - 1, gh row r) over all
    // rows r >= 1, with the t = 0 rows of gh (whose r - 1 is another sequence) zeroed.
    SIFT_CUDA_CHECK_LAUNCH(LaunchZeroStepRows(stream_, B, d.time, G, 0, gh));
    GemmBatched(true, false, H, G, rows - 1, 1.0f, h, H, 0, gh + G, G, 0, 1.0f, dw_rec, G, 0, 1);
  }
}

void CudaBackend::AugruForward(const RnnDims& d, const float* x, const float* att, const float* g_w,
                               const float* g_b, const float* c_w, const float* c_b, float* hs,
                               float* cache, float* workspace) {
  if (failed()) return;
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden;
  if (B <= 0 || T <= 0 || H <= 0) return;
  const rnn::AugruForwardLayout l = rnn::MakeAugruForwardLayout(B, T, H);
  float* xg = workspace + l.xg;        // [B*T, 2H] gate pre-activations (no bias)
  float* xc = workspace + l.xc;        // [B*T, H] candidate pre-activations (no bias)
  const float* g_h = g_w + I * 2 * H;  // the h' rows of G
  const float* c_h = c_w + I * H;      // the (gamma h') rows of C
  if (I > 0) {
    GemmBatched(false, false, B * T, 2 * H, I, 1.0f, x, I, 0, g_w, 2 * H, 0, 0.0f, xg, 2 * H, 0, 1);
    GemmBatched(false, false, B * T, H, I, 1.0f, x, I, 0, c_w, H, 0, 0.0f, xc, H, 0, 1);
  } else {
    SIFT_CUDA_CHECK(cudaMemsetAsync(workspace, 0, sizeof(float) * l.floats, stream_));
  }
  for (int t = 0; t < d.time; ++t) {
    if (failed()) return;
    if (t > 0) {  // xg_t += h'_{t-1} G_h
      GemmBatched(false, false, B, 2 * H, H, 1.0f, hs + (t - 1) * H, T * H, 0, g_h, 2 * H, 0, 1.0f,
                  xg + t * 2 * H, T * 2 * H, 0, 1);
    }
    SIFT_CUDA_CHECK_LAUNCH(
        LaunchAugruGatesStep(stream_, B, d.time, d.hidden, t, xg, g_b, hs, cache));
    if (t > 0) {  // xc_t += (gamma h'_{t-1}) C_h, the cache's gh block of step t
      GemmBatched(false, false, B, H, H, 1.0f, cache + t * 4 * H + 3 * H, T * 4 * H, 0, c_h, H, 0,
                  1.0f, xc + t * H, T * H, 0, 1);
    }
    SIFT_CUDA_CHECK_LAUNCH(
        LaunchAugruUpdateStep(stream_, B, d.time, d.hidden, t, xc, c_b, att, hs, cache));
  }
}

void CudaBackend::AugruBackward(const RnnDims& d, const float* x, const float* att,
                                const float* g_w, const float* c_w, const float* hs,
                                const float* cache, const float* dlast, float* dx, float* datt,
                                float* dg_w, float* dg_b, float* dc_w, float* dc_b,
                                float* workspace) {
  if (failed()) return;
  const int64_t B = d.batch, T = d.time, I = d.in, H = d.hidden, rows = B * T;
  if (B <= 0 || T <= 0 || H <= 0) return;
  const rnn::AugruBackwardLayout l = rnn::MakeAugruBackwardLayout(B, T, H);
  float* dg = workspace + l.dg;        // [B*T, 2H] gate pre-activation gradients
  float* dcp = workspace + l.dcp;      // [B*T, H] candidate pre-activation gradients
  float* carry = workspace + l.carry;  // [B, H] gradient w.r.t. h'_{t-1}
  float* dgh = workspace + l.dgh;      // [B, H] gradient w.r.t. gamma h'_{t-1}
  const float* g_h = g_w + I * 2 * H;
  const float* c_h = c_w + I * H;
  auto* partials = static_cast<double*>(
      Scratch(kSumScratchSlot, sizeof(double) * rnn::ColumnSumPartials(rows, 2 * H)));
  if (partials == nullptr) return;
  SIFT_CUDA_CHECK(
      cudaMemcpyAsync(carry, dlast, sizeof(float) * B * H, cudaMemcpyDeviceToDevice, stream_));
  for (int t = d.time - 1; t >= 0; --t) {
    if (failed()) return;
    // Through h'_t = u' h'_{t-1} + (1 - u') c: dcp, the u block of dg, datt, the direct path.
    SIFT_CUDA_CHECK_LAUNCH(LaunchAugruUpdateBackwardStep(stream_, B, d.time, d.hidden, t, att, hs,
                                                         cache, carry, dcp, dg, datt));
    if (t == 0) break;  // gamma multiplies h'_{-1} = 0: nothing flows further
    // Through c = tanh([x; gamma h'] C + c_b): dgh = dcp_t C_h^T, then the reset gate.
    GemmBatched(false, true, B, H, H, 1.0f, dcp + t * H, T * H, 0, c_h, H, 0, 0.0f, dgh, H, 0, 1);
    SIFT_CUDA_CHECK_LAUNCH(
        LaunchAugruGatesBackwardStep(stream_, B, d.time, d.hidden, t, hs, cache, dgh, carry, dg));
    // Through the gates: carry += dg_t G_h^T.
    GemmBatched(false, true, B, H, 2 * H, 1.0f, dg + t * 2 * H, T * 2 * H, 0, g_h, 2 * H, 0, 1.0f,
                carry, H, 0, 1);
  }
  if (failed()) return;
  if (I > 0) {
    if (dx != nullptr) {
      GemmBatched(false, true, rows, I, 2 * H, 1.0f, dg, 2 * H, 0, g_w, 2 * H, 0, 1.0f, dx, I, 0,
                  1);
      GemmBatched(false, true, rows, I, H, 1.0f, dcp, H, 0, c_w, H, 0, 1.0f, dx, I, 0, 1);
    }
    GemmBatched(true, false, I, 2 * H, rows, 1.0f, x, I, 0, dg, 2 * H, 0, 1.0f, dg_w, 2 * H, 0, 1);
    GemmBatched(true, false, I, H, rows, 1.0f, x, I, 0, dcp, H, 0, 1.0f, dc_w, H, 0, 1);
  }
  // dc_w's h rows: the cache's gh = gamma h'_{t-1} is 0 at t = 0, so all rows take part.
  GemmBatched(true, false, H, H, rows, 1.0f, cache + 3 * H, 4 * H, 0, dcp, H, 0, 1.0f, dc_w + I * H,
              H, 0, 1);
  SIFT_CUDA_CHECK_LAUNCH(LaunchColumnSum(stream_, rows, 2 * H, dg, 2 * H, partials, dg_b));
  SIFT_CUDA_CHECK_LAUNCH(LaunchColumnSum(stream_, rows, H, dcp, H, partials, dc_b));
  if (T > 1) {
    // dg_w's h rows += sum over t >= 1 of h'_{t-1}^T dg_t: one GEMM over rows r >= 1 paired with
    // state r - 1, the t = 0 rows of dg zeroed (their r - 1 is another sequence).
    SIFT_CUDA_CHECK_LAUNCH(LaunchZeroStepRows(stream_, B, d.time, 2 * H, 0, dg));
    GemmBatched(true, false, H, 2 * H, rows - 1, 1.0f, hs, H, 0, dg + 2 * H, 2 * H, 0, 1.0f,
                dg_w + I * 2 * H, 2 * H, 0, 1);
  }
}

}  // namespace sift::cuda
