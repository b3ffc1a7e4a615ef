// CpuBackend: the fast CPU implementation of kernels/backend.h — OpenBLAS (cblas_sgemm) for every
// GEMM, vectorisable loops (contiguous inner dimensions, no branches in hot loops) for the
// element-wise work, a ThreadPool over batch rows for the rest, no allocation inside an op.
// Deterministic for a fixed thread count: work is split by rows into fixed chunks, and reductions
// over rows (bias and slope gradients, segment sums) use a fixed partition and a fixed combine
// order. Owns its thread pool; used by one thread at a time.
//
// The methods are defined in two files: cpu_backend_dense.cc (memory, GEMM, dense, embeddings,
// attention, softmax, losses, Adam) and cpu_backend_sequence.cc (attention features, GRU, AUGRU).
#pragma once

#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/backend.h"

namespace sift::kernels {

class CpuBackend final : public Backend {
 public:
  // threads <= 0: every available CPU. Sets OpenBLAS to one thread: GEMMs are split over the
  // pool instead (parallel_gemm.h).
  explicit CpuBackend(int threads);
  absl::string_view name() const override { return "cpu"; }
  int threads() const override { return pool_.num_threads(); }

  void Fill(int64_t n, float value, float* p) override;
  void Copy(int64_t outer, int64_t rows, int64_t cols, const float* src, int64_t src_outer,
            int64_t src_row, float* dst, int64_t dst_outer, int64_t dst_row,
            bool accumulate) override;
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override;
  void DenseForward(const DenseDims& d, const float* x, int64_t ldx, const float* w, const float* b,
                    const float* slope, float* pre, float* y) override;
  void DenseBackward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                     const float* slope, const float* pre, const float* y, const float* dy,
                     float* dx, int64_t lddx, float* dw, float* db, float* dslope,
                     float* workspace) override;
  void GatherRows(int64_t n, int dim, const float* rows, const int32_t* inv, const float* mask,
                  float* out, int64_t ld_out) override;
  void SegmentSumRows(int64_t n, int dim, const float* dout, int64_t ld_dout, const int32_t* inv,
                      const float* mask, int64_t num_unique, float* drows) override;
  void DotAttentionForward(int64_t batch, int n, int d, const float* q, int64_t ldq, const float* k,
                           const float* mask, float* alpha, float* out, int64_t ldout) override;
  void DotAttentionBackward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                            const float* k, const float* mask, const float* alpha,
                            const float* dout, int64_t lddout, float* dq, int64_t lddq,
                            float* dk) override;
  void TopKMask(int64_t batch, int n, int k, const float* alpha, float* rho) override;
  void DampedMeanForward(int64_t batch, int n, int d, const float* x, const float* rho, float* out,
                         int64_t ldout) override;
  void DampedMeanBackward(int64_t batch, int n, int d, const float* rho, const float* dout,
                          int64_t lddout, float* dx) override;
  void MaskedSoftmaxForward(int64_t rows, int n, const float* scores, const float* mask,
                            float* p) override;
  void MaskedSoftmaxBackward(int64_t rows, int n, const float* p, const float* mask,
                             const float* dp, float* dscores) override;
  void AttentionFeaturesForward(int64_t batch, int time, int hidden, const float* qp,
                                const float* h, float* c) override;
  void AttentionFeaturesBackward(int64_t batch, int time, int hidden, const float* qp,
                                 const float* h, const float* dc, float* dqp, float* dh) override;
  void GruForward(const RnnDims& d, const float* x, const float* w_in, const float* w_rec,
                  const float* b_in, const float* b_rec, float* h, float* cache,
                  float* workspace) override;
  void GruBackward(const RnnDims& d, const float* x, const float* w_in, const float* w_rec,
                   const float* h, const float* cache, const float* dh, float* dx, float* dw_in,
                   float* dw_rec, float* db_in, float* db_rec, float* workspace) override;
  void AugruForward(const RnnDims& d, const float* x, const float* att, const float* g_w,
                    const float* g_b, const float* c_w, const float* c_b, float* hs, float* cache,
                    float* workspace) override;
  void AugruBackward(const RnnDims& d, const float* x, const float* att, const float* g_w,
                     const float* c_w, const float* hs, const float* cache, const float* dlast,
                     float* dx, float* datt, float* dg_w, float* dg_b, float* dc_w, float* dc_b,
                     float* workspace) override;
  double BceWithLogits(int64_t n, const float* logits, const float* labels, float scale,
                       float* dlogits) override;
  double AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits, const float* mask,
                 float scale, float* dpos, float* dneg) override;
  void AdamUpdate(int64_t n, const AdamHyper& h, int64_t t, const float* grad, float* param,
                  float* m, float* v) override;

 private:
  ThreadPool pool_;
  // Per-thread scratch for reductions (sized on first use by the op that needs it, outside hot
  // loops; grows only).
  std::vector<double> reduce_scratch_;
  std::vector<float> reduce_scratch_f_;
};

}  // namespace sift::kernels
