// kernels/cuda/elementwise_math.h on the CPU (no CUDA link): every function against the reference
// backend on the same inputs. Where the header follows the reference's order of operations the
// float results must be bit-identical: the activations through ReferenceBackend's dense layer,
// whole GRU / AUGRU sequences (forward states and caches, backward gate gradients read from the
// reference's documented workspace, dx, datt) with the pre-activation sums formed in double as the
// reference forms them, the BCE / aux-loss terms and gradients, and several Adam steps. The
// kernel-style variants (pre-activations summed in float, the AUGRU carry formed in float) are
// compared with stated tolerances, and every backward function is checked against central finite
// differences of its forward in double.
#include "kernels/cuda/elementwise_math.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/elementwise_math_probe.h"
#include "kernels/reference/dense_ops.h"
#include "kernels/reference/sequence_ops.h"
#include "tests/unit/kernels/op_test_util.h"

namespace sift::cuda::math {
namespace {

using kernels::testing::GradientMatches;
using kernels::testing::RandomFloats;

static_assert(kAuxEps == kernels::kAuxEps, "elementwise_math.h kAuxEps must be backend.h's");

// Tolerances of the variants that do not follow the reference's rounding (relative, with an
// absolute floor): pre-activations summed in float instead of rounded once from double.
constexpr double kSplitSumTol = 1e-5;
constexpr double kSplitSumFloor = 1e-2;
// The AUGRU carry formed as float(dprev) + GEMM instead of one double sum, over T = 6 steps.
constexpr double kFloatCarryTol = 1e-5;
constexpr double kFloatCarryFloor = 1e-2;
// Central differences (eps 1e-6) of the double instantiations.
constexpr double kFiniteDiffTol = 1e-6;

// First index where two float arrays differ in bits, or -1.
int64_t FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

::testing::AssertionResult SameBits(const std::vector<float>& actual,
                                    const std::vector<float>& expected) {
  const int64_t i = FirstBitDifference(actual, expected);
  if (i < 0) return ::testing::AssertionSuccess();
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << "sizes " << actual.size() << " vs " << expected.size();
  }
  return ::testing::AssertionFailure() << "index " << i << ": " << actual[i] << " vs reference "
                                       << expected[i] << " (bits differ)";
}

// Largest absolute and relative (with an absolute floor) error of actual vs expected.
struct ErrorStats {
  double max_abs = 0.0;
  double max_rel = 0.0;
};
ErrorStats Errors(const std::vector<float>& actual, const std::vector<float>& expected,
                  double floor) {
  ErrorStats e;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double d = std::abs(double(actual[i]) - double(expected[i]));
    e.max_abs = std::max(e.max_abs, d);
    e.max_rel = std::max(e.max_rel, d / std::max(std::abs(double(expected[i])), floor));
  }
  return e;
}
void Report(const char* what, const ErrorStats& e) {
  std::printf("[ errors ] %s: max abs %.3g, max rel %.3g\n", what, e.max_abs, e.max_rel);
}

// Arguments spanning the saturated tails and the exact special points of the activations.
std::vector<float> ActivationArguments() {
  std::vector<float> v = RandomFloats(4000, 11, -12.0f, 12.0f);
  const std::vector<float> tiny = RandomFloats(200, 12, -1e-3f, 1e-3f);
  v.insert(v.end(), tiny.begin(), tiny.end());
  for (float s : {0.0f,
                  -0.0f,
                  1e-30f,
                  -1e-30f,
                  1.0f,
                  -1.0f,
                  15.0f,
                  -15.0f,
                  30.0f,
                  -30.0f,
                  88.0f,
                  -88.0f,
                  89.0f,
                  -89.0f,
                  104.0f,
                  -104.0f,
                  1e30f,
                  -1e30f,
                  std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()}) {
    v.push_back(s);
  }
  return v;
}

// ---- Activations --------------------------------------------------------------------------------

TEST(CudaElementwiseMath, SigmoidAndTanhAreTheReferenceFunctions) {
  const std::vector<float> v = ActivationArguments();
  std::vector<float> mine_sig, ref_sig, mine_tanh, ref_tanh;
  for (float x : v) {
    mine_sig.push_back(Sigmoid(x));
    ref_sig.push_back(kernels::ref::Sigmoid<float>(x));
    mine_tanh.push_back(Tanh(x));
    ref_tanh.push_back(std::tanh(x));
    EXPECT_EQ(Sigmoid(double(x)), kernels::ref::Sigmoid<double>(double(x))) << x;
  }
  EXPECT_TRUE(SameBits(mine_sig, ref_sig));
  EXPECT_TRUE(SameBits(mine_tanh, ref_tanh));
  // The saturated ends are exact: sigmoid(-inf) = 0, sigmoid(inf) = 1, tanh(+-inf) = +-1.
  EXPECT_EQ(Sigmoid(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(Sigmoid(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(Tanh(-std::numeric_limits<float>::infinity()), -1.0f);
}

// The dense layer's sigmoid is computed in double: its float bits differ from Sigmoid<float> on
// some inputs, and must be the reference dense layer's.
TEST(CudaElementwiseMath, DenseSigmoidIsTheDenseLayersSigmoid) {
  const std::vector<float> v = ActivationArguments();
  std::vector<float> mine, ref;
  int differs_from_float_sigmoid = 0;
  for (float x : v) {
    mine.push_back(DenseSigmoid(x));
    ref.push_back(kernels::reference::Activate<float>(kernels::Activation::kSigmoid, x, 0.0f));
    if (std::bit_cast<uint32_t>(mine.back()) != std::bit_cast<uint32_t>(Sigmoid(x))) {
      ++differs_from_float_sigmoid;
    }
  }
  EXPECT_TRUE(SameBits(mine, ref));
  std::printf("[ info   ] DenseSigmoid != Sigmoid<float> in %d of %zu inputs\n",
              differs_from_float_sigmoid, v.size());
}

// PReLU and the sigmoid activation through ReferenceBackend's DenseForward / DenseBackward: y,
// d pre (the reference's workspace) and d slope, bit for bit. Column 0 has zero weights and bias,
// so its pre-activations are exactly 0 (where PReLU and its derivative are 0).
TEST(CudaElementwiseMath, ActivationsMatchReferenceDenseLayer) {
  for (kernels::Activation act : {kernels::Activation::kPrelu, kernels::Activation::kSigmoid}) {
    kernels::DenseDims d{.rows = 37, .in = 5, .out = 9, .act = act};
    std::vector<float> x = RandomFloats(d.rows * d.in, 21, -2.0f, 2.0f);
    std::vector<float> w = RandomFloats(int64_t{d.in} * d.out, 22);
    std::vector<float> b = RandomFloats(d.out, 23, -0.5f, 0.5f);
    std::vector<float> slope = RandomFloats(d.out, 24, -0.3f, 0.6f);
    std::vector<float> dy = RandomFloats(d.rows * d.out, 25);
    for (int i = 0; i < d.in; ++i) w[int64_t{i} * d.out] = 0.0f;
    b[0] = 0.0f;
    auto ref = kernels::CreateReferenceBackend();
    std::vector<float> pre(d.rows * d.out), y(pre.size()), ws(kernels::DenseWorkspaceFloats(d));
    ref->DenseForward(d, x.data(), d.in, w.data(), b.data(), slope.data(), pre.data(), y.data());
    std::vector<float> dw(w.size(), 0.0f), db(b.size(), 0.0f), dslope(slope.size(), 0.0f);
    ref->DenseBackward(d, x.data(), d.in, w.data(), slope.data(), pre.data(), y.data(), dy.data(),
                       nullptr, d.in, dw.data(), db.data(), dslope.data(), ws.data());

    std::vector<float> my_y(pre.size()), my_dpre(pre.size()), my_dslope(slope.size());
    for (int o = 0; o < d.out; ++o) {
      double s = 0.0;
      for (int64_t r = 0; r < d.rows; ++r) {
        const int64_t i = r * d.out + o;
        if (act == kernels::Activation::kPrelu) {
          my_y[i] = Prelu(pre[i], slope[o]);
          my_dpre[i] = PreluBackward(pre[i], slope[o], dy[i]);
          s += PreluSlopeGradTerm(pre[i], dy[i]);
        } else {
          my_y[i] = DenseSigmoid(pre[i]);
          my_dpre[i] = DenseSigmoidBackward(my_y[i], dy[i]);
        }
      }
      my_dslope[o] = act == kernels::Activation::kPrelu ? static_cast<float>(s) : 0.0f;
    }
    SCOPED_TRACE(act == kernels::Activation::kPrelu ? "prelu" : "sigmoid");
    EXPECT_EQ(pre[0], 0.0f);
    EXPECT_TRUE(SameBits(my_y, y));
    EXPECT_TRUE(SameBits(my_dpre, ws));
    EXPECT_TRUE(SameBits(my_dslope, dslope));
  }
  EXPECT_EQ(Prelu(0.0f, 0.25f), 0.0f);
  EXPECT_EQ(PreluBackward(0.0f, 0.25f, 3.0f), 0.0f);
  EXPECT_EQ(Prelu(-2.0f, 0.25f), -0.5f);
  EXPECT_EQ(PreluBackward(-2.0f, 0.25f, 3.0f), 0.75f);
  EXPECT_EQ(PreluSlopeGradTerm(-2.0f, 3.0f), -6.0);
  EXPECT_EQ(PreluSlopeGradTerm(2.0f, 3.0f), 0.0);
}

TEST(CudaElementwiseMath, ActivationGradientsMatchFiniteDifferences) {
  Rng rng(31);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> p = {rng.Uniform() < 0.5 ? -0.05 - rng.Uniform() : 0.05 + rng.Uniform(),
                             0.5 * rng.Uniform() - 0.1};  // (pre away from 0, slope)
    const double dy = rng.Normal();
    const auto f = [&] { return dy * Prelu(p[0], p[1]); };
    const std::vector<double> analytic = {PreluBackward(p[0], p[1], dy),
                                          PreluSlopeGradTerm(p[0], dy)};
    EXPECT_TRUE(GradientMatches(f, &p, analytic, kFiniteDiffTol));
    std::vector<double> q = {8.0 * rng.Uniform() - 4.0};
    const double y = DenseSigmoid(q[0]);
    const auto g = [&] { return dy * DenseSigmoid(q[0]); };
    EXPECT_TRUE(GradientMatches(g, &q, {DenseSigmoidBackward(y, dy)}, kFiniteDiffTol));
  }
}

// ---- GRU ----------------------------------------------------------------------------------------

struct GruCase {
  kernels::RnnDims d{.batch = 3, .time = 6, .in = 5, .hidden = 7};
  std::vector<float> x, w_in, w_rec, b_in, b_rec;
  GruCase() {
    const int64_t H = d.hidden, G = 3 * H;
    x = RandomFloats(d.batch * d.time * d.in, 41);
    w_in = RandomFloats(d.in * G, 42, -0.6f, 0.6f);
    w_rec = RandomFloats(H * G, 43, -0.6f, 0.6f);
    b_in = RandomFloats(G, 44, -0.3f, 0.3f);
    b_rec = RandomFloats(G, 45, -0.3f, 0.3f);
  }
};

// The reference's double pre-activations of unit j at row `row` given h_{t-1} (null at t = 0):
// xs[g] = b_in + x W_in, hs[g] = b_rec + h U, summed in the reference's order.
void GruPreactivations(const GruCase& c, int64_t row, const float* hp, int64_t j, double xs[3],
                       double hs[3]) {
  const int64_t H = c.d.hidden, G = 3 * H, in = c.d.in;
  for (int g = 0; g < 3; ++g) {
    const int64_t col = g * H + j;
    double sx = c.b_in[col], sh = c.b_rec[col];
    for (int64_t k = 0; k < in; ++k) sx += double(c.x[row * in + k]) * double(c.w_in[k * G + col]);
    if (hp != nullptr) {
      for (int64_t k = 0; k < H; ++k) sh += double(hp[k]) * double(c.w_rec[k * G + col]);
    }
    xs[g] = sx;
    hs[g] = sh;
  }
}

// Runs the GRU over the case with GruUnitForward; split = the kernel form (x* and h* rounded to
// float separately, summed in float).
void GruForwardWithUnits(const GruCase& c, bool split, std::vector<float>* h,
                         std::vector<float>* cache) {
  const int64_t H = c.d.hidden;
  h->assign(c.d.batch * c.d.time * H, 0.0f);
  cache->assign(kernels::GruCacheFloats(c.d), 0.0f);
  for (int64_t b = 0; b < c.d.batch; ++b) {
    for (int t = 0; t < c.d.time; ++t) {
      const int64_t row = b * c.d.time + t;
      const float* hp = t > 0 ? h->data() + (row - 1) * H : nullptr;
      float* cr = cache->data() + row * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        double xs[3], hs[3];
        GruPreactivations(c, row, hp, j, xs, hs);
        const float prev = hp != nullptr ? hp[j] : 0.0f;
        const GruUnitState<float> s =
            split ? GruUnitForward(float(xs[0]), float(xs[1]), float(xs[2]), float(hs[0]),
                                   float(hs[1]), float(hs[2]), prev)
                  : GruUnitForward(float(xs[0] + hs[0]), float(xs[1] + hs[1]), float(xs[2]),
                                   float(hs[2]), prev);
        cr[kGruCacheZ * H + j] = s.z;
        cr[kGruCacheR * H + j] = s.r;
        cr[kGruCacheN * H + j] = s.n;
        cr[kGruCacheHn * H + j] = s.hn;
        (*h)[row * H + j] = s.h;
      }
    }
  }
}

TEST(CudaElementwiseMath, GruForwardMatchesReferenceBitForBit) {
  const GruCase c;
  auto ref = kernels::CreateReferenceBackend();
  std::vector<float> h(c.d.batch * c.d.time * c.d.hidden), cache(kernels::GruCacheFloats(c.d));
  std::vector<float> ws(kernels::GruWorkspaceFloats(c.d));
  ref->GruForward(c.d, c.x.data(), c.w_in.data(), c.w_rec.data(), c.b_in.data(), c.b_rec.data(),
                  h.data(), cache.data(), ws.data());
  std::vector<float> my_h, my_cache;
  GruForwardWithUnits(c, /*split=*/false, &my_h, &my_cache);
  EXPECT_TRUE(SameBits(my_h, h));
  EXPECT_TRUE(SameBits(my_cache, cache));

  GruForwardWithUnits(c, /*split=*/true, &my_h, &my_cache);
  const ErrorStats eh = Errors(my_h, h, kSplitSumFloor);
  const ErrorStats ec = Errors(my_cache, cache, kSplitSumFloor);
  Report("GRU forward, x*/h* summed in float: h", eh);
  Report("GRU forward, x*/h* summed in float: cache", ec);
  EXPECT_LE(eh.max_rel, kSplitSumTol);
  EXPECT_LE(ec.max_rel, kSplitSumTol);
}

// GruBackward's workspace holds gx [B*T,3H] then gh [B*T,3H] (reference/sequence_ops.h): the
// loop below must reproduce both, and dx, bit for bit.
TEST(CudaElementwiseMath, GruBackwardMatchesReferenceBitForBit) {
  const GruCase c;
  const int64_t H = c.d.hidden, G = 3 * H, in = c.d.in, rows = c.d.batch * c.d.time;
  auto ref = kernels::CreateReferenceBackend();
  std::vector<float> h(rows * H), cache(kernels::GruCacheFloats(c.d));
  std::vector<float> ws(kernels::GruWorkspaceFloats(c.d));
  ref->GruForward(c.d, c.x.data(), c.w_in.data(), c.w_rec.data(), c.b_in.data(), c.b_rec.data(),
                  h.data(), cache.data(), ws.data());
  const std::vector<float> dh = RandomFloats(rows * H, 46);
  std::vector<float> dx(c.x.size(), 0.0f), dw_in(c.w_in.size(), 0.0f), dw_rec(c.w_rec.size(), 0.0f),
      db_in(G, 0.0f), db_rec(G, 0.0f);
  ref->GruBackward(c.d, c.x.data(), c.w_in.data(), c.w_rec.data(), h.data(), cache.data(),
                   dh.data(), dx.data(), dw_in.data(), dw_rec.data(), db_in.data(), db_rec.data(),
                   ws.data());
  const std::vector<float> ref_gx(ws.begin(), ws.begin() + rows * G);
  const std::vector<float> ref_gh(ws.begin() + rows * G, ws.begin() + 2 * rows * G);

  std::vector<float> gx(rows * G), gh(rows * G), my_dx(c.x.size(), 0.0f), carry(H);
  for (int64_t b = 0; b < c.d.batch; ++b) {
    std::fill(carry.begin(), carry.end(), 0.0f);
    for (int t = c.d.time - 1; t >= 0; --t) {
      const int64_t row = b * c.d.time + t;
      const float* cr = cache.data() + row * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        const float prev = t > 0 ? h[(row - 1) * H + j] : 0.0f;
        const float dht = dh[row * H + j] + carry[j];
        const GruUnitGrad<float> g =
            GruUnitBackward(cr[j], cr[H + j], cr[2 * H + j], cr[3 * H + j], prev, dht);
        gx[row * G + j] = g.daz;
        gx[row * G + H + j] = g.dar;
        gx[row * G + 2 * H + j] = g.dan;
        gh[row * G + j] = g.daz;
        gh[row * G + H + j] = g.dar;
        gh[row * G + 2 * H + j] = g.dhn;
        carry[j] = g.dprev;
      }
      for (int64_t k = 0; k < H; ++k) {  // carry += gh U^T, in the reference's double order
        double s = carry[k];
        for (int64_t col = 0; col < G; ++col) {
          s += double(gh[row * G + col]) * double(c.w_rec[k * G + col]);
        }
        carry[k] = float(s);
      }
      for (int64_t k = 0; k < in; ++k) {
        double s = 0;
        for (int64_t col = 0; col < G; ++col) {
          s += double(gx[row * G + col]) * double(c.w_in[k * G + col]);
        }
        my_dx[row * in + k] += float(s);
      }
    }
  }
  EXPECT_TRUE(SameBits(gx, ref_gx));
  EXPECT_TRUE(SameBits(gh, ref_gh));
  EXPECT_TRUE(SameBits(my_dx, dx));
}

// In double: loss = dht * h(pre_z, pre_r, xn, hn, prev); the analytic gradients of the unit
// [daz, dar, dan, dhn, dprev] against central differences.
TEST(CudaElementwiseMath, GruUnitBackwardMatchesFiniteDifferences) {
  Rng rng(51);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<double> p(5);
    for (double& v : p) v = 4.0 * rng.Uniform() - 2.0;
    const double dht = rng.Normal();
    const auto f = [&] { return dht * GruUnitForward(p[0], p[1], p[2], p[3], p[4]).h; };
    const GruUnitState<double> s = GruUnitForward(p[0], p[1], p[2], p[3], p[4]);
    const GruUnitGrad<double> g = GruUnitBackward(s.z, s.r, s.n, s.hn, p[4], dht);
    EXPECT_TRUE(GradientMatches(f, &p, {g.daz, g.dar, g.dan, g.dhn, g.dprev}, kFiniteDiffTol))
        << "trial " << trial;
  }
}

// ---- AUGRU --------------------------------------------------------------------------------------

struct AugruCase {
  kernels::RnnDims d{.batch = 3, .time = 6, .in = 5, .hidden = 7};
  std::vector<float> x, att, g_w, g_b, c_w, c_b;
  AugruCase() {
    const int64_t H = d.hidden, in = d.in;
    x = RandomFloats(d.batch * d.time * in, 61);
    att = RandomFloats(d.batch * d.time, 62, 0.0f, 1.0f);
    att[0] = 0.0f;  // an ordinary GRU step and a full replacement by the candidate
    att[3] = 1.0f;
    g_w = RandomFloats((in + H) * 2 * H, 63, -0.6f, 0.6f);
    g_b = RandomFloats(2 * H, 64, 0.7f, 1.3f);
    c_w = RandomFloats((in + H) * H, 65, -0.6f, 0.6f);
    c_b = RandomFloats(H, 66, -0.3f, 0.3f);
  }
};

void AugruForwardWithUnits(const AugruCase& c, std::vector<float>* hs, std::vector<float>* cache) {
  const int64_t H = c.d.hidden, in = c.d.in;
  hs->assign(c.d.batch * c.d.time * H, 0.0f);
  cache->assign(kernels::AugruCacheFloats(c.d), 0.0f);
  for (int64_t b = 0; b < c.d.batch; ++b) {
    for (int t = 0; t < c.d.time; ++t) {
      const int64_t row = b * c.d.time + t;
      const float* xr = c.x.data() + row * in;
      const float* hp = t > 0 ? hs->data() + (row - 1) * H : nullptr;
      float* cr = cache->data() + row * 4 * H;
      const auto gate_pre = [&](int64_t col) {  // the reference's double sum, rounded once
        double s = c.g_b[col];
        for (int64_t k = 0; k < in; ++k) s += double(xr[k]) * double(c.g_w[k * 2 * H + col]);
        if (hp != nullptr) {
          for (int64_t k = 0; k < H; ++k)
            s += double(hp[k]) * double(c.g_w[(in + k) * 2 * H + col]);
        }
        return float(s);
      };
      for (int64_t j = 0; j < H; ++j) {
        const float prev = hp != nullptr ? hp[j] : 0.0f;
        const AugruGates<float> g = AugruUnitGates(gate_pre(j), gate_pre(H + j), prev);
        cr[kAugruCacheGamma * H + j] = g.gamma;
        cr[kAugruCacheU * H + j] = g.u;
        cr[kAugruCacheGh * H + j] = g.gh;
      }
      for (int64_t j = 0; j < H; ++j) {
        double s = c.c_b[j];
        for (int64_t k = 0; k < in; ++k) s += double(xr[k]) * double(c.c_w[k * H + j]);
        for (int64_t k = 0; k < H; ++k)
          s += double(cr[3 * H + k]) * double(c.c_w[(in + k) * H + j]);
        const float prev = hp != nullptr ? hp[j] : 0.0f;
        const AugruUpdate<float> u = AugruUnitUpdate(float(s), cr[H + j], c.att[row], prev);
        cr[kAugruCacheC * H + j] = u.c;
        (*hs)[row * H + j] = u.h;
      }
    }
  }
}

TEST(CudaElementwiseMath, AugruForwardMatchesReferenceBitForBit) {
  const AugruCase c;
  auto ref = kernels::CreateReferenceBackend();
  std::vector<float> hs(c.d.batch * c.d.time * c.d.hidden), cache(kernels::AugruCacheFloats(c.d));
  std::vector<float> ws(kernels::AugruWorkspaceFloats(c.d));
  ref->AugruForward(c.d, c.x.data(), c.att.data(), c.g_w.data(), c.g_b.data(), c.c_w.data(),
                    c.c_b.data(), hs.data(), cache.data(), ws.data());
  std::vector<float> my_hs, my_cache;
  AugruForwardWithUnits(c, &my_hs, &my_cache);
  EXPECT_TRUE(SameBits(my_hs, hs));
  EXPECT_TRUE(SameBits(my_cache, cache));
}

// AugruBackward's workspace holds dg [B*T,2H] then dcp [B*T,H] (reference/sequence_ops.h).
// exact_carry: the carried gradient formed in one double sum as the reference does (so dg, dcp,
// datt and dx must be bit-identical); otherwise as a kernel forms it: float(dprev of
// AugruUnitGatesBackward) + the G_h product (compared within kFloatCarryTol).
void CheckAugruBackward(bool exact_carry) {
  const AugruCase c;
  const int64_t H = c.d.hidden, in = c.d.in, rows = c.d.batch * c.d.time;
  auto ref = kernels::CreateReferenceBackend();
  std::vector<float> hs(rows * H), cache(kernels::AugruCacheFloats(c.d));
  std::vector<float> ws(kernels::AugruWorkspaceFloats(c.d));
  ref->AugruForward(c.d, c.x.data(), c.att.data(), c.g_w.data(), c.g_b.data(), c.c_w.data(),
                    c.c_b.data(), hs.data(), cache.data(), ws.data());
  const std::vector<float> dlast = RandomFloats(c.d.batch * H, 67);
  std::vector<float> dx(c.x.size(), 0.0f), datt(rows, 0.0f), dg_w(c.g_w.size(), 0.0f),
      dg_b(2 * H, 0.0f), dc_w(c.c_w.size(), 0.0f), dc_b(H, 0.0f);
  ref->AugruBackward(c.d, c.x.data(), c.att.data(), c.g_w.data(), c.c_w.data(), hs.data(),
                     cache.data(), dlast.data(), dx.data(), datt.data(), dg_w.data(), dg_b.data(),
                     dc_w.data(), dc_b.data(), ws.data());
  const std::vector<float> ref_dg(ws.begin(), ws.begin() + rows * 2 * H);
  const std::vector<float> ref_dcp(ws.begin() + rows * 2 * H, ws.begin() + rows * 3 * H);

  std::vector<float> dg(rows * 2 * H), dcp(rows * H), my_datt(rows, 0.0f), my_dx(c.x.size(), 0.0f);
  std::vector<float> carry(H), direct(H), dgh(H), next(H);
  for (int64_t b = 0; b < c.d.batch; ++b) {
    for (int64_t j = 0; j < H; ++j) carry[j] = dlast[b * H + j];
    for (int t = c.d.time - 1; t >= 0; --t) {
      const int64_t row = b * c.d.time + t;
      const float* cr = cache.data() + row * 4 * H;
      const float* hp = t > 0 ? hs.data() + (row - 1) * H : nullptr;
      double da = 0;
      for (int64_t j = 0; j < H; ++j) {
        const float prev = hp != nullptr ? hp[j] : 0.0f;
        const AugruUpdateGrad<float> g =
            AugruUnitUpdateBackward(cr[H + j], cr[2 * H + j], c.att[row], prev, carry[j]);
        dcp[row * H + j] = g.dpre_c;
        dg[row * 2 * H + H + j] = g.dpre_u;
        da -= double(g.duk) * double(cr[H + j]);
        direct[j] = g.dprev;
      }
      my_datt[row] += float(da);
      for (int64_t k = 0; k < H; ++k) {
        double s = 0;
        for (int64_t j = 0; j < H; ++j)
          s += double(dcp[row * H + j]) * double(c.c_w[(in + k) * H + j]);
        dgh[k] = float(s);
      }
      for (int64_t k = 0; k < H; ++k) {
        const float prev = hp != nullptr ? hp[k] : 0.0f;
        const AugruGatesGrad<float> g = AugruUnitGatesBackward(cr[k], prev, dgh[k], direct[k]);
        dg[row * 2 * H + k] = g.dpre_gamma;
        next[k] = g.dprev;
      }
      for (int64_t k = 0; k < H; ++k) {
        double s =
            exact_carry ? double(direct[k]) + double(dgh[k]) * double(cr[k]) : double(next[k]);
        for (int64_t col = 0; col < 2 * H; ++col) {
          s += double(dg[row * 2 * H + col]) * double(c.g_w[(in + k) * 2 * H + col]);
        }
        carry[k] = float(s);
      }
      for (int64_t k = 0; k < in; ++k) {
        double s = 0;
        for (int64_t col = 0; col < 2 * H; ++col) {
          s += double(dg[row * 2 * H + col]) * double(c.g_w[k * 2 * H + col]);
        }
        for (int64_t j = 0; j < H; ++j) s += double(dcp[row * H + j]) * double(c.c_w[k * H + j]);
        my_dx[row * in + k] += float(s);
      }
    }
  }
  if (exact_carry) {
    EXPECT_TRUE(SameBits(dg, ref_dg));
    EXPECT_TRUE(SameBits(dcp, ref_dcp));
    EXPECT_TRUE(SameBits(my_datt, datt));
    EXPECT_TRUE(SameBits(my_dx, dx));
    return;
  }
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>
      arrays[] = {{"dg", {&dg, &ref_dg}},
                  {"dcp", {&dcp, &ref_dcp}},
                  {"datt", {&my_datt, &datt}},
                  {"dx", {&my_dx, &dx}}};
  for (const auto& [name, pair] : arrays) {
    const ErrorStats e = Errors(*pair.first, *pair.second, kFloatCarryFloor);
    std::printf(
        "[ errors ] AUGRU backward, carry formed in float: %s: max abs %.3g, max rel %.3g\n", name,
        e.max_abs, e.max_rel);
    EXPECT_LE(e.max_rel, kFloatCarryTol) << name;
  }
}

TEST(CudaElementwiseMath, AugruBackwardMatchesReferenceBitForBit) { CheckAugruBackward(true); }
TEST(CudaElementwiseMath, AugruBackwardWithFloatCarryIsClose) { CheckAugruBackward(false); }

// In double, one AUGRU unit with a scalar candidate weight wc (H = 1): gates -> gh -> pre_c =
// xc + wc gh -> update; loss = dht * h'. Analytic [d pre_gamma, d pre_u, d xc, d att, d prev]
// against central differences.
TEST(CudaElementwiseMath, AugruUnitBackwardMatchesFiniteDifferences) {
  Rng rng(71);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<double> p = {4.0 * rng.Uniform() - 2.0, 4.0 * rng.Uniform() - 2.0,
                             2.0 * rng.Uniform() - 1.0, rng.Uniform(), 2.0 * rng.Uniform() - 1.0};
    const double wc = 2.0 * rng.Uniform() - 1.0, dht = rng.Normal();
    const auto forward = [&](const std::vector<double>& q) {
      const AugruGates<double> g = AugruUnitGates(q[0], q[1], q[4]);
      return AugruUnitUpdate(q[2] + wc * g.gh, g.u, q[3], q[4]).h;
    };
    const auto f = [&] { return dht * forward(p); };
    const AugruGates<double> g = AugruUnitGates(p[0], p[1], p[4]);
    const AugruUpdate<double> s = AugruUnitUpdate(p[2] + wc * g.gh, g.u, p[3], p[4]);
    const AugruUpdateGrad<double> ga = AugruUnitUpdateBackward(g.u, s.c, p[3], p[4], dht);
    const AugruGatesGrad<double> gb =
        AugruUnitGatesBackward(g.gamma, p[4], ga.dpre_c * wc, ga.dprev);
    EXPECT_TRUE(GradientMatches(
        f, &p, {gb.dpre_gamma, ga.dpre_u, ga.dpre_c, -ga.duk * g.u, gb.dprev}, kFiniteDiffTol))
        << "trial " << trial;
  }
}

// ---- Losses -------------------------------------------------------------------------------------

TEST(CudaElementwiseMath, BceWithLogitsMatchesReference) {
  std::vector<float> logits = RandomFloats(2000, 81, -20.0f, 20.0f);
  for (float s : {0.0f, -0.0f, 1e-8f, 40.0f, -40.0f, 100.0f, -100.0f, 1e30f, -1e30f}) {
    logits.push_back(s);
  }
  std::vector<float> labels = kernels::testing::RandomMask(logits.size(), 82, 0.5);
  for (size_t i = 0; i < labels.size(); i += 7) labels[i] = 0.3f;  // soft labels too
  const float scale = 1.0f / 3.0f;
  auto ref = kernels::CreateReferenceBackend();
  std::vector<float> dlogits(logits.size(), 0.0f);
  const double total = ref->BceWithLogits(static_cast<int64_t>(logits.size()), logits.data(),
                                          labels.data(), scale, dlogits.data());
  double my_total = 0.0;
  std::vector<float> my_d(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    my_total += BceWithLogitsTerm(logits[i], labels[i]);
    my_d[i] = 0.0f + BceWithLogitsGrad(logits[i], labels[i], scale);
  }
  EXPECT_EQ(my_total, total);
  EXPECT_TRUE(SameBits(my_d, dlogits));
}

TEST(CudaElementwiseMath, AuxLossMatchesReferenceIncludingTheClampedBranch) {
  std::vector<float> pos = RandomFloats(3000, 91, -25.0f, 25.0f);
  std::vector<float> neg = RandomFloats(3000, 92, -25.0f, 25.0f);
  const std::vector<float> mask = kernels::testing::RandomMask(pos.size(), 93, 0.8);
  const float scale = 1.0f / 27.0f;
  auto ref = kernels::CreateReferenceBackend();
  std::vector<float> dpos(pos.size(), 0.0f), dneg(pos.size(), 0.0f);
  const double total = ref->AuxLoss(static_cast<int64_t>(pos.size()), pos.data(), neg.data(),
                                    mask.data(), scale, dpos.data(), dneg.data());
  double my_total = 0.0;
  int clamped = 0;
  std::vector<float> my_dpos(pos.size(), 0.0f), my_dneg(pos.size(), 0.0f);
  for (size_t i = 0; i < pos.size(); ++i) {
    if (mask[i] == 0.0f) continue;
    const AuxTerm<float> a = AuxLossTerm(pos[i], neg[i], scale);
    my_total += a.loss;
    my_dpos[i] += a.dpos;
    my_dneg[i] += a.dneg;
    if (a.dneg == 0.0f) ++clamped;
  }
  EXPECT_GT(clamped, 100);  // neg logits above ~13.8 hit the clamp
  EXPECT_EQ(my_total, total);
  EXPECT_TRUE(SameBits(my_dpos, dpos));
  EXPECT_TRUE(SameBits(my_dneg, dneg));
  EXPECT_TRUE(std::isfinite(AuxLossTerm(100.0f, 100.0f, 1.0f).loss));
}

TEST(CudaElementwiseMath, LossGradientsMatchFiniteDifferences) {
  Rng rng(101);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<double> l = {16.0 * rng.Uniform() - 8.0};
    const double y = rng.Uniform(), scale = 0.5;
    const auto f = [&] { return scale * BceWithLogitsTerm(l[0], y); };
    EXPECT_TRUE(GradientMatches(f, &l, {BceWithLogitsGrad(l[0], y, scale)}, kFiniteDiffTol));
    // Unclamped aux pairs: neg logit below ~13.
    std::vector<double> a = {16.0 * rng.Uniform() - 8.0, 16.0 * rng.Uniform() - 8.0};
    const auto g = [&] { return scale * AuxLossTerm(a[0], a[1], 1.0).loss; };
    const AuxTerm<double> t = AuxLossTerm(a[0], a[1], scale);
    EXPECT_TRUE(GradientMatches(g, &a, {t.dpos, t.dneg}, kFiniteDiffTol)) << "trial " << trial;
  }
}

// ---- Adam ---------------------------------------------------------------------------------------

TEST(CudaElementwiseMath, AdamMatchesReferenceOverSteps) {
  const kernels::AdamHyper hypers[] = {
      {}, {.lr = 0.003f, .beta1 = 0.8f, .beta2 = 0.99f, .epsilon = 1e-8f}};
  auto ref = kernels::CreateReferenceBackend();
  for (const kernels::AdamHyper& hp : hypers) {
    const int64_t n = 700;
    std::vector<float> param = RandomFloats(n, 111), m(n, 0.0f), v(n, 0.0f);
    std::vector<float> my_param = param, my_m = m, my_v = v;
    for (int64_t t = 1; t <= 8; ++t) {
      std::vector<float> grad = RandomFloats(n, 112 + t, -0.1f, 0.1f);
      grad[0] = 0.0f;
      ref->AdamUpdate(n, hp, t, grad.data(), param.data(), m.data(), v.data());
      const double step = AdamStepSize(hp.lr, hp.beta1, hp.beta2, t);
      EXPECT_EQ(step, kernels::reference::AdamStepSize(hp, t));
      const float lr_t = static_cast<float>(step);
      for (int64_t i = 0; i < n; ++i) {
        AdamParamUpdate(lr_t, hp.beta1, hp.beta2, hp.epsilon, grad[i], &my_param[i], &my_m[i],
                        &my_v[i]);
      }
      EXPECT_TRUE(SameBits(my_param, param)) << "step " << t;
      EXPECT_TRUE(SameBits(my_m, m)) << "step " << t;
      EXPECT_TRUE(SameBits(my_v, v)) << "step " << t;
    }
  }
}

// The device probe's host half (tests/gpu runs it in a kernel): it writes exactly kProbeOutputs
// finite values, and its exact outputs (PReLU, Adam) are those of the functions themselves.
TEST(CudaElementwiseMath, ProbeWritesEveryOutput) {
  std::vector<float> args = RandomFloats(kProbeInputs, 121);
  std::vector<double> out(kProbeOutputs + 1, std::numeric_limits<double>::quiet_NaN());
  ProbeElementwiseMath(args.data(), out.data());
  for (int k = 0; k < kProbeOutputs; ++k) EXPECT_TRUE(std::isfinite(out[k])) << k;
  EXPECT_TRUE(std::isnan(out[kProbeOutputs]));
  EXPECT_EQ(out[3], Prelu(args[0], args[1]));
  EXPECT_EQ(out[4], PreluBackward(args[0], args[1], args[2]));
  EXPECT_EQ(out[7], Sigmoid(4.0f * args[0]));
  int exact = 0;
  for (int k = 0; k < kProbeOutputs; ++k) exact += ProbeOutputIsExact(k) ? 1 : 0;
  EXPECT_EQ(exact, 6);
}

}  // namespace
}  // namespace sift::cuda::math
