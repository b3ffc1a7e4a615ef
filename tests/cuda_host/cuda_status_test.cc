// CUDA / cuBLAS / NCCL results as Status. Runs without a device (the error names and strings come
// from the libraries), so it does not skip: it runs wherever the gpu tests are built.
#include "kernels/cuda/cuda_status.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift::cuda {
namespace {

using ::testing::HasSubstr;

TEST(CudaCallStatus, SuccessIsOk) {
  EXPECT_TRUE(CudaCallStatus(cudaSuccess, "cudaFree(p)", "f.cc", 1).ok());
  EXPECT_TRUE(CudaCallStatus(CUBLAS_STATUS_SUCCESS, "cublasSgemm(...)", "f.cc", 1).ok());
  EXPECT_EQ(CudaErrorCode(cudaSuccess), absl::StatusCode::kOk);
}

TEST(CudaCallStatus, NamesFileLineCallAndError) {
  const Status s =
      CudaCallStatus(cudaErrorMemoryAllocation, "cudaMalloc(&p, bytes)", "kernels/cuda/x.cc", 42);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("kernels/cuda/x.cc:42: cudaMalloc(&p, bytes) failed: "
                                     "cudaErrorMemoryAllocation ("));
  EXPECT_THAT(s.message(), HasSubstr(cudaGetErrorString(cudaErrorMemoryAllocation)));
}

TEST(CudaCallStatus, MapsCudaErrorsByWhatTheCallerShouldDo) {
  struct Case {
    cudaError_t err;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {cudaErrorMemoryAllocation, absl::StatusCode::kResourceExhausted},
      {cudaErrorLaunchOutOfResources, absl::StatusCode::kResourceExhausted},
      {cudaErrorInvalidValue, absl::StatusCode::kInvalidArgument},
      {cudaErrorInvalidMemcpyDirection, absl::StatusCode::kInvalidArgument},
      {cudaErrorInvalidConfiguration, absl::StatusCode::kInvalidArgument},
      {cudaErrorInvalidDevice, absl::StatusCode::kInvalidArgument},
      {cudaErrorNoDevice, absl::StatusCode::kFailedPrecondition},
      {cudaErrorInsufficientDriver, absl::StatusCode::kFailedPrecondition},
      {cudaErrorNoKernelImageForDevice, absl::StatusCode::kFailedPrecondition},
      {cudaErrorDevicesUnavailable, absl::StatusCode::kUnavailable},
      {cudaErrorLaunchTimeout, absl::StatusCode::kDeadlineExceeded},
      {cudaErrorNotSupported, absl::StatusCode::kUnimplemented},
      {cudaErrorIllegalAddress, absl::StatusCode::kInternal},
      {cudaErrorLaunchFailure, absl::StatusCode::kInternal},
      {cudaErrorUnknown, absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(CudaErrorCode(c.err), c.code) << cudaGetErrorName(c.err);
    const Status s = CudaCallStatus(c.err, "call()", "f.cc", 7);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(s.message(), HasSubstr(cudaGetErrorName(c.err)));
  }
}

TEST(CudaCallStatus, StickyErrorsSayTheContextIsLost) {
  EXPECT_TRUE(IsStickyCudaError(cudaErrorIllegalAddress));
  EXPECT_TRUE(IsStickyCudaError(cudaErrorAssert));
  EXPECT_FALSE(IsStickyCudaError(cudaErrorInvalidValue));
  EXPECT_FALSE(IsStickyCudaError(cudaErrorMemoryAllocation));
  EXPECT_THAT(CudaCallStatus(cudaErrorIllegalAddress, "k", "f.cu", 3).message(),
              HasSubstr("context is unusable"));
  EXPECT_THAT(CudaCallStatus(cudaErrorInvalidValue, "k", "f.cu", 3).message(),
              ::testing::Not(HasSubstr("context is unusable")));
}

TEST(CudaCallStatus, MapsCublasStatuses) {
  struct Case {
    cublasStatus_t status;
    absl::StatusCode code;
    const char* name;
  };
  const Case cases[] = {
      {CUBLAS_STATUS_ALLOC_FAILED, absl::StatusCode::kResourceExhausted,
       "CUBLAS_STATUS_ALLOC_FAILED"},
      {CUBLAS_STATUS_INVALID_VALUE, absl::StatusCode::kInvalidArgument,
       "CUBLAS_STATUS_INVALID_VALUE"},
      {CUBLAS_STATUS_NOT_INITIALIZED, absl::StatusCode::kFailedPrecondition,
       "CUBLAS_STATUS_NOT_INITIALIZED"},
      {CUBLAS_STATUS_ARCH_MISMATCH, absl::StatusCode::kFailedPrecondition,
       "CUBLAS_STATUS_ARCH_MISMATCH"},
      {CUBLAS_STATUS_NOT_SUPPORTED, absl::StatusCode::kUnimplemented,
       "CUBLAS_STATUS_NOT_SUPPORTED"},
      {CUBLAS_STATUS_EXECUTION_FAILED, absl::StatusCode::kInternal,
       "CUBLAS_STATUS_EXECUTION_FAILED"},
  };
  for (const Case& c : cases) {
    const Status s = CudaCallStatus(c.status, "cublasSgemm(h, ...)", "gemm.cc", 9);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("gemm.cc:9: cublasSgemm(h, ...) failed: ", c.name)));
  }
}

#if SIFT_HAVE_NCCL
TEST(CudaCallStatus, MapsNcclResults) {
  EXPECT_TRUE(CudaCallStatus(ncclSuccess, "ncclAllReduce(...)", "f.cc", 1).ok());
  struct Case {
    ncclResult_t result;
    absl::StatusCode code;
    const char* name;
  };
  const Case cases[] = {
      {ncclInvalidArgument, absl::StatusCode::kInvalidArgument, "ncclInvalidArgument"},
      {ncclInvalidUsage, absl::StatusCode::kFailedPrecondition, "ncclInvalidUsage"},
      {ncclSystemError, absl::StatusCode::kUnavailable, "ncclSystemError"},
      {ncclRemoteError, absl::StatusCode::kUnavailable, "ncclRemoteError"},
      {ncclInProgress, absl::StatusCode::kUnavailable, "ncclInProgress"},
      {ncclUnhandledCudaError, absl::StatusCode::kInternal, "ncclUnhandledCudaError"},
      {ncclInternalError, absl::StatusCode::kInternal, "ncclInternalError"},
  };
  for (const Case& c : cases) {
    const Status s = CudaCallStatus(c.result, "ncclAllReduce(...)", "nccl.cc", 5);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("nccl.cc:5: ncclAllReduce(...) failed: ", c.name, " (",
                                       ncclGetErrorString(c.result), ")")));
  }
}
#endif

cudaError_t FakeCudaCall(int /*unused*/) { return cudaErrorInvalidValue; }
cublasStatus_t FakeCublasCall() { return CUBLAS_STATUS_SUCCESS; }

Status CallsThroughTheMacro(int* line) {
  SIFT_CUDA_RETURN_IF_ERROR(FakeCublasCall());
  *line = __LINE__ + 1;
  SIFT_CUDA_RETURN_IF_ERROR(FakeCudaCall(3));
  return absl::InternalError("not reached");
}

StatusOr<int> ReturnsStatusOr() {
  SIFT_CUDA_RETURN_IF_ERROR(FakeCudaCall(4));
  return 1;
}

TEST(CudaMacros, ReturnTheFailureNamingThisFileLineAndCallText) {
  int line = 0;
  const Status s = CallsThroughTheMacro(&line);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("cuda_status_test.cc:", line,
                                     ": FakeCudaCall(3) failed: cudaErrorInvalidValue")));
  EXPECT_TRUE(absl::IsInvalidArgument(ReturnsStatusOr().status()));
  EXPECT_THAT(SIFT_CUDA_STATUS(FakeCudaCall(5)).message(), HasSubstr("FakeCudaCall(5)"));
}

}  // namespace
}  // namespace sift::cuda
