#include "tests/util/mirrored_backend.h"

#include "absl/strings/strip.h"
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sift::testing {

using kernels::AdamHyper;
using kernels::Backend;
using kernels::BackendBuffer;
using kernels::DenseDims;
using kernels::RnnDims;

int64_t StridedExtent(int64_t rows, int64_t ld, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return (rows - 1) * ld + cols;
}

int64_t StridedExtent3(int64_t outer, int64_t outer_stride, int64_t rows, int64_t ld,
                       int64_t cols) {
  if (outer <= 0 || rows <= 0 || cols <= 0) return 0;
  return (outer - 1) * outer_stride + (rows - 1) * ld + cols;
}

namespace {

// Guards of host inner buffers: kGuardBytes of quiet-NaN floats before and after the extent.
constexpr int64_t kGuardBytes = 256;
constexpr uint32_t kGuardWord = 0x7fc00000u;

void FillGuard(char* p) {
  for (int64_t i = 0; i < kGuardBytes; i += 4) std::memcpy(p + i, &kGuardWord, 4);
}
bool GuardIntact(const char* p) {
  for (int64_t i = 0; i < kGuardBytes; i += 4) {
    uint32_t w;
    std::memcpy(&w, p + i, 4);
    if (w != kGuardWord) return false;
  }
  return true;
}

// `bytes` of zeroed host memory between two guards (the data starts 64-byte aligned and ends
// exactly at `bytes`, where the trailing guard begins).
StatusOr<BackendBuffer> AllocateGuarded(int64_t bytes) {
  const size_t total = static_cast<size_t>((2 * kGuardBytes + bytes + 63) / 64 * 64);
  char* base = static_cast<char*>(std::aligned_alloc(64, total));
  if (base == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("guarded host buffer of ", bytes, " bytes"));
  }
  std::memset(base, 0, total);
  FillGuard(base);
  FillGuard(base + kGuardBytes + bytes);
  return BackendBuffer(base + kGuardBytes, bytes,
                       [](void* q) { std::free(static_cast<char*>(q) - kGuardBytes); });
}

}  // namespace

// The argument buffers of one op on the inner backend. Arguments are mapped in order; an
// argument that lies inside one mapped before (DenseForward's pre == y) shares its buffer.
class MirroredBackend::Call {
 public:
  Call(MirroredBackend& mirror, absl::string_view op)
      : mirror_(mirror),
        inner_(*mirror.inner_),
        op_(op),
        guarded_(inner_.memory_space() == kernels::MemorySpace::kHost) {}
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Read-only: copied in.
  template <typename T>
  T* In(const T* host, int64_t count, const char* what) {
    return static_cast<T*>(Map(const_cast<T*>(host), count * int64_t{sizeof(T)}, what, false));
  }
  // Written (overwritten or accumulated): copied in, and back after the op.
  template <typename T>
  T* Out(T* host, int64_t count, const char* what) {
    return static_cast<T*>(Map(host, count * int64_t{sizeof(T)}, what, true));
  }
  // A workspace: zeroed inner memory, neither copied in nor back. Null stays null.
  float* Scratch(const float* host, int64_t count, const char* what) {
    if (host == nullptr || count <= 0 || !status_.ok()) return nullptr;
    StatusOr<BackendBuffer> buf = NewBuffer(count * int64_t{sizeof(float)});
    if (!buf.ok()) {
      Fail(what, buf.status());
      return nullptr;
    }
    regions_.push_back({nullptr, buf->bytes(), std::move(*buf), false, what});
    return regions_.back().buf.floats();
  }

  bool ok() const { return status_.ok(); }

  // Copies the outputs back, checks the guards and synchronizes the inner backend; records the
  // first failure in the mirror.
  void Finish() {
    if (status_.ok()) {
      for (Region& r : regions_) {
        if (!r.copy_back) continue;
        Status s = inner_.CopyToHost(r.buf.data(), r.host, r.bytes);
        if (!s.ok()) {
          Fail(r.what, s);
          break;
        }
      }
    }
    if (guarded_) {
      for (const Region& r : regions_) {
        const char* data = static_cast<const char*>(r.buf.data());
        if (data == nullptr) continue;
        if (!GuardIntact(data - kGuardBytes) || !GuardIntact(data + r.bytes)) {
          Fail(r.what, absl::InternalError("the op wrote outside the argument's extent"));
        }
      }
    }
    Status s = inner_.Synchronize();
    if (!s.ok()) Fail("Synchronize", s);
    if (!status_.ok()) mirror_.Record(op_, status_);
  }

 private:
  struct Region {
    char* host;  // null for workspaces
    int64_t bytes;
    BackendBuffer buf;
    bool copy_back;
    const char* what;
  };

  StatusOr<BackendBuffer> NewBuffer(int64_t bytes) {
    if (guarded_) return AllocateGuarded(bytes);
    return inner_.Allocate(bytes);
  }

  void Fail(const char* what, const Status& s) {
    if (status_.ok()) status_ = Annotate(s, absl::StrCat("argument ", what));
  }

  void* Map(void* host_ptr, int64_t bytes, const char* what, bool copy_back) {
    if (host_ptr == nullptr || bytes <= 0 || !status_.ok()) return nullptr;
    char* host = static_cast<char*>(host_ptr);
    for (Region& r : regions_) {
      if (r.host == nullptr) continue;
      if (host >= r.host && host + bytes <= r.host + r.bytes) {
        r.copy_back |= copy_back;
        return static_cast<char*>(r.buf.data()) + (host - r.host);
      }
      const bool overlap = host < r.host + r.bytes && r.host < host + bytes;
      if (overlap && (copy_back || r.copy_back)) {
        Fail(what, absl::InvalidArgumentError(
                       absl::StrCat("overlaps argument ", r.what, " without lying inside it")));
        return nullptr;
      }
    }
    StatusOr<BackendBuffer> buf = NewBuffer(bytes);
    if (!buf.ok()) {
      Fail(what, buf.status());
      return nullptr;
    }
    Status s = inner_.CopyToBackend(host, buf->data(), bytes);
    if (!s.ok()) {
      Fail(what, s);
      return nullptr;
    }
    regions_.push_back({host, bytes, std::move(*buf), copy_back, what});
    return regions_.back().buf.data();
  }

  MirroredBackend& mirror_;
  Backend& inner_;
  std::string op_;
  const bool guarded_;
  std::vector<Region> regions_;
  Status status_;
};

MirroredBackend::MirroredBackend(std::unique_ptr<Backend> inner)
    : inner_(std::move(inner)), name_(absl::StrCat(inner_->name(), "-mirrored")) {}

MirroredBackend::~MirroredBackend() = default;

void MirroredBackend::Record(absl::string_view op, const Status& status) {
  ADD_FAILURE() << name_ << " " << op << ": " << status;
  if (status_.ok()) status_ = Annotate(status, op);
}

Status MirroredBackend::Synchronize() {
  Status s = inner_->Synchronize();
  if (!s.ok()) Record("Synchronize", s);
  return std::exchange(status_, absl::OkStatus());
}

void MirroredBackend::Fill(int64_t n, float value, float* p) {
  Call c(*this, "Fill");
  float* p_ = c.Out(p, n, "p");
  if (c.ok()) inner_->Fill(n, value, p_);
  c.Finish();
}

void MirroredBackend::Copy(int64_t outer, int64_t rows, int64_t cols, const float* src,
                           int64_t src_outer, int64_t src_row, float* dst, int64_t dst_outer,
                           int64_t dst_row, bool accumulate) {
  Call c(*this, "Copy");
  const float* src_ = c.In(src, StridedExtent3(outer, src_outer, rows, src_row, cols), "src");
  float* dst_ = c.Out(dst, StridedExtent3(outer, dst_outer, rows, dst_row, cols), "dst");
  if (c.ok()) {
    inner_->Copy(outer, rows, cols, src_, src_outer, src_row, dst_, dst_outer, dst_row, accumulate);
  }
  c.Finish();
}

void MirroredBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                           float* c_, int64_t ldc) {
  Call c(*this, "Gemm");
  // A is stored [m,k] ([k,m] when transposed), B [k,n] ([n,k]).
  const float* a_ = c.In(a, trans_a ? StridedExtent(k, lda, m) : StridedExtent(m, lda, k), "a");
  const float* b_ = c.In(b, trans_b ? StridedExtent(n, ldb, k) : StridedExtent(k, ldb, n), "b");
  float* cc = c.Out(c_, StridedExtent(m, ldc, n), "c");
  if (c.ok()) inner_->Gemm(trans_a, trans_b, m, n, k, alpha, a_, lda, b_, ldb, beta, cc, ldc);
  c.Finish();
}

void MirroredBackend::DenseForward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                                   const float* b, const float* slope, float* pre, float* y) {
  Call c(*this, "DenseForward");
  const int64_t out = d.rows * d.out;
  const float* x_ = c.In(x, StridedExtent(d.rows, ldx, d.in), "x");
  const float* w_ = c.In(w, int64_t{d.in} * d.out, "w");
  const float* b_ = c.In(b, d.out, "b");
  const float* s_ = c.In(slope, d.out, "slope");
  float* pre_ = c.Out(pre, out, "pre");
  float* y_ = c.Out(y, out, "y");
  if (c.ok()) inner_->DenseForward(d, x_, ldx, w_, b_, s_, pre_, y_);
  c.Finish();
}

void MirroredBackend::DenseBackward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                                    const float* slope, const float* pre, const float* y,
                                    const float* dy, float* dx, int64_t lddx, float* dw, float* db,
                                    float* dslope, float* workspace) {
  Call c(*this, "DenseBackward");
  const int64_t out = d.rows * d.out, wsize = int64_t{d.in} * d.out;
  const float* x_ = c.In(x, StridedExtent(d.rows, ldx, d.in), "x");
  const float* w_ = c.In(w, wsize, "w");
  const float* s_ = c.In(slope, d.out, "slope");
  const float* pre_ = c.In(pre, out, "pre");
  const float* y_ = c.In(y, out, "y");
  const float* dy_ = c.In(dy, out, "dy");
  float* dx_ = c.Out(dx, StridedExtent(d.rows, lddx, d.in), "dx");
  float* dw_ = c.Out(dw, wsize, "dw");
  float* db_ = c.Out(db, d.out, "db");
  float* ds_ = c.Out(dslope, d.out, "dslope");
  float* ws_ = c.Scratch(workspace, kernels::DenseWorkspaceFloats(d), "workspace");
  if (c.ok()) {
    inner_->DenseBackward(d, x_, ldx, w_, s_, pre_, y_, dy_, dx_, lddx, dw_, db_, ds_, ws_);
  }
  c.Finish();
}

void MirroredBackend::GatherRows(int64_t n, int dim, const float* rows, const int32_t* inv,
                                 const float* mask, float* out, int64_t ld_out) {
  Call c(*this, "GatherRows");
  // rows is [U, dim]; the op reads the rows inv names, so U = max(inv) + 1.
  int64_t num_rows = 0;
  for (int64_t i = 0; inv != nullptr && i < n; ++i) {
    num_rows = std::max<int64_t>(num_rows, int64_t{inv[i]} + 1);
  }
  const float* rows_ = c.In(rows, num_rows * dim, "rows");
  const int32_t* inv_ = c.In(inv, n, "inv");
  const float* mask_ = c.In(mask, n, "mask");
  float* out_ = c.Out(out, StridedExtent(n, ld_out, dim), "out");
  if (c.ok()) inner_->GatherRows(n, dim, rows_, inv_, mask_, out_, ld_out);
  c.Finish();
}

void MirroredBackend::SegmentSumRows(int64_t n, int dim, const float* dout, int64_t ld_dout,
                                     const int32_t* inv, const float* mask, int64_t num_unique,
                                     float* drows) {
  Call c(*this, "SegmentSumRows");
  const float* dout_ = c.In(dout, StridedExtent(n, ld_dout, dim), "dout");
  const int32_t* inv_ = c.In(inv, n, "inv");
  const float* mask_ = c.In(mask, n, "mask");
  float* drows_ = c.Out(drows, num_unique * dim, "drows");
  if (c.ok()) inner_->SegmentSumRows(n, dim, dout_, ld_dout, inv_, mask_, num_unique, drows_);
  c.Finish();
}

void MirroredBackend::DotAttentionForward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                          const float* k, const float* mask, float* alpha,
                                          float* out, int64_t ldout) {
  Call c(*this, "DotAttentionForward");
  const float* q_ = c.In(q, StridedExtent(batch, ldq, d), "q");
  const float* k_ = c.In(k, batch * n * d, "k");
  const float* mask_ = c.In(mask, batch * n, "mask");
  float* alpha_ = c.Out(alpha, batch * n, "alpha");
  float* out_ = c.Out(out, StridedExtent(batch, ldout, d), "out");
  if (c.ok()) inner_->DotAttentionForward(batch, n, d, q_, ldq, k_, mask_, alpha_, out_, ldout);
  c.Finish();
}

void MirroredBackend::DotAttentionBackward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                           const float* k, const float* mask, const float* alpha,
                                           const float* dout, int64_t lddout, float* dq,
                                           int64_t lddq, float* dk) {
  Call c(*this, "DotAttentionBackward");
  const float* q_ = c.In(q, StridedExtent(batch, ldq, d), "q");
  const float* k_ = c.In(k, batch * n * d, "k");
  const float* mask_ = c.In(mask, batch * n, "mask");
  const float* alpha_ = c.In(alpha, batch * n, "alpha");
  const float* dout_ = c.In(dout, StridedExtent(batch, lddout, d), "dout");
  float* dq_ = c.Out(dq, StridedExtent(batch, lddq, d), "dq");
  float* dk_ = c.Out(dk, batch * n * d, "dk");
  if (c.ok()) {
    inner_->DotAttentionBackward(batch, n, d, q_, ldq, k_, mask_, alpha_, dout_, lddout, dq_, lddq,
                                 dk_);
  }
  c.Finish();
}

void MirroredBackend::TopKMask(int64_t batch, int n, int k, const float* alpha, float* rho) {
  Call c(*this, "TopKMask");
  const float* alpha_ = c.In(alpha, batch * n, "alpha");
  float* rho_ = c.Out(rho, batch * n, "rho");
  if (c.ok()) inner_->TopKMask(batch, n, k, alpha_, rho_);
  c.Finish();
}

void MirroredBackend::DampedMeanForward(int64_t batch, int n, int d, const float* x,
                                        const float* rho, float* out, int64_t ldout) {
  Call c(*this, "DampedMeanForward");
  const float* x_ = c.In(x, batch * n * d, "x");
  const float* rho_ = c.In(rho, batch * n, "rho");
  float* out_ = c.Out(out, StridedExtent(batch, ldout, d), "out");
  if (c.ok()) inner_->DampedMeanForward(batch, n, d, x_, rho_, out_, ldout);
  c.Finish();
}

void MirroredBackend::DampedMeanBackward(int64_t batch, int n, int d, const float* rho,
                                         const float* dout, int64_t lddout, float* dx) {
  Call c(*this, "DampedMeanBackward");
  const float* rho_ = c.In(rho, batch * n, "rho");
  const float* dout_ = c.In(dout, StridedExtent(batch, lddout, d), "dout");
  float* dx_ = c.Out(dx, batch * n * d, "dx");
  if (c.ok()) inner_->DampedMeanBackward(batch, n, d, rho_, dout_, lddout, dx_);
  c.Finish();
}

void MirroredBackend::MaskedSoftmaxForward(int64_t rows, int n, const float* scores,
                                           const float* mask, float* p) {
  Call c(*this, "MaskedSoftmaxForward");
  const float* s_ = c.In(scores, rows * n, "scores");
  const float* mask_ = c.In(mask, rows * n, "mask");
  float* p_ = c.Out(p, rows * n, "p");
  if (c.ok()) inner_->MaskedSoftmaxForward(rows, n, s_, mask_, p_);
  c.Finish();
}

void MirroredBackend::MaskedSoftmaxBackward(int64_t rows, int n, const float* p, const float* mask,
                                            const float* dp, float* dscores) {
  Call c(*this, "MaskedSoftmaxBackward");
  const float* p_ = c.In(p, rows * n, "p");
  const float* mask_ = c.In(mask, rows * n, "mask");
  const float* dp_ = c.In(dp, rows * n, "dp");
  float* ds_ = c.Out(dscores, rows * n, "dscores");
  if (c.ok()) inner_->MaskedSoftmaxBackward(rows, n, p_, mask_, dp_, ds_);
  c.Finish();
}

void MirroredBackend::AttentionFeaturesForward(int64_t batch, int time, int hidden, const float* qp,
                                               const float* h, float* c_) {
  Call c(*this, "AttentionFeaturesForward");
  const int64_t bt = batch * time;
  const float* qp_ = c.In(qp, batch * hidden, "qp");
  const float* h_ = c.In(h, bt * hidden, "h");
  float* cc = c.Out(c_, bt * 4 * hidden, "c");
  if (c.ok()) inner_->AttentionFeaturesForward(batch, time, hidden, qp_, h_, cc);
  c.Finish();
}

void MirroredBackend::AttentionFeaturesBackward(int64_t batch, int time, int hidden,
                                                const float* qp, const float* h, const float* dc,
                                                float* dqp, float* dh) {
  Call c(*this, "AttentionFeaturesBackward");
  const int64_t bt = batch * time;
  const float* qp_ = c.In(qp, batch * hidden, "qp");
  const float* h_ = c.In(h, bt * hidden, "h");
  const float* dc_ = c.In(dc, bt * 4 * hidden, "dc");
  float* dqp_ = c.Out(dqp, batch * hidden, "dqp");
  float* dh_ = c.Out(dh, bt * hidden, "dh");
  if (c.ok()) inner_->AttentionFeaturesBackward(batch, time, hidden, qp_, h_, dc_, dqp_, dh_);
  c.Finish();
}

void MirroredBackend::FeatureDenseForward(const kernels::FeatureDenseDims& d, const float* qp,
                                          const float* h, const float* w, const float* b,
                                          const float* slope, float* pre, float* y,
                                          float* workspace) {
  Call c(*this, "FeatureDenseForward");
  const int64_t rows = d.batch * d.time, out = rows * d.out;
  const float* qp_ = c.In(qp, d.batch * d.hidden, "qp");
  const float* h_ = c.In(h, rows * d.hidden, "h");
  const float* w_ = c.In(w, 4 * int64_t{d.hidden} * d.out, "w");
  const float* b_ = c.In(b, d.out, "b");
  const float* s_ = c.In(slope, d.out, "slope");
  float* pre_ = c.Out(pre, out, "pre");
  float* y_ = c.Out(y, out, "y");
  float* ws_ = c.Scratch(workspace, kernels::FeatureDenseWorkspaceFloats(d), "workspace");
  if (c.ok()) inner_->FeatureDenseForward(d, qp_, h_, w_, b_, s_, pre_, y_, ws_);
  c.Finish();
}

void MirroredBackend::FeatureDenseBackward(const kernels::FeatureDenseDims& d, const float* qp,
                                           const float* h, const float* w, const float* slope,
                                           const float* pre, const float* y, const float* dy,
                                           float* dqp, float* dh, float* dw, float* db,
                                           float* dslope, float* workspace) {
  Call c(*this, "FeatureDenseBackward");
  const int64_t rows = d.batch * d.time, out = rows * d.out;
  const float* qp_ = c.In(qp, d.batch * d.hidden, "qp");
  const float* h_ = c.In(h, rows * d.hidden, "h");
  const float* w_ = c.In(w, 4 * int64_t{d.hidden} * d.out, "w");
  const float* s_ = c.In(slope, d.out, "slope");
  const float* pre_ = c.In(pre, out, "pre");
  const float* y_ = c.In(y, out, "y");
  const float* dy_ = c.In(dy, out, "dy");
  float* dqp_ = c.Out(dqp, d.batch * d.hidden, "dqp");
  float* dh_ = c.Out(dh, rows * d.hidden, "dh");
  float* dw_ = c.Out(dw, 4 * int64_t{d.hidden} * d.out, "dw");
  float* db_ = c.Out(db, d.out, "db");
  float* ds_ = c.Out(dslope, d.out, "dslope");
  float* ws_ = c.Scratch(workspace, kernels::FeatureDenseWorkspaceFloats(d), "workspace");
  if (c.ok()) {
    inner_->FeatureDenseBackward(d, qp_, h_, w_, s_, pre_, y_, dy_, dqp_, dh_, dw_, db_, ds_, ws_);
  }
  c.Finish();
}

void MirroredBackend::GruForward(const RnnDims& d, const float* x, const float* w_in,
                                 const float* w_rec, const float* b_in, const float* b_rec,
                                 float* h, float* cache, float* workspace) {
  Call c(*this, "GruForward");
  const int64_t bt = d.batch * d.time, H = d.hidden, G = 3 * H;
  const float* x_ = c.In(x, bt * d.in, "x");
  const float* w_in_ = c.In(w_in, d.in * G, "w_in");
  const float* w_rec_ = c.In(w_rec, H * G, "w_rec");
  const float* b_in_ = c.In(b_in, G, "b_in");
  const float* b_rec_ = c.In(b_rec, G, "b_rec");
  float* h_ = c.Out(h, bt * H, "h");
  float* cache_ = c.Out(cache, kernels::GruCacheFloats(d), "cache");
  float* ws_ = c.Scratch(workspace, kernels::GruWorkspaceFloats(d), "workspace");
  if (c.ok()) inner_->GruForward(d, x_, w_in_, w_rec_, b_in_, b_rec_, h_, cache_, ws_);
  c.Finish();
}

void MirroredBackend::GruBackward(const RnnDims& d, const float* x, const float* w_in,
                                  const float* w_rec, const float* h, const float* cache,
                                  const float* dh, float* dx, float* dw_in, float* dw_rec,
                                  float* db_in, float* db_rec, float* workspace) {
  Call c(*this, "GruBackward");
  const int64_t bt = d.batch * d.time, H = d.hidden, G = 3 * H;
  const float* x_ = c.In(x, bt * d.in, "x");
  const float* w_in_ = c.In(w_in, d.in * G, "w_in");
  const float* w_rec_ = c.In(w_rec, H * G, "w_rec");
  const float* h_ = c.In(h, bt * H, "h");
  const float* cache_ = c.In(cache, kernels::GruCacheFloats(d), "cache");
  const float* dh_ = c.In(dh, bt * H, "dh");
  float* dx_ = c.Out(dx, bt * d.in, "dx");
  float* dw_in_ = c.Out(dw_in, d.in * G, "dw_in");
  float* dw_rec_ = c.Out(dw_rec, H * G, "dw_rec");
  float* db_in_ = c.Out(db_in, G, "db_in");
  float* db_rec_ = c.Out(db_rec, G, "db_rec");
  float* ws_ = c.Scratch(workspace, kernels::GruWorkspaceFloats(d), "workspace");
  if (c.ok()) {
    inner_->GruBackward(d, x_, w_in_, w_rec_, h_, cache_, dh_, dx_, dw_in_, dw_rec_, db_in_,
                        db_rec_, ws_);
  }
  c.Finish();
}

void MirroredBackend::AugruForward(const RnnDims& d, const float* x, const float* att,
                                   const float* g_w, const float* g_b, const float* c_w,
                                   const float* c_b, float* hs, float* cache, float* workspace) {
  Call c(*this, "AugruForward");
  const int64_t bt = d.batch * d.time, H = d.hidden, K = d.in + H;
  const float* x_ = c.In(x, bt * d.in, "x");
  const float* att_ = c.In(att, bt, "att");
  const float* g_w_ = c.In(g_w, K * 2 * H, "g_w");
  const float* g_b_ = c.In(g_b, 2 * H, "g_b");
  const float* c_w_ = c.In(c_w, K * H, "c_w");
  const float* c_b_ = c.In(c_b, H, "c_b");
  float* hs_ = c.Out(hs, bt * H, "hs");
  float* cache_ = c.Out(cache, kernels::AugruCacheFloats(d), "cache");
  float* ws_ = c.Scratch(workspace, kernels::AugruWorkspaceFloats(d), "workspace");
  if (c.ok()) inner_->AugruForward(d, x_, att_, g_w_, g_b_, c_w_, c_b_, hs_, cache_, ws_);
  c.Finish();
}

void MirroredBackend::AugruBackward(const RnnDims& d, const float* x, const float* att,
                                    const float* g_w, const float* c_w, const float* hs,
                                    const float* cache, const float* dlast, float* dx, float* datt,
                                    float* dg_w, float* dg_b, float* dc_w, float* dc_b,
                                    float* workspace) {
  Call c(*this, "AugruBackward");
  const int64_t bt = d.batch * d.time, H = d.hidden, K = d.in + H;
  const float* x_ = c.In(x, bt * d.in, "x");
  const float* att_ = c.In(att, bt, "att");
  const float* g_w_ = c.In(g_w, K * 2 * H, "g_w");
  const float* c_w_ = c.In(c_w, K * H, "c_w");
  const float* hs_ = c.In(hs, bt * H, "hs");
  const float* cache_ = c.In(cache, kernels::AugruCacheFloats(d), "cache");
  const float* dlast_ = c.In(dlast, d.batch * H, "dlast");
  float* dx_ = c.Out(dx, bt * d.in, "dx");
  float* datt_ = c.Out(datt, bt, "datt");
  float* dg_w_ = c.Out(dg_w, K * 2 * H, "dg_w");
  float* dg_b_ = c.Out(dg_b, 2 * H, "dg_b");
  float* dc_w_ = c.Out(dc_w, K * H, "dc_w");
  float* dc_b_ = c.Out(dc_b, H, "dc_b");
  float* ws_ = c.Scratch(workspace, kernels::AugruWorkspaceFloats(d), "workspace");
  if (c.ok()) {
    inner_->AugruBackward(d, x_, att_, g_w_, c_w_, hs_, cache_, dlast_, dx_, datt_, dg_w_, dg_b_,
                          dc_w_, dc_b_, ws_);
  }
  c.Finish();
}

double MirroredBackend::BceWithLogits(int64_t n, const float* logits, const float* labels,
                                      float scale, float* dlogits) {
  Call c(*this, "BceWithLogits");
  const float* l_ = c.In(logits, n, "logits");
  const float* y_ = c.In(labels, n, "labels");
  float* dl_ = c.Out(dlogits, n, "dlogits");
  double loss = std::numeric_limits<double>::quiet_NaN();
  if (c.ok()) loss = inner_->BceWithLogits(n, l_, y_, scale, dl_);
  c.Finish();
  return loss;
}

double MirroredBackend::AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits,
                                const float* mask, float scale, float* dpos, float* dneg) {
  Call c(*this, "AuxLoss");
  const float* lp_ = c.In(pos_logits, n, "pos_logits");
  const float* ln_ = c.In(neg_logits, n, "neg_logits");
  const float* mask_ = c.In(mask, n, "mask");
  float* dp_ = c.Out(dpos, n, "dpos");
  float* dn_ = c.Out(dneg, n, "dneg");
  double loss = std::numeric_limits<double>::quiet_NaN();
  if (c.ok()) loss = inner_->AuxLoss(n, lp_, ln_, mask_, scale, dp_, dn_);
  c.Finish();
  return loss;
}

void MirroredBackend::AdamUpdate(int64_t n, const AdamHyper& h, int64_t t, const float* grad,
                                 float* param, float* m, float* v) {
  Call c(*this, "AdamUpdate");
  const float* g_ = c.In(grad, n, "grad");
  float* p_ = c.Out(param, n, "param");
  float* m_ = c.Out(m, n, "m");
  float* v_ = c.Out(v, n, "v");
  if (c.ok()) inner_->AdamUpdate(n, h, t, g_, p_, m_, v_);
  c.Finish();
}

void MirroredBackend::Scale(int64_t n, float alpha, float* p) {
  Call c(*this, "Scale");
  float* p_ = c.Out(p, n, "p");
  if (c.ok()) inner_->Scale(n, alpha, p_);
  c.Finish();
}

bool MirroredBackend::AllFinite(int64_t n, const float* p) {
  Call c(*this, "AllFinite");
  const float* p_ = c.In(p, n, "p");
  bool finite = false;
  if (c.ok()) finite = inner_->AllFinite(n, p_);
  c.Finish();
  return finite;
}

namespace {

std::map<std::string, TestBackendCreator>& Registry() {
  static auto* registry = new std::map<std::string, TestBackendCreator>();
  return *registry;
}

StatusOr<std::unique_ptr<Backend>> CreateNamed(absl::string_view name, int threads) {
  auto it = Registry().find(std::string(name));
  if (it != Registry().end()) return it->second(threads);
  // "cpu-<isa>": the CPU backend's variant for that ISA (FAILED_PRECONDITION naming the missing
  // features on a CPU without it); "cpu-bf16": the CPU backend in MathMode::kBf16.
  absl::string_view rest = name;
  if (absl::ConsumePrefix(&rest, "cpu-")) {
    if (rest == "bf16") {
      std::unique_ptr<Backend> be = kernels::CreateCpuBackend(threads);
      SIFT_RETURN_IF_ERROR(be->SetMathMode(kernels::MathMode::kBf16));
      return be;
    }
    SIFT_ASSIGN_OR_RETURN(const kernels::CpuIsa isa, kernels::ParseCpuIsa(rest));
    kernels::CpuBackendOptions options;
    options.threads = threads;
    options.isa = isa;
    return kernels::CreateCpuBackend(options);
  }
  return kernels::CreateBackend(name, threads);
}

}  // namespace

void RegisterTestBackend(const std::string& name, TestBackendCreator create) {
  Registry()[name] = std::move(create);
}

StatusOr<std::unique_ptr<Backend>> CreateTestBackend(absl::string_view spec, int threads) {
  constexpr absl::string_view kSuffix = "-mirrored";
  if (!absl::EndsWith(spec, kSuffix)) return CreateNamed(spec, threads);
  spec.remove_suffix(kSuffix.size());
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> inner, CreateNamed(spec, threads));
  return std::unique_ptr<Backend>(std::make_unique<MirroredBackend>(std::move(inner)));
}

}  // namespace sift::testing
