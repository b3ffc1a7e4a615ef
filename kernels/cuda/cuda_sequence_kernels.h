// Kernel launchers of CudaBackend's sequence family (cuda_backend_sequence.cc): embedding gather
// and deterministic segment sum, dot attention, top-k mask, damped mean, masked softmax and DIEN
// attention features. Each enqueues its kernels on `stream` and returns cudaGetLastError() of the
// launches (cudaSuccess without a launch when there is nothing to do); arguments and their
// contracts are those of the same-named op in kernels/backend.h (device pointers, row-major,
// gradients accumulate). No float atomics except in LaunchSegmentSumRowsAtomic (the backend's
// non-deterministic option): every output element is written by one thread, and every reduction
// has a fixed order, so results are bit-identical run to run.
// Thread-safety: as the stream's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/sequence_index_math.h"

namespace sift::cuda {

cudaError_t LaunchGatherRows(cudaStream_t stream, int64_t n, int dim, const float* rows,
                             const int32_t* inv, const float* mask, float* out, int64_t ld_out);

// The segment sum's CUB radix-sort temporary storage for n rows (no launch).
cudaError_t SegmentSumSortTempBytes(int64_t n, int64_t num_unique, int64_t* bytes);
// Sorts (key, i) pairs stably by key (seq::SegmentSumKey), finds each unique key's segment by
// binary search, then one thread per (key, column) adds its rows in increasing i to drows.
// `scratch` holds seq::PlanSegmentSum(n, num_unique, sort temp bytes) = `layout`.
cudaError_t LaunchSegmentSumRows(cudaStream_t stream, int64_t n, int dim, const float* dout,
                                 int64_t ld_dout, const int32_t* inv, const float* mask,
                                 int64_t num_unique, float* drows, void* scratch,
                                 const seq::SegmentSumLayout& layout);
// The same sum without the sort: one thread per (row i, column c) with a key (seq::SegmentSumKey
// != 0) atomically adds dout[i, c] * (mask ? mask[i] : 1) to drows[inv[i], c]. No scratch; a
// key's terms are added in whatever order the atomics land (not bit-reproducible).
cudaError_t LaunchSegmentSumRowsAtomic(cudaStream_t stream, int64_t n, int dim, const float* dout,
                                       int64_t ld_dout, const int32_t* inv, const float* mask,
                                       int64_t num_unique, float* drows);

cudaError_t LaunchDotAttentionForward(cudaStream_t stream, int64_t batch, int n, int d,
                                      const float* q, int64_t ldq, const float* k,
                                      const float* mask, float* alpha, float* out, int64_t ldout);
// `ds` is device scratch of batch * n doubles (the score gradients).
cudaError_t LaunchDotAttentionBackward(cudaStream_t stream, int64_t batch, int n, int d,
                                       const float* q, int64_t ldq, const float* k,
                                       const float* mask, const float* alpha, const float* dout,
                                       int64_t lddout, float* dq, int64_t lddq, float* dk,
                                       double* ds);

cudaError_t LaunchTopKMask(cudaStream_t stream, int64_t batch, int n, int k, const float* alpha,
                           float* rho);

cudaError_t LaunchDampedMeanForward(cudaStream_t stream, int64_t batch, int n, int d,
                                    const float* x, const float* rho, float* out, int64_t ldout);
cudaError_t LaunchDampedMeanBackward(cudaStream_t stream, int64_t batch, int n, int d,
                                     const float* rho, const float* dout, int64_t lddout,
                                     float* dx);

cudaError_t LaunchMaskedSoftmaxForward(cudaStream_t stream, int64_t rows, int n,
                                       const float* scores, const float* mask, float* p);
cudaError_t LaunchMaskedSoftmaxBackward(cudaStream_t stream, int64_t rows, int n, const float* p,
                                        const float* mask, const float* dp, float* dscores);

cudaError_t LaunchAttentionFeaturesForward(cudaStream_t stream, int64_t batch, int time, int hidden,
                                           const float* qp, const float* h, float* c);
cudaError_t LaunchAttentionFeaturesBackward(cudaStream_t stream, int64_t batch, int time,
                                            int hidden, const float* qp, const float* h,
                                            const float* dc, float* dqp, float* dh);

}  // namespace sift::cuda
