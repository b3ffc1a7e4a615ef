// The op API of sift's dense model: every computation SIM, DIEN and DIN need (model-spec 3, 4,
// 5.1, 8), forward and backward, as pure functions over raw float views with the workspace passed
// in. One abstract Backend, several implementations: reference/ (naive loops, the test oracle,
// never optimised), cpu/ (oneDNN + a thread pool), cuda/ (its own target: cuBLAS + kernels).
//
// Conventions, for every op:
// - Pointers are in the backend's memory (memory_space(): host for reference and cpu, device memory
//   from Allocate for cuda); the losses' double results and TopKMask's k are host values.
// - Tensors are row-major float32; shapes are given in the argument names ([B,T,H] = B*T*H floats,
//   contiguous unless a leading-dimension `ld*` argument says otherwise: `ld` = floats between
//   consecutive rows).
// - Gradients ACCUMULATE: every d* output is `+=`; the caller zeroes (Fill) what it owns. A null
//   gradient pointer means "not needed" (skipped), where the argument says nullable.
// - Forward outputs are overwritten. Ops do not allocate: caches and workspaces come from the
//   caller, sized by the *Floats() functions below (enough for every backend).
// - Results are deterministic: a backend gives bit-identical results for identical inputs and the
//   same thread count (no float atomics, fixed reduction orders).
// Thread-safety: one Backend is used by one thread at a time (it owns its thread pool).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "kernels/dropout_mask.h"

namespace sift::kernels {

// The masked-softmax score of an invalid slot: the most negative finite fp32 (model-spec 3.1).
inline constexpr float kMaskedScore = -3.4028235e38f;
// EPS added to the aux probabilities (model-spec 3.7).
inline constexpr float kAuxEps = 1e-6f;

enum class Activation { kNone = 0, kSigmoid = 1, kPrelu = 2 };

// A dense layer y = act(x W + b) over `rows` rows: W is [in, out] (Keras kernel layout), b [out];
// PReLU has one slope per output unit: f(p) = p for p > 0, slope*p for p < 0, 0 for p == 0
// (TF's relu-based form; its derivative at 0 is 0).
struct DenseDims {
  int64_t rows = 0;
  int in = 0;
  int out = 0;
  Activation act = Activation::kNone;
};

// A recurrence over T steps for B sequences: inputs x [B,T,in], hidden size H.
struct RnnDims {
  int64_t batch = 0;
  int time = 0;
  int in = 0;
  int hidden = 0;
};

struct AdamHyper {
  float lr = 0.01f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;
};

// Cache/workspace sizes (floats) every backend fits in.
inline int64_t GruCacheFloats(const RnnDims& d) { return d.batch * d.time * 4 * d.hidden; }
inline int64_t GruWorkspaceFloats(const RnnDims& d) {
  return d.batch * d.time * 6 * d.hidden + d.batch * 6 * d.hidden;
}
inline int64_t AugruCacheFloats(const RnnDims& d) { return d.batch * d.time * 4 * d.hidden; }
inline int64_t AugruWorkspaceFloats(const RnnDims& d) {
  return d.batch * d.time * 3 * d.hidden + d.batch * 4 * d.hidden;
}
inline int64_t DenseWorkspaceFloats(const DenseDims& d) { return d.rows * d.out; }

// A dense layer over DIEN's attention features (3.6 b): for batch row b and step t, the input is
// c_bt = [qp_b; h_bt; qp_b - h_bt; qp_b * h_bt] (4H wide, AttentionFeaturesForward's rows
// b*T + t) and pre = c W + b, y = act(pre) over B*T rows, W [4H, out].
struct FeatureDenseDims {
  int64_t batch = 0;
  int time = 0;
  int hidden = 0;
  int out = 0;
  Activation act = Activation::kNone;
};
inline DenseDims FeatureDenseAsDense(const FeatureDenseDims& d) {
  return DenseDims{d.batch * d.time, 4 * d.hidden, d.out, d.act};
}
// Enough for every backend: the default (features materialised, then the dense layer) and the
// cpu backend's (the four blocks of W folded into two products and a per-row one).
inline int64_t FeatureDenseWorkspaceFloats(const FeatureDenseDims& d) {
  const int64_t rows = d.batch * d.time;
  return rows * 8 * d.hidden + rows * d.out + 2 * d.batch * d.out + 4 * int64_t{d.hidden} * d.out;
}

// Where an op's pointers must point: any host memory (reference, cpu) or device memory from
// Backend::Allocate (cuda).
enum class MemorySpace { kHost = 0, kDevice = 1 };

// The arithmetic of the GEMMs (Gemm, the dense layers, the recurrences' projections); storage,
// element-wise maths, reductions and losses stay fp32 everywhere (model-spec 5.3). kFp32 is the
// only mode of the host backends; cuda maps the others to cuBLAS compute types (tensor cores):
// kTf32 = CUBLAS_COMPUTE_32F_FAST_TF32, kBf16 = _FAST_16BF, kFp16 = _FAST_16F (the one that needs
// loss scaling: fp16's range is 6e-5 .. 65504).
enum class MathMode { kFp32 = 0, kTf32 = 1, kBf16 = 2, kFp16 = 3 };
inline const char* MathModeName(MathMode mode) {
  switch (mode) {
    case MathMode::kFp32:
      return "fp32";
    case MathMode::kTf32:
      return "tf32";
    case MathMode::kBf16:
      return "bf16";
    case MathMode::kFp16:
      return "fp16";
  }
  return "unknown";
}
// The inverse of MathModeName; INVALID_ARGUMENT naming the choices otherwise.
inline StatusOr<MathMode> ParseMathMode(absl::string_view name) {
  for (MathMode m : {MathMode::kFp32, MathMode::kTf32, MathMode::kBf16, MathMode::kFp16}) {
    if (name == MathModeName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name, "' (expected fp32, tf32, bf16 or fp16)"));
}

// An owned block of backend memory: move-only, freed by its deleter on destruction. REQUIRES: it
// is destroyed before the backend that allocated it. Header-only (the CUDA target uses it).
class BackendBuffer {
 public:
  using Deleter = std::function<void(void*)>;
  BackendBuffer() = default;
  BackendBuffer(void* data, int64_t bytes, Deleter deleter)
      : data_(data), bytes_(bytes), deleter_(std::move(deleter)) {}
  ~BackendBuffer() { Reset(); }
  BackendBuffer(BackendBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        deleter_(std::move(o.deleter_)) {}
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      deleter_ = std::move(o.deleter_);
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  float* floats() const { return static_cast<float*>(data_); }
  int32_t* ints() const { return static_cast<int32_t*>(data_); }
  int64_t num_floats() const { return bytes_ / static_cast<int64_t>(sizeof(float)); }
  bool empty() const { return bytes_ == 0; }
  void Reset() {
    if (data_ != nullptr && deleter_) deleter_(data_);
    data_ = nullptr;
    bytes_ = 0;
    deleter_ = nullptr;
  }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Deleter deleter_;
};

// A point in one stream of a backend's work (its compute, or a CopyChannel's copies): it passes
// once the work issued before it is done. Recorded by Backend::RecordFence or
// CopyChannel::RecordFence and waited for by the other side's WaitFence, without a host wait. A
// default-constructed (trivial) Fence has nothing to wait for: host backends finish their work
// inside each call.
// Copyable and safe to hand to another thread; the handle is the backend's (cuda: a cudaEvent_t).
class Fence {
 public:
  Fence() = default;
  explicit Fence(std::shared_ptr<void> handle) : handle_(std::move(handle)) {}
  void* handle() const { return handle_.get(); }
  // No handle: nothing to wait for (a recorded device fence says false even once it passed).
  bool trivial() const { return handle_ == nullptr; }

 private:
  std::shared_ptr<void> handle_;
};

// Asynchronous copies between host memory and a backend's memory, beside its compute (cuda: a
// stream of its own and page-locked staging buffers; host backends: memcpy, done on return). The
// order against the compute is explicit, by fences: before uploading into memory the compute may
// still read, WaitFence(the compute's fence after those reads); before the compute reads the
// uploads, Backend::WaitFence(RecordFence()); before downloading what the compute writes,
// WaitFence(the compute's fence after the writes).
// Thread-safety: one thread at a time drives a channel, and it may be another thread than the
// backend's (the step pipeline uploads step t+1 while the backend computes step t).
// REQUIRES: destroyed before its backend.
class CopyChannel {
 public:
  virtual ~CopyChannel() = default;
  // Host `src` -> backend `dst` (`bytes` >= 0), after the fences waited for so far. `src` is staged
  // before the call returns: the caller may reuse it at once.
  virtual Status Upload(const void* src, void* dst, int64_t bytes) = 0;
  // Backend `src` -> host `dst`, after the fences waited for so far: `dst` holds the data once
  // Synchronize() returned OK (its contents are undefined before).
  virtual Status Download(const void* src, void* dst, int64_t bytes) = 0;
  // A fence after the copies issued so far.
  virtual StatusOr<Fence> RecordFence() = 0;
  // The copies issued from now on start after `fence` (a Backend::RecordFence one) passed.
  virtual Status WaitFence(const Fence& fence) = 0;
  // Waits for every copy issued, completes the downloads, and returns the first error since the
  // last call; the staging is free for reuse after it.
  virtual Status Synchronize() = 0;
};

// The host backends' channel: every copy is a memcpy, done when the call returns.
class HostCopyChannel final : public CopyChannel {
 public:
  Status Upload(const void* src, void* dst, int64_t bytes) override {
    return Memcpy(src, dst, bytes);
  }
  Status Download(const void* src, void* dst, int64_t bytes) override {
    return Memcpy(src, dst, bytes);
  }
  StatusOr<Fence> RecordFence() override { return Fence(); }
  Status WaitFence(const Fence&) override { return absl::OkStatus(); }
  Status Synchronize() override { return absl::OkStatus(); }

 private:
  static Status Memcpy(const void* src, void* dst, int64_t bytes) {
    if (bytes < 0) return absl::InvalidArgumentError("CopyChannel: negative size");
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  virtual int threads() const = 0;
  // One line saying what actually computes, for benchmarks and logs (cpu: the kernels' ISA
  // variant, oneDNN's version and ISA, bf16 native or emulated, threads). Default: the name.
  virtual std::string Describe() const { return std::string(name()); }
  // Where this backend runs slower than the machine allows (a generic fallback, an emulated
  // precision, a reference kernel): one sentence each, for the user to see. Default: none.
  virtual std::vector<std::string> Warnings() const { return {}; }

  // ---- Backend memory (the defaults are the host backends') -----------------------------------
  // Ops read and write memory of this space; for kDevice, host data goes through CopyToBackend /
  // CopyToHost and every pointer an op gets comes from Allocate.
  virtual MemorySpace memory_space() const { return MemorySpace::kHost; }
  // `bytes` (>= 0) of zero-filled memory of this backend, 64-byte aligned (cuda: 256).
  // RESOURCE_EXHAUSTED when there is none left.
  virtual StatusOr<BackendBuffer> Allocate(int64_t bytes) {
    if (bytes < 0) return absl::InvalidArgumentError("Backend::Allocate: negative size");
    if (bytes == 0) return BackendBuffer();
    const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Backend::Allocate: ", bytes, " bytes of host memory"));
    }
    std::memset(p, 0, rounded);
    return BackendBuffer(p, bytes, [](void* q) { std::free(q); });
  }
  // Host memory -> this backend's memory (`bytes` >= 0), in order with the ops issued before and
  // after it; `src` may be reused once the call returns.
  virtual Status CopyToBackend(const void* src, void* dst, int64_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  // This backend's memory -> host memory, after every op issued before it: the data is in `dst`
  // when the call returns.
  virtual Status CopyToHost(const void* src, void* dst, int64_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  // Waits for every op issued so far and returns the first error an op met since the last call
  // (ops return void; a device backend records failures such as a failed launch or a cuBLAS
  // error and reports them here, naming the call, file and line). Host backends: always OK.
  virtual Status Synchronize() { return absl::OkStatus(); }
  // A copy channel beside this backend's compute (see CopyChannel), with `staging_bytes` (>= 0)
  // of staging reserved up front (it grows on demand). REQUIRES: destroyed before the backend.
  // The default is the host backends' memcpy channel: a device backend must override it.
  virtual StatusOr<std::unique_ptr<CopyChannel>> CreateCopyChannel(int64_t staging_bytes) {
    (void)staging_bytes;
    return std::unique_ptr<CopyChannel>(std::make_unique<HostCopyChannel>());
  }
  // The stream the ops run on, for libraries that enqueue work after them (cuda: its
  // cudaStream_t, for NCCL); nullptr on host backends.
  virtual void* native_stream() const { return nullptr; }
  // A fence after the ops issued so far (a trivial one on host backends). A device backend
  // returns its recorded failure instead once an op failed (the work before the fence is not
  // what the caller thinks).
  virtual StatusOr<Fence> RecordFence() { return Fence(); }
  // The ops issued from now on start after `fence` (a CopyChannel's) passed; no host wait.
  virtual Status WaitFence(const Fence& fence) {
    (void)fence;
    return absl::OkStatus();
  }
  // The first failure an op recorded since the last Synchronize, without waiting for anything
  // (what Synchronize would report so far; a device fault still in flight shows only there). Lets
  // the caller refuse to hand a failed pass's results to another stream, e.g. NCCL's.
  virtual Status PendingError() const { return absl::OkStatus(); }
  // The GEMM arithmetic (MathMode). The reference backend takes kFp32 only, cpu kFp32 and kBf16
  // (INVALID_ARGUMENT otherwise).
  virtual Status SetMathMode(MathMode mode) {
    if (mode == MathMode::kFp32) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("precision '", MathModeName(mode),
                                                   "' needs the cuda backend (backend '", name(),
                                                   "' computes in fp32 only)"));
  }
  virtual MathMode math_mode() const { return MathMode::kFp32; }
  // What precision `auto` means here: the fastest mode whose accuracy sift has shown to match
  // fp32 (cuda: bf16; cpu: bf16 where the CPU has native bf16 dot products, else fp32).
  virtual MathMode AutoMathMode() const { return MathMode::kFp32; }
  // Whether ops must keep their fixed summation orders (bit-reproducible runs; the default). A
  // device backend given false may use float atomics where they are faster (cuda: SegmentSumRows),
  // so such sums vary in their last bits run to run. Host backends are always deterministic:
  // SetDeterministic(false) is accepted and changes nothing (deterministic() stays true).
  virtual Status SetDeterministic(bool /*deterministic*/) { return absl::OkStatus(); }
  virtual bool deterministic() const { return true; }

  // ---- Memory -------------------------------------------------------------------------------
  // p[0..n) = value.
  virtual void Fill(int64_t n, float value, float* p) = 0;
  // For o < outer, r < rows, c < cols: dst[o*dst_outer + r*dst_row + c] (=|+=) src[o*src_outer +
  // r*src_row + c]. Concatenation, slicing and their gradients. Regions must not overlap.
  virtual void Copy(int64_t outer, int64_t rows, int64_t cols, const float* src, int64_t src_outer,
                    int64_t src_row, float* dst, int64_t dst_outer, int64_t dst_row,
                    bool accumulate) = 0;

  // ---- Linear algebra ------------------------------------------------------------------------
  // C[m,n] = alpha * op(A) op(B) + beta * C, op(A) [m,k], op(B) [k,n]; A stored [m,k] (or [k,m]
  // when trans_a), B [k,n] (or [n,k] when trans_b). beta == 0 ignores C's old contents (NaN-safe).
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) = 0;

  // ---- Dense layer (DenseDims) ---------------------------------------------------------------
  // pre[rows,out] = x W + b (kept for the backward pass), y[rows,out] = act(pre). x has row stride
  // ldx >= in. slope [out] is read only for kPrelu (nullable otherwise). pre == y is allowed for
  // kNone.
  virtual void DenseForward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                            const float* b, const float* slope, float* pre, float* y) = 0;
  // Given dy[rows,out]: dx (+=, nullable, row stride lddx), dw [in,out] (+=), db [out] (+=),
  // dslope [out] (+=, kPrelu only). workspace: DenseWorkspaceFloats(d).
  virtual void DenseBackward(const DenseDims& d, const float* x, int64_t ldx, const float* w,
                             const float* slope, const float* pre, const float* y, const float* dy,
                             float* dx, int64_t lddx, float* dw, float* db, float* dslope,
                             float* workspace) = 0;

  // ---- Embeddings ----------------------------------------------------------------------------
  // out[i, 0..dim) (row stride ld_out) = rows[inv[i], 0..dim) * (mask ? mask[i] : 1), and zeros
  // where inv[i] < 0 (padding). rows is [U, dim] (the batch's unique keys of one table).
  virtual void GatherRows(int64_t n, int dim, const float* rows, const int32_t* inv,
                          const float* mask, float* out, int64_t ld_out) = 0;
  // The gather's gradient, segment-summed per unique key: for every i with inv[i] >= 0,
  // drows[inv[i]] += dout[i] * (mask ? mask[i] : 1). Deterministic: each key's terms are added in
  // increasing i (in any order when deterministic() is false). inv values < num_unique.
  virtual void SegmentSumRows(int64_t n, int dim, const float* dout, int64_t ld_dout,
                              const int32_t* inv, const float* mask, int64_t num_unique,
                              float* drows) = 0;

  // ---- Attention (model-spec 3.1 - 3.5) ------------------------------------------------------
  // Per batch row b: s_j = <q_b, k_bj> for j < n (k [B,n,d]), s_j = kMaskedScore where
  // mask[b,j] == 0, alpha[b] = softmax(s) [B,n], out_b = sum_j alpha_bj k_bj (row stride ldout).
  // q has row stride ldq. An all-masked row gets uniform alpha (and out = 0 for zero keys).
  virtual void DotAttentionForward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                   const float* k, const float* mask, float* alpha, float* out,
                                   int64_t ldout) = 0;
  // Given dout (row stride lddout): dq (+=, row stride lddq, nullable), dk [B,n,d] (+=,
  // nullable). No gradient reaches masked scores (they are constants).
  virtual void DotAttentionBackward(int64_t batch, int n, int d, const float* q, int64_t ldq,
                                    const float* k, const float* mask, const float* alpha,
                                    const float* dout, int64_t lddout, float* dq, int64_t lddq,
                                    float* dk) = 0;
  // Top-k retrieval mask (3.3), kept in place of a gather (3.3.6): rho[b,j] = 1 when slot j is
  // among the k largest alpha[b,:] (ties: the lower index wins) and alpha[b,j] > 0, else 0.
  // k >= n selects every slot. No gradient.
  virtual void TopKMask(int64_t batch, int n, int k, const float* alpha, float* rho) = 0;
  // Damped mean (3.5): out_b = sum_j rho_bj x_bj / (sum_j rho_bj + 1), x [B,n,d].
  virtual void DampedMeanForward(int64_t batch, int n, int d, const float* x, const float* rho,
                                 float* out, int64_t ldout) = 0;
  // dx [B,n,d] += rho_bj * dout_b / (sum_j rho_bj + 1).
  virtual void DampedMeanBackward(int64_t batch, int n, int d, const float* rho, const float* dout,
                                  int64_t lddout, float* dx) = 0;
  // Masked softmax over n slots per row: p[rows,n] = softmax(mask ? s : kMaskedScore).
  virtual void MaskedSoftmaxForward(int64_t rows, int n, const float* scores, const float* mask,
                                    float* p) = 0;
  // dscores (+=) = p * (dp - sum_j p_j dp_j), and 0 at masked slots.
  virtual void MaskedSoftmaxBackward(int64_t rows, int n, const float* p, const float* mask,
                                     const float* dp, float* dscores) = 0;
  // DIEN attention features (3.6 b): c[b,t] = [qp_b; h_bt; qp_b - h_bt; qp_b * h_bt] (4H wide),
  // rows b*T + t; qp [B,H], h [B,T,H], c [B,T,4H].
  virtual void AttentionFeaturesForward(int64_t batch, int time, int hidden, const float* qp,
                                        const float* h, float* c) = 0;
  // dqp [B,H] (+=, nullable), dh [B,T,H] (+=, nullable) from dc [B,T,4H].
  virtual void AttentionFeaturesBackward(int64_t batch, int time, int hidden, const float* qp,
                                         const float* h, const float* dc, float* dqp,
                                         float* dh) = 0;

  // The attention features and the dense layer that reads them, as one op (FeatureDenseDims): pre,
  // y [B*T, out] as DenseForward's over the rows of AttentionFeaturesForward. A backend may
  // compute it without materialising the features (the cpu backend: c W = qp (W_q + W_d') ...,
  // half the products). The default does exactly AttentionFeaturesForward + DenseForward in
  // `workspace` (FeatureDenseWorkspaceFloats).
  virtual void FeatureDenseForward(const FeatureDenseDims& d, const float* qp, const float* h,
                                   const float* w, const float* b, const float* slope, float* pre,
                                   float* y, float* workspace) {
    float* c = workspace;
    AttentionFeaturesForward(d.batch, d.time, d.hidden, qp, h, c);
    DenseForward(FeatureDenseAsDense(d), c, 4 * int64_t{d.hidden}, w, b, slope, pre, y);
  }
  // Its gradients given dy [B*T, out]: dqp [B,H] (+=, nullable), dh [B,T,H] (+=, nullable), dw,
  // db (+=), dslope (+=, kPrelu only). The default recomputes the features, runs DenseBackward
  // into a zeroed feature gradient and AttentionFeaturesBackward from it.
  virtual void FeatureDenseBackward(const FeatureDenseDims& d, const float* qp, const float* h,
                                    const float* w, const float* slope, const float* pre,
                                    const float* y, const float* dy, float* dqp, float* dh,
                                    float* dw, float* db, float* dslope, float* workspace) {
    const int64_t rows = d.batch * d.time, width = 4 * int64_t{d.hidden};
    float* c = workspace;
    float* dc = c + rows * width;
    float* ws = dc + rows * width;
    AttentionFeaturesForward(d.batch, d.time, d.hidden, qp, h, c);
    Fill(rows * width, 0.0f, dc);
    DenseBackward(FeatureDenseAsDense(d), c, width, w, slope, pre, y, dy, dc, width, dw, db, dslope,
                  ws);
    AttentionFeaturesBackward(d.batch, d.time, d.hidden, qp, h, dc, dqp, dh);
  }

  // ---- Recurrences (model-spec 3.6) ---------------------------------------------------------
  // Keras reset-after GRU from h_0 = 0 over all T steps (no masking): w_in [in,3H], w_rec [H,3H],
  // b_in [3H], b_rec [3H], columns [z | r | n]. Writes every state h [B,T,H] and the cache
  // (GruCacheFloats) the backward pass reads. workspace: GruWorkspaceFloats.
  virtual void GruForward(const RnnDims& d, const float* x, const float* w_in, const float* w_rec,
                          const float* b_in, const float* b_rec, float* h, float* cache,
                          float* workspace) = 0;
  // Given dh [B,T,H] (the loss gradient w.r.t. every state, read only): dx [B,T,in] (+=,
  // nullable), dw_in, dw_rec, db_in, db_rec (+=).
  virtual void GruBackward(const RnnDims& d, const float* x, const float* w_in, const float* w_rec,
                           const float* h, const float* cache, const float* dh, float* dx,
                           float* dw_in, float* dw_rec, float* db_in, float* db_rec,
                           float* workspace) = 0;
  // AUGRU with the original-code gating (3.6 c) from h'_0 = 0 over all T steps: inputs x [B,T,in]
  // (in = H in the model), attention att [B,T]; gates [gamma | u] = sigmoid([x_t; h'] G + g_b),
  // G [(in+H), 2H]; candidate c = tanh([x_t; gamma * h'] C + c_b), C [(in+H), H];
  // u' = (1 - att_t) u; h'_t = u' h' + (1 - u') c. Writes every state hs [B,T,H] (the model uses
  // the last) and the cache (AugruCacheFloats). workspace: AugruWorkspaceFloats.
  virtual void AugruForward(const RnnDims& d, const float* x, const float* att, const float* g_w,
                            const float* g_b, const float* c_w, const float* c_b, float* hs,
                            float* cache, float* workspace) = 0;
  // Given dlast [B,H] (the gradient w.r.t. the final state only): dx [B,T,in] (+=, nullable),
  // datt [B,T] (+=, nullable), dg_w, dg_b, dc_w, dc_b (+=).
  virtual void AugruBackward(const RnnDims& d, const float* x, const float* att, const float* g_w,
                             const float* c_w, const float* hs, const float* cache,
                             const float* dlast, float* dx, float* datt, float* dg_w, float* dg_b,
                             float* dc_w, float* dc_b, float* workspace) = 0;

  // ---- Losses (model-spec 4, 13) -------------------------------------------------------------
  // Returns sum_i BCE(y_i, l_i) = max(l,0) - l*y + log(1 + exp(-|l|)), accumulated in double.
  // When dlogits is non-null: dlogits[i] += scale * (sigmoid(l_i) - y_i).
  virtual double BceWithLogits(int64_t n, const float* logits, const float* labels, float scale,
                               float* dlogits) = 0;
  // DIEN aux loss (3.7, 13 difference 2), summed over the n pairs with mask[i] != 0 (masked pairs
  // contribute exactly 0, also for non-finite logits):
  //   -log(sigmoid(lp) + kAuxEps) - log(max(sigmoid(-ln) - kAuxEps, kAuxEps))
  // (= the reference's -log(1 - p-) with p- = sigmoid(ln) + EPS, clamped so it stays finite; the
  // clamped branch has zero gradient). Accumulated in double. When dpos/dneg are non-null they
  // get += scale * d(term)/d(logit).
  virtual double AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits,
                         const float* mask, float scale, float* dpos, float* dneg) = 0;

  // ---- Optimizer (model-spec 5.1, Keras form) -------------------------------------------------
  // Step t >= 1: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // param -= lr_t * m / (sqrt(v) + eps), lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t) (in double,
  // rounded to float once).
  virtual void AdamUpdate(int64_t n, const AdamHyper& h, int64_t t, const float* grad, float* param,
                          float* m, float* v) = 0;

  // ---- Dropout (the MLP heads' model.dropout); host default -----------------------------------
  // Inverted dropout in place: p[i] *= DropoutFactor(seed, i, rate, scale) (kernels/dropout_mask.h:
  // 0 with probability rate, else scale = 1 / (1 - rate), a pure function of (seed, i)). Applying
  // it to an output and then, with the same seed, to that output's gradient is dropout's forward
  // and backward. REQUIRES: 0 < rate < 1, scale = 1 / (1 - rate) as a float.
  virtual void Dropout(int64_t n, uint64_t seed, float rate, float scale, float* p) {
    for (int64_t i = 0; i < n; ++i) p[i] *= DropoutFactor(seed, i, rate, scale);
  }

  // ---- Dynamic loss scaling (fp16, worker/loss_scaler.h); host defaults ---------------------
  // p[0..n) *= alpha.
  virtual void Scale(int64_t n, float alpha, float* p) {
    for (int64_t i = 0; i < n; ++i) p[i] *= alpha;
  }
  // Whether every p[0..n) is finite: a host answer (a device backend waits for the ops before).
  virtual bool AllFinite(int64_t n, const float* p) { return AllFiniteOnHost(n, p); }

  // Whether every p[0..n) of HOST memory is finite (the host backends' AllFinite; the trainer's
  // check of the embedding gradients, which are host arrays on every backend).
  static bool AllFiniteOnHost(int64_t n, const float* p) {
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) finite &= std::isfinite(p[i]);
    return finite;
  }
};

// The naive reference backend (kernels/reference): the test oracle.
std::unique_ptr<Backend> CreateReferenceBackend();
// The CPU backend (kernels/cpu): oneDNN GEMMs and sift's kernels for the widest vector ISA this
// CPU supports, on a thread pool of `threads` (<= 0: every available CPU); GEMMs run as
// single-threaded oneDNN calls split over that pool. kernels/cpu/cpu_backend.h has the options.
std::unique_ptr<Backend> CreateCpuBackend(int threads);

// "reference", "cpu" and, in builds with the CUDA target, "cuda": the backends this build offers,
// in that order; `threads` is passed to the CPU backend. "cuda" uses device 0 of those visible
// (CUDA_VISIBLE_DEVICES) and fails with FAILED_PRECONDITION where there is none.
std::vector<std::string> AvailableBackendNames();
StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name, int threads);

}  // namespace sift::kernels
