// DeviceSimBackend: a CPU backend posing as a device backend (memory_space() == kDevice), so the
// device paths of the model and trainer (inputs staged in, gradients and logits copied out,
// parameters and Adam moments in backend memory, loss scaling) run and are checked in CI without
// a GPU. Allocate hands out host memory, but TRACKED; every op first checks that each non-null
// pointer argument lies, over the whole extent the op spans (from its dims and strides), inside
// one tracked allocation, and CopyToBackend / CopyToHost that the backend side is tracked and the
// host side is NOT (a host array passed where device memory belongs is the bug this catches on
// the CPU; it would fault or read garbage on a GPU). A failed check is reported as a gtest failure
// naming the op and argument, counted in stats(), returned (the first one) by the next
// Synchronize(), and the op is skipped (its outputs are then unspecified, as on a device).
// The host touching backend memory outside an op or copy (reading a device pointer as if it were
// a host array) faults: with `protect` (the default) allocations are whole mmap'ed pages kept
// PROT_NONE except during the op or copy whose arguments they are; the process then dies of
// SIGSEGV after a message naming the address ("DeviceSimBackend: SIGSEGV at 0x...").
// SIMULATION: SetMathMode accepts every MathMode and records it, but the GEMMs stay fp32 (the
// inner CPU backend's), so results are bit-identical to that backend's; likewise SetDeterministic
// records its argument (deterministic() reports it) while the ops keep their fixed orders. Fault
// injection: FailAllFiniteOnCalls.
// Copy channels (CreateCopyChannel) are simulated as strictly as a GPU allows, so a missing
// fence fails on the CPU: an upload is only queued (its source staged) and lands when the
// backend waits for a channel fence recorded after it (WaitFence) or the channel synchronizes;
// an op touching memory with an upload not yet landed fails the check ("upload in flight"). An
// upload into, or download from, memory that an op used after the last backend fence the channel
// waited for fails too (the copy could race that op on a GPU), and so does an op touching memory
// a download may still be reading (before the channel's Synchronize). A download fills its host
// destination with NaN bytes until that Synchronize delivers the data. The one lock below orders
// the threads it serialises, so TSan on the simulator cannot see races in the caller's own
// state: those rest on the step pipeline's order (worker/step_pipeline.h).
// Thread-compatible, like every Backend, except that channels may run on other threads: every
// op and channel call holds one lock. Owns the inner backend; stats() outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/status.h"
#include "kernels/backend.h"

namespace sift::testing {

// What a DeviceSimBackend saw; shared (stats()), so a test can read it after the backend's owner
// (e.g. RunTrainer) destroyed the backend.
struct DeviceSimStats {
  std::vector<std::string> failures;  // every failed check, "<op>: argument <name>: ..."
  int64_t ops = 0;                    // op calls (Fill .. AllFinite)
  int64_t copies_to_backend = 0;      // CopyToBackend calls with bytes > 0
  int64_t copies_to_host = 0;         // CopyToHost calls with bytes > 0
  int64_t all_finite_calls = 0;
  std::vector<float> scale_alphas;         // the alpha of every Scale call, in order
  int64_t allocations = 0;                 // Allocate calls with bytes > 0
  int64_t live_allocations = 0;            // allocations not yet freed
  int64_t live_at_destruction = -1;        // live_allocations when the backend died (-1: alive)
  std::set<kernels::MathMode> math_modes;  // every mode SetMathMode was given
  int64_t uploads = 0;                     // channel Upload calls with bytes > 0
  int64_t downloads = 0;                   // channel Download calls with bytes > 0
  int64_t landed_by_fence = 0;             // uploads landed by the backend's WaitFence
  int64_t fences_recorded = 0;             // RecordFence calls (backend and channels)
  std::vector<bool> deterministic_calls;   // every SetDeterministic argument, in order
};

class DeviceSimBackend final : public kernels::Backend {
 public:
  // REQUIRES: inner != nullptr and inner->memory_space() == kHost. protect: see above.
  explicit DeviceSimBackend(std::unique_ptr<kernels::Backend> inner, bool protect = true);
  ~DeviceSimBackend() override;

  // Makes AllFinite return false on these calls (numbered from 1 in call order), whatever the
  // data; the other calls answer truly.
  void FailAllFiniteOnCalls(std::set<int64_t> call_numbers) {
    fail_all_finite_ = std::move(call_numbers);
  }
  // Makes the loss-only BceWithLogits calls (dlogits == nullptr: a forward pass's losses,
  // numbered from 1 in call order) return +inf on these calls: a simulated fp16 forward overflow.
  void OverflowLossOnCalls(std::set<int64_t> call_numbers) {
    overflow_loss_ = std::move(call_numbers);
  }
  std::shared_ptr<const DeviceSimStats> stats() const;
  // Whether [p, p + bytes) lies inside one live allocation of this backend.
  bool IsTracked(const void* p, int64_t bytes) const;

  absl::string_view name() const override { return name_; }  // "<inner name>-device-sim"
  int threads() const override { return inner_->threads(); }
  kernels::MemorySpace memory_space() const override { return kernels::MemorySpace::kDevice; }
  StatusOr<kernels::BackendBuffer> Allocate(int64_t bytes) override;
  Status CopyToBackend(const void* src, void* dst, int64_t bytes) override;
  Status CopyToHost(const void* src, void* dst, int64_t bytes) override;
  // The first failure since the last call (OK when none), then the inner backend's.
  Status Synchronize() override;
  Status SetMathMode(kernels::MathMode mode) override;  // every mode; computes in fp32
  StatusOr<std::unique_ptr<kernels::CopyChannel>> CreateCopyChannel(int64_t staging_bytes) override;
  StatusOr<kernels::Fence> RecordFence() override;
  Status WaitFence(const kernels::Fence& fence) override;
  kernels::MathMode math_mode() const override { return mode_; }
  Status SetDeterministic(bool deterministic) override;  // recorded; the ops stay deterministic
  bool deterministic() const override { return deterministic_; }

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

  // Internal: the tracked allocations and the stats, shared with the buffers' deleters.
  struct State;

 private:
  class Check;
  class SimChannel;
  void Fail(absl::string_view op, absl::string_view what, absl::string_view why);
  std::string DescribeMemory(const void* p, int64_t bytes) const;

  std::unique_ptr<kernels::Backend> inner_;
  std::string name_;
  std::shared_ptr<State> state_;
  kernels::MathMode mode_ = kernels::MathMode::kFp32;
  bool deterministic_ = true;
  std::set<int64_t> fail_all_finite_;
  std::set<int64_t> overflow_loss_;
  int64_t loss_calls_ = 0;
  Status status_;
};

// A DeviceSimBackend over kernels::CreateCpuBackend(threads).
std::unique_ptr<DeviceSimBackend> CreateDeviceSimBackend(int threads, bool protect = true);

}  // namespace sift::testing
