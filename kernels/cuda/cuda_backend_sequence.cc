// CudaBackend's sequence family: embedding gather and segment sum (sorted and deterministic, or
// with float atomics when deterministic() is false), dot attention, top-k mask, damped mean,
// masked softmax, DIEN attention features. Each op enqueues the kernels
// of cuda_sequence_kernels.cu on the compute stream (no synchronisation) and records a failed
// launch for Synchronize(). Device scratch: the segment sum's sort buffers and the attention
// backward's score gradients (slot 0).
#include <cstdint>

#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/cuda_sequence_kernels.h"
#include "kernels/cuda/sequence_index_math.h"

namespace sift::cuda {

void CudaBackend::GatherRows(int64_t n, int dim, const float* rows, const int32_t* inv,
                             const float* mask, float* out, int64_t ld_out) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchGatherRows(stream_, n, dim, rows, inv, mask, out, ld_out));
}

void CudaBackend::SegmentSumRows(int64_t n, int dim, const float* dout, int64_t ld_dout,
                                 const int32_t* inv, const float* mask, int64_t num_unique,
                                 float* drows) {
  if (failed()) return;
  if (n <= 0 || dim <= 0 || num_unique <= 0) return;
  if (!deterministic_) {
    SIFT_CUDA_CHECK_LAUNCH(
        LaunchSegmentSumRowsAtomic(stream_, n, dim, dout, ld_dout, inv, mask, num_unique, drows));
    return;
  }
  int64_t sort_temp_bytes = 0;
  if (!SIFT_CUDA_CHECK(SegmentSumSortTempBytes(n, num_unique, &sort_temp_bytes))) return;
  const seq::SegmentSumLayout layout = seq::PlanSegmentSum(n, num_unique, sort_temp_bytes);
  void* scratch = Scratch(0, layout.total_bytes);
  if (scratch == nullptr) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchSegmentSumRows(stream_, n, dim, dout, ld_dout, inv, mask, num_unique,
                                              drows, scratch, layout));
}

void CudaBackend::DotAttentionForward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                      const float* k, const float* mask, float* alpha, float* out,
                                      int64_t ldout) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(
      LaunchDotAttentionForward(stream_, batch, n, d, q, ldq, k, mask, alpha, out, ldout));
}

void CudaBackend::DotAttentionBackward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                       const float* k, const float* mask, const float* alpha,
                                       const float* dout, int64_t lddout, float* dq, int64_t lddq,
                                       float* dk) {
  if (failed()) return;
  if (batch <= 0 || n <= 0 || d <= 0 || (dq == nullptr && dk == nullptr)) return;
  auto* ds =
      static_cast<double*>(Scratch(0, batch * int64_t{n} * static_cast<int64_t>(sizeof(double))));
  if (ds == nullptr) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchDotAttentionBackward(stream_, batch, n, d, q, ldq, k, mask, alpha,
                                                    dout, lddout, dq, lddq, dk, ds));
}

void CudaBackend::TopKMask(int64_t batch, int n, int k, const float* alpha, float* rho) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchTopKMask(stream_, batch, n, k, alpha, rho));
}

void CudaBackend::DampedMeanForward(int64_t batch, int n, int d, const float* x, const float* rho,
                                    float* out, int64_t ldout) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchDampedMeanForward(stream_, batch, n, d, x, rho, out, ldout));
}

void CudaBackend::DampedMeanBackward(int64_t batch, int n, int d, const float* rho,
                                     const float* dout, int64_t lddout, float* dx) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchDampedMeanBackward(stream_, batch, n, d, rho, dout, lddout, dx));
}

void CudaBackend::MaskedSoftmaxForward(int64_t rows, int n, const float* scores, const float* mask,
                                       float* p) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchMaskedSoftmaxForward(stream_, rows, n, scores, mask, p));
}

void CudaBackend::MaskedSoftmaxBackward(int64_t rows, int n, const float* p, const float* mask,
                                        const float* dp, float* dscores) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchMaskedSoftmaxBackward(stream_, rows, n, p, mask, dp, dscores));
}

void CudaBackend::AttentionFeaturesForward(int64_t batch, int time, int hidden, const float* qp,
                                           const float* h, float* c) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchAttentionFeaturesForward(stream_, batch, time, hidden, qp, h, c));
}

void CudaBackend::AttentionFeaturesBackward(int64_t batch, int time, int hidden, const float* qp,
                                            const float* h, const float* dc, float* dqp,
                                            float* dh) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(
      LaunchAttentionFeaturesBackward(stream_, batch, time, hidden, qp, h, dc, dqp, dh));
}

}  // namespace sift::cuda
