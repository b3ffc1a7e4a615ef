// The backend-parameterised tests of the dense family of kernels/backend.h (memory, GEMM, dense
// layers, gather / segment sum, dot attention, top-k mask, damped mean, masked softmax, BCE, aux
// loss, Adam, loss-scaling helpers) against the reference templates run in double; edge cases and
// determinism. Included by exactly one .cc per test binary, which instantiates DenseOpsTest for its
// backends: dense_ops_test.cc (the host backends, label unit) and tests/gpu/cuda_ops_test.cc
// (cuda through a MirroredBackend, label gpu).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/reference/dense_ops.h"
#include "tests/unit/kernels/backend_fixture.h"
#include "tests/unit/kernels/op_test_util.h"

namespace sift::kernels::dense_op_tests {

namespace ref = reference;
using testing::AllClose;
using testing::AsDouble;
using testing::AsFloat;
using testing::BitIdentical;
using testing::RandomFloats;
using testing::RandomIndices;
using testing::RandomMask;
using Vf = std::vector<float>;
using Vd = std::vector<double>;

// Tolerances (max relative error, |expected| floored at kFloor) of a float backend against the
// double-precision reference on inputs of magnitude ~1:
// - exact ops (Fill, Copy, Gather, TopKMask): bit-identical to the float reference.
constexpr double kFloor = 1.0;
// - float sums of up to a few hundred products (Gemm, dense, attention, damped mean): rounding
//   grows ~ sqrt(k) * 6e-8 * |terms|; 5e-5 leaves a wide margin while any indexing bug is O(1).
constexpr double kSumTol = 5e-5;
// - element-wise maths with FastExp / FastSigmoid (rel. error <= 1e-6) and short sums.
constexpr double kElementTol = 1e-5;
// - Adam: one fused multiply-add may round differently from the reference's separate ops.
constexpr double kAdamTol = 1e-6;
// - losses summed in double from float terms.
constexpr double kLossTol = 1e-6;
// The same constants hold for the cuda backend in MathMode::kFp32 (true fp32 GEMMs: cuBLAS with
// CUBLAS_COMPUTE_32F, no TF32):
// - kSumTol: cuBLAS and the cuda reductions add the same products in another (blocked / tree)
//   order; any order's rounding error is bounded by ~k * 6e-8 * sum|terms| and is ~sqrt(k) * 6e-8
//   in practice, far under 5e-5 for k up to a few hundred.
// - kElementTol: the per-element maths is elementwise_math.h in the reference's order of
//   operations, on CUDA's expf / tanhf / logf (no fast-math), each within 2 ulp (~2.4e-7).
// - kAdamTol: the Adam step is elementwise_math.h's: the reference's order of operations with
//   explicit round-to-nearest intrinsics (no FMA contraction) and IEEE sqrt, so it agrees with
//   the reference as closely as the CPU backend does (a few ulp, ~1e-7 each, over three steps).
// - kLossTol: the losses are summed in double from float terms of <= 2 ulp error each; the terms
//   are non-negative, so the sum's relative error is at most the terms' (~3e-7).

class DenseOpsTest : public testing::BackendOpTest {
 protected:
  void SetUp() override {
    BackendOpTest::SetUp();
    be_ = backend_.get();
  }
  Backend* be_ = nullptr;
};

TEST_P(DenseOpsTest, FillAndCopy) {
  Vf p(1000, 1.0f);
  be_->Fill(999, -2.5f, p.data());
  for (int i = 0; i < 999; ++i) ASSERT_EQ(p[i], -2.5f);
  EXPECT_EQ(p[999], 1.0f);
  // A [3, 4, 5] block out of a [3, 6, 7] source into a [3, 4, 9] destination, set then added.
  const Vf src = RandomFloats(3 * 6 * 7, 1);
  for (bool acc : {false, true}) {
    Vf dst = RandomFloats(3 * 4 * 9, 2), want = dst;
    be_->Copy(3, 4, 5, src.data() + 8, 42, 7, dst.data() + 1, 36, 9, acc);
    ref::Copy<float>(3, 4, 5, src.data() + 8, 42, 7, want.data() + 1, 36, 9, acc);
    EXPECT_TRUE(BitIdentical(dst, want)) << "accumulate " << acc;
  }
  // Large enough for the CPU backend's parallel path.
  const Vf big = RandomFloats(200 * 300, 3);
  Vf out(200 * 300, 0.0f);
  be_->Copy(1, 200, 300, big.data(), 0, 300, out.data(), 0, 300, false);
  EXPECT_TRUE(BitIdentical(out, big));
}

TEST_P(DenseOpsTest, GemmMatchesReferenceForEveryTransposition) {
  const int m = 37, n = 29, k = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
      const Vf a = RandomFloats((ta ? k : m) * int64_t{lda}, 10);
      const Vf b = RandomFloats((tb ? n : k) * int64_t{ldb}, 11);
      Vf c = RandomFloats(m * int64_t{ldc}, 12);
      Vd want = AsDouble(c);
      be_->Gemm(ta, tb, m, n, k, 0.7f, a.data(), lda, b.data(), ldb, 0.3f, c.data(), ldc);
      ref::Gemm<double>(ta, tb, m, n, k, 0.7, AsDouble(a).data(), lda, AsDouble(b).data(), ldb, 0.3,
                        want.data(), ldc);
      EXPECT_TRUE(AllClose(c, want, kSumTol, kFloor)) << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST_P(DenseOpsTest, GemmBetaZeroIgnoresNanInC) {
  const int m = 20, n = 30, k = 10;
  const Vf a = RandomFloats(m * k, 13), b = RandomFloats(k * n, 14);
  Vf c(m * n, std::numeric_limits<float>::quiet_NaN());
  Vd want(m * n, 0.0);
  be_->Gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  ref::Gemm<double>(false, false, m, n, k, 1.0, AsDouble(a).data(), k, AsDouble(b).data(), n, 0.0,
                    want.data(), n);
  EXPECT_TRUE(AllClose(c, want, kSumTol, kFloor));
  // k == 0: C = beta C, zeros for beta == 0.
  Vf c0(6, std::numeric_limits<float>::quiet_NaN());
  be_->Gemm(false, false, 2, 3, 0, 1.0f, a.data(), 1, b.data(), 3, 0.0f, c0.data(), 3);
  EXPECT_EQ(c0, Vf(6, 0.0f));
}

inline const Activation kActs[] = {Activation::kNone, Activation::kSigmoid, Activation::kPrelu};

TEST_P(DenseOpsTest, DenseForwardBackwardMatchReference) {
  for (Activation act : kActs) {
    for (int64_t rows : {int64_t{1}, int64_t{300}}) {
      SCOPED_TRACE(::testing::Message() << "act " << static_cast<int>(act) << " rows " << rows);
      const DenseDims d{rows, 45, 33, act};
      const int64_t ldx = d.in + 3, lddx = d.in + 2;
      const Vf x = RandomFloats(rows * ldx, 20), w = RandomFloats(d.in * d.out, 21, -0.3f, 0.3f);
      const Vf b = RandomFloats(d.out, 22), slope = RandomFloats(d.out, 23, 0.0f, 0.5f);
      Vf pre(rows * d.out), y(rows * d.out);
      be_->DenseForward(d, x.data(), ldx, w.data(), b.data(), slope.data(), pre.data(), y.data());
      Vd pre_d(pre.size()), y_d(y.size());
      ref::DenseForward<double>(d, AsDouble(x).data(), ldx, AsDouble(w).data(), AsDouble(b).data(),
                                AsDouble(slope).data(), pre_d.data(), y_d.data());
      EXPECT_TRUE(AllClose(pre, pre_d, kSumTol, kFloor));
      EXPECT_TRUE(AllClose(y, y_d, kSumTol, kFloor));

      // Backward from the double reference's forward values, into pre-filled gradients (+=).
      const Vf dy = RandomFloats(rows * d.out, 24);
      Vf dx = RandomFloats(rows * lddx, 25), dw = RandomFloats(d.in * d.out, 26);
      Vf db = RandomFloats(d.out, 27), dslope = RandomFloats(d.out, 28);
      Vd dx_d = AsDouble(dx), dw_d = AsDouble(dw), db_d = AsDouble(db), ds_d = AsDouble(dslope);
      const Vf pre_f = AsFloat(pre_d), y_f = AsFloat(y_d);
      Vf ws(DenseWorkspaceFloats(d));
      be_->DenseBackward(d, x.data(), ldx, w.data(), slope.data(), pre_f.data(), y_f.data(),
                         dy.data(), dx.data(), lddx, dw.data(), db.data(), dslope.data(),
                         ws.data());
      Vd ws_d(ws.size());
      ref::DenseBackward<double>(d, AsDouble(x).data(), ldx, AsDouble(w).data(),
                                 AsDouble(slope).data(), AsDouble(pre_f).data(),
                                 AsDouble(y_f).data(), AsDouble(dy).data(), dx_d.data(), lddx,
                                 dw_d.data(), db_d.data(), ds_d.data(), ws_d.data());
      EXPECT_TRUE(AllClose(dx, dx_d, kSumTol, kFloor));
      EXPECT_TRUE(AllClose(dw, dw_d, kSumTol, kFloor));
      EXPECT_TRUE(AllClose(db, db_d, kSumTol, kFloor));
      EXPECT_TRUE(AllClose(dslope, ds_d, kSumTol, kFloor));
    }
  }
}

TEST_P(DenseOpsTest, DenseNullDxAndPreEqualsYForLinear) {
  const DenseDims d{50, 8, 6, Activation::kNone};
  const Vf x = RandomFloats(50 * 8, 30), w = RandomFloats(48, 31), b = RandomFloats(6, 32);
  Vf py(50 * 6), pre(50 * 6), y(50 * 6);
  be_->DenseForward(d, x.data(), 8, w.data(), b.data(), nullptr, py.data(), py.data());
  be_->DenseForward(d, x.data(), 8, w.data(), b.data(), nullptr, pre.data(), y.data());
  EXPECT_TRUE(BitIdentical(py, y));
  const Vf dy = RandomFloats(50 * 6, 33);
  Vf dw(48, 0.0f), db(6, 0.0f), ws(DenseWorkspaceFloats(d));
  be_->DenseBackward(d, x.data(), 8, w.data(), nullptr, pre.data(), y.data(), dy.data(), nullptr, 0,
                     dw.data(), db.data(), nullptr, ws.data());
  Vd dw_d(48, 0.0), db_d(6, 0.0), ws_d(ws.size());
  ref::DenseBackward<double>(d, AsDouble(x).data(), 8, AsDouble(w).data(), nullptr,
                             AsDouble(pre).data(), AsDouble(y).data(), AsDouble(dy).data(), nullptr,
                             0, dw_d.data(), db_d.data(), nullptr, ws_d.data());
  EXPECT_TRUE(AllClose(dw, dw_d, kSumTol, kFloor));
  EXPECT_TRUE(AllClose(db, db_d, kSumTol, kFloor));
}

TEST_P(DenseOpsTest, PreluAtZeroHasZeroDerivative) {
  // x = 0 and b = 0 make pre exactly 0: y = 0, and no gradient reaches x, W, b or the slope.
  const DenseDims d{4, 3, 5, Activation::kPrelu};
  const Vf x(12, 0.0f), w = RandomFloats(15, 40), b(5, 0.0f), slope(5, 0.1f);
  Vf pre(20), y(20);
  be_->DenseForward(d, x.data(), 3, w.data(), b.data(), slope.data(), pre.data(), y.data());
  EXPECT_EQ(y, Vf(20, 0.0f));
  const Vf dy = RandomFloats(20, 41);
  Vf dx(12, 0.0f), dw(15, 0.0f), db(5, 0.0f), ds(5, 0.0f), ws(DenseWorkspaceFloats(d));
  be_->DenseBackward(d, x.data(), 3, w.data(), slope.data(), pre.data(), y.data(), dy.data(),
                     dx.data(), 3, dw.data(), db.data(), ds.data(), ws.data());
  EXPECT_EQ(dx, Vf(12, 0.0f));
  EXPECT_EQ(db, Vf(5, 0.0f));
  EXPECT_EQ(ds, Vf(5, 0.0f));
  EXPECT_EQ(dw, Vf(15, 0.0f));
}

TEST_P(DenseOpsTest, GatherRowsWithPaddingMaskAndStride) {
  const int dim = 16, u = 7;
  const int64_t n = 3000;  // past the CPU backend's inline threshold
  const Vf rows = RandomFloats(u * dim, 50);
  const std::vector<int32_t> inv = RandomIndices(n, 51, -1, u);
  const Vf mask = RandomMask(n, 52);
  for (const float* m : {static_cast<const float*>(nullptr), mask.data()}) {
    Vf out(n * (dim + 4), 9.0f), want = out;
    be_->GatherRows(n, dim, rows.data(), inv.data(), m, out.data(), dim + 4);
    ref::GatherRows<float>(n, dim, rows.data(), inv.data(), m, want.data(), dim + 4);
    EXPECT_TRUE(BitIdentical(out, want));
    EXPECT_EQ(out[dim], 9.0f);  // the stride gap is untouched
  }
}

TEST_P(DenseOpsTest, SegmentSumRowsAccumulatesPerKey) {
  const int dim = 16, u = 37;
  for (int64_t n : {int64_t{1}, int64_t{50}, int64_t{5000}}) {
    const std::vector<int32_t> inv = RandomIndices(n, 60 + n, -1, u);  // repeats and padding
    const Vf dout = RandomFloats(n * (dim + 3), 61), mask = RandomMask(n, 62);
    for (const float* m : {static_cast<const float*>(nullptr), mask.data()}) {
      Vf drows = RandomFloats(u * dim, 63);
      Vd want = AsDouble(drows);
      be_->SegmentSumRows(n, dim, dout.data(), dim + 3, inv.data(), m, u, drows.data());
      const Vd mask_d = AsDouble(mask);
      ref::SegmentSumRows<double>(n, dim, AsDouble(dout).data(), dim + 3, inv.data(),
                                  m != nullptr ? mask_d.data() : nullptr, u, want.data());
      EXPECT_TRUE(AllClose(drows, want, n > 1000 ? kSumTol : kElementTol, kFloor)) << "n " << n;
    }
  }
  // Every row padding: nothing changes.
  const std::vector<int32_t> pad(10, -1);
  const Vf g = RandomFloats(10 * dim, 64);
  Vf drows(u * dim, 0.5f);
  be_->SegmentSumRows(10, dim, g.data(), dim, pad.data(), nullptr, u, drows.data());
  EXPECT_EQ(drows, Vf(u * dim, 0.5f));
}

// Attention inputs shaped like the model's: masked keys are zero; some rows all-masked.
struct AttnInputs {
  int64_t batch;
  int n, d;
  int64_t ldq;
  Vf q, k, mask;
};
inline AttnInputs MakeAttn(int64_t batch, int n, int d, uint64_t seed) {
  AttnInputs a{batch, n, d, d + 5, {}, {}, {}};
  a.q = RandomFloats(batch * a.ldq, seed);
  a.k = RandomFloats(batch * n * d, seed + 1);
  a.mask = RandomMask(batch * n, seed + 2, 0.6);
  for (int64_t b = 0; b < batch; b += 3) {  // every third row: an empty history
    for (int j = 0; j < n; ++j) a.mask[b * n + j] = 0.0f;
  }
  for (int64_t s = 0; s < batch * n; ++s) {
    if (a.mask[s] == 0.0f) {
      for (int c = 0; c < d; ++c) a.k[s * d + c] = 0.0f;
    }
  }
  return a;
}

TEST_P(DenseOpsTest, DotAttentionMatchesReference) {
  for (int64_t batch : {int64_t{1}, int64_t{40}}) {
    const AttnInputs in = MakeAttn(batch, 90, 32, 70 + batch);
    const int64_t ldout = in.d + 3, lddq = in.d + 1;
    Vf alpha(batch * in.n), out(batch * ldout, 7.0f);
    be_->DotAttentionForward(batch, in.n, in.d, in.q.data(), in.ldq, in.k.data(), in.mask.data(),
                             alpha.data(), out.data(), ldout);
    Vd alpha_d(alpha.size()), out_d = AsDouble(out);
    const Vd q_d = AsDouble(in.q), k_d = AsDouble(in.k), m_d = AsDouble(in.mask);
    ref::DotAttentionForward<double>(batch, in.n, in.d, q_d.data(), in.ldq, k_d.data(), m_d.data(),
                                     alpha_d.data(), out_d.data(), ldout);
    EXPECT_TRUE(AllClose(alpha, alpha_d, kElementTol, 1e-6));
    EXPECT_TRUE(AllClose(out, out_d, kSumTol, kFloor));
    // Row 0 is all-masked: uniform weights, zero output; masked slots elsewhere get exactly 0.
    for (int j = 0; j < in.n; ++j) EXPECT_NEAR(alpha[j], 1.0 / in.n, 1e-7);
    for (int c = 0; c < in.d; ++c) EXPECT_EQ(out[c], 0.0f);
    for (int64_t b = 0; b < batch; ++b) {
      if (b % 3 == 0) continue;  // all-masked rows: uniform
      for (int j = 0; j < in.n; ++j) {
        if (in.mask[b * in.n + j] == 0.0f) {
          ASSERT_EQ(alpha[b * in.n + j], 0.0f) << b << " " << j;
        }
      }
    }

    const Vf dout = RandomFloats(batch * ldout, 80);
    Vf dq = RandomFloats(batch * lddq, 81), dk = RandomFloats(batch * in.n * in.d, 82);
    Vd dq_d = AsDouble(dq), dk_d = AsDouble(dk);
    const Vf alpha_f = AsFloat(alpha_d);
    be_->DotAttentionBackward(batch, in.n, in.d, in.q.data(), in.ldq, in.k.data(), in.mask.data(),
                              alpha_f.data(), dout.data(), ldout, dq.data(), lddq, dk.data());
    ref::DotAttentionBackward<double>(batch, in.n, in.d, q_d.data(), in.ldq, k_d.data(), m_d.data(),
                                      AsDouble(alpha_f).data(), AsDouble(dout).data(), ldout,
                                      dq_d.data(), lddq, dk_d.data());
    EXPECT_TRUE(AllClose(dq, dq_d, kSumTol, kFloor));
    EXPECT_TRUE(AllClose(dk, dk_d, kSumTol, kFloor));
  }
}

TEST_P(DenseOpsTest, TopKMaskSelectsLargestLowerIndexOnTies) {
  // Hand-checked: ties between slots 1 and 2 (0.3) and 0 and 4 (0.2); slot 3 has alpha 0.
  const Vf a = {0.2f, 0.3f, 0.3f, 0.0f, 0.2f};
  Vf rho(5);
  be_->TopKMask(1, 5, 2, a.data(), rho.data());
  EXPECT_EQ(rho, (Vf{0, 1, 1, 0, 0}));
  be_->TopKMask(1, 5, 3, a.data(), rho.data());
  EXPECT_EQ(rho, (Vf{1, 1, 1, 0, 0}));
  be_->TopKMask(1, 5, 4, a.data(), rho.data());  // slot 3 is 4th but alpha 0: not valid
  EXPECT_EQ(rho, (Vf{1, 1, 1, 0, 1}));
  be_->TopKMask(1, 5, 9, a.data(), rho.data());  // k >= n
  EXPECT_EQ(rho, (Vf{1, 1, 1, 0, 1}));
  // Uniform weights (an empty history): the first k slots.
  const Vf u(10, 0.1f);
  Vf ru(10);
  be_->TopKMask(1, 10, 4, u.data(), ru.data());
  EXPECT_EQ(ru, (Vf{1, 1, 1, 1, 0, 0, 0, 0, 0, 0}));

  // Random softmax weights with many ties and zeros, fewer valid slots than k in some rows.
  const int64_t batch = 64;
  const int n = 90;
  Vf alpha(batch * n);
  Rng rng(90);
  for (auto& v : alpha) v = rng.Uniform() < 0.4 ? 0.0f : static_cast<float>(rng.Below(8)) / 8;
  for (int k : {1, 50, 89, 90, 200}) {
    Vf got(batch * n), want(batch * n);
    be_->TopKMask(batch, n, k, alpha.data(), got.data());
    ref::TopKMask<float>(batch, n, k, alpha.data(), want.data());
    EXPECT_EQ(got, want) << "k " << k;
  }
}

TEST_P(DenseOpsTest, DampedMeanMatchesReference) {
  const Vf x = {1, 2, 3, 4, 5, 6};  // [1, 3, 2]
  const Vf rho = {1, 0, 1};
  Vf out(2);
  be_->DampedMeanForward(1, 3, 2, x.data(), rho.data(), out.data(), 2);
  EXPECT_FLOAT_EQ(out[0], 6.0f / 3);  // (1 + 5) / (2 + 1)
  EXPECT_FLOAT_EQ(out[1], 8.0f / 3);
  const Vf none(3, 0.0f);
  be_->DampedMeanForward(1, 3, 2, x.data(), none.data(), out.data(), 2);
  EXPECT_EQ(out, Vf(2, 0.0f));

  for (int64_t batch : {int64_t{1}, int64_t{70}}) {
    const int n = 90, d = 32;
    const Vf xs = RandomFloats(batch * n * d, 100), r = RandomMask(batch * n, 101, 0.5);
    Vf o(batch * (d + 2), 3.0f);
    Vd o_d = AsDouble(o);
    be_->DampedMeanForward(batch, n, d, xs.data(), r.data(), o.data(), d + 2);
    ref::DampedMeanForward<double>(batch, n, d, AsDouble(xs).data(), AsDouble(r).data(), o_d.data(),
                                   d + 2);
    EXPECT_TRUE(AllClose(o, o_d, kSumTol, kFloor));
    const Vf g = RandomFloats(batch * (d + 1), 102);
    Vf dx = RandomFloats(batch * n * d, 103);
    Vd dx_d = AsDouble(dx);
    be_->DampedMeanBackward(batch, n, d, r.data(), g.data(), d + 1, dx.data());
    ref::DampedMeanBackward<double>(batch, n, d, AsDouble(r).data(), AsDouble(g).data(), d + 1,
                                    dx_d.data());
    EXPECT_TRUE(AllClose(dx, dx_d, kElementTol, kFloor));
  }
}

TEST_P(DenseOpsTest, MaskedSoftmaxMatchesReference) {
  const int64_t rows = 200;
  const int n = 10;
  const Vf s = RandomFloats(rows * n, 110, -5.0f, 5.0f);
  Vf mask = RandomMask(rows * n, 111);
  for (int j = 0; j < n; ++j) mask[j] = 0.0f;  // row 0: all masked
  Vf p(rows * n);
  Vd p_d(p.size());
  be_->MaskedSoftmaxForward(rows, n, s.data(), mask.data(), p.data());
  ref::MaskedSoftmaxForward<double>(rows, n, AsDouble(s).data(), AsDouble(mask).data(), p_d.data());
  EXPECT_TRUE(AllClose(p, p_d, kElementTol, 1e-6));
  for (int j = 0; j < n; ++j) EXPECT_NEAR(p[j], 0.1f, 1e-7);
  for (int64_t i = n; i < rows * n; ++i) {
    if (mask[i] == 0.0f) {
      ASSERT_EQ(p[i], 0.0f);
    }
  }
  const Vf dp = RandomFloats(rows * n, 112);
  Vf ds = RandomFloats(rows * n, 113);
  const Vf ds0 = ds;
  Vd ds_d = AsDouble(ds);
  const Vf p_f = AsFloat(p_d);
  be_->MaskedSoftmaxBackward(rows, n, p_f.data(), mask.data(), dp.data(), ds.data());
  ref::MaskedSoftmaxBackward<double>(rows, n, AsDouble(p_f).data(), AsDouble(mask).data(),
                                     AsDouble(dp).data(), ds_d.data());
  EXPECT_TRUE(AllClose(ds, ds_d, kElementTol, kFloor));
  for (size_t i = 0; i < ds.size(); ++i) {
    if (mask[i] == 0.0f) {
      ASSERT_EQ(ds[i], ds0[i]) << "gradient reached masked slot " << i;
    }
  }
}

TEST_P(DenseOpsTest, BceWithLogitsMatchesReferenceAndStaysFinite) {
  const int64_t n = 3000;
  Vf l = RandomFloats(n, 120, -8.0f, 8.0f);
  l[0] = 1e4f, l[1] = -1e4f, l[2] = 0.0f;
  const Vf y = RandomMask(n, 121, 0.5);
  Vf dl = RandomFloats(n, 122);
  Vd dl_d = AsDouble(dl);
  const double got = be_->BceWithLogits(n, l.data(), y.data(), 0.25f, dl.data());
  const double want =
      ref::BceWithLogits<double>(n, AsDouble(l).data(), AsDouble(y).data(), 0.25, dl_d.data());
  EXPECT_NEAR(got, want, kLossTol * std::abs(want));
  EXPECT_TRUE(AllClose(dl, dl_d, kElementTol, kFloor));
  EXPECT_NEAR(be_->BceWithLogits(1, l.data() + 2, y.data() + 2, 1.0f, nullptr), std::log(2.0),
              1e-12);
}

TEST_P(DenseOpsTest, AuxLossMatchesReferenceNeverNanMaskedExactlyZero) {
  const int64_t n = 4000;
  Vf lp = RandomFloats(n, 130, -6.0f, 6.0f), ln = RandomFloats(n, 131, -6.0f, 6.0f);
  const float inf = std::numeric_limits<float>::infinity();
  lp[0] = 1e4f, lp[1] = -1e4f, ln[2] = 1e4f, ln[3] = -1e4f, ln[4] = 20.0f;  // 4: clamped branch
  Vf mask = RandomMask(n, 132);
  for (int i = 0; i < 5; ++i) mask[i] = 1.0f;
  Vf dp = RandomFloats(n, 133), dn = RandomFloats(n, 134);
  Vd dp_d = AsDouble(dp), dn_d = AsDouble(dn);
  const double got = be_->AuxLoss(n, lp.data(), ln.data(), mask.data(), 0.5f, dp.data(), dn.data());
  const double want = ref::AuxLoss<double>(n, AsDouble(lp).data(), AsDouble(ln).data(),
                                           AsDouble(mask).data(), 0.5, dp_d.data(), dn_d.data());
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, want, kLossTol * std::abs(want));
  EXPECT_TRUE(AllClose(dp, dp_d, kElementTol, kFloor));
  EXPECT_TRUE(AllClose(dn, dn_d, kElementTol, kFloor));
  for (size_t i = 0; i < dp.size(); ++i) ASSERT_TRUE(std::isfinite(dp[i]) && std::isfinite(dn[i]));

  // Masked pairs contribute exactly 0, even with inf / NaN logits, and get no gradient.
  Vf lp2 = lp, ln2 = ln;
  for (int64_t i = 5; i < n; ++i) {
    if (mask[i] == 0.0f) {
      lp2[i] = (i % 2) ? inf : std::numeric_limits<float>::quiet_NaN();
      ln2[i] = (i % 3) ? -inf : inf;
    }
  }
  Vf dp2(n, 0.0f), dn2(n, 0.0f), dp3(n, 0.0f), dn3(n, 0.0f);
  const double a = be_->AuxLoss(n, lp.data(), ln.data(), mask.data(), 1.0f, dp2.data(), dn2.data());
  const double b =
      be_->AuxLoss(n, lp2.data(), ln2.data(), mask.data(), 1.0f, dp3.data(), dn3.data());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(BitIdentical(dp2, dp3));
  EXPECT_TRUE(BitIdentical(dn2, dn3));
  // The clamped branch has zero gradient; sigmoid(-1e4) = 0 gives -log(EPS) for the positive term.
  EXPECT_EQ(dn2[4], 0.0f);
  const float one_lp = -1e4f, one_ln = -1e4f, one_m = 1.0f;
  EXPECT_NEAR(be_->AuxLoss(1, &one_lp, &one_ln, &one_m, 1.0f, nullptr, nullptr),
              -std::log(1e-6) - std::log(1.0 - 1e-6), 1e-5);
}

TEST_P(DenseOpsTest, AdamMatchesReferenceOverSteps) {
  const int64_t n = 5000;
  AdamHyper h;
  Vf param = RandomFloats(n, 140), m(n, 0.0f), v(n, 0.0f);
  Vf rp = param, rm = m, rv = v;
  for (int64_t t = 1; t <= 3; ++t) {
    const Vf g = RandomFloats(n, 141 + t);
    be_->AdamUpdate(n, h, t, g.data(), param.data(), m.data(), v.data());
    ref::AdamUpdate<float>(n, h, t, g.data(), rp.data(), rm.data(), rv.data());
  }
  EXPECT_TRUE(AllClose(param, rp, kAdamTol, kFloor));
  // m and v are differences of terms of size (1 - b1)|g| <= 0.1 and (1 - b2) g^2 <= 1e-3: floors.
  EXPECT_TRUE(AllClose(m, rm, kAdamTol, 0.1));
  EXPECT_TRUE(AllClose(v, rv, kAdamTol, 1e-3));
  // Hand-computed first step: m = 0.1 g, v = 0.001 g^2, lr_t = 0.01 sqrt(0.001) / 0.1, so
  // param moves by lr_t * 0.1 g / (sqrt(0.001) |g| + 1e-7) ~= 0.01 sign(g).
  float p1 = 1.0f, m1 = 0.0f, v1 = 0.0f;
  const float g1 = 0.5f;
  be_->AdamUpdate(1, h, 1, &g1, &p1, &m1, &v1);
  EXPECT_NEAR(p1, 1.0f - 0.01f, 1e-6);
  EXPECT_FLOAT_EQ(m1, 0.05f);
  EXPECT_FLOAT_EQ(v1, (1.0f - h.beta2) * 0.25f);  // 1 - 0.999f is 0.00099998713f
}

TEST_P(DenseOpsTest, DeterministicAcrossRuns) {
  const DenseDims d{777, 80, 200, Activation::kPrelu};
  const Vf x = RandomFloats(d.rows * d.in, 150), w = RandomFloats(d.in * d.out, 151);
  const Vf b = RandomFloats(d.out, 152), slope(d.out, 0.1f), dy = RandomFloats(d.rows * d.out, 153);
  const std::vector<int32_t> inv = RandomIndices(20000, 154, -1, 300);
  const Vf g = RandomFloats(20000 * 16, 155);
  const AttnInputs in = MakeAttn(300, 90, 32, 156);
  auto run = [&]() {
    Vf pre(d.rows * d.out), y(d.rows * d.out), dx(d.rows * d.in, 0.0f), dw(d.in * d.out, 0.0f);
    Vf db(d.out, 0.0f), ds(d.out, 0.0f), ws(DenseWorkspaceFloats(d)), drows(300 * 16, 0.0f);
    Vf alpha(300 * 90), out(300 * 32), dq(300 * 32, 0.0f), dk(300 * 90 * 32, 0.0f);
    be_->DenseForward(d, x.data(), d.in, w.data(), b.data(), slope.data(), pre.data(), y.data());
    be_->DenseBackward(d, x.data(), d.in, w.data(), slope.data(), pre.data(), y.data(), dy.data(),
                       dx.data(), d.in, dw.data(), db.data(), ds.data(), ws.data());
    be_->SegmentSumRows(20000, 16, g.data(), 16, inv.data(), nullptr, 300, drows.data());
    be_->DotAttentionForward(300, 90, 32, in.q.data(), in.ldq, in.k.data(), in.mask.data(),
                             alpha.data(), out.data(), 32);
    be_->DotAttentionBackward(300, 90, 32, in.q.data(), in.ldq, in.k.data(), in.mask.data(),
                              alpha.data(), out.data(), 32, dq.data(), 32, dk.data());
    return std::vector<Vf>{y, dx, dw, db, ds, drows, alpha, out, dq, dk};
  };
  const auto first = run(), second = run();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(BitIdentical(first[i], second[i])) << i;
}

TEST_P(DenseOpsTest, ScaleAndAllFinite) {
  Vf p = RandomFloats(3001, 160), want = p;
  be_->Scale(3000, -0.375f, p.data());  // one float multiply each: bit-identical to the host
  for (int i = 0; i < 3000; ++i) want[i] *= -0.375f;
  EXPECT_TRUE(BitIdentical(p, want));  // the last element is outside n: untouched
  EXPECT_TRUE(be_->AllFinite(3001, p.data()));
  EXPECT_TRUE(be_->AllFinite(0, p.data()));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    Vf q = p;
    q[2999] = bad;
    EXPECT_FALSE(be_->AllFinite(3001, q.data())) << bad;
    EXPECT_TRUE(be_->AllFinite(2999, q.data())) << bad;  // the bad value is past n
  }
}

}  // namespace sift::kernels::dense_op_tests
