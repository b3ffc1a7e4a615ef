// CudaBackend (cuda_backend_impl.h): creation, memory, errors, and the dense op family.
// - GEMMs (Gemm, the dense layers' x W, dx += dpre W^T, dW += x^T dpre, the recurrences'
//   projections through GemmBatched) are cublasGemmEx / cublasGemmStridedBatchedEx calls in the
//   math mode's compute type, mapped from row major by RowMajorGemmOnCublas (cuda_dense_plan.h).
//   cuBLAS is deterministic on one stream (its default atomics mode forbids atomics).
// - Element-wise work (Fill, Copy, Scale, the dense epilogue and activation backward, Adam) is one
//   thread per element (cuda_dense_kernels.cu) with elementwise_math.h's arithmetic.
// - Reductions (the losses, bias / slope gradients, AllFinite) sum in double over fixed
//   partitions of the rows (cuda_dense_plan.h) into Scratch slot 0, combined in a fixed order:
//   no float atomics, bit-reproducible.
// Every launch and library call is checked: the first failure is kept for Synchronize() and the
// later ops are skipped (cuda_backend.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/cuda_copy_channel.h"
#include "kernels/cuda/cuda_dense_kernels.h"
#include "kernels/cuda/cuda_dense_plan.h"
#include "kernels/reference/dense_ops.h"

namespace sift::cuda {
namespace {

static_assert(static_cast<int>(DenseActivation::kNone) ==
                      static_cast<int>(kernels::Activation::kNone) &&
                  static_cast<int>(DenseActivation::kSigmoid) ==
                      static_cast<int>(kernels::Activation::kSigmoid) &&
                  static_cast<int>(DenseActivation::kPrelu) ==
                      static_cast<int>(kernels::Activation::kPrelu),
              "DenseActivation must mirror kernels::Activation");

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

cublasComputeType_t ComputeType(kernels::MathMode mode) {
  switch (mode) {
    case kernels::MathMode::kFp32:
      return CUBLAS_COMPUTE_32F;
    case kernels::MathMode::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case kernels::MathMode::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case kernels::MathMode::kFp16:
      return CUBLAS_COMPUTE_32F_FAST_16F;
  }
  return CUBLAS_COMPUTE_32F;
}

cublasOperation_t Op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

DenseActivation ToDense(kernels::Activation act) { return static_cast<DenseActivation>(act); }

}  // namespace

StatusOr<std::unique_ptr<kernels::Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(options));
  return std::unique_ptr<kernels::Backend>(std::move(backend));
}

CudaBackend::CudaBackend(int device, std::unique_ptr<CudaRawAllocator> raw)
    : device_(device),
      raw_(std::move(raw)),
      allocator_(std::make_unique<CachingAllocator>(raw_.get())) {}

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& options) {
  int count = 0;
  const Status counted = SIFT_CUDA_STATUS(cudaGetDeviceCount(&count));
  if (!counted.ok()) {
    // No driver, the toolkit's link-only libcuda, no device: all "no usable device" for the
    // caller.
    return absl::FailedPreconditionError(
        absl::StrCat("cuda backend: no usable CUDA device: ", counted.message()));
  }
  if (options.device < 0 || options.device >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::FailedPreconditionError(
        absl::StrCat("cuda backend: device ", options.device, " does not exist (this process sees ",
                     count, " CUDA device", count == 1 ? "" : "s", "; CUDA_VISIBLE_DEVICES=",
                     visible != nullptr ? absl::StrCat("'", visible, "'") : "unset", ")"));
  }
  SIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  std::unique_ptr<CudaBackend> backend(
      new CudaBackend(options.device, std::make_unique<CudaRawAllocator>(options.device)));
  SIFT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking));
  SIFT_CUDA_RETURN_IF_ERROR(cublasCreate(&backend->cublas_));
  SIFT_CUDA_RETURN_IF_ERROR(cublasSetStream(backend->cublas_, backend->stream_));
  // The compute type of each call (ComputeType) decides the tensor-core use; the handle's own
  // mode adds nothing (no implicit TF32 for CUBLAS_COMPUTE_32F).
  SIFT_CUDA_RETURN_IF_ERROR(cublasSetMathMode(backend->cublas_, CUBLAS_DEFAULT_MATH));
  void* pinned = nullptr;
  SIFT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned, sizeof(double)));
  backend->host_double_ = static_cast<double*>(pinned);
  SIFT_RETURN_IF_ERROR(backend->SetMathMode(options.math));
  return backend;
}

CudaBackend::~CudaBackend() {
  // Work still queued may use the scratch blocks: wait for it before they go back.
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  for (kernels::BackendBuffer& s : scratch_) s.Reset();
  if (host_double_ != nullptr) (void)cudaFreeHost(host_double_);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  // allocator_ (declared after raw_) is destroyed next and returns its cached blocks to cudaFree.
}

// ---- Errors ------------------------------------------------------------------------------------

void CudaBackend::Record(Status s) { first_error_.Update(std::move(s)); }

bool CudaBackend::Check(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return true;
  Record(CudaCallStatus(err, what, file, line));
  return false;
}

bool CudaBackend::Check(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  Record(CudaCallStatus(status, what, file, line));
  return false;
}

Status CudaBackend::Synchronize() {
  const cudaError_t err = cudaStreamSynchronize(stream_);
  if (err != cudaSuccess) {
    Record(CudaCallStatus(err, "cudaStreamSynchronize(stream_)", __FILE__, __LINE__));
  }
  Status result = first_error_;
  // A sticky error leaves the context unusable: every later Synchronize reports it again (the
  // stream sync keeps failing with it, so it never clears).
  if (!IsStickyCudaError(err)) first_error_ = absl::OkStatus();
  return result;
}

Status CudaBackend::SetMathMode(kernels::MathMode mode) {
  switch (mode) {
    case kernels::MathMode::kFp32:
    case kernels::MathMode::kTf32:
    case kernels::MathMode::kBf16:
    case kernels::MathMode::kFp16:
      math_ = mode;
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cuda backend: unknown math mode ", static_cast<int>(mode)));
}

// ---- Memory ------------------------------------------------------------------------------------

StatusOr<kernels::BackendBuffer> CudaBackend::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CudaBackend::Allocate: negative size ", bytes));
  }
  if (bytes == 0) return kernels::BackendBuffer();
  StatusOr<MemoryBlock> block = allocator_->Allocate(static_cast<size_t>(bytes));
  if (!block.ok()) return Annotate(block.status(), "cuda backend: device memory");
  CachingAllocator* allocator = allocator_.get();
  const MemoryBlock b = *block;
  kernels::BackendBuffer buffer(b.ptr, bytes, [allocator, b](void*) { allocator->Release(b); });
  // In stream order: after every op that used a previous owner of the block, before any op on it.
  SIFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.ptr, 0, b.bytes, stream_));
  return buffer;
}

Status CudaBackend::CopyToBackend(const void* src, void* dst, int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackend::CopyToBackend: negative size ", bytes));
  }
  if (bytes == 0) return absl::OkStatus();
  // From pageable memory, cudaMemcpyAsync returns once the source is staged: reusable. From
  // page-locked (or managed) memory it returns at once, so wait for the copy to keep the contract.
  cudaPointerAttributes attributes{};
  const cudaError_t queried = cudaPointerGetAttributes(&attributes, src);
  if (queried != cudaSuccess) (void)cudaGetLastError();
  const bool pageable = queried == cudaSuccess && attributes.type == cudaMemoryTypeUnregistered;
  SIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
  if (!pageable) SIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<kernels::CopyChannel>> CudaBackend::CreateCopyChannel(
    int64_t staging_bytes) {
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<CudaCopyChannel> channel,
                        CudaCopyChannel::Create(device_, staging_bytes));
  return std::unique_ptr<kernels::CopyChannel>(std::move(channel));
}

StatusOr<kernels::Fence> CudaBackend::RecordFence() {
  // After a failed op the work before the fence is not what the caller thinks: report it.
  if (failed()) return Annotate(first_error_, "CudaBackend::RecordFence after a failed op");
  // Events are created on the calling thread's current device: the stream's.
  SIFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return RecordCudaFence(stream_);
}

Status CudaBackend::WaitFence(const kernels::Fence& fence) {
  Status s = SIFT_CUDA_STATUS(cudaSetDevice(device_));
  if (s.ok()) s = WaitCudaFence(stream_, fence);
  Record(s);
  return s;
}

Status CudaBackend::CopyToHost(const void* src, void* dst, int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackend::CopyToHost: negative size ", bytes));
  }
  // The ops that produced `src` failed: its contents are undefined; never hand them out.
  if (failed()) {
    return Annotate(first_error_, "CudaBackend::CopyToHost after a failed op");
  }
  if (bytes == 0) return absl::OkStatus();
  SIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
  const cudaError_t err = cudaStreamSynchronize(stream_);
  if (err != cudaSuccess) {
    Status s = CudaCallStatus(err, "cudaStreamSynchronize(stream_)", __FILE__, __LINE__);
    Record(s);
    return s;
  }
  return absl::OkStatus();
}

void* CudaBackend::Scratch(int slot, int64_t bytes) {
  if (slot < 0 || slot >= kScratchSlots) {
    Record(absl::InternalError(
        absl::StrCat("CudaBackend::Scratch: slot ", slot, " (0..", kScratchSlots - 1, ")")));
    return nullptr;
  }
  if (bytes < 1) bytes = 1;
  kernels::BackendBuffer& buffer = scratch_[slot];
  if (buffer.bytes() >= bytes) return buffer.data();
  // Released before the new block is taken: in stream order, ops still queued on the old block
  // run before any later use of it (one stream).
  buffer.Reset();
  StatusOr<MemoryBlock> block = allocator_->Allocate(static_cast<size_t>(bytes));
  if (!block.ok()) {
    Record(Annotate(block.status(), absl::StrCat("cuda backend: scratch slot ", slot)));
    return nullptr;
  }
  CachingAllocator* allocator = allocator_.get();
  const MemoryBlock b = *block;
  buffer = kernels::BackendBuffer(b.ptr, static_cast<int64_t>(b.bytes),
                                  [allocator, b](void*) { allocator->Release(b); });
  return buffer.data();
}

double CudaBackend::ReadDouble(const double* device_value) {
  if (failed()) return kNan;
  if (!SIFT_CUDA_CHECK(cudaMemcpyAsync(host_double_, device_value, sizeof(double),
                                       cudaMemcpyDeviceToHost, stream_))) {
    return kNan;
  }
  if (!SIFT_CUDA_CHECK(cudaStreamSynchronize(stream_))) return kNan;
  return *host_double_;
}

// ---- GEMM --------------------------------------------------------------------------------------

void CudaBackend::GemmBatched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const float* a, int64_t lda, int64_t stride_a,
                              const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                              int64_t ldc, int64_t stride_c, int64_t batch) {
  if (failed()) return;
  if (m < 0 || n < 0 || k < 0 || batch < 0) {
    Record(absl::InvalidArgumentError(absl::StrCat("CudaBackend GEMM: negative size (m ", m, ", n ",
                                                   n, ", k ", k, ", batch ", batch, ")")));
    return;
  }
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    // op(A) op(B) is empty: C = beta C (zeros for beta 0, whatever C held).
    SIFT_CUDA_CHECK_LAUNCH(LaunchScaleMatrices(stream_, batch, m, n, beta, c, ldc, stride_c));
    return;
  }
  const CublasGemmArgs g = RowMajorGemmOnCublas(trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb,
                                                stride_b, ldc, stride_c);
  if (!FitsCublasInt(g, batch)) {
    Record(absl::InvalidArgumentError(
        absl::StrCat("CudaBackend GEMM: m ", m, ", n ", n, ", k ", k, ", lda ", lda, ", ldb ", ldb,
                     ", ldc ", ldc, ", batch ", batch, " exceed cuBLAS's int arguments")));
    return;
  }
  const cublasComputeType_t compute = ComputeType(math_);
  const int gm = static_cast<int>(g.m), gn = static_cast<int>(g.n), gk = static_cast<int>(g.k);
  const int glda = static_cast<int>(g.lda), gldb = static_cast<int>(g.ldb);
  const int gldc = static_cast<int>(g.ldc);
  // beta == 0: cuBLAS does not read C (NaN-safe, as the contract wants).
  if (batch == 1) {
    SIFT_CUDA_CHECK(cublasGemmEx(cublas_, Op(g.trans_a), Op(g.trans_b), gm, gn, gk, &alpha, g.a,
                                 CUDA_R_32F, glda, g.b, CUDA_R_32F, gldb, &beta, c, CUDA_R_32F,
                                 gldc, compute, CUBLAS_GEMM_DEFAULT));
  } else {
    SIFT_CUDA_CHECK(cublasGemmStridedBatchedEx(
        cublas_, Op(g.trans_a), Op(g.trans_b), gm, gn, gk, &alpha, g.a, CUDA_R_32F, glda,
        g.stride_a, g.b, CUDA_R_32F, gldb, g.stride_b, &beta, c, CUDA_R_32F, gldc, g.stride_c,
        static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT));
  }
}

void CudaBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                       float* c, int64_t ldc) {
  GemmBatched(trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

// ---- Memory ops --------------------------------------------------------------------------------

void CudaBackend::Fill(int64_t n, float value, float* p) {
  if (failed() || n <= 0) return;
  if (value == 0.0f && !std::signbit(value)) {
    SIFT_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(n) * sizeof(float), stream_));
    return;
  }
  SIFT_CUDA_CHECK_LAUNCH(LaunchFill(stream_, n, value, p));
}

void CudaBackend::Copy(int64_t outer, int64_t rows, int64_t cols, const float* src,
                       int64_t src_outer, int64_t src_row, float* dst, int64_t dst_outer,
                       int64_t dst_row, bool accumulate) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchCopy(stream_, outer, rows, cols, src, src_outer, src_row, dst,
                                    dst_outer, dst_row, accumulate));
}

void CudaBackend::Scale(int64_t n, float alpha, float* p) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchScale(stream_, n, alpha, p));
}

void CudaBackend::Dropout(int64_t n, uint64_t seed, float rate, float scale, float* p) {
  if (failed()) return;
  SIFT_CUDA_CHECK_LAUNCH(LaunchDropout(stream_, n, seed, rate, scale, p));
}

bool CudaBackend::AllFinite(int64_t n, const float* p) {
  if (failed()) return false;  // undefined contents: never report them finite
  if (n <= 0) return true;
  auto* partial = static_cast<double*>(
      Scratch(0, ReducePartialDoubles(n) * static_cast<int64_t>(sizeof(double))));
  if (partial == nullptr) return false;
  if (!SIFT_CUDA_CHECK_LAUNCH(LaunchCountNonFiniteBlocks(stream_, n, p, partial))) return false;
  return ReadDouble(partial + ReduceBlocks(n)) == 0.0;
}

// ---- Dense layer -------------------------------------------------------------------------------

void CudaBackend::DenseForward(const kernels::DenseDims& d, const float* x, int64_t ldx,
                               const float* w, const float* b, const float* slope, float* pre,
                               float* y) {
  if (failed() || d.rows <= 0 || d.out <= 0) return;
  // pre = x W (in == 0: zeros), then one pass: pre += b, y = act(pre).
  GemmBatched(false, false, d.rows, d.out, d.in, 1.0f, x, ldx, 0, w, d.out, 0, 0.0f, pre, d.out, 0,
              1);
  if (failed()) return;
  if (d.act == kernels::Activation::kNone && b == nullptr && pre == y) return;
  SIFT_CUDA_CHECK_LAUNCH(
      LaunchDenseEpilogue(stream_, d.rows, d.out, ToDense(d.act), b, slope, pre, y));
}

void CudaBackend::DenseBackward(const kernels::DenseDims& d, const float* x, int64_t ldx,
                                const float* w, const float* slope, const float* pre,
                                const float* y, const float* dy, float* dx, int64_t lddx, float* dw,
                                float* db, float* dslope, float* workspace) {
  if (failed() || d.rows <= 0 || d.out <= 0) return;
  // dpre = dy through the activation (dy itself for kNone), in the workspace.
  const float* dpre = dy;
  if (d.act != kernels::Activation::kNone) {
    if (!SIFT_CUDA_CHECK_LAUNCH(LaunchDenseActivationBackward(
            stream_, d.rows, d.out, ToDense(d.act), pre, y, slope, dy, workspace))) {
      return;
    }
    dpre = workspace;
  }
  const bool need_slope = d.act == kernels::Activation::kPrelu && dslope != nullptr;
  double* partial = nullptr;
  if (need_slope || db != nullptr) {
    partial = static_cast<double*>(
        Scratch(0, ColumnPartialDoubles(d.rows, d.out) * static_cast<int64_t>(sizeof(double))));
    if (partial == nullptr) return;
  }
  if (need_slope) {
    // dslope[o] += sum over rows with pre < 0 of dy * pre (in double).
    if (!SIFT_CUDA_CHECK_LAUNCH(LaunchColumnSums(stream_, ColumnSumTerm::kPreluSlope, d.rows, d.out,
                                                 pre, dy, partial, dslope))) {
      return;
    }
  }
  if (dx != nullptr && d.in > 0) {
    // dx[rows, in] += dpre[rows, out] W^T.
    GemmBatched(false, true, d.rows, d.in, d.out, 1.0f, dpre, d.out, 0, w, d.out, 0, 1.0f, dx, lddx,
                0, 1);
  }
  if (dw != nullptr && d.in > 0) {
    // dW[in, out] += x^T dpre.
    GemmBatched(true, false, d.in, d.out, d.rows, 1.0f, x, ldx, 0, dpre, d.out, 0, 1.0f, dw, d.out,
                0, 1);
  }
  if (db != nullptr && !failed()) {
    SIFT_CUDA_CHECK_LAUNCH(LaunchColumnSums(stream_, ColumnSumTerm::kValue, d.rows, d.out, dpre,
                                            nullptr, partial, db));
  }
}

// ---- Losses ------------------------------------------------------------------------------------

double CudaBackend::BceWithLogits(int64_t n, const float* logits, const float* labels, float scale,
                                  float* dlogits) {
  if (failed()) return kNan;
  if (n <= 0) return 0.0;
  auto* partial = static_cast<double*>(
      Scratch(0, ReducePartialDoubles(n) * static_cast<int64_t>(sizeof(double))));
  if (partial == nullptr) return kNan;
  if (!SIFT_CUDA_CHECK_LAUNCH(
          LaunchBceWithLogits(stream_, n, logits, labels, scale, dlogits, partial))) {
    return kNan;
  }
  return ReadDouble(partial + ReduceBlocks(n));
}

double CudaBackend::AuxLoss(int64_t n, const float* pos_logits, const float* neg_logits,
                            const float* mask, float scale, float* dpos, float* dneg) {
  if (failed()) return kNan;
  if (n <= 0) return 0.0;
  auto* partial = static_cast<double*>(
      Scratch(0, ReducePartialDoubles(n) * static_cast<int64_t>(sizeof(double))));
  if (partial == nullptr) return kNan;
  if (!SIFT_CUDA_CHECK_LAUNCH(
          LaunchAuxLoss(stream_, n, pos_logits, neg_logits, mask, scale, dpos, dneg, partial))) {
    return kNan;
  }
  return ReadDouble(partial + ReduceBlocks(n));
}

// ---- Optimizer ---------------------------------------------------------------------------------

void CudaBackend::AdamUpdate(int64_t n, const kernels::AdamHyper& h, int64_t t, const float* grad,
                             float* param, float* m, float* v) {
  if (failed() || n <= 0) return;
  // The reference's step size (double), rounded to float once.
  const auto lr_t = static_cast<float>(kernels::reference::AdamStepSize(h, t));
  SIFT_CUDA_CHECK_LAUNCH(
      LaunchAdamUpdate(stream_, n, lr_t, h.beta1, h.beta2, h.epsilon, grad, param, m, v));
}

}  // namespace sift::cuda
