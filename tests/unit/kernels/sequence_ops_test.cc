// The sequence ops of kernels/backend.h on the host backends (reference, cpu, and cpu through a
// MirroredBackend: the proof of the mirror that the cuda tests use), the bodies in
// sequence_ops_tests.h; and the double-precision reference templates (reference/sequence_ops.h)
// against central finite differences.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/reference/sequence_ops.h"
#include "tests/unit/kernels/backend_fixture.h"
#include "tests/unit/kernels/op_test_util.h"
#include "tests/unit/kernels/sequence_ops_tests.h"

namespace sift::kernels::sequence_op_tests {

using testing::GradientMatches;

// The double templates against central differences (eps 1e-6).
constexpr double kFiniteDiffTol = 1e-5;

// ---- The double templates against finite differences -------------------------------------------

TEST(SequenceReferenceTest, AttentionFeaturesGradientsMatchFiniteDifferences) {
  const int64_t B = 3, T = 4, H = 5;
  std::vector<double> qp = AsDouble(RandomFloats(B * H, 11));
  std::vector<double> h = AsDouble(RandomFloats(B * T * H, 12));
  const std::vector<double> w = AsDouble(RandomFloats(B * T * 4 * H, 13));
  auto loss = [&] {
    std::vector<double> c(B * T * 4 * H);
    ref::AttentionFeaturesForward<double>(B, T, H, qp.data(), h.data(), c.data());
    return testing::Project(c, w);
  };
  std::vector<double> dqp(B * H, 0.0), dh(B * T * H, 0.0);
  ref::AttentionFeaturesBackward<double>(B, T, H, qp.data(), h.data(), w.data(), dqp.data(),
                                         dh.data());
  EXPECT_TRUE(GradientMatches(loss, &qp, dqp, kFiniteDiffTol)) << "dqp";
  EXPECT_TRUE(GradientMatches(loss, &h, dh, kFiniteDiffTol)) << "dh";
}

TEST(SequenceReferenceTest, GruGradientsMatchFiniteDifferences) {
  GruData<double> g = AsDoubleData(MakeGru({3, 4, 5, 6}, 100));
  const GruOut<double> o = RefGru(g);
  auto loss = [&] { return GruLoss(g); };
  EXPECT_TRUE(GradientMatches(loss, &g.x, o.dx, kFiniteDiffTol)) << "dx";
  EXPECT_TRUE(GradientMatches(loss, &g.w_in, o.dw_in, kFiniteDiffTol)) << "dw_in";
  EXPECT_TRUE(GradientMatches(loss, &g.w_rec, o.dw_rec, kFiniteDiffTol)) << "dw_rec";
  EXPECT_TRUE(GradientMatches(loss, &g.b_in, o.db_in, kFiniteDiffTol)) << "db_in";
  EXPECT_TRUE(GradientMatches(loss, &g.b_rec, o.db_rec, kFiniteDiffTol)) << "db_rec";
}

TEST(SequenceReferenceTest, AugruGradientsMatchFiniteDifferences) {
  AugruData<double> a = AsDoubleData(MakeAugru({3, 4, 5, 6}, 200));
  const AugruOut<double> o = RefAugru(a);
  auto loss = [&] { return AugruLoss(a); };
  EXPECT_TRUE(GradientMatches(loss, &a.x, o.dx, kFiniteDiffTol)) << "dx";
  EXPECT_TRUE(GradientMatches(loss, &a.att, o.datt, kFiniteDiffTol)) << "datt";
  EXPECT_TRUE(GradientMatches(loss, &a.g_w, o.dg_w, kFiniteDiffTol)) << "dg_w";
  EXPECT_TRUE(GradientMatches(loss, &a.g_b, o.dg_b, kFiniteDiffTol)) << "dg_b";
  EXPECT_TRUE(GradientMatches(loss, &a.c_w, o.dc_w, kFiniteDiffTol)) << "dc_w";
  EXPECT_TRUE(GradientMatches(loss, &a.c_b, o.dc_b, kFiniteDiffTol)) << "dc_b";
}

INSTANTIATE_TEST_SUITE_P(Backends, SequenceOpsTest,
                         ::testing::ValuesIn(testing::HostTestBackends()),
                         testing::BackendParamName);

}  // namespace sift::kernels::sequence_op_tests
