// Host-testable planning of the CUDA recurrences (cuda_backend_rnn.cc, cuda_rnn_kernels.cu): how
// the op's workspace is carved up (every layout fits kernels/backend.h's *WorkspaceFloats), how
// many blocks a grid-stride launch gets. (The bias gradients' fixed-order column sums are the dense
// family's: cuda_dense_plan.h's PlanColumnSums, launched by LaunchColumnSums.) Header-only, no
// CUDA or Abseil include (g++ compiles it for CPU tests, nvcc for kernels). Pure functions,
// thread-safe.
#pragma once

#include <cstdint>

#include "kernels/cuda/elementwise_math.h"  // SIFT_HD

namespace sift::cuda::rnn {

// Threads per block of the element-wise step kernels (one thread per element), and of the
// kernels with one block per batch row (a power of two: their tree reduction halves it).
inline constexpr int kThreads = 256;
inline constexpr int kRowThreads = 128;
// Grid-stride loops cover what a grid of this many blocks does not (grid.x allows 2^31 - 1).
inline constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// Blocks for n elements at `threads` per block: ceil(n / threads) capped at kMaxBlocks, 0 when
// n <= 0 (the launcher then launches nothing). REQUIRES: threads > 0.
SIFT_HD int64_t GridBlocks(int64_t n, int threads) {
  if (n <= 0) return 0;
  const int64_t blocks = (n + threads - 1) / threads;
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

// ---- Workspace layouts (offsets in floats into the op's workspace) ------------------------------
// With B = batch, T = time, H = hidden, BT = B * T rows of the [B, T, ...] tensors.
// GruForward: xw [BT, 3H] = x W_in (no bias), hu [B, 3H] = h_{t-1} W_rec of the current step.
struct GruForwardLayout {
  int64_t xw = 0, hu = 0, floats = 0;
};
SIFT_HD GruForwardLayout MakeGruForwardLayout(int64_t batch, int64_t time, int64_t hidden) {
  GruForwardLayout l;
  l.hu = batch * time * 3 * hidden;
  l.floats = l.hu + batch * 3 * hidden;
  return l;
}
// GruBackward: gx [BT, 3H] input-side gate gradients, gh [BT, 3H] recurrent-side ones, carry [B, H]
// the gradient w.r.t. h_{t-1}.
struct GruBackwardLayout {
  int64_t gx = 0, gh = 0, carry = 0, floats = 0;
};
SIFT_HD GruBackwardLayout MakeGruBackwardLayout(int64_t batch, int64_t time, int64_t hidden) {
  GruBackwardLayout l;
  l.gh = batch * time * 3 * hidden;
  l.carry = 2 * l.gh;
  l.floats = l.carry + batch * hidden;
  return l;
}
// AugruForward: xg [BT, 2H] gate pre-activations (x G_x, then + h' G_h at step t), xc [BT, H]
// candidate pre-activations (x C_x, then + (gamma h') C_h).
struct AugruForwardLayout {
  int64_t xg = 0, xc = 0, floats = 0;
};
SIFT_HD AugruForwardLayout MakeAugruForwardLayout(int64_t batch, int64_t time, int64_t hidden) {
  AugruForwardLayout l;
  l.xc = batch * time * 2 * hidden;
  l.floats = l.xc + batch * time * hidden;
  return l;
}
// AugruBackward: dg [BT, 2H] gate pre-activation gradients, dcp [BT, H] candidate ones, carry
// [B, H] the gradient w.r.t. h'_{t-1}, dgh [B, H] the gradient w.r.t. gamma * h'_{t-1}.
struct AugruBackwardLayout {
  int64_t dg = 0, dcp = 0, carry = 0, dgh = 0, floats = 0;
};
SIFT_HD AugruBackwardLayout MakeAugruBackwardLayout(int64_t batch, int64_t time, int64_t hidden) {
  AugruBackwardLayout l;
  l.dcp = batch * time * 2 * hidden;
  l.carry = l.dcp + batch * time * hidden;
  l.dgh = l.carry + batch * hidden;
  l.floats = l.dgh + batch * hidden;
  return l;
}

}  // namespace sift::cuda::rnn
