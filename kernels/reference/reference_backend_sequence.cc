// ReferenceBackend's sequence ops: the float instantiations of reference/sequence_ops.h.
#include "kernels/reference/reference_backend.h"
#include "kernels/reference/sequence_ops.h"

namespace sift::kernels {

void ReferenceBackend::AttentionFeaturesForward(int64_t batch, int time, int hidden,
                                                const float* qp, const float* h, float* c) {
  ref::AttentionFeaturesForward<float>(batch, time, hidden, qp, h, c);
}

void ReferenceBackend::AttentionFeaturesBackward(int64_t batch, int time, int hidden,
                                                 const float* qp, const float* h, const float* dc,
                                                 float* dqp, float* dh) {
  ref::AttentionFeaturesBackward<float>(batch, time, hidden, qp, h, dc, dqp, dh);
}

void ReferenceBackend::GruForward(const RnnDims& d, const float* x, const float* w_in,
                                  const float* w_rec, const float* b_in, const float* b_rec,
                                  float* h, float* cache, float* /*workspace*/) {
  ref::GruForward<float>(d, x, w_in, w_rec, b_in, b_rec, h, cache);
}

void ReferenceBackend::GruBackward(const RnnDims& d, const float* x, const float* w_in,
                                   const float* w_rec, const float* h, const float* cache,
                                   const float* dh, float* dx, float* dw_in, float* dw_rec,
                                   float* db_in, float* db_rec, float* workspace) {
  ref::GruBackward<float>(d, x, w_in, w_rec, h, cache, dh, dx, dw_in, dw_rec, db_in, db_rec,
                          workspace);
}

void ReferenceBackend::AugruForward(const RnnDims& d, const float* x, const float* att,
                                    const float* g_w, const float* g_b, const float* c_w,
                                    const float* c_b, float* hs, float* cache,
                                    float* /*workspace*/) {
  ref::AugruForward<float>(d, x, att, g_w, g_b, c_w, c_b, hs, cache);
}

void ReferenceBackend::AugruBackward(const RnnDims& d, const float* x, const float* att,
                                     const float* g_w, const float* c_w, const float* hs,
                                     const float* cache, const float* dlast, float* dx, float* datt,
                                     float* dg_w, float* dg_b, float* dc_w, float* dc_b,
                                     float* workspace) {
  ref::AugruBackward<float>(d, x, att, g_w, c_w, hs, cache, dlast, dx, datt, dg_w, dg_b, dc_w, dc_b,
                            workspace);
}

}  // namespace sift::kernels
