// The kernels of the CUDA backend's dense family (cuda_backend.cc), as plain launchers: each
// enqueues its kernel(s) on `stream` and returns cudaGetLastError() of the launch (cudaSuccess,
// launching nothing, when the size is 0). Pointers are device memory; shapes follow
// kernels/backend.h (row-major float32). Per-element maths is elementwise_math.h; sums run in
// the fixed orders of cuda_dense_plan.h (no atomics), so results are bit-reproducible.
// Thread-safety: launchers are thread-safe (kernels run in stream order).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda_dense_plan.h"

namespace sift::cuda {

// p[0..n) = value.
cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* p);

// dst[o*dst_outer + r*dst_row + c] (= | +=) src[o*src_outer + r*src_row + c] for o < outer,
// r < rows, c < cols (kernels::Backend::Copy).
cudaError_t LaunchCopy(cudaStream_t stream, int64_t outer, int64_t rows, int64_t cols,
                       const float* src, int64_t src_outer, int64_t src_row, float* dst,
                       int64_t dst_outer, int64_t dst_row, bool accumulate);

// For b < batch, r < rows, c < cols: x = c[b*stride + r*ld + col]: x = beta * x, and 0 when beta
// is 0 (whatever x was: NaN-safe). A GEMM with k == 0.
cudaError_t LaunchScaleMatrices(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols,
                                float beta, float* c, int64_t ld, int64_t stride);

// p[0..n) *= alpha.
cudaError_t LaunchScale(cudaStream_t stream, int64_t n, float alpha, float* p);
// Backend::Dropout: p[i] *= kernels::DropoutFactor(seed, i, rate, scale).
cudaError_t LaunchDropout(cudaStream_t stream, int64_t n, uint64_t seed, float rate, float scale,
                          float* p);

// The dense layer's epilogue over pre [rows, out] holding x W: pre += b (b nullable), then
// y = act(pre) (DenseSigmoid / Prelu with slope[o]; slope read only for kPrelu). y may be pre.
cudaError_t LaunchDenseEpilogue(cudaStream_t stream, int64_t rows, int out, DenseActivation act,
                                const float* b, const float* slope, float* pre, float* y);

// dpre [rows, out] = dy through the activation: kSigmoid from y (DenseSigmoidBackward), kPrelu
// from pre and slope (PreluBackward), kNone a copy.
cudaError_t LaunchDenseActivationBackward(cudaStream_t stream, int64_t rows, int out,
                                          DenseActivation act, const float* pre, const float* y,
                                          const float* slope, const float* dy, float* dpre);

// out[c] += float(sum over r of term(r, c)) for c < cols (ColumnSumTerm, PlanColumnSums' order,
// in double). a, b: [rows, cols] (b read only for kPreluSlope). partial: ColumnPartialDoubles
// doubles of device scratch.
cudaError_t LaunchColumnSums(cudaStream_t stream, ColumnSumTerm term, int64_t rows, int cols,
                             const float* a, const float* b, double* partial, float* out);

// The BCE-with-logits sum (BceWithLogitsTerm, in double, ReduceBlocks' order) into
// partial[ReduceBlocks(n)]; dlogits[i] += BceWithLogitsGrad when dlogits is non-null. partial:
// ReducePartialDoubles(n) doubles. REQUIRES: n > 0 (the caller returns 0 for n == 0).
cudaError_t LaunchBceWithLogits(cudaStream_t stream, int64_t n, const float* logits,
                                const float* labels, float scale, float* dlogits, double* partial);

// The DIEN aux-loss sum over pairs with mask[i] != 0 (mask nullable: all), AuxLossTerm, into
// partial[ReduceBlocks(n)]; dpos / dneg (nullable) += its gradients. REQUIRES: n > 0.
cudaError_t LaunchAuxLoss(cudaStream_t stream, int64_t n, const float* pos_logits,
                          const float* neg_logits, const float* mask, float scale, float* dpos,
                          float* dneg, double* partial);

// partial[ReduceBlocks(n)] = the number of blocks that hold a non-finite p[i] (0.0: all finite).
// REQUIRES: n > 0.
cudaError_t LaunchCountNonFiniteBlocks(cudaStream_t stream, int64_t n, const float* p,
                                       double* partial);

// Adam (AdamParamUpdate) on n parameters with the step size lr_t (AdamStepSize, rounded to float
// on the host).
cudaError_t LaunchAdamUpdate(cudaStream_t stream, int64_t n, float lr_t, float beta1, float beta2,
                             float epsilon, const float* grad, float* param, float* m, float* v);

}  // namespace sift::cuda
