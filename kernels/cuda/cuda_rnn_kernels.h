// Kernel launchers of the CUDA recurrences (cuda_backend_rnn.cc): the fused element-wise steps of
// the GRU and AUGRU between their cuBLAS GEMMs (the bias gradients' column sums are the dense
// family's LaunchColumnSums, cuda_dense_kernels.h). Each step kernel runs rnn_steps.h's element
// function (elementwise_math.h's unit steps) in a grid-stride loop; planning (grids) is
// rnn_plan.h. Every launcher
// enqueues on `stream` and returns cudaGetLastError() of its launch, or cudaSuccess when there is
// nothing to do (a zero size). Row-major float views in device memory; `row` = b * T + t as in
// kernels/backend.h. No Abseil here (nvcc compiles the .cu). Thread-safety: as CUDA's for the
// stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sift::cuda {

// GRU forward step t for all B rows (one thread per (b, j), j < H): with xw [B*T, 3H] = x W_in
// (no bias) and hu [B, 3H] = h_{t-1} W_rec (nullptr at t = 0: the zero state), computes
// GruUnitForward(xw + b_in, hu + b_rec, prev = h_{t-1} or 0) and writes h[row*H + j] and the
// cache row [z | r | n | hn] (4H per row).
cudaError_t LaunchGruForwardStep(cudaStream_t stream, int64_t batch, int64_t time, int64_t hidden,
                                 int64_t t, const float* xw, const float* hu, const float* b_in,
                                 const float* b_rec, float* h, float* cache);

// GRU backward step t (one thread per (b, j)): dht = dh[row] + carry[b] (carry [B, H]);
// GruUnitBackward with prev = h_{t-1} (0 at t = 0); writes gx row [daz | dar | dan], gh row
// [daz | dar | dhn] (3H each, rows of [B*T, 3H]) and carry[b] = dht * z (the direct path).
cudaError_t LaunchGruBackwardStep(cudaStream_t stream, int64_t batch, int64_t time, int64_t hidden,
                                  int64_t t, const float* h, const float* cache, const float* dh,
                                  float* carry, float* gx, float* gh);

// AUGRU phase 1 of step t (one thread per (b, k)): pre = xg[row] + g_b (xg [B*T, 2H] already
// holds x G_x + h' G_h); AugruUnitGates with prev = hs[row - 1] (0 at t = 0) writes the cache's
// gamma, u and gh = gamma * prev.
cudaError_t LaunchAugruGatesStep(cudaStream_t stream, int64_t batch, int64_t time, int64_t hidden,
                                 int64_t t, const float* xg, const float* g_b, const float* hs,
                                 float* cache);

// AUGRU phase 2 of step t (one thread per (b, j)): pre_c = xc[row] + c_b (xc [B*T, H] already
// holds x C_x + gh C_h); AugruUnitUpdate with att[row] writes the cache's c and hs[row].
cudaError_t LaunchAugruUpdateStep(cudaStream_t stream, int64_t batch, int64_t time, int64_t hidden,
                                  int64_t t, const float* xc, const float* c_b, const float* att,
                                  float* hs, float* cache);

// AUGRU backward through phase 2 of step t (one block per b): AugruUnitUpdateBackward with dht =
// carry[b] (carry [B, H]) writes dcp[row] (dcp [B*T, H]), the u block of dg[row] (dg [B*T, 2H]),
// carry[b] = dht * u'; at t = 0 also the gamma block of dg[row] = 0 (gamma multiplies h'_{-1} =
// 0). When datt is non-null: datt[row] += float(-sum_j duk_j u_j), summed in double in a fixed
// order.
cudaError_t LaunchAugruUpdateBackwardStep(cudaStream_t stream, int64_t batch, int64_t time,
                                          int64_t hidden, int64_t t, const float* att,
                                          const float* hs, const float* cache, float* carry,
                                          float* dcp, float* dg, float* datt);

// AUGRU backward through phase 1 of step t >= 1 (one thread per (b, k)): with dgh [B, H] =
// dcp_t C_h^T, AugruUnitGatesBackward writes the gamma block of dg[row] and carry[b] (+= dgh *
// gamma; the caller then adds dg_t G_h^T).
cudaError_t LaunchAugruGatesBackwardStep(cudaStream_t stream, int64_t batch, int64_t time,
                                         int64_t hidden, int64_t t, const float* hs,
                                         const float* cache, const float* dgh, float* carry,
                                         float* dg);

// Zeroes row b * T + t of m [B*T, width] for every b (the t = 0 rows of a gradient before the
// weight GEMM that pairs row r with state r - 1, which at t = 0 belongs to another sequence).
cudaError_t LaunchZeroStepRows(cudaStream_t stream, int64_t batch, int64_t time, int64_t width,
                               int64_t t, float* m);

}  // namespace sift::cuda
