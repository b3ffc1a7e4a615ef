// Every CUDA runtime, cuBLAS and (when built with NCCL) NCCL result becomes a sift Status whose
// message names the source file, line and call text:
//   SIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
//   "kernels/cuda/x.cc:42: cudaMemcpyAsync(...) failed: cudaErrorInvalidValue (invalid argument)"
// Codes follow what the caller should do: out of memory -> RESOURCE_EXHAUSTED, a bad argument ->
// INVALID_ARGUMENT, no usable device / driver / kernel image -> FAILED_PRECONDITION, a device or
// peer busy or gone -> UNAVAILABLE, a watchdog timeout -> DEADLINE_EXCEEDED, an unsupported feature
// -> UNIMPLEMENTED, anything else (sticky launch failures included) -> INTERNAL. Thread-safety: the
// functions are thread-safe; CudaCallStatus clears the calling thread's CUDA "last error" when
// `err` is a failure, so a later cudaGetLastError() check does not report it again (sticky errors
// stay: the context is unusable).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "common/status.h"

#if SIFT_HAVE_NCCL
#include <nccl.h>
#endif

namespace sift::cuda {

// The absl code for each result (kOk for success).
absl::StatusCode CudaErrorCode(cudaError_t err);
absl::StatusCode CublasErrorCode(cublasStatus_t status);

// OK for success; else "<file>:<line>: <call> failed: <name> (<description>)" with the code above.
// `call` and `file` are NUL-terminated (the macros pass string literals).
Status CudaCallStatus(cudaError_t err, const char* call, const char* file, int line);
Status CudaCallStatus(cublasStatus_t status, const char* call, const char* file, int line);

// True for the errors after which the CUDA context is corrupt and every later call fails (an
// illegal address, a launch failure, a device assert, ...): the process must exit to recover.
bool IsStickyCudaError(cudaError_t err);

#if SIFT_HAVE_NCCL
// ncclInvalidArgument -> INVALID_ARGUMENT, ncclInvalidUsage -> FAILED_PRECONDITION,
// ncclSystemError / ncclRemoteError (a peer or the network failed) -> UNAVAILABLE,
// ncclInProgress (a non-blocking call not finished: callers poll for it before converting) ->
// UNAVAILABLE, ncclUnhandledCudaError / ncclInternalError -> INTERNAL.
absl::StatusCode NcclErrorCode(ncclResult_t result);
Status CudaCallStatus(ncclResult_t result, const char* call, const char* file, int line);
#endif

}  // namespace sift::cuda

// The Status of a CUDA / cuBLAS / NCCL call expression, naming this file, line and the call.
#define SIFT_CUDA_STATUS(call) ::sift::cuda::CudaCallStatus((call), #call, __FILE__, __LINE__)

// Evaluates a CUDA / cuBLAS / NCCL call; returns its Status from the enclosing function (which
// returns Status or StatusOr<T>) when it failed.
#define SIFT_CUDA_RETURN_IF_ERROR(call) SIFT_RETURN_IF_ERROR(SIFT_CUDA_STATUS(call))

// After a kernel launch `name<<<...>>>(...)`: returns the launch error (bad configuration, no
// kernel image, ...) named after `name` (a string literal) from the enclosing function.
#define SIFT_CUDA_RETURN_IF_LAUNCH_ERROR(name) \
  SIFT_RETURN_IF_ERROR(                        \
      ::sift::cuda::CudaCallStatus(cudaGetLastError(), "launch of " name, __FILE__, __LINE__))
