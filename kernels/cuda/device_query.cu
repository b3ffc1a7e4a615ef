#include <cuda_runtime.h>

#include "kernels/cuda/device_query.h"

namespace sift::cuda {
namespace {

// A trivial kernel so the target carries device code for every architecture it is built for.
__global__ void ProbeKernel(int* out) { out[threadIdx.x] = static_cast<int>(threadIdx.x); }

}  // namespace

StatusOr<std::vector<DeviceInfo>> QueryDevices() {
  std::vector<DeviceInfo> out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return out;
  }
  if (err != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat(__FILE__, ":", __LINE__, ": cudaGetDeviceCount: ", cudaGetErrorString(err)));
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    err = cudaGetDeviceProperties(&p, i);
    if (err != cudaSuccess) {
      return absl::UnavailableError(absl::StrCat(__FILE__, ":", __LINE__,
                                                 ": cudaGetDeviceProperties(", i,
                                                 "): ", cudaGetErrorString(err)));
    }
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.sm_major = p.major;
    d.sm_minor = p.minor;
    d.multiprocessors = p.multiProcessorCount;
    d.total_memory_bytes = p.totalGlobalMem;
    int clock = 0;
    if (cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, i) == cudaSuccess) d.clock_khz = clock;
    out.push_back(d);
  }
  (void)&ProbeKernel;
  return out;
}

std::string RuntimeVersion() {
  return absl::StrCat(CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10);
}

}  // namespace sift::cuda
