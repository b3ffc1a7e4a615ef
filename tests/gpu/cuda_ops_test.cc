// The op tests of the model issue on the cuda backend: the bodies of dense_ops_tests.h and
// sequence_ops_tests.h (fp32, the tolerances stated there) instantiated for "cuda-mirrored", the
// cuda backend inside a MirroredBackend (host arguments copied to device buffers of their exact
// extents and back); and the GEMM and dense layers in every reduced-precision MathMode against
// the double reference within bounds derived from the mantissa width; the segment sum's atomic
// option (SetDeterministic(false)) against the reference and the sorted path. Every test skips
// itself where the cuda backend cannot be created (no device: FAILED_PRECONDITION).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/reference/dense_ops.h"
#include "tests/unit/kernels/backend_fixture.h"
#include "tests/unit/kernels/dense_ops_tests.h"
#include "tests/unit/kernels/op_test_util.h"
#include "tests/unit/kernels/precision_tests.h"
#include "tests/unit/kernels/sequence_ops_tests.h"
#include "tests/util/mirrored_backend.h"

namespace sift::kernels {

// gtest prints a MathMode parameter by name.
void PrintTo(MathMode mode, std::ostream* os) { *os << MathModeName(mode); }

namespace {
// This binary links sift_cuda: "cuda" is its CreateCudaBackend on device 0, in fp32, whether or
// not kernels::CreateBackend offers it in this build.
[[maybe_unused]] const bool kCudaRegistered = [] {
  sift::testing::RegisterTestBackend(
      "cuda", [](int) { return cuda::CreateCudaBackend(cuda::CudaBackendOptions{}); });
  return true;
}();
}  // namespace

namespace dense_op_tests {
INSTANTIATE_TEST_SUITE_P(Cuda, DenseOpsTest, ::testing::Values("cuda-mirrored"),
                         testing::BackendParamName);
}  // namespace dense_op_tests
namespace sequence_op_tests {
INSTANTIATE_TEST_SUITE_P(Cuda, SequenceOpsTest, ::testing::Values("cuda-mirrored"),
                         testing::BackendParamName);
}  // namespace sequence_op_tests

namespace {

using testing::AllClose;
using testing::AsDouble;
using testing::AsFloat;
using testing::BitIdentical;
using testing::RandomFloats;
using testing::RandomIndices;
using testing::RandomMask;
using Vf = std::vector<float>;
using Vd = std::vector<double>;

// ---- Reduced precision: precision_tests.h in tf32 / bf16 / fp16 ---------------------------
}  // namespace
namespace precision_op_tests {
INSTANTIATE_TEST_SUITE_P(Cuda, PrecisionOpsTest,
                         ::testing::Combine(::testing::Values("cuda-mirrored"),
                                            ::testing::Values(MathMode::kTf32, MathMode::kBf16,
                                                              MathMode::kFp16)),
                         PrecisionParamName);
}  // namespace precision_op_tests
namespace {

// The cuda backend takes every MathMode and reports the one set (through the mirror, which
// forwards both calls).
TEST(CudaMathModeTest, AcceptsEveryPrecision) {
  auto b = sift::testing::CreateTestBackend("cuda-mirrored", 1);
  if (!b.ok() && (absl::IsFailedPrecondition(b.status()) || absl::IsInvalidArgument(b.status()))) {
    GTEST_SKIP() << "no cuda backend here: " << b.status();
  }
  ASSERT_TRUE(b.ok()) << b.status();
  for (MathMode mode : {MathMode::kTf32, MathMode::kBf16, MathMode::kFp16, MathMode::kFp32}) {
    const Status s = (*b)->SetMathMode(mode);
    EXPECT_TRUE(s.ok()) << MathModeName(mode) << ": " << s;
    EXPECT_EQ((*b)->math_mode(), mode);
  }
}

// ---- Segment sum: the deterministic default and the atomic option ----------------------------
// The cuda-mirrored backend, or a skip (no device).
#define SIFT_CUDA_BACKEND_OR_SKIP(var)                                    \
  auto var##_or = sift::testing::CreateTestBackend("cuda-mirrored", 1);   \
  if (!var##_or.ok() && (absl::IsFailedPrecondition(var##_or.status()) || \
                         absl::IsInvalidArgument(var##_or.status()))) {   \
    GTEST_SKIP() << "no cuda backend here: " << var##_or.status();        \
  }                                                                       \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status();                        \
  std::unique_ptr<Backend> var = std::move(*var##_or)

struct SegmentCase {
  int64_t n;
  int dim;
  int32_t unique;
};
// Small and empty-ish segments, heavy contention (37 keys over 200k rows: ~5400 atomics per
// address), many keys, and n * dim = 17.8M elements > the 65535 x 256 threads of one grid (the
// grid-stride loop).
constexpr SegmentCase kSegmentCases[] = {{1, 16, 37},      {50, 33, 37},       {5000, 16, 37},
                                         {200000, 16, 37}, {200000, 8, 50000}, {1 << 20, 17, 4096}};

// sum_i |dout[i, c] * mask[i]| per (key, column): the scale of a sum's rounding error.
Vd AbsTermSums(const SegmentCase& sc, int64_t ld, const Vf& dout, const std::vector<int32_t>& inv,
               const float* mask) {
  Vd abs_sum(static_cast<size_t>(sc.unique) * sc.dim, 0.0);
  for (int64_t i = 0; i < sc.n; ++i) {
    if (inv[i] < 0) continue;
    for (int c = 0; c < sc.dim; ++c) {
      abs_sum[int64_t{inv[i]} * sc.dim + c] +=
          std::abs(static_cast<double>(dout[i * ld + c]) * (mask != nullptr ? mask[i] : 1.0));
    }
  }
  return abs_sum;
}

// The sorted (deterministic) path is the default and gives the same bits run after run, also
// after a round trip through the atomic option.
TEST(CudaSegmentSumTest, DeterministicByDefaultAndBitIdenticalAcrossRuns) {
  SIFT_CUDA_BACKEND_OR_SKIP(be);
  EXPECT_TRUE(be->deterministic());
  const SegmentCase sc{200000, 16, 37};
  const int64_t ld = sc.dim + 3;
  const std::vector<int32_t> inv = RandomIndices(sc.n, 300, -1, sc.unique);
  const Vf dout = RandomFloats(sc.n * ld, 301), mask = RandomMask(sc.n, 302);
  const Vf drows0 = RandomFloats(int64_t{sc.unique} * sc.dim, 303);
  auto run = [&] {
    Vf drows = drows0;
    be->SegmentSumRows(sc.n, sc.dim, dout.data(), ld, inv.data(), mask.data(), sc.unique,
                       drows.data());
    return drows;
  };
  const Vf first = run();
  EXPECT_TRUE(BitIdentical(run(), first));
  ASSERT_TRUE(be->SetDeterministic(false).ok());
  (void)run();
  ASSERT_TRUE(be->SetDeterministic(true).ok());
  EXPECT_TRUE(be->deterministic());
  EXPECT_TRUE(BitIdentical(run(), first));
  // And it is the reference's float sum in increasing i, bit for bit.
  Vf want = drows0;
  reference::SegmentSumRows<float>(sc.n, sc.dim, dout.data(), ld, inv.data(), mask.data(),
                                   sc.unique, want.data());
  EXPECT_TRUE(BitIdentical(first, want));
}

// The atomic option adds the same terms in another order. Tolerance: a float sum of k terms in
// any order is off from the exact sum by <= (k - 1) * 2^-24 * sum|terms| (and ~sqrt(k) * 2^-24 *
// sum|terms| in practice, k up to ~5400 here: ~4.4e-6); the check |got - want| <= 1e-5 *
// max(1, sum|terms|) per element (want: the double reference) holds with a wide margin while any
// indexing or masking bug is O(1). Keys without terms keep their bits (+= of nothing).
TEST(CudaSegmentSumTest, AtomicOptionMatchesTheReference) {
  SIFT_CUDA_BACKEND_OR_SKIP(be);
  ASSERT_TRUE(be->SetDeterministic(false).ok());
  EXPECT_FALSE(be->deterministic());
  constexpr double kAtomicTol = 1e-5;
  for (const SegmentCase& sc : kSegmentCases) {
    const int64_t ld = sc.dim + 3;
    const std::vector<int32_t> inv = RandomIndices(sc.n, 310 + sc.n, -1, sc.unique);
    const Vf dout = RandomFloats(sc.n * ld, 311), mask = RandomMask(sc.n, 312);
    const Vf drows0 = RandomFloats(int64_t{sc.unique} * sc.dim, 313);
    std::vector<bool> touched(static_cast<size_t>(sc.unique), false);
    for (int32_t k : inv) {
      if (k >= 0) touched[static_cast<size_t>(k)] = true;
    }
    for (const float* m : {static_cast<const float*>(nullptr), mask.data()}) {
      SCOPED_TRACE(::testing::Message() << "n " << sc.n << " dim " << sc.dim << " unique "
                                        << sc.unique << (m != nullptr ? " masked" : ""));
      Vf drows = drows0;
      be->SegmentSumRows(sc.n, sc.dim, dout.data(), ld, inv.data(), m, sc.unique, drows.data());
      Vd want = AsDouble(drows0);
      const Vd mask_d = AsDouble(mask);
      reference::SegmentSumRows<double>(sc.n, sc.dim, AsDouble(dout).data(), ld, inv.data(),
                                        m != nullptr ? mask_d.data() : nullptr, sc.unique,
                                        want.data());
      const Vd abs_sum = AbsTermSums(sc, ld, dout, inv, m);
      int64_t bad = 0;
      for (size_t e = 0; e < drows.size(); ++e) {
        const bool key_touched = touched[e / static_cast<size_t>(sc.dim)];
        const bool ok = key_touched
                            ? std::abs(drows[e] - want[e]) <=
                                  kAtomicTol * std::max(1.0, abs_sum[e] + std::abs(drows0[e]))
                            : BitIdentical(Vf{drows[e]}, Vf{drows0[e]});
        if (!ok && bad++ == 0) {
          ADD_FAILURE() << "element " << e << " (key " << e / sc.dim << "): " << drows[e] << " vs "
                        << want[e] << " (sum|terms| " << abs_sum[e] << ")";
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// Terms that are small multiples of 1/8 add exactly in any order (every partial sum is a float),
// so there the atomic option must give the sorted path's bits; and rows of padding only change
// nothing.
TEST(CudaSegmentSumTest, AtomicOptionIsExactWhereEveryOrderIs) {
  SIFT_CUDA_BACKEND_OR_SKIP(be);
  const SegmentCase sc{100000, 24, 300};
  const int64_t ld = sc.dim + 1;
  const std::vector<int32_t> inv = RandomIndices(sc.n, 320, -1, sc.unique);
  const std::vector<int32_t> eighths = RandomIndices(sc.n * ld, 321, -16, 17);
  Vf dout(eighths.size());
  for (size_t e = 0; e < dout.size(); ++e) dout[e] = static_cast<float>(eighths[e]) / 8.0f;
  const Vf mask = RandomMask(sc.n, 322);
  Vf drows0(static_cast<size_t>(sc.unique) * sc.dim);
  for (size_t e = 0; e < drows0.size(); ++e) drows0[e] = static_cast<float>(e % 7) - 3.0f;
  Vf sorted = drows0, atomic = drows0;
  be->SegmentSumRows(sc.n, sc.dim, dout.data(), ld, inv.data(), mask.data(), sc.unique,
                     sorted.data());
  ASSERT_TRUE(be->SetDeterministic(false).ok());
  be->SegmentSumRows(sc.n, sc.dim, dout.data(), ld, inv.data(), mask.data(), sc.unique,
                     atomic.data());
  EXPECT_TRUE(BitIdentical(atomic, sorted));
  EXPECT_FALSE(BitIdentical(atomic, drows0)) << "the sum changed nothing";

  const std::vector<int32_t> pad(1000, -1);
  Vf untouched = drows0;
  be->SegmentSumRows(1000, sc.dim, dout.data(), ld, pad.data(), nullptr, sc.unique,
                     untouched.data());
  EXPECT_TRUE(BitIdentical(untouched, drows0));
}

}  // namespace
}  // namespace sift::kernels
