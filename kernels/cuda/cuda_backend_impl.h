// CudaBackend, the class behind CreateCudaBackend (cuda_backend.h). Its member functions are
// defined in three files, one per op family, each with its kernels in a .cu file of its own:
//   cuda_backend.cc           creation, memory, errors, Fill, Copy, Gemm, dense layers, losses,
//                             Adam, Scale, AllFinite               (kernels: cuda_dense_kernels.cu)
//   cuda_backend_sequence.cc  GatherRows, SegmentSumRows, the attentions, TopKMask, damped
//                             mean, masked softmax, attention features
//                                                               (kernels: cuda_sequence_kernels.cu)
//   cuda_backend_rnn.cc       GRU and AUGRU forward / backward       (kernels: cuda_rnn_kernels.cu)
// Kernel launchers are plain functions declared in the matching cuda_*_kernels.h (no Abseil in
// device code); they return cudaGetLastError() of their launch, which the member functions pass
// to Check().
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "kernels/backend.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_allocators.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_status.h"

namespace sift::cuda {

class CudaBackend final : public kernels::Backend {
 public:
  static StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  absl::string_view name() const override { return "cuda"; }
  int threads() const override { return 1; }
  // bf16 tensor cores (sm_80+; model-spec 5.3).
  kernels::MathMode AutoMathMode() const override { return kernels::MathMode::kBf16; }

  // ---- Memory and errors (cuda_backend.cc) ----
  kernels::MemorySpace memory_space() const override { return kernels::MemorySpace::kDevice; }
  StatusOr<kernels::BackendBuffer> Allocate(int64_t bytes) override;
  Status CopyToBackend(const void* src, void* dst, int64_t bytes) override;
  Status CopyToHost(const void* src, void* dst, int64_t bytes) override;
  Status Synchronize() override;
  // Copy channels on streams of their own (cuda_copy_channel.h); fences are cudaEvents.
  StatusOr<std::unique_ptr<kernels::CopyChannel>> CreateCopyChannel(int64_t staging_bytes) override;
  StatusOr<kernels::Fence> RecordFence() override;
  void* native_stream() const override { return stream_; }
  Status PendingError() const override { return first_error_; }
  Status WaitFence(const kernels::Fence& fence) override;
  Status SetMathMode(kernels::MathMode mode) override;
  kernels::MathMode math_mode() const override { return math_; }
  // false: SegmentSumRows adds with float atomics (no sort; the sums' order varies run to run).
  Status SetDeterministic(bool deterministic) override {
    deterministic_ = deterministic;
    return absl::OkStatus();
  }
  bool deterministic() const override { return deterministic_; }
  void Scale(int64_t n, float alpha, float* p) override;
  void Dropout(int64_t n, uint64_t seed, float rate, float scale, float* p) override;
  bool AllFinite(int64_t n, const float* p) override;

  // ---- Dense family (cuda_backend.cc) ----
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
  double BceWithLogits(int64_t n, const float* logits, const float* labels, float scale,
                       float* dlogits) override;
  double AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits, const float* mask,
                 float scale, float* dpos, float* dneg) override;
  void AdamUpdate(int64_t n, const kernels::AdamHyper& h, int64_t t, const float* grad,
                  float* param, float* m, float* v) override;

  // ---- Sequence family (cuda_backend_sequence.cc) ----
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

  // ---- Recurrences (cuda_backend_rnn.cc) ----
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

  // For the worker (NCCL on the compute stream, copy-stream events) and tests.
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  AllocatorStats allocator_stats() const { return allocator_->stats(); }

 private:
  CudaBackend(int device, std::unique_ptr<CudaRawAllocator> raw);

  // Records `s` when it is the first failure since the last Synchronize (cuda_backend.cc).
  void Record(Status s);
  // Records the error of a launch or CUDA call (`what` names it) unless it is cudaSuccess; true
  // when it succeeded. Use through SIFT_CUDA_CHECK / SIFT_CUDA_CHECK_LAUNCH (cuda_backend.cc's
  // comment) so the file and line are the caller's.
  bool Check(cudaError_t err, const char* what, const char* file, int line);
  bool Check(cublasStatus_t status, const char* what, const char* file, int line);
  // An op runs only while no failure is pending (its inputs may be garbage otherwise).
  bool failed() const { return !first_error_.ok(); }
  // Device scratch of at least `bytes`, valid until the next call of Scratch with the same slot
  // (slots 0..kScratchSlots-1 are independent). Ops run in stream order on one stream, so a
  // buffer reused by a later op is never read by an earlier one still in flight. nullptr (and a
  // recorded failure) when out of memory.
  static constexpr int kScratchSlots = 4;
  void* Scratch(int slot, int64_t bytes);
  // A double computed on the device (at `device_value`) back on the host, after the ops before
  // it (one synchronisation): the losses' results. NaN after a failure.
  double ReadDouble(const double* device_value);
  // cuBLAS row-major GEMM on the compute stream with the math mode's compute type; Gemm and the
  // recurrences call it. Strided-batched when batch > 1 (stride_* in elements).
  void GemmBatched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                   int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                   int64_t batch);

  const int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  kernels::MathMode math_ = kernels::MathMode::kFp32;
  bool deterministic_ = true;
  std::unique_ptr<CudaRawAllocator> raw_;
  std::unique_ptr<CachingAllocator> allocator_;
  kernels::BackendBuffer scratch_[kScratchSlots];
  double* host_double_ = nullptr;  // pinned, for ReadDouble
  Status first_error_;
};

}  // namespace sift::cuda

// In CudaBackend member functions: record a failed CUDA/cuBLAS call or launch; evaluate to true
// when it succeeded.
#define SIFT_CUDA_CHECK(call) Check((call), #call, __FILE__, __LINE__)
#define SIFT_CUDA_CHECK_LAUNCH(launch) Check((launch), "launch " #launch, __FILE__, __LINE__)
