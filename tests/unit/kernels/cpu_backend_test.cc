// CPU-backend-specific behaviour (the per-op comparisons with the reference live in
// dense_ops_test.cc and sequence_ops_test.cc).
#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace sift::kernels {
namespace {

// Denormal floats are flushed to zero on the calling thread and on every pool thread (regression:
// denormals from saturated units made a SIM step at lr 0.1 2.3x slower). A 64x64x64 GEMM is big
// enough to be split over both threads; each product 1e-20 * 1e-20 = 1e-40 is denormal.
TEST(CpuBackendTest, DenormalsAreFlushedOnEveryThread) {
  auto cpu = CreateCpuBackend(2);
  const int n = 64;
  std::vector<float> a(n * n, 1e-20f), b(n * n, 1e-20f), c(n * n, 1.0f);
  cpu->Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  for (float v : c) ASSERT_EQ(v, 0.0f);
  // Normal numbers are untouched.
  std::fill(a.begin(), a.end(), 1e-10f);
  cpu->Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  for (float v : c) ASSERT_NEAR(v, n * 1e-30f, 1e-34f);
}

}  // namespace
}  // namespace sift::kernels
