// CudaBackend's recurrences (cuda_backend_impl.h): GRU and AUGRU forward / backward run
// rnn_schedule.h's schedules (the order of GEMMs and step kernels, tested on the host) with a
// device executor: cuBLAS GEMMs through GemmBatched (the math mode's compute type), the fused step
// kernels of cuda_rnn_kernels.h, the dense family's fixed-order column sums (LaunchColumnSums of
// cuda_dense_kernels.h) for the bias gradients, async memset/memcpy, all on the
// compute stream. No float atomics anywhere, so results are bit-reproducible on one GPU model.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/cuda_dense_kernels.h"
#include "kernels/cuda/cuda_dense_plan.h"
#include "kernels/cuda/cuda_rnn_kernels.h"
#include "kernels/cuda/rnn_schedule.h"

namespace sift::cuda {

using kernels::RnnDims;

namespace {

// The scratch slot of the column sums' double partials.
constexpr int kSumScratchSlot = 0;

// The private members of CudaBackend the executor calls, named (so access-checked) inside the
// backend's member functions and called through these pointers.
struct BackendHooks {
  CudaBackend* backend;
  cudaStream_t stream;
  void (CudaBackend::*gemm)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                            int64_t, const float*, int64_t, int64_t, float, float*, int64_t,
                            int64_t, int64_t);
  bool (CudaBackend::*check)(cudaError_t, const char*, const char*, int);
  bool (CudaBackend::*failed)() const;
  void* (CudaBackend::*scratch)(int, int64_t);
};

// rnn_schedule.h's executor on the device. Every call enqueues on the compute stream; a failed
// launch or CUDA call is recorded by the backend (Check) naming this file and line.
class DeviceExec {
 public:
  explicit DeviceExec(const BackendHooks& hooks) : h_(hooks) {}

  bool failed() const { return (h_.backend->*h_.failed)(); }
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    (h_.backend->*h_.gemm)(trans_a, trans_b, m, n, k, 1.0f, a, lda, 0, b, ldb, 0, beta, c, ldc, 0,
                           1);
  }
  void Zero(float* p, int64_t n) {
    Ok(cudaMemsetAsync(p, 0, sizeof(float) * n, h_.stream), "cudaMemsetAsync", __LINE__);
  }
  void CopyFloats(float* dst, const float* src, int64_t n) {
    Ok(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, h_.stream),
       "cudaMemcpyAsync", __LINE__);
  }
  void ZeroStepRows(int64_t batch, int64_t time, int64_t width, int64_t t, float* m) {
    Ok(LaunchZeroStepRows(h_.stream, batch, time, width, t, m), "launch LaunchZeroStepRows",
       __LINE__);
  }
  void ColumnSum(int64_t rows, int64_t cols, const float* src, float* dst) {
    if (cols > std::numeric_limits<int>::max()) {  // LaunchColumnSums takes int columns
      Ok(cudaErrorInvalidValue, "LaunchColumnSums: more than INT_MAX columns", __LINE__);
      return;
    }
    auto* partials = static_cast<double*>((h_.backend->*h_.scratch)(
        kSumScratchSlot, sizeof(double) * ColumnPartialDoubles(rows, cols)));
    if (partials == nullptr) return;  // the backend recorded the failure
    Ok(LaunchColumnSums(h_.stream, ColumnSumTerm::kValue, rows, static_cast<int>(cols), src,
                        nullptr, partials, dst),
       "launch LaunchColumnSums", __LINE__);
  }
  void GruForwardStep(int64_t batch, int64_t time, int64_t hidden, int64_t t, const float* xw,
                      const float* hu, const float* b_in, const float* b_rec, float* h,
                      float* cache) {
    Ok(LaunchGruForwardStep(h_.stream, batch, time, hidden, t, xw, hu, b_in, b_rec, h, cache),
       "launch LaunchGruForwardStep", __LINE__);
  }
  void GruBackwardStep(int64_t batch, int64_t time, int64_t hidden, int64_t t, const float* h,
                       const float* cache, const float* dh, float* carry, float* gx, float* gh) {
    Ok(LaunchGruBackwardStep(h_.stream, batch, time, hidden, t, h, cache, dh, carry, gx, gh),
       "launch LaunchGruBackwardStep", __LINE__);
  }
  void AugruGatesStep(int64_t batch, int64_t time, int64_t hidden, int64_t t, const float* xg,
                      const float* g_b, const float* hs, float* cache) {
    Ok(LaunchAugruGatesStep(h_.stream, batch, time, hidden, t, xg, g_b, hs, cache),
       "launch LaunchAugruGatesStep", __LINE__);
  }
  void AugruUpdateStep(int64_t batch, int64_t time, int64_t hidden, int64_t t, const float* xc,
                       const float* c_b, const float* att, float* hs, float* cache) {
    Ok(LaunchAugruUpdateStep(h_.stream, batch, time, hidden, t, xc, c_b, att, hs, cache),
       "launch LaunchAugruUpdateStep", __LINE__);
  }
  void AugruUpdateBackwardStep(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                               const float* att, const float* hs, const float* cache, float* carry,
                               float* dcp, float* dg, float* datt) {
    Ok(LaunchAugruUpdateBackwardStep(h_.stream, batch, time, hidden, t, att, hs, cache, carry, dcp,
                                     dg, datt),
       "launch LaunchAugruUpdateBackwardStep", __LINE__);
  }
  void AugruGatesBackwardStep(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                              const float* hs, const float* cache, const float* dgh, float* carry,
                              float* dg) {
    Ok(LaunchAugruGatesBackwardStep(h_.stream, batch, time, hidden, t, hs, cache, dgh, carry, dg),
       "launch LaunchAugruGatesBackwardStep", __LINE__);
  }

 private:
  void Ok(cudaError_t err, const char* what, int line) {
    (h_.backend->*h_.check)(err, what, __FILE__, line);
  }

  BackendHooks h_;
};

rnn::RnnShape Shape(const RnnDims& d) { return {d.batch, d.time, d.in, d.hidden}; }

}  // namespace

// Each member builds its executor here, where the private members may be named.
#define SIFT_RNN_DEVICE_EXEC(name)                                                            \
  DeviceExec name(BackendHooks{this, stream_, &CudaBackend::GemmBatched, &CudaBackend::Check, \
                               &CudaBackend::failed, &CudaBackend::Scratch})

void CudaBackend::GruForward(const RnnDims& d, const float* x, const float* w_in,
                             const float* w_rec, const float* b_in, const float* b_rec, float* h,
                             float* cache, float* workspace) {
  if (failed()) return;
  SIFT_RNN_DEVICE_EXEC(exec);
  rnn::GruForwardSchedule(exec, Shape(d), x, w_in, w_rec, b_in, b_rec, h, cache, workspace);
}

void CudaBackend::GruBackward(const RnnDims& d, const float* x, const float* w_in,
                              const float* w_rec, const float* h, const float* cache,
                              const float* dh, float* dx, float* dw_in, float* dw_rec, float* db_in,
                              float* db_rec, float* workspace) {
  if (failed()) return;
  SIFT_RNN_DEVICE_EXEC(exec);
  rnn::GruBackwardSchedule(exec, Shape(d), x, w_in, w_rec, h, cache, dh, dx, dw_in, dw_rec, db_in,
                           db_rec, workspace);
}

void CudaBackend::AugruForward(const RnnDims& d, const float* x, const float* att, const float* g_w,
                               const float* g_b, const float* c_w, const float* c_b, float* hs,
                               float* cache, float* workspace) {
  if (failed()) return;
  SIFT_RNN_DEVICE_EXEC(exec);
  rnn::AugruForwardSchedule(exec, Shape(d), x, att, g_w, g_b, c_w, c_b, hs, cache, workspace);
}

void CudaBackend::AugruBackward(const RnnDims& d, const float* x, const float* att,
                                const float* g_w, const float* c_w, const float* hs,
                                const float* cache, const float* dlast, float* dx, float* datt,
                                float* dg_w, float* dg_b, float* dc_w, float* dc_b,
                                float* workspace) {
  if (failed()) return;
  SIFT_RNN_DEVICE_EXEC(exec);
  rnn::AugruBackwardSchedule(exec, Shape(d), x, att, g_w, c_w, hs, cache, dlast, dx, datt, dg_w,
                             dg_b, dc_w, dc_b, workspace);
}

#undef SIFT_RNN_DEVICE_EXEC

}  // namespace sift::cuda
