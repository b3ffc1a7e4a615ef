// kernels/cuda/elementwise_math.h on the device: every function, run in a kernel
// (ProbeElementwiseMathOnDevice) on 4096 seeded argument sets, against the same functions on the
// host (which tests/unit/cuda_elementwise_math_test.cc ties to the reference backend). Outputs
// made of + - * / sqrt only must be bit-identical (no FMA contraction on the device); outputs
// through the math library (CUDA's expf/tanhf within 2 ulp, exp/log1p/log within 1-2 ulp of
// glibc's) within the tolerances below. Skips itself where no GPU is visible.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_query.h"
#include "kernels/cuda/elementwise_math_probe.h"

namespace sift::cuda::math {
namespace {

// |device - host| <= tol * max(1, |host|): float outputs through expf/tanhf (a few float ulp of
// O(1) values, amplified at most ~4x by 1 - n^2 style factors), double ones through exp/log.
constexpr double kFloatMathTol = 2e-6;
constexpr double kDoubleMathTol = 1e-13;

TEST(CudaElementwiseMathDevice, MatchesHost) {
  auto devices = QueryDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (devices->empty()) GTEST_SKIP() << "no CUDA device visible";

  constexpr int kSets = 4096;
  Rng rng(7);
  std::vector<float> args(static_cast<size_t>(kSets) * kProbeInputs);
  for (float& a : args) a = static_cast<float>(2.0 * rng.Uniform() - 1.0);
  for (int i = 0; i < kProbeInputs; ++i) args[i] = 0.0f;  // set 0: PReLU at 0, BCE at 0, ...
  auto device = ProbeElementwiseMathOnDevice(args);
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_EQ(device->size(), static_cast<size_t>(kSets) * kProbeOutputs);

  std::vector<double> max_err(kProbeOutputs, 0.0);
  std::vector<double> host(kProbeOutputs);
  for (int s = 0; s < kSets; ++s) {
    ProbeElementwiseMath(args.data() + s * kProbeInputs, host.data());
    for (int k = 0; k < kProbeOutputs; ++k) {
      const double h = host[k], d = (*device)[static_cast<size_t>(s) * kProbeOutputs + k];
      ASSERT_TRUE(std::isfinite(d)) << "set " << s << " output " << k;
      const double err = std::abs(d - h) / std::max(1.0, std::abs(h));
      max_err[k] = std::max(max_err[k], err);
      if (ProbeOutputIsExact(k)) {
        ASSERT_EQ(d, h) << "set " << s << " output " << k << " (exact arithmetic)";
      } else {
        ASSERT_LE(err, ProbeOutputIsDouble(k) ? kDoubleMathTol : kFloatMathTol)
            << "set " << s << " output " << k << ": device " << d << " host " << h;
      }
    }
  }
  for (int k = 0; k < kProbeOutputs; ++k) {
    std::printf("[ errors ] output %2d: max |device - host| / max(1, |host|) = %.3g\n", k,
                max_err[k]);
  }
}

// Checked before any CUDA call: runs without a device too.
TEST(CudaElementwiseMathDevice, RejectsARaggedArgumentList) {
  auto r = ProbeElementwiseMathOnDevice(std::vector<float>(kProbeInputs + 1, 0.0f));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sift::cuda::math
