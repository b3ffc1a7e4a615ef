// The backend-parameterised tests of the sequence ops of kernels/backend.h (DIEN attention
// features, Keras reset-after GRU, original-code AUGRU) and their helpers: every backend against
// the double-precision reference templates (reference/sequence_ops.h), forward and every gradient,
// hand-computed single steps, edge cases (batch 1, T = 1, att all 0 / all 1, zero inputs), the +=
// accumulate contract, nullable gradients, and bit-identical reruns. Included by exactly one .cc
// per test binary, which instantiates SequenceOpsTest for its backends: sequence_ops_test.cc (the
// host backends, label unit) and tests/gpu/cuda_ops_test.cc (cuda through a MirroredBackend,
// label gpu).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/reference/dense_ops.h"
#include "kernels/reference/sequence_ops.h"
#include "tests/unit/kernels/backend_fixture.h"
#include "tests/unit/kernels/op_test_util.h"

namespace sift::kernels::sequence_op_tests {

using testing::AllClose;
using testing::AsDouble;
using testing::AsFloat;
using testing::BitIdentical;
using testing::RandomFloats;

// Float backends against the double templates, with tolerances from an error bound that holds
// for every correct kernel (any BLAS / oneDNN blocking, any summation order, any ISA):
// - One pre-activation is a k-term dot product (k = in + H for the recurrences' gates) of terms
//   |x_i w_i| <= xw, where xw = max|input| * max|weight| of the test data (inputs and states
//   <= 1). Rounding errors of fp32 (u = 2^-24) in whatever order add like a random walk over
//   partial sums of size ~sqrt(k) xw: |error| <~ u sqrt(k) * sqrt(k) xw = u k xw (DotError).
// - The gates see it through sigmoid' <= 1/4, the candidate through tanh' <= 1, and the fast
//   activations add their own <= 5e-7 (vector_math.h: sigmoid 2e-7, tanh 3e-7 absolute; CUDA's
//   expf / tanhf <= 2.4e-7); the state update is a convex combination (gain <= 1), so one step
//   adds at most StepError = 2 DotError + 1e-6 and passes the earlier steps' errors on.
// - After T steps a state is off by <= T * StepError (RecurrenceTolerance, absolute: states are
//   at most 1). Gradients go back through the same T steps and their GEMMs (k = 3H, 2H, H; the
//   weight gradients sum B*T rows, relative error u sqrt(B T), far below): the same bound as a
//   fraction of each gradient's largest magnitude (normwise, GradScale).
// kMargin covers the constants dropped above (the walk's tail, sigmoid vs tanh mixing). An
// indexing or gate bug is O(0.1 - 1), far above every tolerance here. The bound is ~50x the
// error seen with OpenBLAS, oneDNN (SSE4.1, AVX2) and the cpu backend's variants (~1e-6 at
// T = 10, k = 192), and the fixed 1e-5 it replaced failed a correct kernel (SSE4.1 oneDNN:
// 1.09e-5).
constexpr double kUnitRoundoff = 0x1p-24;
constexpr double kFastActivationError = 1e-6;
constexpr double kMargin = 4.0;
constexpr double kFeaturesTol = 1e-6;  // q - h, q * h: one rounding of values <= 1
// The features' gradients sum <= 3 terms of size <= 1 per step over T <= 10 steps: absolute
// error <= kMargin * u * 30 = 7e-6.
constexpr double kFeaturesGradTol = 1e-5;
constexpr double kFloor = 1e-3;
// Hand-computed single steps (float backends against double formulas): T = 1, k <= 3.
constexpr double kHandTol = 1e-5;

inline double DotError(int64_t k, double xw) { return kUnitRoundoff * static_cast<double>(k) * xw; }
inline double RecurrenceTolerance(const RnnDims& d, double xw) {
  const double step = 2.0 * DotError(d.in + d.hidden, xw) + kFastActivationError;
  return kMargin * std::max(1, d.time) * step;
}
template <typename V>
double MaxAbs(const V& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}
// The normwise floor of a gradient: its largest magnitude (an AllClose floor of max|expected|
// turns the relative tolerance into tol * max|expected| for every element).
inline double GradScale(const std::vector<double>& expected) {
  return std::max(1e-12, MaxAbs(expected));
}

// ---- GRU --------------------------------------------------------------------------------------

template <typename R>
struct GruData {
  RnnDims d;
  std::vector<R> x, w_in, w_rec, b_in, b_rec, dh;
};

inline GruData<float> MakeGru(const RnnDims& d, uint64_t seed) {
  const int64_t H = d.hidden, G = 3 * H, rows = d.batch * d.time;
  GruData<float> g;
  g.d = d;
  g.x = RandomFloats(rows * d.in, seed + 1);
  g.w_in = RandomFloats(d.in * G, seed + 2, -0.5f, 0.5f);
  g.w_rec = RandomFloats(H * G, seed + 3, -0.4f, 0.4f);
  g.b_in = RandomFloats(G, seed + 4, -0.3f, 0.3f);
  g.b_rec = RandomFloats(G, seed + 5, -0.3f, 0.3f);
  g.dh = RandomFloats(rows * H, seed + 6);
  return g;
}

inline GruData<double> AsDoubleData(const GruData<float>& f) {
  return {f.d,
          AsDouble(f.x),
          AsDouble(f.w_in),
          AsDouble(f.w_rec),
          AsDouble(f.b_in),
          AsDouble(f.b_rec),
          AsDouble(f.dh)};
}

template <typename R>
struct GruOut {
  std::vector<R> h, dx, dw_in, dw_rec, db_in, db_rec;
};

// Zero-initialised gradient buffers of the right sizes.
template <typename R>
GruOut<R> ZeroGruOut(const RnnDims& d) {
  const int64_t H = d.hidden, G = 3 * H, rows = d.batch * d.time;
  GruOut<R> o;
  o.h.assign(rows * H, R(0));
  o.dx.assign(rows * d.in, R(0));
  o.dw_in.assign(d.in * G, R(0));
  o.dw_rec.assign(H * G, R(0));
  o.db_in.assign(G, R(0));
  o.db_rec.assign(G, R(0));
  return o;
}

inline GruOut<double> RefGru(const GruData<double>& g) {
  const RnnDims& d = g.d;
  GruOut<double> o = ZeroGruOut<double>(d);
  std::vector<double> cache(GruCacheFloats(d)), ws(GruWorkspaceFloats(d));
  ref::GruForward<double>(d, g.x.data(), g.w_in.data(), g.w_rec.data(), g.b_in.data(),
                          g.b_rec.data(), o.h.data(), cache.data());
  ref::GruBackward<double>(d, g.x.data(), g.w_in.data(), g.w_rec.data(), o.h.data(), cache.data(),
                           g.dh.data(), o.dx.data(), o.dw_in.data(), o.dw_rec.data(),
                           o.db_in.data(), o.db_rec.data(), ws.data());
  return o;
}

// Forward + backward on a backend; gradients are added to `init` (zeros by default).
inline GruOut<float> RunGru(Backend& be, const GruData<float>& g, bool want_dx = true,
                            const GruOut<float>* init = nullptr) {
  const RnnDims& d = g.d;
  GruOut<float> o = init != nullptr ? *init : ZeroGruOut<float>(d);
  std::vector<float> cache(GruCacheFloats(d)), ws(GruWorkspaceFloats(d));
  be.GruForward(d, g.x.data(), g.w_in.data(), g.w_rec.data(), g.b_in.data(), g.b_rec.data(),
                o.h.data(), cache.data(), ws.data());
  be.GruBackward(d, g.x.data(), g.w_in.data(), g.w_rec.data(), o.h.data(), cache.data(),
                 g.dh.data(), want_dx ? o.dx.data() : nullptr, o.dw_in.data(), o.dw_rec.data(),
                 o.db_in.data(), o.db_rec.data(), ws.data());
  return o;
}

inline double GruLoss(const GruData<double>& g) {
  std::vector<double> h(g.d.batch * g.d.time * g.d.hidden), cache(GruCacheFloats(g.d));
  ref::GruForward<double>(g.d, g.x.data(), g.w_in.data(), g.w_rec.data(), g.b_in.data(),
                          g.b_rec.data(), h.data(), cache.data());
  return testing::Project(h, g.dh);
}

// The largest |input| * |weight| of a GRU's products (inputs and states: states are <= 1).
inline double GruTermBound(const GruData<float>& g) {
  return std::max(1.0, MaxAbs(g.x)) * std::max(MaxAbs(g.w_in), MaxAbs(g.w_rec));
}

inline void ExpectGruClose(const GruOut<float>& got, const GruOut<double>& want,
                           const GruData<float>& g) {
  const double tol = RecurrenceTolerance(g.d, GruTermBound(g));
  EXPECT_TRUE(AllClose(got.h, want.h, tol, 1.0)) << "h, absolute tolerance " << tol;
  EXPECT_TRUE(AllClose(got.dx, want.dx, tol, GradScale(want.dx))) << "dx";
  EXPECT_TRUE(AllClose(got.dw_in, want.dw_in, tol, GradScale(want.dw_in))) << "dw_in";
  EXPECT_TRUE(AllClose(got.dw_rec, want.dw_rec, tol, GradScale(want.dw_rec))) << "dw_rec";
  EXPECT_TRUE(AllClose(got.db_in, want.db_in, tol, GradScale(want.db_in))) << "db_in";
  EXPECT_TRUE(AllClose(got.db_rec, want.db_rec, tol, GradScale(want.db_rec))) << "db_rec";
}

// ---- AUGRU ------------------------------------------------------------------------------------

template <typename R>
struct AugruData {
  RnnDims d;
  std::vector<R> x, att, g_w, g_b, c_w, c_b, dlast;
};

inline AugruData<float> MakeAugru(const RnnDims& d, uint64_t seed) {
  const int64_t H = d.hidden, rows = d.batch * d.time, K = d.in + H;
  AugruData<float> a;
  a.d = d;
  a.x = RandomFloats(rows * d.in, seed + 1);
  a.att = RandomFloats(rows, seed + 2, 0.0f, 1.0f);
  a.g_w = RandomFloats(K * 2 * H, seed + 3, -0.4f, 0.4f);
  a.g_b = RandomFloats(2 * H, seed + 4, 0.5f, 1.5f);  // the model initialises b_G to 1
  a.c_w = RandomFloats(K * H, seed + 5, -0.4f, 0.4f);
  a.c_b = RandomFloats(H, seed + 6, -0.3f, 0.3f);
  a.dlast = RandomFloats(d.batch * H, seed + 7);
  return a;
}

inline AugruData<double> AsDoubleData(const AugruData<float>& f) {
  return {f.d,
          AsDouble(f.x),
          AsDouble(f.att),
          AsDouble(f.g_w),
          AsDouble(f.g_b),
          AsDouble(f.c_w),
          AsDouble(f.c_b),
          AsDouble(f.dlast)};
}

template <typename R>
struct AugruOut {
  std::vector<R> hs, dx, datt, dg_w, dg_b, dc_w, dc_b;
};

template <typename R>
AugruOut<R> ZeroAugruOut(const RnnDims& d) {
  const int64_t H = d.hidden, rows = d.batch * d.time, K = d.in + H;
  AugruOut<R> o;
  o.hs.assign(rows * H, R(0));
  o.dx.assign(rows * d.in, R(0));
  o.datt.assign(rows, R(0));
  o.dg_w.assign(K * 2 * H, R(0));
  o.dg_b.assign(2 * H, R(0));
  o.dc_w.assign(K * H, R(0));
  o.dc_b.assign(H, R(0));
  return o;
}

inline AugruOut<double> RefAugru(const AugruData<double>& a) {
  const RnnDims& d = a.d;
  AugruOut<double> o = ZeroAugruOut<double>(d);
  std::vector<double> cache(AugruCacheFloats(d)), ws(AugruWorkspaceFloats(d));
  ref::AugruForward<double>(d, a.x.data(), a.att.data(), a.g_w.data(), a.g_b.data(), a.c_w.data(),
                            a.c_b.data(), o.hs.data(), cache.data());
  ref::AugruBackward<double>(d, a.x.data(), a.att.data(), a.g_w.data(), a.c_w.data(), o.hs.data(),
                             cache.data(), a.dlast.data(), o.dx.data(), o.datt.data(),
                             o.dg_w.data(), o.dg_b.data(), o.dc_w.data(), o.dc_b.data(), ws.data());
  return o;
}

inline AugruOut<float> RunAugru(Backend& be, const AugruData<float>& a, bool want_dx = true,
                                const AugruOut<float>* init = nullptr) {
  const RnnDims& d = a.d;
  AugruOut<float> o = init != nullptr ? *init : ZeroAugruOut<float>(d);
  std::vector<float> cache(AugruCacheFloats(d)), ws(AugruWorkspaceFloats(d));
  be.AugruForward(d, a.x.data(), a.att.data(), a.g_w.data(), a.g_b.data(), a.c_w.data(),
                  a.c_b.data(), o.hs.data(), cache.data(), ws.data());
  be.AugruBackward(d, a.x.data(), a.att.data(), a.g_w.data(), a.c_w.data(), o.hs.data(),
                   cache.data(), a.dlast.data(), want_dx ? o.dx.data() : nullptr,
                   want_dx ? o.datt.data() : nullptr, o.dg_w.data(), o.dg_b.data(), o.dc_w.data(),
                   o.dc_b.data(), ws.data());
  return o;
}

// sum_b <dlast_b, h'_{b,T-1}>: the scalar whose gradient AugruBackward computes.
inline double AugruLoss(const AugruData<double>& a) {
  const RnnDims& d = a.d;
  const int64_t H = d.hidden;
  std::vector<double> hs(d.batch * d.time * H), cache(AugruCacheFloats(d));
  ref::AugruForward<double>(d, a.x.data(), a.att.data(), a.g_w.data(), a.g_b.data(), a.c_w.data(),
                            a.c_b.data(), hs.data(), cache.data());
  double s = 0.0;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      s += a.dlast[b * H + j] * hs[((b + 1) * d.time - 1) * H + j];
    }
  }
  return s;
}

// The largest |input| * |weight| of an AUGRU's products (inputs and states <= 1).
inline double AugruTermBound(const AugruData<float>& a) {
  return std::max(1.0, MaxAbs(a.x)) * std::max(MaxAbs(a.g_w), MaxAbs(a.c_w));
}

inline void ExpectAugruClose(const AugruOut<float>& got, const AugruOut<double>& want,
                             const AugruData<float>& a) {
  const double tol = RecurrenceTolerance(a.d, AugruTermBound(a));
  EXPECT_TRUE(AllClose(got.hs, want.hs, tol, 1.0)) << "hs, absolute tolerance " << tol;
  EXPECT_TRUE(AllClose(got.dx, want.dx, tol, GradScale(want.dx))) << "dx";
  EXPECT_TRUE(AllClose(got.datt, want.datt, tol, GradScale(want.datt))) << "datt";
  EXPECT_TRUE(AllClose(got.dg_w, want.dg_w, tol, GradScale(want.dg_w))) << "dg_w";
  EXPECT_TRUE(AllClose(got.dg_b, want.dg_b, tol, GradScale(want.dg_b))) << "dg_b";
  EXPECT_TRUE(AllClose(got.dc_w, want.dc_w, tol, GradScale(want.dc_w))) << "dc_w";
  EXPECT_TRUE(AllClose(got.dc_b, want.dc_b, tol, GradScale(want.dc_b))) << "dc_b";
}

inline double Sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// ---- Every backend ----------------------------------------------------------------------------

class SequenceOpsTest : public testing::BackendOpTest {};

// FeatureDense (the attention MLP's first layer over the features) against the reference's
// composition in double (AttentionFeaturesForward, then DenseForward / DenseBackward and
// AttentionFeaturesBackward), every activation, gradients added to non-zero values, and the
// nullable input gradients skipped. A backend may regroup the 4H products (the cpu backend folds
// them into 2H + a per-row product): the error bound is the dense layers' (k = 4H products per
// output, kMargin * u * k * max|c| max|w|), the gradients' as a fraction of their largest value.
TEST_P(SequenceOpsTest, FeatureDenseMatchesFeaturesThenDense) {
  for (Activation act : {Activation::kSigmoid, Activation::kPrelu, Activation::kNone}) {
    const FeatureDenseDims d{7, 10, 96, 80, act};
    SCOPED_TRACE(::testing::Message() << "act " << static_cast<int>(act));
    const int64_t R = d.batch * d.time, H = d.hidden, O = d.out, K = 4 * H;
    const std::vector<float> qp = RandomFloats(d.batch * H, 31), h = RandomFloats(R * H, 32);
    const std::vector<float> w = RandomFloats(K * O, 33, -0.2f, 0.2f);
    const std::vector<float> b = RandomFloats(O, 34, -0.1f, 0.1f);
    const std::vector<float> slope = RandomFloats(O, 35, 0.0f, 0.3f);
    std::vector<float> pre(R * O), y(R * O), ws(FeatureDenseWorkspaceFloats(d));
    backend_->FeatureDenseForward(d, qp.data(), h.data(), w.data(), b.data(), slope.data(),
                                  pre.data(), y.data(), ws.data());
    std::vector<double> c_d(R * K), pre_d(R * O), y_d(R * O);
    ref::AttentionFeaturesForward<double>(d.batch, d.time, d.hidden, AsDouble(qp).data(),
                                          AsDouble(h).data(), c_d.data());
    reference::DenseForward<double>(FeatureDenseAsDense(d), c_d.data(), K, AsDouble(w).data(),
                                    AsDouble(b).data(), AsDouble(slope).data(), pre_d.data(),
                                    y_d.data());
    // |c| <= 2 (qp - h), |w| <= 0.2.
    const double tol = kMargin * DotError(K, 2.0 * 0.2) + kFastActivationError;
    EXPECT_TRUE(AllClose(pre, pre_d, tol, 1.0)) << "pre";
    EXPECT_TRUE(AllClose(y, y_d, tol, 1.0)) << "y";

    // Backward from the reference's forward values into non-zero gradients.
    const std::vector<float> pre_f = AsFloat(pre_d), y_f = AsFloat(y_d);
    const std::vector<float> dy = RandomFloats(R * O, 36);
    std::vector<float> dqp = RandomFloats(d.batch * H, 37), dh = RandomFloats(R * H, 38);
    std::vector<float> dw = RandomFloats(K * O, 39), db = RandomFloats(O, 40);
    std::vector<float> dslope = RandomFloats(O, 41);
    std::vector<double> dqp_d = AsDouble(dqp), dh_d = AsDouble(dh), dw_d = AsDouble(dw);
    std::vector<double> db_d = AsDouble(db), ds_d = AsDouble(dslope);
    backend_->FeatureDenseBackward(d, qp.data(), h.data(), w.data(), slope.data(), pre_f.data(),
                                   y_f.data(), dy.data(), dqp.data(), dh.data(), dw.data(),
                                   db.data(), dslope.data(), ws.data());
    std::vector<double> dc_d(R * K, 0.0), dws(DenseWorkspaceFloats(FeatureDenseAsDense(d)));
    reference::DenseBackward<double>(FeatureDenseAsDense(d), c_d.data(), K, AsDouble(w).data(),
                                     AsDouble(slope).data(), AsDouble(pre_f).data(),
                                     AsDouble(y_f).data(), AsDouble(dy).data(), dc_d.data(), K,
                                     dw_d.data(), db_d.data(), ds_d.data(), dws.data());
    ref::AttentionFeaturesBackward<double>(d.batch, d.time, d.hidden, AsDouble(qp).data(),
                                           AsDouble(h).data(), dc_d.data(), dqp_d.data(),
                                           dh_d.data());
    // dh and dqp sum O products (and dqp T steps of them); dw sums R rows.
    const double gtol = kMargin * DotError(std::max<int64_t>(O * d.time, R), 2.0) + 1e-6;
    EXPECT_TRUE(AllClose(dqp, dqp_d, gtol, GradScale(dqp_d))) << "dqp";
    EXPECT_TRUE(AllClose(dh, dh_d, gtol, GradScale(dh_d))) << "dh";
    EXPECT_TRUE(AllClose(dw, dw_d, gtol, GradScale(dw_d))) << "dw";
    EXPECT_TRUE(AllClose(db, db_d, gtol, GradScale(db_d))) << "db";
    if (act == Activation::kPrelu) {
      EXPECT_TRUE(AllClose(dslope, ds_d, gtol, GradScale(ds_d))) << "dslope";
    }
    // Nullable input gradients: only the weights' are computed, and they are the same.
    std::vector<float> dw2 = RandomFloats(K * O, 39), db2 = RandomFloats(O, 40);
    std::vector<float> dslope2 = RandomFloats(O, 41);
    backend_->FeatureDenseBackward(d, qp.data(), h.data(), w.data(), slope.data(), pre_f.data(),
                                   y_f.data(), dy.data(), nullptr, nullptr, dw2.data(), db2.data(),
                                   dslope2.data(), ws.data());
    EXPECT_TRUE(BitIdentical(dw2, dw));
    EXPECT_TRUE(BitIdentical(db2, db));
  }
}

TEST_P(SequenceOpsTest, AttentionFeaturesMatchReferenceAndAccumulate) {
  const int64_t B = 7, T = 10, H = 96;
  const std::vector<float> qp = RandomFloats(B * H, 21), h = RandomFloats(B * T * H, 22);
  const std::vector<float> dc = RandomFloats(B * T * 4 * H, 23);
  std::vector<float> c(B * T * 4 * H, -7.0f);  // overwritten
  backend_->AttentionFeaturesForward(B, T, H, qp.data(), h.data(), c.data());
  std::vector<double> want_c(c.size());
  ref::AttentionFeaturesForward<double>(B, T, H, AsDouble(qp).data(), AsDouble(h).data(),
                                        want_c.data());
  EXPECT_TRUE(AllClose(c, want_c, kFeaturesTol, kFloor));

  // Gradients start from non-zero values: the op adds.
  std::vector<float> dqp = RandomFloats(B * H, 24), dh = RandomFloats(B * T * H, 25);
  std::vector<double> want_dqp = AsDouble(dqp), want_dh = AsDouble(dh);
  backend_->AttentionFeaturesBackward(B, T, H, qp.data(), h.data(), dc.data(), dqp.data(),
                                      dh.data());
  ref::AttentionFeaturesBackward<double>(B, T, H, AsDouble(qp).data(), AsDouble(h).data(),
                                         AsDouble(dc).data(), want_dqp.data(), want_dh.data());
  EXPECT_TRUE(AllClose(dqp, want_dqp, kFeaturesGradTol, 1.0));
  EXPECT_TRUE(AllClose(dh, want_dh, kFeaturesGradTol, 1.0));

  // Nullable outputs: each alone gives the same values.
  std::vector<float> dqp_only(B * H, 0.0f), dh_only(B * T * H, 0.0f);
  backend_->AttentionFeaturesBackward(B, T, H, qp.data(), h.data(), dc.data(), dqp_only.data(),
                                      nullptr);
  backend_->AttentionFeaturesBackward(B, T, H, qp.data(), h.data(), dc.data(), nullptr,
                                      dh_only.data());
  std::vector<double> ref_dqp(B * H, 0.0), ref_dh(B * T * H, 0.0);
  ref::AttentionFeaturesBackward<double>(B, T, H, AsDouble(qp).data(), AsDouble(h).data(),
                                         AsDouble(dc).data(), ref_dqp.data(), ref_dh.data());
  EXPECT_TRUE(AllClose(dqp_only, ref_dqp, kFeaturesGradTol, 1.0));
  EXPECT_TRUE(AllClose(dh_only, ref_dh, kFeaturesGradTol, 1.0));
}

TEST_P(SequenceOpsTest, GruMatchesReference) {
  // Small odd sizes, the model's size (in 32, H 96, T 10), batch 1, and T = 1.
  const RnnDims shapes[] = {{5, 4, 3, 6}, {9, 10, 32, 96}, {1, 10, 32, 96}, {6, 1, 7, 5}};
  uint64_t seed = 300;
  for (const RnnDims& d : shapes) {
    SCOPED_TRACE(::testing::Message()
                 << "B=" << d.batch << " T=" << d.time << " in=" << d.in << " H=" << d.hidden);
    const GruData<float> g = MakeGru(d, seed += 10);
    ExpectGruClose(RunGru(*backend_, g), RefGru(AsDoubleData(g)), g);
  }
}

TEST_P(SequenceOpsTest, AugruMatchesReference) {
  const RnnDims shapes[] = {{5, 4, 3, 6}, {9, 10, 96, 96}, {1, 10, 96, 96}, {6, 1, 7, 5}};
  uint64_t seed = 400;
  for (const RnnDims& d : shapes) {
    SCOPED_TRACE(::testing::Message()
                 << "B=" << d.batch << " T=" << d.time << " in=" << d.in << " H=" << d.hidden);
    const AugruData<float> a = MakeAugru(d, seed += 10);
    ExpectAugruClose(RunAugru(*backend_, a), RefAugru(AsDoubleData(a)), a);
  }
}

TEST_P(SequenceOpsTest, GruSingleStepByHand) {
  // T = 1, in = 1, H = 2: h_0 = 0, so h U = 0 and only the recurrent bias reaches the gates.
  GruData<float> g;
  g.d = {1, 1, 1, 2};
  g.x = {0.5f};
  g.w_in = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};  // [z0 z1 | r0 r1 | n0 n1]
  g.w_rec = {0.7f, -0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f, -0.7f, 0.8f, 0.9f, -0.3f, 0.2f};
  g.b_in = {0.05f, -0.05f, 0.1f, -0.1f, 0.2f, -0.2f};
  g.b_rec = {0.01f, 0.02f, -0.03f, 0.04f, 0.3f, -0.25f};
  g.dh = {1.0f, -2.0f};
  const GruOut<float> o = RunGru(*backend_, g);
  const double x = 0.5;
  double dx = 0.0;
  for (int j = 0; j < 2; ++j) {
    const double z = Sig(x * g.w_in[j] + g.b_in[j] + g.b_rec[j]);
    const double r = Sig(x * g.w_in[2 + j] + g.b_in[2 + j] + g.b_rec[2 + j]);
    const double hn = g.b_rec[4 + j];
    const double n = std::tanh(x * g.w_in[4 + j] + g.b_in[4 + j] + r * hn);
    EXPECT_NEAR(o.h[j], (1 - z) * n, kHandTol) << j;
    const double dh = g.dh[j];
    const double daz = dh * (0.0 - n) * z * (1 - z);
    const double dan = dh * (1 - z) * (1 - n * n);
    const double dar = dan * hn * r * (1 - r);
    EXPECT_NEAR(o.db_in[j], daz, kHandTol);
    EXPECT_NEAR(o.db_in[2 + j], dar, kHandTol);
    EXPECT_NEAR(o.db_in[4 + j], dan, kHandTol);
    EXPECT_NEAR(o.db_rec[j], daz, kHandTol);
    EXPECT_NEAR(o.db_rec[2 + j], dar, kHandTol);
    EXPECT_NEAR(o.db_rec[4 + j], dan * r, kHandTol);
    EXPECT_NEAR(o.dw_in[j], x * daz, kHandTol);
    EXPECT_NEAR(o.dw_in[2 + j], x * dar, kHandTol);
    EXPECT_NEAR(o.dw_in[4 + j], x * dan, kHandTol);
    dx += daz * g.w_in[j] + dar * g.w_in[2 + j] + dan * g.w_in[4 + j];
  }
  EXPECT_NEAR(o.dx[0], dx, kHandTol);
  for (float v : o.dw_rec) EXPECT_EQ(v, 0.0f);  // h_0 = 0: no recurrent-kernel gradient
}

TEST_P(SequenceOpsTest, AugruSingleStepByHand) {
  // T = 1, in = 1, H = 2, att 0.25: h'_0 = 0, so gamma * h' = 0 and only x reaches the gates.
  AugruData<float> a;
  a.d = {1, 1, 1, 2};
  a.x = {0.8f};
  a.att = {0.25f};
  // G [(1 + 2), 4]: row 0 is x's, rows 1-2 the state's; columns [gamma0 gamma1 | u0 u1].
  a.g_w = {0.3f, -0.6f, 0.5f, -0.2f, 0.1f, 0.2f, 0.3f, 0.4f, -0.1f, -0.2f, -0.3f, -0.4f};
  a.g_b = {1.0f, 0.9f, 1.1f, 0.8f};
  a.c_w = {0.7f, -0.9f, 0.2f, 0.3f, -0.5f, 0.6f};  // C [(1 + 2), 2]
  a.c_b = {0.1f, -0.2f};
  a.dlast = {0.5f, -1.5f};
  const AugruOut<float> o = RunAugru(*backend_, a);
  const double x = 0.8, att = 0.25;
  double dx = 0.0, datt = 0.0;
  for (int j = 0; j < 2; ++j) {
    const double u = Sig(x * a.g_w[2 + j] + a.g_b[2 + j]);
    const double c = std::tanh(x * a.c_w[j] + a.c_b[j]);
    const double uk = (1 - att) * u;
    EXPECT_NEAR(o.hs[j], (1 - uk) * c, kHandTol) << j;
    const double g = a.dlast[j];
    const double duk = g * (0.0 - c);
    const double dcp = g * (1 - uk) * (1 - c * c);
    const double dgu = duk * (1 - att) * u * (1 - u);
    datt += -duk * u;
    EXPECT_NEAR(o.dg_b[j], 0.0, kHandTol);  // gamma multiplies h'_0 = 0
    EXPECT_NEAR(o.dg_b[2 + j], dgu, kHandTol);
    EXPECT_NEAR(o.dc_b[j], dcp, kHandTol);
    EXPECT_NEAR(o.dg_w[2 + j], x * dgu, kHandTol);
    EXPECT_NEAR(o.dc_w[j], x * dcp, kHandTol);
    dx += dgu * a.g_w[2 + j] + dcp * a.c_w[j];
  }
  EXPECT_NEAR(o.dx[0], dx, kHandTol);
  EXPECT_NEAR(o.datt[0], datt, kHandTol);
  // The state rows of G and C, and the gamma columns, see only zeros.
  for (int k = 0; k < 12; ++k) {
    if (k == 2 || k == 3) continue;  // x row, u columns
    EXPECT_EQ(o.dg_w[k], 0.0f) << k;
  }
  for (int k = 2; k < 6; ++k) EXPECT_EQ(o.dc_w[k], 0.0f) << k;
}

TEST_P(SequenceOpsTest, AugruAttentionZeroIsResetBeforeGru) {
  // att = 0: h'_t = u h' + (1 - u) tanh([x; gamma h'] C + c_b), a plain reset-before GRU,
  // written out here independently over T = 3 steps.
  const RnnDims d{2, 3, 4, 3};
  AugruData<float> a = MakeAugru(d, 500);
  std::fill(a.att.begin(), a.att.end(), 0.0f);
  const AugruOut<float> o = RunAugru(*backend_, a);
  const int64_t H = d.hidden, I = d.in;
  for (int64_t b = 0; b < d.batch; ++b) {
    std::vector<double> h(H, 0.0);
    for (int64_t t = 0; t < d.time; ++t) {
      const float* x = &a.x[(b * d.time + t) * I];
      std::vector<double> gamma(H), u(H), next(H);
      for (int64_t j = 0; j < H; ++j) {
        double sg = a.g_b[j], su = a.g_b[H + j];
        for (int64_t k = 0; k < I; ++k) {
          sg += x[k] * a.g_w[k * 2 * H + j];
          su += x[k] * a.g_w[k * 2 * H + H + j];
        }
        for (int64_t k = 0; k < H; ++k) {
          sg += h[k] * a.g_w[(I + k) * 2 * H + j];
          su += h[k] * a.g_w[(I + k) * 2 * H + H + j];
        }
        gamma[j] = Sig(sg);
        u[j] = Sig(su);
      }
      for (int64_t j = 0; j < H; ++j) {
        double s = a.c_b[j];
        for (int64_t k = 0; k < I; ++k) s += x[k] * a.c_w[k * H + j];
        for (int64_t k = 0; k < H; ++k) s += gamma[k] * h[k] * a.c_w[(I + k) * H + j];
        next[j] = u[j] * h[j] + (1 - u[j]) * std::tanh(s);
      }
      h = next;
      for (int64_t j = 0; j < H; ++j) {
        EXPECT_NEAR(o.hs[(b * d.time + t) * H + j], h[j], kHandTol) << b << " " << t << " " << j;
      }
    }
  }
}

TEST_P(SequenceOpsTest, AugruAttentionOneReplacesStateWithCandidate) {
  // att = 1: u' = 0, so h'_t = c_t and the update gate gets no gradient at all.
  const RnnDims d{3, 4, 5, 6};
  AugruData<float> a = MakeAugru(d, 600);
  std::fill(a.att.begin(), a.att.end(), 1.0f);
  const AugruOut<float> o = RunAugru(*backend_, a);
  const AugruOut<double> want = RefAugru(AsDoubleData(a));
  ExpectAugruClose(o, want, a);
  const int64_t H = d.hidden;
  for (int64_t j = 0; j < H; ++j) EXPECT_EQ(o.dg_b[H + j], 0.0f) << j;
  for (int64_t k = 0; k < d.in + H; ++k) {
    for (int64_t j = 0; j < H; ++j) EXPECT_EQ(o.dg_w[k * 2 * H + H + j], 0.0f) << k << " " << j;
  }
  // Step 0 from h'_0 = 0: the state is exactly the candidate tanh(x C_x + c_b).
  for (int64_t j = 0; j < H; ++j) {
    double s = a.c_b[j];
    for (int64_t k = 0; k < d.in; ++k) s += a.x[k] * a.c_w[k * H + j];
    EXPECT_NEAR(o.hs[j], std::tanh(s), kHandTol) << j;
  }
}

TEST_P(SequenceOpsTest, ZeroInputsGiveZeroStates) {
  // x = 0 and zero biases: every gate is 1/2 and every candidate tanh(0) = 0, so all states stay
  // exactly 0; the kernels see only zero inputs, so their gradients are exactly 0.
  const RnnDims d{4, 5, 6, 7};
  GruData<float> g = MakeGru(d, 700);
  std::fill(g.x.begin(), g.x.end(), 0.0f);
  std::fill(g.b_in.begin(), g.b_in.end(), 0.0f);
  std::fill(g.b_rec.begin(), g.b_rec.end(), 0.0f);
  const GruOut<float> go = RunGru(*backend_, g);
  for (float v : go.h) ASSERT_EQ(v, 0.0f);
  for (float v : go.dw_in) ASSERT_EQ(v, 0.0f);
  for (float v : go.dw_rec) ASSERT_EQ(v, 0.0f);
  ExpectGruClose(go, RefGru(AsDoubleData(g)), g);

  AugruData<float> a = MakeAugru(d, 710);
  std::fill(a.x.begin(), a.x.end(), 0.0f);
  std::fill(a.g_b.begin(), a.g_b.end(), 0.0f);
  std::fill(a.c_b.begin(), a.c_b.end(), 0.0f);
  const AugruOut<float> ao = RunAugru(*backend_, a);
  for (float v : ao.hs) ASSERT_EQ(v, 0.0f);
  for (float v : ao.dg_w) ASSERT_EQ(v, 0.0f);
  for (float v : ao.dc_w) ASSERT_EQ(v, 0.0f);
  ExpectAugruClose(ao, RefAugru(AsDoubleData(a)), a);
}

TEST_P(SequenceOpsTest, GradientsAccumulate) {
  const RnnDims d{5, 6, 8, 12};
  const GruData<float> g = MakeGru(d, 800);
  GruOut<float> ginit = ZeroGruOut<float>(d);
  ginit.dx = RandomFloats(ginit.dx.size(), 801);
  ginit.dw_in = RandomFloats(ginit.dw_in.size(), 802);
  ginit.dw_rec = RandomFloats(ginit.dw_rec.size(), 803);
  ginit.db_in = RandomFloats(ginit.db_in.size(), 804);
  ginit.db_rec = RandomFloats(ginit.db_rec.size(), 805);
  GruOut<double> gwant = RefGru(AsDoubleData(g));
  auto add = [](std::vector<double>* want, const std::vector<float>& init) {
    for (size_t i = 0; i < want->size(); ++i) (*want)[i] += init[i];
  };
  add(&gwant.dx, ginit.dx);
  add(&gwant.dw_in, ginit.dw_in);
  add(&gwant.dw_rec, ginit.dw_rec);
  add(&gwant.db_in, ginit.db_in);
  add(&gwant.db_rec, ginit.db_rec);
  ExpectGruClose(RunGru(*backend_, g, true, &ginit), gwant, g);

  const AugruData<float> a = MakeAugru(d, 810);
  AugruOut<float> ainit = ZeroAugruOut<float>(d);
  ainit.dx = RandomFloats(ainit.dx.size(), 811);
  ainit.datt = RandomFloats(ainit.datt.size(), 812);
  ainit.dg_w = RandomFloats(ainit.dg_w.size(), 813);
  ainit.dg_b = RandomFloats(ainit.dg_b.size(), 814);
  ainit.dc_w = RandomFloats(ainit.dc_w.size(), 815);
  ainit.dc_b = RandomFloats(ainit.dc_b.size(), 816);
  AugruOut<double> awant = RefAugru(AsDoubleData(a));
  add(&awant.dx, ainit.dx);
  add(&awant.datt, ainit.datt);
  add(&awant.dg_w, ainit.dg_w);
  add(&awant.dg_b, ainit.dg_b);
  add(&awant.dc_w, ainit.dc_w);
  add(&awant.dc_b, ainit.dc_b);
  ExpectAugruClose(RunAugru(*backend_, a, true, &ainit), awant, a);
}

TEST_P(SequenceOpsTest, NullInputGradientsSkipped) {
  // dx (and datt) null: the weight gradients are unchanged, and the skipped buffers untouched.
  const RnnDims d{4, 5, 6, 8};
  const GruData<float> g = MakeGru(d, 900);
  const GruOut<float> full = RunGru(*backend_, g, true);
  const GruOut<float> part = RunGru(*backend_, g, false);
  EXPECT_TRUE(BitIdentical(part.dw_in, full.dw_in));
  EXPECT_TRUE(BitIdentical(part.dw_rec, full.dw_rec));
  EXPECT_TRUE(BitIdentical(part.db_in, full.db_in));
  EXPECT_TRUE(BitIdentical(part.db_rec, full.db_rec));
  for (float v : part.dx) EXPECT_EQ(v, 0.0f);

  const AugruData<float> a = MakeAugru(d, 910);
  const AugruOut<float> afull = RunAugru(*backend_, a, true);
  const AugruOut<float> apart = RunAugru(*backend_, a, false);
  EXPECT_TRUE(BitIdentical(apart.dg_w, afull.dg_w));
  EXPECT_TRUE(BitIdentical(apart.dg_b, afull.dg_b));
  EXPECT_TRUE(BitIdentical(apart.dc_w, afull.dc_w));
  EXPECT_TRUE(BitIdentical(apart.dc_b, afull.dc_b));
  for (float v : apart.dx) EXPECT_EQ(v, 0.0f);
  for (float v : apart.datt) EXPECT_EQ(v, 0.0f);
}

TEST_P(SequenceOpsTest, BitIdenticalReruns) {
  // Large enough that the CPU backend splits the batch over both threads (the naive reference
  // gets a smaller batch to keep the test fast).
  const int64_t batch = backend_->name() == "reference" ? 20 : 300;
  const RnnDims d{batch, 10, 32, 96};
  const GruData<float> g = MakeGru(d, 1000);
  const GruOut<float> g1 = RunGru(*backend_, g), g2 = RunGru(*backend_, g);
  EXPECT_TRUE(BitIdentical(g1.h, g2.h));
  EXPECT_TRUE(BitIdentical(g1.dx, g2.dx));
  EXPECT_TRUE(BitIdentical(g1.dw_in, g2.dw_in));
  EXPECT_TRUE(BitIdentical(g1.dw_rec, g2.dw_rec));
  EXPECT_TRUE(BitIdentical(g1.db_in, g2.db_in));
  EXPECT_TRUE(BitIdentical(g1.db_rec, g2.db_rec));

  const RnnDims ad{batch, 10, 96, 96};
  const AugruData<float> a = MakeAugru(ad, 1010);
  const AugruOut<float> a1 = RunAugru(*backend_, a), a2 = RunAugru(*backend_, a);
  EXPECT_TRUE(BitIdentical(a1.hs, a2.hs));
  EXPECT_TRUE(BitIdentical(a1.dx, a2.dx));
  EXPECT_TRUE(BitIdentical(a1.datt, a2.datt));
  EXPECT_TRUE(BitIdentical(a1.dg_w, a2.dg_w));
  EXPECT_TRUE(BitIdentical(a1.dg_b, a2.dg_b));
  EXPECT_TRUE(BitIdentical(a1.dc_w, a2.dc_w));
  EXPECT_TRUE(BitIdentical(a1.dc_b, a2.dc_b));
}

}  // namespace sift::kernels::sequence_op_tests
