// MirroredBackend: a host-memory Backend over any inner Backend (in particular one whose memory is
// not host memory: cuda), so that the op tests, which pass host pointers, run unchanged on it.
// Each op copies every argument it reads (inputs, in-out/accumulated outputs, forward outputs: so
// row-stride gaps stay as they were) into inner buffers of exactly the extent the op spans (from
// its dims and strides), runs the inner op, copies the outputs back and synchronizes. Null
// pointers and zero extents stay null; workspaces are fresh zeroed inner memory. Over a host inner
// backend each buffer is bracketed by NaN guards, checked after the op: a read past an extent
// gives NaN results, a write past it an error. A failed allocation, copy, guard or inner
// Synchronize() is recorded (the first one: status(), returned and cleared by Synchronize()) and
// reported as a gtest failure naming the op and argument; the op's outputs are then unspecified.
// Thread-compatible, like every Backend. Owns the inner backend.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "common/status.h"
#include "kernels/backend.h"

namespace sift::testing {

class MirroredBackend final : public kernels::Backend {
 public:
  // REQUIRES: inner != nullptr.
  explicit MirroredBackend(std::unique_ptr<kernels::Backend> inner);
  ~MirroredBackend() override;

  kernels::Backend& inner() { return *inner_; }
  // The first failure since the last Synchronize() (OK when none).
  const Status& status() const { return status_; }

  absl::string_view name() const override { return name_; }  // "<inner name>-mirrored"
  int threads() const override { return inner_->threads(); }
  // memory_space(), Allocate, CopyToBackend / CopyToHost: the host defaults.
  Status Synchronize() override;
  Status SetMathMode(kernels::MathMode mode) override { return inner_->SetMathMode(mode); }
  kernels::MathMode math_mode() const override { return inner_->math_mode(); }
  kernels::MathMode AutoMathMode() const override { return inner_->AutoMathMode(); }
  std::string Describe() const override { return inner_->Describe(); }
  std::vector<std::string> Warnings() const override { return inner_->Warnings(); }
  Status SetDeterministic(bool deterministic) override {
    return inner_->SetDeterministic(deterministic);
  }
  bool deterministic() const override { return inner_->deterministic(); }

  void Fill(int64_t n, float value, float* p) override;
  void Copy(int64_t outer, int64_t rows, int64_t cols, const float* src, int64_t src_outer,
            int64_t src_row, float* dst, int64_t dst_outer, int64_t dst_row,
            bool accumulate) override;
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override;
  void DenseForward(const kernels::DenseDims& d, const float* x, int64_t ldx, const float* w,
                    const float* b, const float* slope, float* pre, float* y) override;
  void DenseBackward(const kernels::DenseDims& d, const float* x, int64_t ldx, const float* w,
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
  void FeatureDenseForward(const kernels::FeatureDenseDims& d, const float* qp, const float* h,
                           const float* w, const float* b, const float* slope, float* pre, float* y,
                           float* workspace) override;
  void FeatureDenseBackward(const kernels::FeatureDenseDims& d, const float* qp, const float* h,
                            const float* w, const float* slope, const float* pre, const float* y,
                            const float* dy, float* dqp, float* dh, float* dw, float* db,
                            float* dslope, float* workspace) override;
  void GruForward(const kernels::RnnDims& d, const float* x, const float* w_in, const float* w_rec,
                  const float* b_in, const float* b_rec, float* h, float* cache,
                  float* workspace) override;
  void GruBackward(const kernels::RnnDims& d, const float* x, const float* w_in, const float* w_rec,
                   const float* h, const float* cache, const float* dh, float* dx, float* dw_in,
                   float* dw_rec, float* db_in, float* db_rec, float* workspace) override;
  void AugruForward(const kernels::RnnDims& d, const float* x, const float* att, const float* g_w,
                    const float* g_b, const float* c_w, const float* c_b, float* hs, float* cache,
                    float* workspace) override;
  void AugruBackward(const kernels::RnnDims& d, const float* x, const float* att, const float* g_w,
                     const float* c_w, const float* hs, const float* cache, const float* dlast,
                     float* dx, float* datt, float* dg_w, float* dg_b, float* dc_w, float* dc_b,
                     float* workspace) override;
  double BceWithLogits(int64_t n, const float* logits, const float* labels, float scale,
                       float* dlogits) override;
  double AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits, const float* mask,
                 float scale, float* dpos, float* dneg) override;
  void AdamUpdate(int64_t n, const kernels::AdamHyper& h, int64_t t, const float* grad,
                  float* param, float* m, float* v) override;
  void Scale(int64_t n, float alpha, float* p) override;
  bool AllFinite(int64_t n, const float* p) override;

 private:
  class Call;
  void Record(absl::string_view op, const Status& status);

  std::unique_ptr<kernels::Backend> inner_;
  std::string name_;
  Status status_;
};

// Floats spanned by `rows` rows of `cols` floats, `ld` apart: (rows-1)*ld + cols, 0 when either
// count is <= 0.
int64_t StridedExtent(int64_t rows, int64_t ld, int64_t cols);
// The same with an outer dimension: (outer-1)*outer_stride + (rows-1)*ld + cols, 0 when a count
// is <= 0.
int64_t StridedExtent3(int64_t outer, int64_t outer_stride, int64_t rows, int64_t ld, int64_t cols);

// A backend of the op tests by name: a name registered with RegisterTestBackend or else of
// kernels::CreateBackend, or "<name>-mirrored" for that backend inside a MirroredBackend (e.g.
// "cpu-mirrored", "cuda-mirrored"). The creator's errors otherwise.
StatusOr<std::unique_ptr<kernels::Backend>> CreateTestBackend(absl::string_view spec, int threads);

// Makes CreateTestBackend create `name` with `create` (a test binary that links a backend
// kernels::CreateBackend does not offer in every build: tests/gpu names cuda this way). Call it
// before the tests run (e.g. from a namespace-scope initializer); not thread-safe.
using TestBackendCreator = std::function<StatusOr<std::unique_ptr<kernels::Backend>>(int threads)>;
void RegisterTestBackend(const std::string& name, TestBackendCreator create);

}  // namespace sift::testing
