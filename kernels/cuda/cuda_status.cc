#include "kernels/cuda/cuda_status.h"

namespace sift::cuda {
namespace {

Status Failure(absl::StatusCode code, const char* call, const char* file, int line,
               const char* name, const char* description, const char* note) {
  return Status(code, absl::StrCat(file, ":", line, ": ", call, " failed: ", name, " (",
                                   description, ")", note));
}

}  // namespace

absl::StatusCode CudaErrorCode(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorMemoryAllocation:
    case cudaErrorLaunchOutOfResources:
    case cudaErrorLaunchMaxDepthExceeded:
    case cudaErrorLaunchPendingCountExceeded:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidSymbol:
    case cudaErrorInvalidHostPointer:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidSource:
    case cudaErrorFileNotFound:
    case cudaErrorMissingConfiguration:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
    case cudaErrorPeerAccessAlreadyEnabled:
    case cudaErrorPeerAccessNotEnabled:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidKernelImage:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    // CUDA's own enum name: the libcuda found is the toolkit's link-only copy, not a driver.
    case cudaErrorStubLibrary:
    case cudaErrorDeviceNotLicensed:
    case cudaErrorInitializationError:
    case cudaErrorDeviceUninitialized:
    case cudaErrorCudartUnloading:
    case cudaErrorIllegalState:
    case cudaErrorNotPermitted:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorNotReady:
    case cudaErrorMpsConnectionFailed:
    case cudaErrorMpsClientTerminated:
      return absl::StatusCode::kUnavailable;
    case cudaErrorLaunchTimeout:
    case cudaErrorTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    case cudaErrorNotSupported:
    case cudaErrorUnsupportedLimit:
    case cudaErrorPeerAccessUnsupported:
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorUnsupportedDevSideSync:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

bool IsStickyCudaError(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorExternalDevice:
      return true;
    default:
      return false;
  }
}

Status CudaCallStatus(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  // A failed call also set this thread's last error; clear it so that the next launch check
  // reports only its own failure. Sticky errors cannot be cleared and are reported as such.
  const bool sticky = IsStickyCudaError(err);
  if (!sticky) (void)cudaGetLastError();
  return Failure(CudaErrorCode(err), call, file, line, cudaGetErrorName(err),
                 cudaGetErrorString(err),
                 sticky ? "; the CUDA context is unusable, the process must restart" : "");
}

absl::StatusCode CublasErrorCode(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return absl::StatusCode::kOk;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_LICENSE_ERROR:
      return absl::StatusCode::kFailedPrecondition;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    default:  // MAPPING_ERROR, EXECUTION_FAILED, INTERNAL_ERROR and any later code
      return absl::StatusCode::kInternal;
  }
}

Status CudaCallStatus(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return Failure(CublasErrorCode(status), call, file, line, cublasGetStatusName(status),
                 cublasGetStatusString(status), "");
}

#if SIFT_HAVE_NCCL
absl::StatusCode NcclErrorCode(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return absl::StatusCode::kOk;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError:
    case ncclInProgress:
      return absl::StatusCode::kUnavailable;
    default:  // ncclUnhandledCudaError, ncclInternalError and any later code
      return absl::StatusCode::kInternal;
  }
}

Status CudaCallStatus(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* name = "ncclResult";
  switch (result) {
    case ncclUnhandledCudaError:
      name = "ncclUnhandledCudaError";
      break;
    case ncclSystemError:
      name = "ncclSystemError";
      break;
    case ncclInternalError:
      name = "ncclInternalError";
      break;
    case ncclInvalidArgument:
      name = "ncclInvalidArgument";
      break;
    case ncclInvalidUsage:
      name = "ncclInvalidUsage";
      break;
    case ncclRemoteError:
      name = "ncclRemoteError";
      break;
    case ncclInProgress:
      name = "ncclInProgress";
      break;
    default:
      break;
  }
  return Failure(NcclErrorCode(result), call, file, line, name, ncclGetErrorString(result), "");
}
#endif

}  // namespace sift::cuda
