// The GEMM-bearing ops (Gemm, the dense layers, GRU, AUGRU) in a reduced-precision MathMode
// against the double reference, within bounds derived from the mantissa width; parameterised over
// (backend spec, MathMode). Included by exactly one .cc per test binary, which instantiates
// PrecisionOpsTest: precision_ops_test.cc (the cpu backend and its ISA variants in bf16, label
// unit) and tests/gpu/cuda_ops_test.cc (cuda in tf32 / bf16 / fp16, label gpu). A backend that
// cannot be created here (no device, a CPU without the variant's ISA) skips the test.
//
// The bound: in kTf32 / kBf16 / kFp16 each GEMM input is rounded to a p-bit mantissa (tf32 and
// fp16: p = 10, bf16: p = 7; round to nearest: relative error <= u = 2^-(p+1)), the products are
// exact in fp32 and accumulate in fp32 (tensor cores; AMX / AVX512-BF16 dot products; the cpu's
// emulation, which rounds the inputs and multiplies in fp32). A product of two rounded inputs is
// off by <= 2u relative; over k products of random sign the errors add like a random walk: for
// inputs uniform in [-1, 1] (E[(ab)^2] = 1/9) the error of one output has a standard deviation
// ~0.27 u sqrt(k) = 0.14 * 2^-p * sqrt(k), and the largest of ~10^3 outputs is ~3.3 of those.
// The bound 2 * 2^-p * sqrt(k) (relative, |expected| floored at 1) leaves a margin of ~4 over
// that while an indexing bug is O(1). The fp32 accumulation (~sqrt(k) * 6e-8) is negligible next
// to it. Through a recurrence every step adds its own rounding and passes the earlier ones on
// (with gain <= 1: gates are convex combinations, sigmoid' <= 1/4, tanh' <= 1), so the states of
// T steps get T times the bound of one step, as a fraction of the largest state.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/reference/dense_ops.h"
#include "kernels/reference/sequence_ops.h"
#include "tests/unit/kernels/onednn_isa_env.h"
#include "tests/unit/kernels/op_test_util.h"
#include "tests/unit/kernels/sequence_ops_tests.h"
#include "tests/util/mirrored_backend.h"

namespace sift::kernels::precision_op_tests {

using testing::AllClose;
using testing::AsDouble;
using testing::AsFloat;
using testing::BitIdentical;
using testing::RandomFloats;
using Vf = std::vector<float>;
using Vd = std::vector<double>;

inline int MantissaBits(MathMode mode) { return mode == MathMode::kBf16 ? 7 : 10; }
inline double PrecisionTol(MathMode mode, int64_t k) {
  return 2.0 * std::ldexp(1.0, -MantissaBits(mode)) * std::sqrt(static_cast<double>(k));
}
constexpr double kFloor = 1.0;

// max |got - want| / max |want|: the recurrences' normwise error (states and gradients of
// different sizes share one scale).
template <typename A>
double NormwiseError(const std::vector<A>& got, const Vd& want) {
  double scale = 0, err = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(static_cast<double>(got[i]) - want[i]);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  return err / std::max(scale, 1e-300);
}

using PrecisionParam = std::tuple<std::string, MathMode>;

inline std::string PrecisionParamName(const ::testing::TestParamInfo<PrecisionParam>& info) {
  std::string name = std::get<0>(info.param) + "_" + MathModeName(std::get<1>(info.param));
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

class PrecisionOpsTest : public ::testing::TestWithParam<PrecisionParam> {
 protected:
  void SetUp() override {
    const std::string& spec = std::get<0>(GetParam());
    auto b = sift::testing::CreateTestBackend(spec, 2);
    if (!b.ok() &&
        (absl::IsFailedPrecondition(b.status()) || absl::IsInvalidArgument(b.status()))) {
      GTEST_SKIP() << spec << " cannot run here: " << b.status();
    }
    ASSERT_TRUE(b.ok()) << b.status();
    be_ = std::move(*b);
    const Status s = be_->SetMathMode(mode());
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(be_->math_mode(), mode());
  }
  void TearDown() override {
    if (be_ != nullptr) {
      const Status s = be_->Synchronize();
      EXPECT_TRUE(s.ok()) << s;
    }
  }
  MathMode mode() const { return std::get<1>(GetParam()); }
  std::unique_ptr<Backend> be_;
};

TEST_P(PrecisionOpsTest, GemmWithinMantissaBoundForEveryTransposition) {
  for (int64_t k : {int64_t{53}, int64_t{512}}) {
    const int m = 37, n = 29;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "k " << k << " trans_a " << ta << " trans_b " << tb);
        const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
        const Vf a = RandomFloats((ta ? k : m) * lda, 10 + k);
        const Vf b = RandomFloats((tb ? n : k) * ldb, 11 + k);
        const Vf c0 = RandomFloats(m * ldc, 12);
        Vf c = c0;
        Vd want = AsDouble(c0);
        be_->Gemm(ta, tb, m, n, k, 0.7f, a.data(), lda, b.data(), ldb, 0.3f, c.data(), ldc);
        reference::Gemm<double>(ta, tb, m, n, k, 0.7, AsDouble(a).data(), lda, AsDouble(b).data(),
                                ldb, 0.3, want.data(), ldc);
        EXPECT_TRUE(AllClose(c, want, PrecisionTol(mode(), k), kFloor));
        // Deterministic in every precision: a rerun gives the same bits.
        Vf again = c0;
        be_->Gemm(ta, tb, m, n, k, 0.7f, a.data(), lda, b.data(), ldb, 0.3f, again.data(), ldc);
        EXPECT_TRUE(BitIdentical(again, c));
      }
    }
  }
}

// The precision is real: an input that needs more than the mode's p mantissa bits comes out
// rounded (1 + 2^-(p+3) is 1 in p bits, exact in fp32), so the mode is not silently fp32.
TEST_P(PrecisionOpsTest, GemmInputsAreRounded) {
  const float x = 1.0f + std::ldexp(1.0f, -(MantissaBits(mode()) + 3));
  const Vf a = {x}, b = {1.0f};
  Vf c = {0.0f};
  be_->Gemm(false, false, 1, 1, 1, 1.0f, a.data(), 1, b.data(), 1, 0.0f, c.data(), 1);
  EXPECT_EQ(c[0], 1.0f) << MathModeName(mode()) << " kept " << x << " exactly";
}

TEST_P(PrecisionOpsTest, DenseForwardBackwardWithinMantissaBound) {
  for (Activation act : {Activation::kNone, Activation::kSigmoid, Activation::kPrelu}) {
    SCOPED_TRACE(::testing::Message() << "act " << static_cast<int>(act));
    const DenseDims d{300, 45, 33, act};
    const int64_t ldx = d.in + 3, lddx = d.in + 2;
    const Vf x = RandomFloats(d.rows * ldx, 20), w = RandomFloats(d.in * d.out, 21, -0.3f, 0.3f);
    const Vf b = RandomFloats(d.out, 22), slope = RandomFloats(d.out, 23, 0.0f, 0.5f);
    Vf pre(d.rows * d.out), y(d.rows * d.out);
    be_->DenseForward(d, x.data(), ldx, w.data(), b.data(), slope.data(), pre.data(), y.data());
    Vd pre_d(pre.size()), y_d(y.size());
    reference::DenseForward<double>(d, AsDouble(x).data(), ldx, AsDouble(w).data(),
                                    AsDouble(b).data(), AsDouble(slope).data(), pre_d.data(),
                                    y_d.data());
    // pre sums `in` products; the activations (sigmoid' <= 1/4, |PReLU'| <= 1) do not grow it.
    EXPECT_TRUE(AllClose(pre, pre_d, PrecisionTol(mode(), d.in), kFloor));
    EXPECT_TRUE(AllClose(y, y_d, PrecisionTol(mode(), d.in), kFloor));

    // Backward from the reference's forward values into pre-filled gradients (+=): dx sums `out`
    // products, dW, db and dslope sum over the `rows` rows.
    const Vf dy = RandomFloats(d.rows * d.out, 24);
    Vf dx = RandomFloats(d.rows * lddx, 25), dw = RandomFloats(d.in * d.out, 26);
    Vf db = RandomFloats(d.out, 27), dslope = RandomFloats(d.out, 28);
    Vd dx_d = AsDouble(dx), dw_d = AsDouble(dw), db_d = AsDouble(db), ds_d = AsDouble(dslope);
    const Vf pre_f = AsFloat(pre_d), y_f = AsFloat(y_d);
    Vf ws(DenseWorkspaceFloats(d));
    be_->DenseBackward(d, x.data(), ldx, w.data(), slope.data(), pre_f.data(), y_f.data(),
                       dy.data(), dx.data(), lddx, dw.data(), db.data(), dslope.data(), ws.data());
    Vd ws_d(ws.size());
    reference::DenseBackward<double>(d, AsDouble(x).data(), ldx, AsDouble(w).data(),
                                     AsDouble(slope).data(), AsDouble(pre_f).data(),
                                     AsDouble(y_f).data(), AsDouble(dy).data(), dx_d.data(), lddx,
                                     dw_d.data(), db_d.data(), ds_d.data(), ws_d.data());
    EXPECT_TRUE(AllClose(dx, dx_d, PrecisionTol(mode(), d.out), kFloor));
    EXPECT_TRUE(AllClose(dw, dw_d, PrecisionTol(mode(), d.rows), kFloor));
    EXPECT_TRUE(AllClose(db, db_d, PrecisionTol(mode(), d.rows), kFloor));
    EXPECT_TRUE(AllClose(dslope, ds_d, PrecisionTol(mode(), d.rows), kFloor));
  }
}

// The attention MLP's first layer over the features (FeatureDense) at the model's widths: the 4H
// = 384 products of an output (or their cpu regrouping into 2H + a per-row product) within the
// bound for k = 4H, the weight gradient's R rows for k = R; normwise.
TEST_P(PrecisionOpsTest, FeatureDenseWithinMantissaBound) {
  const FeatureDenseDims d{7, 10, 96, 80, Activation::kSigmoid};
  const int64_t R = d.batch * d.time, H = d.hidden, O = d.out, K = 4 * H;
  const Vf qp = RandomFloats(d.batch * H, 61), h = RandomFloats(R * H, 62);
  const Vf w = RandomFloats(K * O, 63, -0.2f, 0.2f), b = RandomFloats(O, 64, -0.1f, 0.1f);
  Vf pre(R * O), y(R * O), ws(FeatureDenseWorkspaceFloats(d));
  be_->FeatureDenseForward(d, qp.data(), h.data(), w.data(), b.data(), nullptr, pre.data(),
                           y.data(), ws.data());
  Vd c_d(R * K), pre_d(R * O), y_d(R * O);
  ref::AttentionFeaturesForward<double>(d.batch, d.time, d.hidden, AsDouble(qp).data(),
                                        AsDouble(h).data(), c_d.data());
  reference::DenseForward<double>(FeatureDenseAsDense(d), c_d.data(), K, AsDouble(w).data(),
                                  AsDouble(b).data(), nullptr, pre_d.data(), y_d.data());
  EXPECT_LE(NormwiseError(pre, pre_d), PrecisionTol(mode(), K)) << "pre";
  const Vf dy = RandomFloats(R * O, 65);
  Vf dqp(d.batch * H), dh(R * H), dw(K * O), db(O);
  be_->FeatureDenseBackward(d, qp.data(), h.data(), w.data(), nullptr, AsFloat(pre_d).data(),
                            AsFloat(y_d).data(), dy.data(), dqp.data(), dh.data(), dw.data(),
                            db.data(), nullptr, ws.data());
  Vd dc_d(R * K, 0.0), dqp_d(dqp.size(), 0.0), dh_d(dh.size(), 0.0), dw_d(dw.size(), 0.0);
  Vd db_d(O, 0.0), dws(DenseWorkspaceFloats(FeatureDenseAsDense(d)));
  reference::DenseBackward<double>(FeatureDenseAsDense(d), c_d.data(), K, AsDouble(w).data(),
                                   nullptr, pre_d.data(), y_d.data(), AsDouble(dy).data(),
                                   dc_d.data(), K, dw_d.data(), db_d.data(), nullptr, dws.data());
  ref::AttentionFeaturesBackward<double>(d.batch, d.time, d.hidden, AsDouble(qp).data(),
                                         AsDouble(h).data(), dc_d.data(), dqp_d.data(),
                                         dh_d.data());
  EXPECT_LE(NormwiseError(dh, dh_d), PrecisionTol(mode(), O)) << "dh";
  EXPECT_LE(NormwiseError(dqp, dqp_d), PrecisionTol(mode(), O * d.time)) << "dqp";
  EXPECT_LE(NormwiseError(dw, dw_d), PrecisionTol(mode(), R)) << "dw";
}

// GRU and AUGRU at the model's widths (in + H = 128 and 192 products per gate) over T steps:
// normwise within T x the one-product bound, for the states and every gradient (the weight
// gradients sum B*T rows: their bound uses that length).
TEST_P(PrecisionOpsTest, GruWithinMantissaBound) {
  const RnnDims d{70, 10, 32, 96};
  const auto data = sequence_op_tests::MakeGru(d, 40);
  const auto want = sequence_op_tests::RefGru(sequence_op_tests::AsDoubleData(data));
  const auto got = sequence_op_tests::RunGru(*be_, data);
  const double step = PrecisionTol(mode(), d.in + d.hidden) * d.time;
  const double rows = PrecisionTol(mode(), d.batch * d.time) * d.time;
  EXPECT_LE(NormwiseError(got.h, want.h), step) << "h";
  EXPECT_LE(NormwiseError(got.dx, want.dx), step) << "dx";
  EXPECT_LE(NormwiseError(got.dw_in, want.dw_in), rows) << "dw_in";
  EXPECT_LE(NormwiseError(got.dw_rec, want.dw_rec), rows) << "dw_rec";
  EXPECT_LE(NormwiseError(got.db_in, want.db_in), rows) << "db_in";
  // Deterministic: a rerun gives the same bits.
  const auto again = sequence_op_tests::RunGru(*be_, data);
  EXPECT_TRUE(BitIdentical(again.h, got.h));
  EXPECT_TRUE(BitIdentical(again.dw_rec, got.dw_rec));
}

TEST_P(PrecisionOpsTest, AugruWithinMantissaBound) {
  const RnnDims d{70, 10, 96, 96};
  const auto data = sequence_op_tests::MakeAugru(d, 50);
  const auto want = sequence_op_tests::RefAugru(sequence_op_tests::AsDoubleData(data));
  const auto got = sequence_op_tests::RunAugru(*be_, data);
  const double step = PrecisionTol(mode(), d.in + d.hidden) * d.time;
  const double rows = PrecisionTol(mode(), d.batch * d.time) * d.time;
  EXPECT_LE(NormwiseError(got.hs, want.hs), step) << "hs";
  EXPECT_LE(NormwiseError(got.dx, want.dx), step) << "dx";
  EXPECT_LE(NormwiseError(got.datt, want.datt), step) << "datt";
  EXPECT_LE(NormwiseError(got.dg_w, want.dg_w), rows) << "dg_w";
  EXPECT_LE(NormwiseError(got.dc_w, want.dc_w), rows) << "dc_w";
  EXPECT_LE(NormwiseError(got.dg_b, want.dg_b), rows) << "dg_b";
  const auto again = sequence_op_tests::RunAugru(*be_, data);
  EXPECT_TRUE(BitIdentical(again.hs, got.hs));
  EXPECT_TRUE(BitIdentical(again.dg_w, got.dg_w));
}

}  // namespace sift::kernels::precision_op_tests
