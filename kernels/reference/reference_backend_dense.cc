// ReferenceBackend: memory, GEMM, dense, embedding, attention, softmax, loss and Adam ops — the
// float instantiations of the loops in reference/dense_ops.h.
#include <memory>

#include "kernels/reference/dense_ops.h"
#include "kernels/reference/reference_backend.h"

namespace sift::kernels {

std::unique_ptr<Backend> CreateReferenceBackend() { return std::make_unique<ReferenceBackend>(); }

void ReferenceBackend::Fill(int64_t n, float value, float* p) { reference::Fill(n, value, p); }

void ReferenceBackend::Copy(int64_t outer, int64_t rows, int64_t cols, const float* src,
                            int64_t src_outer, int64_t src_row, float* dst, int64_t dst_outer,
                            int64_t dst_row, bool accumulate) {
  reference::Copy(outer, rows, cols, src, src_outer, src_row, dst, dst_outer, dst_row, accumulate);
}

void ReferenceBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float beta, float* c, int64_t ldc) {
  reference::Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void ReferenceBackend::DenseForward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                                    const float* b, const float* slope, float* pre, float* y) {
  reference::DenseForward(d, x, ldx, w, b, slope, pre, y);
}

void ReferenceBackend::DenseBackward(const DenseDims& d, const float* x, int64_t ldx,
                                     const float* w, const float* slope, const float* pre,
                                     const float* y, const float* dy, float* dx, int64_t lddx,
                                     float* dw, float* db, float* dslope, float* workspace) {
  reference::DenseBackward(d, x, ldx, w, slope, pre, y, dy, dx, lddx, dw, db, dslope, workspace);
}

void ReferenceBackend::GatherRows(int64_t n, int dim, const float* rows, const int32_t* inv,
                                  const float* mask, float* out, int64_t ld_out) {
  reference::GatherRows(n, dim, rows, inv, mask, out, ld_out);
}

void ReferenceBackend::SegmentSumRows(int64_t n, int dim, const float* dout, int64_t ld_dout,
                                      const int32_t* inv, const float* mask, int64_t num_unique,
                                      float* drows) {
  reference::SegmentSumRows(n, dim, dout, ld_dout, inv, mask, num_unique, drows);
}

void ReferenceBackend::DotAttentionForward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                           const float* k, const float* mask, float* alpha,
                                           float* out, int64_t ldout) {
  reference::DotAttentionForward(batch, n, d, q, ldq, k, mask, alpha, out, ldout);
}

void ReferenceBackend::DotAttentionBackward(int64_t batch, int n, int d, const float* q,
                                            int64_t ldq, const float* k, const float* mask,
                                            const float* alpha, const float* dout, int64_t lddout,
                                            float* dq, int64_t lddq, float* dk) {
  reference::DotAttentionBackward(batch, n, d, q, ldq, k, mask, alpha, dout, lddout, dq, lddq, dk);
}

void ReferenceBackend::TopKMask(int64_t batch, int n, int k, const float* alpha, float* rho) {
  reference::TopKMask(batch, n, k, alpha, rho);
}

void ReferenceBackend::DampedMeanForward(int64_t batch, int n, int d, const float* x,
                                         const float* rho, float* out, int64_t ldout) {
  reference::DampedMeanForward(batch, n, d, x, rho, out, ldout);
}

void ReferenceBackend::DampedMeanBackward(int64_t batch, int n, int d, const float* rho,
                                          const float* dout, int64_t lddout, float* dx) {
  reference::DampedMeanBackward(batch, n, d, rho, dout, lddout, dx);
}

void ReferenceBackend::MaskedSoftmaxForward(int64_t rows, int n, const float* scores,
                                            const float* mask, float* p) {
  reference::MaskedSoftmaxForward(rows, n, scores, mask, p);
}

void ReferenceBackend::MaskedSoftmaxBackward(int64_t rows, int n, const float* p, const float* mask,
                                             const float* dp, float* dscores) {
  reference::MaskedSoftmaxBackward(rows, n, p, mask, dp, dscores);
}

double ReferenceBackend::BceWithLogits(int64_t n, const float* logits, const float* labels,
                                       float scale, float* dlogits) {
  return reference::BceWithLogits(n, logits, labels, scale, dlogits);
}

double ReferenceBackend::AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits,
                                 const float* mask, float scale, float* dpos, float* dneg) {
  return reference::AuxLoss(n, pos_logits, neg_logits, mask, scale, dpos, dneg);
}

void ReferenceBackend::AdamUpdate(int64_t n, const AdamHyper& h, int64_t t, const float* grad,
                                  float* param, float* m, float* v) {
  reference::AdamUpdate(n, h, t, grad, param, m, v);
}

}  // namespace sift::kernels
