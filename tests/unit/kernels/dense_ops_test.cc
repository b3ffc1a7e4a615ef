// The dense family of kernels/backend.h on the host backends (reference, cpu, and cpu through a
// MirroredBackend: the proof of the mirror that the cuda tests use), the bodies in
// dense_ops_tests.h; finite-difference gradient checks of every backward (reference templates in
// double); the host backends' fp32-only math mode and their always-deterministic sums.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/reference/dense_ops.h"
#include "tests/unit/kernels/backend_fixture.h"
#include "tests/unit/kernels/dense_ops_tests.h"
#include "tests/unit/kernels/op_test_util.h"
#include "tests/util/mirrored_backend.h"

namespace sift::kernels::dense_op_tests {

INSTANTIATE_TEST_SUITE_P(Backends, DenseOpsTest, ::testing::ValuesIn(testing::HostTestBackends()),
                         testing::BackendParamName);

}  // namespace sift::kernels::dense_op_tests

namespace sift::kernels {
namespace {

namespace ref = reference;
using dense_op_tests::kActs;
using testing::AsDouble;
using testing::GradientMatches;
using testing::Project;
using testing::RandomFloats;
using testing::RandomIndices;
using testing::RandomMask;
using Vd = std::vector<double>;

// Finite-difference checks in double: central differences with step kFdEps agree with the
// analytic gradient to ~eps^2 * f''' + 1e-16 / eps; kFdTol leaves a margin.
constexpr double kFdEps = 1e-6;
constexpr double kFdTol = 2e-6;

// The reference computes in fp32 only, the cpu backend (every variant, and through a mirror) in
// fp32 or bf16: every other MathMode is INVALID_ARGUMENT and leaves the mode as it was.
TEST(HostMathModeTest, HostBackendsRefuseTheCudaOnlyPrecisions) {
  for (const std::string& name : testing::HostTestBackends()) {
    SCOPED_TRACE(name);
    auto be = sift::testing::CreateTestBackend(name, 1);
    if (!be.ok() && absl::IsFailedPrecondition(be.status())) continue;  // a variant this CPU lacks
    ASSERT_TRUE(be.ok()) << be.status();
    const bool bf16 = name != "reference";
    for (MathMode mode : {MathMode::kTf32, MathMode::kBf16, MathMode::kFp16}) {
      const Status s = (*be)->SetMathMode(mode);
      if (mode == MathMode::kBf16 && bf16) {
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_EQ((*be)->math_mode(), MathMode::kBf16);
        ASSERT_TRUE((*be)->SetMathMode(MathMode::kFp32).ok());
        continue;
      }
      EXPECT_TRUE(absl::IsInvalidArgument(s)) << MathModeName(mode) << ": " << s;
      EXPECT_EQ((*be)->math_mode(), MathMode::kFp32);
    }
    EXPECT_TRUE((*be)->SetMathMode(MathMode::kFp32).ok());
  }
}

// The host backends are always deterministic: SetDeterministic(false) is accepted, deterministic()
// stays true, and the segment sum (the op the cuda backend would switch to atomics) gives the
// same bits as before the call.
TEST(HostDeterministicTest, SetDeterministicFalseIsAcceptedAndChangesNothing) {
  const int dim = 16, u = 37;
  const int64_t n = 5000;
  const std::vector<int32_t> inv = RandomIndices(n, 90, -1, u);
  const std::vector<float> dout = RandomFloats(n * (dim + 3), 91), mask = RandomMask(n, 92);
  const std::vector<float> drows0 = RandomFloats(u * dim, 93);
  for (const std::string& name : testing::HostTestBackends()) {
    SCOPED_TRACE(name);
    auto be = sift::testing::CreateTestBackend(name, 2);
    if (!be.ok() && absl::IsFailedPrecondition(be.status())) continue;  // a variant this CPU lacks
    ASSERT_TRUE(be.ok()) << be.status();
    EXPECT_TRUE((*be)->deterministic());
    std::vector<float> before = drows0, after = drows0;
    (*be)->SegmentSumRows(n, dim, dout.data(), dim + 3, inv.data(), mask.data(), u, before.data());
    const Status s = (*be)->SetDeterministic(false);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE((*be)->deterministic());
    (*be)->SegmentSumRows(n, dim, dout.data(), dim + 3, inv.data(), mask.data(), u, after.data());
    EXPECT_TRUE(testing::BitIdentical(after, before));
    EXPECT_FALSE(testing::BitIdentical(after, drows0)) << "the sum changed nothing";
    EXPECT_TRUE((*be)->SetDeterministic(true).ok());
    EXPECT_TRUE((*be)->Synchronize().ok());
  }
}

// ---- Finite-difference gradient checks of the reference templates, in double ----------------

TEST(DenseGradientTest, DenseBackwardMatchesFiniteDifferences) {
  for (Activation act : kActs) {
    SCOPED_TRACE(static_cast<int>(act));
    const DenseDims d{5, 4, 3, act};
    Vd x = AsDouble(RandomFloats(20, 200)), w = AsDouble(RandomFloats(12, 201));
    Vd b = AsDouble(RandomFloats(3, 202)), slope = AsDouble(RandomFloats(3, 203, 0.05f, 0.5f));
    const Vd proj = AsDouble(RandomFloats(15, 204));
    auto loss = [&]() {
      Vd pre(15), y(15);
      ref::DenseForward<double>(d, x.data(), 4, w.data(), b.data(), slope.data(), pre.data(),
                                y.data());
      return Project(y, proj);
    };
    Vd pre(15), y(15), dx(20, 0.0), dw(12, 0.0), db(3, 0.0), ds(3, 0.0), ws(15);
    ref::DenseForward<double>(d, x.data(), 4, w.data(), b.data(), slope.data(), pre.data(),
                              y.data());
    ref::DenseBackward<double>(d, x.data(), 4, w.data(), slope.data(), pre.data(), y.data(),
                               proj.data(), dx.data(), 4, dw.data(), db.data(), ds.data(),
                               ws.data());
    EXPECT_TRUE(GradientMatches(loss, &x, dx, kFdTol, kFdEps));
    EXPECT_TRUE(GradientMatches(loss, &w, dw, kFdTol, kFdEps));
    EXPECT_TRUE(GradientMatches(loss, &b, db, kFdTol, kFdEps));
    if (act == Activation::kPrelu) {
      EXPECT_TRUE(GradientMatches(loss, &slope, ds, kFdTol, kFdEps));
    }
  }
}

TEST(DenseGradientTest, DotAttentionBackwardMatchesFiniteDifferences) {
  const int64_t batch = 3;
  const int n = 6, d = 4;
  Vd q = AsDouble(RandomFloats(batch * d, 210)), k = AsDouble(RandomFloats(batch * n * d, 211));
  Vd mask = AsDouble(RandomMask(batch * n, 212, 0.6));
  for (int j = 0; j < n; ++j) mask[j] = 0.0;  // row 0 all-masked: only the output path
  const Vd proj = AsDouble(RandomFloats(batch * d, 213));
  auto loss = [&]() {
    Vd alpha(batch * n), out(batch * d);
    ref::DotAttentionForward<double>(batch, n, d, q.data(), d, k.data(), mask.data(), alpha.data(),
                                     out.data(), d);
    return Project(out, proj);
  };
  Vd alpha(batch * n), out(batch * d), dq(batch * d, 0.0), dk(batch * n * d, 0.0);
  ref::DotAttentionForward<double>(batch, n, d, q.data(), d, k.data(), mask.data(), alpha.data(),
                                   out.data(), d);
  ref::DotAttentionBackward<double>(batch, n, d, q.data(), d, k.data(), mask.data(), alpha.data(),
                                    proj.data(), d, dq.data(), d, dk.data());
  EXPECT_TRUE(GradientMatches(loss, &q, dq, kFdTol, kFdEps));
  EXPECT_TRUE(GradientMatches(loss, &k, dk, kFdTol, kFdEps));
}

TEST(DenseGradientTest, DampedMeanAndSoftmaxBackwardMatchFiniteDifferences) {
  const int64_t batch = 2;
  const int n = 5, d = 3;
  Vd x = AsDouble(RandomFloats(batch * n * d, 220));
  const Vd rho = AsDouble(RandomMask(batch * n, 221, 0.5)), proj = AsDouble(RandomFloats(6, 222));
  auto mean_loss = [&]() {
    Vd out(batch * d);
    ref::DampedMeanForward<double>(batch, n, d, x.data(), rho.data(), out.data(), d);
    return Project(out, proj);
  };
  Vd dx(x.size(), 0.0);
  ref::DampedMeanBackward<double>(batch, n, d, rho.data(), proj.data(), d, dx.data());
  EXPECT_TRUE(GradientMatches(mean_loss, &x, dx, kFdTol, kFdEps));

  Vd s = AsDouble(RandomFloats(batch * n, 223, -3.0f, 3.0f));
  const Vd mask = AsDouble(RandomMask(batch * n, 224, 0.6));
  const Vd proj_p = AsDouble(RandomFloats(batch * n, 225));
  auto sm_loss = [&]() {
    Vd p(batch * n);
    ref::MaskedSoftmaxForward<double>(batch, n, s.data(), mask.data(), p.data());
    return Project(p, proj_p);
  };
  Vd p(batch * n), ds(batch * n, 0.0);
  ref::MaskedSoftmaxForward<double>(batch, n, s.data(), mask.data(), p.data());
  ref::MaskedSoftmaxBackward<double>(batch, n, p.data(), mask.data(), proj_p.data(), ds.data());
  EXPECT_TRUE(GradientMatches(sm_loss, &s, ds, kFdTol, kFdEps));
}

TEST(DenseGradientTest, LossGradientsMatchFiniteDifferences) {
  const int64_t n = 12;
  Vd l = AsDouble(RandomFloats(n, 230, -4.0f, 4.0f));
  const Vd y = AsDouble(RandomMask(n, 231, 0.5));
  Vd dl(n, 0.0);
  ref::BceWithLogits<double>(n, l.data(), y.data(), 0.3, dl.data());
  auto bce = [&]() {
    return 0.3 * ref::BceWithLogits<double>(n, l.data(), y.data(), 1.0, nullptr);
  };
  EXPECT_TRUE(GradientMatches(bce, &l, dl, kFdTol, kFdEps));

  Vd lp = AsDouble(RandomFloats(n, 232, -4.0f, 4.0f)),
     ln = AsDouble(RandomFloats(n, 233, -4.0f, 4.0f));
  ln[0] = 30.0;  // clamped branch: zero gradient, also numerically
  const Vd mask = AsDouble(RandomMask(n, 234, 0.7));
  Vd dp(n, 0.0), dn(n, 0.0);
  ref::AuxLoss<double>(n, lp.data(), ln.data(), mask.data(), 0.5, dp.data(), dn.data());
  auto aux = [&]() {
    return 0.5 * ref::AuxLoss<double>(n, lp.data(), ln.data(), mask.data(), 1.0, nullptr, nullptr);
  };
  EXPECT_TRUE(GradientMatches(aux, &lp, dp, kFdTol, kFdEps));
  EXPECT_TRUE(GradientMatches(aux, &ln, dn, kFdTol, kFdEps));
}

TEST(DenseGradientTest, SegmentSumIsTheGatherAdjoint) {
  // <gather(rows), g> == <rows, segment_sum(g)> for any rows and g.
  const int64_t n = 40;
  const int dim = 5, u = 6;
  const Vd rows = AsDouble(RandomFloats(u * dim, 240)), g = AsDouble(RandomFloats(n * dim, 241));
  const Vd mask = AsDouble(RandomMask(n, 242));
  const std::vector<int32_t> inv = RandomIndices(n, 243, -1, u);
  Vd out(n * dim), drows(u * dim, 0.0);
  ref::GatherRows<double>(n, dim, rows.data(), inv.data(), mask.data(), out.data(), dim);
  ref::SegmentSumRows<double>(n, dim, g.data(), dim, inv.data(), mask.data(), u, drows.data());
  EXPECT_NEAR(Project(out, g), Project(rows, drows), 1e-12);
}

}  // namespace
}  // namespace sift::kernels
