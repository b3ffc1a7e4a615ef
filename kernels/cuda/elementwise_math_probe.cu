// ProbeElementwiseMathOnDevice: one thread per argument set, each running ProbeElementwiseMath.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise_math_probe.h"

namespace sift::cuda::math {
namespace {

__global__ void ProbeKernel(const float* args, int64_t n, double* out) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) ProbeElementwiseMath(args + i * kProbeInputs, out + i * kProbeOutputs);
}

// cudaFree on scope exit.
struct DeviceFree {
  void* p = nullptr;
  ~DeviceFree() {
    if (p != nullptr) (void)cudaFree(p);
  }
};

}  // namespace

StatusOr<std::vector<double>> ProbeElementwiseMathOnDevice(const std::vector<float>& args) {
  if (args.size() % kProbeInputs != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ProbeElementwiseMathOnDevice: ", args.size(),
                                                   " arguments, not a multiple of ", kProbeInputs));
  }
  const int64_t n = static_cast<int64_t>(args.size()) / kProbeInputs;
  std::vector<double> out(static_cast<size_t>(n) * kProbeOutputs);
  if (n == 0) return out;
  DeviceFree d_args, d_out;
  SIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_args.p, args.size() * sizeof(float)));
  SIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_out.p, out.size() * sizeof(double)));
  SIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(d_args.p, args.data(), args.size() * sizeof(float), cudaMemcpyHostToDevice));
  constexpr int kThreads = 128;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  ProbeKernel<<<blocks, kThreads>>>(static_cast<const float*>(d_args.p), n,
                                    static_cast<double*>(d_out.p));
  SIFT_CUDA_RETURN_IF_LAUNCH_ERROR("ProbeKernel");
  SIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(out.data(), d_out.p, out.size() * sizeof(double), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace sift::cuda::math
