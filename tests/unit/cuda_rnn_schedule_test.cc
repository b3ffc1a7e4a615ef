// The CUDA recurrences' schedules (kernels/cuda/rnn_schedule.h) run on the host: the same order
// of GEMMs, step bodies (rnn_steps.h, the kernels' element functions) and fixed-order column sums
// (cuda_dense_plan.h's, through the dense family's LaunchColumnSums) that CudaBackend runs on the
// device, with a naive host GEMM and the kernels' loop
// and reduction orders emulated in plain loops. Checked against the double-precision reference
// templates (kernels/reference/sequence_ops.h) at the op tests' tolerances
// (tests/unit/kernels/sequence_ops_tests.h), with guard zones around every buffer (workspaces
// sized exactly by kernels/backend.h's *WorkspaceFloats), the += contract, nullable dx / datt, and
// the planning helpers. No device needed.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_dense_plan.h"
#include "kernels/cuda/rnn_plan.h"
#include "kernels/cuda/rnn_schedule.h"
#include "kernels/cuda/rnn_steps.h"
#include "kernels/reference/sequence_ops.h"
#include "tests/unit/kernels/op_test_util.h"

namespace sift::cuda::rnn {
namespace {

using kernels::RnnDims;
using kernels::testing::AllClose;
using kernels::testing::AsDouble;
using kernels::testing::BitIdentical;
using kernels::testing::RandomFloats;

// The op tests' tolerances (sequence_ops_tests.h).
constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 2e-4;
constexpr double kStateFloor = 0.1;
double GradFloor(const std::vector<double>& expected) {
  double m = 0.0;
  for (double v : expected) m = std::max(m, std::abs(v));
  return std::max(1e-6, 1e-2 * m);
}

// rnn_schedule.h's executor on the host: what each device call computes, in the device's orders
// where they are fixed (column sums, the datt tree), a double-accumulating GEMM otherwise.
class HostExec {
 public:
  bool failed() const { return false; }
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    ++gemms;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const float av = trans_a ? a[p * lda + i] : a[i * lda + p];
          const float bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
          s += static_cast<double>(av) * static_cast<double>(bv);
        }
        float& out = c[i * ldc + j];
        out = beta == 0.0f ? static_cast<float>(s)
                           : static_cast<float>(s + static_cast<double>(beta) * out);
      }
    }
  }
  void Zero(float* p, int64_t n) { std::fill(p, p + n, 0.0f); }
  void CopyFloats(float* dst, const float* src, int64_t n) { std::copy(src, src + n, dst); }
  void ZeroStepRows(int64_t batch, int64_t time, int64_t width, int64_t t, float* m) {
    for (int64_t i = 0; i < batch * width; ++i) ZeroStepRowElement(i, time, width, t, m);
  }
  void ColumnSum(int64_t rows, int64_t cols, const float* src, float* dst) {
    HostColumnSum(rows, cols, src, dst);
  }
  void GruForwardStep(int64_t batch, int64_t time, int64_t hidden, int64_t t, const float* xw,
                      const float* hu, const float* b_in, const float* b_rec, float* h,
                      float* cache) {
    for (int64_t i = 0; i < batch * hidden; ++i) {
      GruForwardElement(i, time, hidden, t, xw, hu, b_in, b_rec, h, cache);
    }
  }
  void GruBackwardStep(int64_t batch, int64_t time, int64_t hidden, int64_t t, const float* h,
                       const float* cache, const float* dh, float* carry, float* gx, float* gh) {
    for (int64_t i = 0; i < batch * hidden; ++i) {
      GruBackwardElement(i, time, hidden, t, h, cache, dh, carry, gx, gh);
    }
  }
  void AugruGatesStep(int64_t batch, int64_t time, int64_t hidden, int64_t t, const float* xg,
                      const float* g_b, const float* hs, float* cache) {
    for (int64_t i = 0; i < batch * hidden; ++i) {
      AugruGatesElement(i, time, hidden, t, xg, g_b, hs, cache);
    }
  }
  void AugruUpdateStep(int64_t batch, int64_t time, int64_t hidden, int64_t t, const float* xc,
                       const float* c_b, const float* att, float* hs, float* cache) {
    for (int64_t i = 0; i < batch * hidden; ++i) {
      AugruUpdateElement(i, time, hidden, t, xc, c_b, att, hs, cache);
    }
  }
  // The kernel: one block of kRowThreads per b, thread x takes j = x, x + kRowThreads, ...; the
  // threads' sums are added in a halving tree.
  void AugruUpdateBackwardStep(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                               const float* att, const float* hs, const float* cache, float* carry,
                               float* dcp, float* dg, float* datt) {
    std::vector<double> terms(kRowThreads);
    for (int64_t b = 0; b < batch; ++b) {
      for (int x = 0; x < kRowThreads; ++x) {
        double part = 0.0;
        for (int64_t j = x; j < hidden; j += kRowThreads) {
          part += AugruUpdateBackwardElement(b, j, time, hidden, t, att, hs, cache, carry, dcp, dg);
        }
        terms[x] = part;
      }
      for (int half = kRowThreads / 2; half > 0; half /= 2) {
        for (int x = 0; x < half; ++x) terms[x] += terms[x + half];
      }
      if (datt != nullptr) datt[b * time + t] += static_cast<float>(-terms[0]);
    }
  }
  void AugruGatesBackwardStep(int64_t batch, int64_t time, int64_t hidden, int64_t t,
                              const float* hs, const float* cache, const float* dgh, float* carry,
                              float* dg) {
    for (int64_t i = 0; i < batch * hidden; ++i) {
      AugruGatesBackwardElement(i, time, hidden, t, hs, cache, dgh, carry, dg);
    }
  }

  // The two kernels of cuda_dense_kernels.h's LaunchColumnSums (kValue) in their orders: per chunk
  // of PlanColumnSums and column, lane l sums rows begin + l, + kColumnLanes, ... in double; the
  // lanes are added in lane order into the chunk's partial; the chunks' partials in chunk order;
  // then dst[c] += float(sum).
  static void HostColumnSum(int64_t rows, int64_t cols, const float* src, float* dst) {
    const ColumnSumPlan plan = PlanColumnSums(rows);
    std::vector<double> partials(static_cast<size_t>(ColumnPartialDoubles(rows, cols)));
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t begin = chunk * plan.chunk_rows;
      const int64_t end = std::min(rows, begin + plan.chunk_rows);
      for (int64_t col = 0; col < cols; ++col) {
        double lanes[kColumnLanes];
        for (int l = 0; l < kColumnLanes; ++l) {
          double acc = 0.0;
          for (int64_t r = begin + l; r < end; r += kColumnLanes) {
            acc += static_cast<double>(src[r * cols + col]);
          }
          lanes[l] = acc;
        }
        double total = lanes[0];
        for (int l = 1; l < kColumnLanes; ++l) total += lanes[l];
        partials[static_cast<size_t>(chunk * cols + col)] = total;
      }
    }
    for (int64_t col = 0; col < cols; ++col) {
      double s = 0.0;
      for (int64_t c = 0; c < plan.chunks; ++c) s += partials[static_cast<size_t>(c * cols + col)];
      dst[col] += static_cast<float>(s);
    }
  }

  int64_t gemms = 0;
};

// A float buffer with NaN guard zones on both sides: reads outside show up as NaN results,
// writes outside as changed guards.
class Guarded {
 public:
  static constexpr int64_t kGuard = 64;
  explicit Guarded(const std::vector<float>& v) : buf_(v.size() + 2 * kGuard, GuardValue()) {
    std::copy(v.begin(), v.end(), buf_.begin() + kGuard);
  }
  explicit Guarded(int64_t n) : Guarded(std::vector<float>(n, 0.0f)) {}
  float* data() { return buf_.data() + kGuard; }
  std::vector<float> values() const {
    return std::vector<float>(buf_.begin() + kGuard, buf_.end() - kGuard);
  }
  bool GuardsIntact() const {
    const int64_t n = static_cast<int64_t>(buf_.size());
    for (int64_t i = 0; i < n; ++i) {
      if (i >= kGuard && i < n - kGuard) continue;
      if (std::bit_cast<uint32_t>(buf_[i]) != std::bit_cast<uint32_t>(GuardValue())) return false;
    }
    return true;
  }

 private:
  static float GuardValue() { return std::numeric_limits<float>::quiet_NaN(); }
  std::vector<float> buf_;
};

RnnShape Shape(const RnnDims& d) { return {d.batch, d.time, d.in, d.hidden}; }

// ---- GRU ----------------------------------------------------------------------------------------

struct GruCase {
  RnnDims d;
  std::vector<float> x, w_in, w_rec, b_in, b_rec, dh;
};
GruCase MakeGru(const RnnDims& d, uint64_t seed) {
  const int64_t H = d.hidden, G = 3 * H, rows = d.batch * d.time;
  return {d,
          RandomFloats(rows * d.in, seed + 1),
          RandomFloats(d.in * G, seed + 2, -0.5f, 0.5f),
          RandomFloats(H * G, seed + 3, -0.4f, 0.4f),
          RandomFloats(G, seed + 4, -0.3f, 0.3f),
          RandomFloats(G, seed + 5, -0.3f, 0.3f),
          RandomFloats(rows * H, seed + 6)};
}

template <typename R>
struct GruResult {
  std::vector<R> h, dx, dw_in, dw_rec, db_in, db_rec;
};

GruResult<double> RefGru(const GruCase& g) {
  const RnnDims& d = g.d;
  const int64_t H = d.hidden, G = 3 * H, rows = d.batch * d.time;
  GruResult<double> o{std::vector<double>(rows * H), std::vector<double>(rows * d.in),
                      std::vector<double>(d.in * G), std::vector<double>(H * G),
                      std::vector<double>(G),        std::vector<double>(G)};
  const std::vector<double> x = AsDouble(g.x), w_in = AsDouble(g.w_in), w_rec = AsDouble(g.w_rec),
                            b_in = AsDouble(g.b_in), b_rec = AsDouble(g.b_rec), dh = AsDouble(g.dh);
  std::vector<double> cache(kernels::GruCacheFloats(d)), ws(kernels::GruWorkspaceFloats(d));
  kernels::ref::GruForward<double>(d, x.data(), w_in.data(), w_rec.data(), b_in.data(),
                                   b_rec.data(), o.h.data(), cache.data());
  kernels::ref::GruBackward<double>(d, x.data(), w_in.data(), w_rec.data(), o.h.data(),
                                    cache.data(), dh.data(), o.dx.data(), o.dw_in.data(),
                                    o.dw_rec.data(), o.db_in.data(), o.db_rec.data(), ws.data());
  return o;
}

// Forward + backward through the schedules; gradients start at `init` (zeros when empty).
GruResult<float> RunGru(const GruCase& g, bool want_dx, const GruResult<float>* init = nullptr) {
  const RnnDims& d = g.d;
  const int64_t H = d.hidden, G = 3 * H, rows = d.batch * d.time;
  Guarded x(g.x), w_in(g.w_in), w_rec(g.w_rec), b_in(g.b_in), b_rec(g.b_rec), dh(g.dh);
  Guarded h(rows * H), cache(kernels::GruCacheFloats(d)), ws(kernels::GruWorkspaceFloats(d));
  Guarded dx(init ? init->dx : std::vector<float>(rows * d.in));
  Guarded dw_in(init ? init->dw_in : std::vector<float>(d.in * G));
  Guarded dw_rec(init ? init->dw_rec : std::vector<float>(H * G));
  Guarded db_in(init ? init->db_in : std::vector<float>(G));
  Guarded db_rec(init ? init->db_rec : std::vector<float>(G));
  HostExec e;
  GruForwardSchedule(e, Shape(d), x.data(), w_in.data(), w_rec.data(), b_in.data(), b_rec.data(),
                     h.data(), cache.data(), ws.data());
  GruBackwardSchedule(e, Shape(d), x.data(), w_in.data(), w_rec.data(), h.data(), cache.data(),
                      dh.data(), want_dx ? dx.data() : nullptr, dw_in.data(), dw_rec.data(),
                      db_in.data(), db_rec.data(), ws.data());
  for (const Guarded* buf : {&x, &w_in, &w_rec, &b_in, &b_rec, &dh, &h, &cache, &ws, &dx, &dw_in,
                             &dw_rec, &db_in, &db_rec}) {
    EXPECT_TRUE(buf->GuardsIntact()) << "a write outside a buffer";
  }
  return {h.values(),      dx.values(),    dw_in.values(),
          dw_rec.values(), db_in.values(), db_rec.values()};
}

void ExpectGruClose(const GruResult<float>& got, const GruResult<double>& want) {
  EXPECT_TRUE(AllClose(got.h, want.h, kForwardTol, kStateFloor)) << "h";
  EXPECT_TRUE(AllClose(got.dx, want.dx, kGradTol, GradFloor(want.dx))) << "dx";
  EXPECT_TRUE(AllClose(got.dw_in, want.dw_in, kGradTol, GradFloor(want.dw_in))) << "dw_in";
  EXPECT_TRUE(AllClose(got.dw_rec, want.dw_rec, kGradTol, GradFloor(want.dw_rec))) << "dw_rec";
  EXPECT_TRUE(AllClose(got.db_in, want.db_in, kGradTol, GradFloor(want.db_in))) << "db_in";
  EXPECT_TRUE(AllClose(got.db_rec, want.db_rec, kGradTol, GradFloor(want.db_rec))) << "db_rec";
}

// ---- AUGRU --------------------------------------------------------------------------------------

struct AugruCase {
  RnnDims d;
  std::vector<float> x, att, g_w, g_b, c_w, c_b, dlast;
};
AugruCase MakeAugru(const RnnDims& d, uint64_t seed) {
  const int64_t H = d.hidden, rows = d.batch * d.time, K = d.in + H;
  return {d,
          RandomFloats(rows * d.in, seed + 1),
          RandomFloats(rows, seed + 2, 0.0f, 1.0f),
          RandomFloats(K * 2 * H, seed + 3, -0.4f, 0.4f),
          RandomFloats(2 * H, seed + 4, 0.5f, 1.5f),
          RandomFloats(K * H, seed + 5, -0.4f, 0.4f),
          RandomFloats(H, seed + 6, -0.3f, 0.3f),
          RandomFloats(d.batch * H, seed + 7)};
}

template <typename R>
struct AugruResult {
  std::vector<R> hs, dx, datt, dg_w, dg_b, dc_w, dc_b;
};

AugruResult<double> RefAugru(const AugruCase& a) {
  const RnnDims& d = a.d;
  const int64_t H = d.hidden, rows = d.batch * d.time, K = d.in + H;
  AugruResult<double> o{std::vector<double>(rows * H), std::vector<double>(rows * d.in),
                        std::vector<double>(rows),     std::vector<double>(K * 2 * H),
                        std::vector<double>(2 * H),    std::vector<double>(K * H),
                        std::vector<double>(H)};
  const std::vector<double> x = AsDouble(a.x), att = AsDouble(a.att), g_w = AsDouble(a.g_w),
                            g_b = AsDouble(a.g_b), c_w = AsDouble(a.c_w), c_b = AsDouble(a.c_b),
                            dlast = AsDouble(a.dlast);
  std::vector<double> cache(kernels::AugruCacheFloats(d)), ws(kernels::AugruWorkspaceFloats(d));
  kernels::ref::AugruForward<double>(d, x.data(), att.data(), g_w.data(), g_b.data(), c_w.data(),
                                     c_b.data(), o.hs.data(), cache.data());
  kernels::ref::AugruBackward<double>(d, x.data(), att.data(), g_w.data(), c_w.data(), o.hs.data(),
                                      cache.data(), dlast.data(), o.dx.data(), o.datt.data(),
                                      o.dg_w.data(), o.dg_b.data(), o.dc_w.data(), o.dc_b.data(),
                                      ws.data());
  return o;
}

AugruResult<float> RunAugru(const AugruCase& a, bool want_dx,
                            const AugruResult<float>* init = nullptr) {
  const RnnDims& d = a.d;
  const int64_t H = d.hidden, rows = d.batch * d.time, K = d.in + H;
  Guarded x(a.x), att(a.att), g_w(a.g_w), g_b(a.g_b), c_w(a.c_w), c_b(a.c_b), dlast(a.dlast);
  Guarded hs(rows * H), cache(kernels::AugruCacheFloats(d)), ws(kernels::AugruWorkspaceFloats(d));
  Guarded dx(init ? init->dx : std::vector<float>(rows * d.in));
  Guarded datt(init ? init->datt : std::vector<float>(rows));
  Guarded dg_w(init ? init->dg_w : std::vector<float>(K * 2 * H));
  Guarded dg_b(init ? init->dg_b : std::vector<float>(2 * H));
  Guarded dc_w(init ? init->dc_w : std::vector<float>(K * H));
  Guarded dc_b(init ? init->dc_b : std::vector<float>(H));
  HostExec e;
  AugruForwardSchedule(e, Shape(d), x.data(), att.data(), g_w.data(), g_b.data(), c_w.data(),
                       c_b.data(), hs.data(), cache.data(), ws.data());
  AugruBackwardSchedule(e, Shape(d), x.data(), att.data(), g_w.data(), c_w.data(), hs.data(),
                        cache.data(), dlast.data(), want_dx ? dx.data() : nullptr,
                        want_dx ? datt.data() : nullptr, dg_w.data(), dg_b.data(), dc_w.data(),
                        dc_b.data(), ws.data());
  for (const Guarded* buf : {&x, &att, &g_w, &g_b, &c_w, &c_b, &dlast, &hs, &cache, &ws, &dx, &datt,
                             &dg_w, &dg_b, &dc_w, &dc_b}) {
    EXPECT_TRUE(buf->GuardsIntact()) << "a write outside a buffer";
  }
  return {hs.values(),   dx.values(),   datt.values(), dg_w.values(),
          dg_b.values(), dc_w.values(), dc_b.values()};
}

void ExpectAugruClose(const AugruResult<float>& got, const AugruResult<double>& want) {
  EXPECT_TRUE(AllClose(got.hs, want.hs, kForwardTol, kStateFloor)) << "hs";
  EXPECT_TRUE(AllClose(got.dx, want.dx, kGradTol, GradFloor(want.dx))) << "dx";
  EXPECT_TRUE(AllClose(got.datt, want.datt, kGradTol, GradFloor(want.datt))) << "datt";
  EXPECT_TRUE(AllClose(got.dg_w, want.dg_w, kGradTol, GradFloor(want.dg_w))) << "dg_w";
  EXPECT_TRUE(AllClose(got.dg_b, want.dg_b, kGradTol, GradFloor(want.dg_b))) << "dg_b";
  EXPECT_TRUE(AllClose(got.dc_w, want.dc_w, kGradTol, GradFloor(want.dc_w))) << "dc_w";
  EXPECT_TRUE(AllClose(got.dc_b, want.dc_b, kGradTol, GradFloor(want.dc_b))) << "dc_b";
}

// Shapes of the op tests plus the model's (T = 10, H = 96), T = 1, batch 1, H > kRowThreads (the
// datt reduction's threads take several units), and no inputs (in = 0).
const RnnDims kGruShapes[] = {{5, 4, 3, 6}, {9, 10, 32, 96}, {1, 10, 32, 96},
                              {6, 1, 7, 5}, {3, 3, 4, 130},  {4, 3, 0, 5}};
const RnnDims kAugruShapes[] = {{5, 4, 3, 6}, {9, 10, 96, 96}, {1, 10, 96, 96},
                                {6, 1, 7, 5}, {3, 3, 4, 130},  {4, 3, 0, 5}};

TEST(CudaRnnScheduleTest, GruMatchesReference) {
  uint64_t seed = 100;
  for (const RnnDims& d : kGruShapes) {
    SCOPED_TRACE(::testing::Message()
                 << "B=" << d.batch << " T=" << d.time << " in=" << d.in << " H=" << d.hidden);
    const GruCase g = MakeGru(d, seed += 10);
    ExpectGruClose(RunGru(g, true), RefGru(g));
  }
}

TEST(CudaRnnScheduleTest, AugruMatchesReference) {
  uint64_t seed = 200;
  for (const RnnDims& d : kAugruShapes) {
    SCOPED_TRACE(::testing::Message()
                 << "B=" << d.batch << " T=" << d.time << " in=" << d.in << " H=" << d.hidden);
    const AugruCase a = MakeAugru(d, seed += 10);
    ExpectAugruClose(RunAugru(a, true), RefAugru(a));
  }
}

TEST(CudaRnnScheduleTest, AugruAttentionAllZeroAndAllOne) {
  for (float value : {0.0f, 1.0f}) {
    SCOPED_TRACE(::testing::Message() << "att=" << value);
    AugruCase a = MakeAugru({3, 4, 5, 6}, 300);
    std::fill(a.att.begin(), a.att.end(), value);
    const AugruResult<float> got = RunAugru(a, true);
    ExpectAugruClose(got, RefAugru(a));
    if (value == 1.0f) {  // u' = 0: the update gate gets no gradient at all
      for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(got.dg_b[6 + j], 0.0f) << j;
    }
  }
}

TEST(CudaRnnScheduleTest, GradientsAccumulate) {
  const RnnDims d{5, 6, 8, 12};
  const GruCase g = MakeGru(d, 400);
  GruResult<float> ginit{{},
                         RandomFloats(d.batch * d.time * d.in, 401),
                         RandomFloats(d.in * 3 * d.hidden, 402),
                         RandomFloats(d.hidden * 3 * d.hidden, 403),
                         RandomFloats(3 * d.hidden, 404),
                         RandomFloats(3 * d.hidden, 405)};
  GruResult<double> gwant = RefGru(g);
  auto add = [](std::vector<double>* want, const std::vector<float>& init) {
    for (size_t i = 0; i < want->size(); ++i) (*want)[i] += init[i];
  };
  add(&gwant.dx, ginit.dx);
  add(&gwant.dw_in, ginit.dw_in);
  add(&gwant.dw_rec, ginit.dw_rec);
  add(&gwant.db_in, ginit.db_in);
  add(&gwant.db_rec, ginit.db_rec);
  ExpectGruClose(RunGru(g, true, &ginit), gwant);

  const AugruCase a = MakeAugru(d, 410);
  const int64_t K = d.in + d.hidden;
  AugruResult<float> ainit{{},
                           RandomFloats(d.batch * d.time * d.in, 411),
                           RandomFloats(d.batch * d.time, 412),
                           RandomFloats(K * 2 * d.hidden, 413),
                           RandomFloats(2 * d.hidden, 414),
                           RandomFloats(K * d.hidden, 415),
                           RandomFloats(d.hidden, 416)};
  AugruResult<double> awant = RefAugru(a);
  add(&awant.dx, ainit.dx);
  add(&awant.datt, ainit.datt);
  add(&awant.dg_w, ainit.dg_w);
  add(&awant.dg_b, ainit.dg_b);
  add(&awant.dc_w, ainit.dc_w);
  add(&awant.dc_b, ainit.dc_b);
  ExpectAugruClose(RunAugru(a, true, &ainit), awant);
}

TEST(CudaRnnScheduleTest, NullInputGradientsLeaveWeightGradientsUnchanged) {
  const RnnDims d{4, 5, 6, 8};
  const GruCase g = MakeGru(d, 500);
  const GruResult<float> full = RunGru(g, true), part = RunGru(g, false);
  EXPECT_TRUE(BitIdentical(part.dw_in, full.dw_in));
  EXPECT_TRUE(BitIdentical(part.dw_rec, full.dw_rec));
  EXPECT_TRUE(BitIdentical(part.db_in, full.db_in));
  EXPECT_TRUE(BitIdentical(part.db_rec, full.db_rec));
  for (float v : part.dx) EXPECT_EQ(v, 0.0f);

  const AugruCase a = MakeAugru(d, 510);
  const AugruResult<float> afull = RunAugru(a, true), apart = RunAugru(a, false);
  EXPECT_TRUE(BitIdentical(apart.dg_w, afull.dg_w));
  EXPECT_TRUE(BitIdentical(apart.dg_b, afull.dg_b));
  EXPECT_TRUE(BitIdentical(apart.dc_w, afull.dc_w));
  EXPECT_TRUE(BitIdentical(apart.dc_b, afull.dc_b));
  for (float v : apart.dx) EXPECT_EQ(v, 0.0f);
  for (float v : apart.datt) EXPECT_EQ(v, 0.0f);
}

TEST(CudaRnnScheduleTest, GemmCountPerOp) {
  // The launch budget the schedules promise: GRU forward 1 + (T - 1) GEMMs, backward (T - 1) + 3
  // (dx, dw_in, dw_rec); AUGRU forward 2 + 2 (T - 1), backward 2 (T - 1) + 6.
  const RnnDims d{3, 10, 4, 5};
  const GruCase g = MakeGru(d, 600);
  const int64_t H = d.hidden, G = 3 * H, rows = d.batch * d.time;
  std::vector<float> h(rows * H), cache(kernels::GruCacheFloats(d)),
      ws(kernels::GruWorkspaceFloats(d)), dx(rows * d.in), dw_in(d.in * G), dw_rec(H * G), db(G),
      db2(G);
  HostExec e;
  GruForwardSchedule(e, Shape(d), g.x.data(), g.w_in.data(), g.w_rec.data(), g.b_in.data(),
                     g.b_rec.data(), h.data(), cache.data(), ws.data());
  EXPECT_EQ(e.gemms, 1 + (d.time - 1));
  e.gemms = 0;
  GruBackwardSchedule(e, Shape(d), g.x.data(), g.w_in.data(), g.w_rec.data(), h.data(),
                      cache.data(), g.dh.data(), dx.data(), dw_in.data(), dw_rec.data(), db.data(),
                      db2.data(), ws.data());
  EXPECT_EQ(e.gemms, (d.time - 1) + 3);

  const AugruCase a = MakeAugru(d, 610);
  const int64_t K = d.in + H;
  std::vector<float> hs(rows * H), acache(kernels::AugruCacheFloats(d)),
      aws(kernels::AugruWorkspaceFloats(d)), adx(rows * d.in), datt(rows), dg_w(K * 2 * H),
      dg_b(2 * H), dc_w(K * H), dc_b(H);
  e.gemms = 0;
  AugruForwardSchedule(e, Shape(d), a.x.data(), a.att.data(), a.g_w.data(), a.g_b.data(),
                       a.c_w.data(), a.c_b.data(), hs.data(), acache.data(), aws.data());
  EXPECT_EQ(e.gemms, 2 + 2 * (d.time - 1));
  e.gemms = 0;
  AugruBackwardSchedule(e, Shape(d), a.x.data(), a.att.data(), a.g_w.data(), a.c_w.data(),
                        hs.data(), acache.data(), a.dlast.data(), adx.data(), datt.data(),
                        dg_w.data(), dg_b.data(), dc_w.data(), dc_b.data(), aws.data());
  EXPECT_EQ(e.gemms, 2 * (d.time - 1) + 6);
}

TEST(CudaRnnScheduleTest, EmptyShapesDoNothing) {
  HostExec e;
  float sentinel = 7.0f;
  for (const RnnDims& d : {RnnDims{0, 4, 3, 5}, RnnDims{2, 0, 3, 5}, RnnDims{2, 4, 3, 0}}) {
    GruForwardSchedule(e, Shape(d), nullptr, nullptr, nullptr, nullptr, nullptr, &sentinel,
                       &sentinel, &sentinel);
    GruBackwardSchedule(e, Shape(d), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                        &sentinel, &sentinel, &sentinel, &sentinel, &sentinel, &sentinel);
    AugruForwardSchedule(e, Shape(d), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                         &sentinel, &sentinel, &sentinel);
    AugruBackwardSchedule(e, Shape(d), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                          nullptr, &sentinel, &sentinel, &sentinel, &sentinel, &sentinel, &sentinel,
                          &sentinel);
  }
  EXPECT_EQ(sentinel, 7.0f);
  EXPECT_EQ(e.gemms, 0);
}

// ---- Planning -----------------------------------------------------------------------------------

TEST(CudaRnnPlanTest, WorkspaceLayoutsFitTheBackendSizes) {
  for (int64_t B : {1, 7, 4096}) {
    for (int64_t T : {1, 10}) {
      for (int64_t H : {1, 96, 130}) {
        const RnnDims d{B, static_cast<int>(T), 32, static_cast<int>(H)};
        const GruForwardLayout gf = MakeGruForwardLayout(B, T, H);
        EXPECT_EQ(gf.hu - gf.xw, B * T * 3 * H);
        EXPECT_LE(gf.floats, kernels::GruWorkspaceFloats(d));
        const GruBackwardLayout gb = MakeGruBackwardLayout(B, T, H);
        EXPECT_EQ(gb.gh - gb.gx, B * T * 3 * H);
        EXPECT_EQ(gb.carry - gb.gh, B * T * 3 * H);
        EXPECT_EQ(gb.floats - gb.carry, B * H);
        EXPECT_LE(gb.floats, kernels::GruWorkspaceFloats(d));
        const AugruForwardLayout af = MakeAugruForwardLayout(B, T, H);
        EXPECT_EQ(af.xc - af.xg, B * T * 2 * H);
        EXPECT_EQ(af.floats - af.xc, B * T * H);
        EXPECT_LE(af.floats, kernels::AugruWorkspaceFloats(d));
        const AugruBackwardLayout ab = MakeAugruBackwardLayout(B, T, H);
        EXPECT_EQ(ab.dcp - ab.dg, B * T * 2 * H);
        EXPECT_EQ(ab.carry - ab.dcp, B * T * H);
        EXPECT_EQ(ab.dgh - ab.carry, B * H);
        EXPECT_EQ(ab.floats - ab.dgh, B * H);
        EXPECT_LE(ab.floats, kernels::AugruWorkspaceFloats(d));
      }
    }
  }
}

TEST(CudaRnnPlanTest, GridBlocks) {
  EXPECT_EQ(GridBlocks(0, 256), 0);
  EXPECT_EQ(GridBlocks(-3, 256), 0);
  EXPECT_EQ(GridBlocks(1, 256), 1);
  EXPECT_EQ(GridBlocks(256, 256), 1);
  EXPECT_EQ(GridBlocks(257, 256), 2);
  EXPECT_EQ(GridBlocks(int64_t{1} << 40, 256), kMaxBlocks);
}

TEST(CudaRnnPlanTest, ColumnSumMatchesDoubleSumsAndAccumulates) {
  // 3001 rows: 12 chunks of PlanColumnSums, the last one short; 37 columns: a partial tile.
  for (int64_t rows : {1, 7, 256, 1000, 3001}) {
    const int64_t cols = 37;
    Guarded src(RandomFloats(rows * cols, 700 + rows));  // a read outside gives NaN sums
    Guarded dst(RandomFloats(cols, 800 + rows));
    const std::vector<float> before = dst.values();
    HostExec::HostColumnSum(rows, cols, src.data(), dst.data());
    EXPECT_TRUE(dst.GuardsIntact());
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0.0;
      for (int64_t r = 0; r < rows; ++r) s += src.data()[r * cols + c];
      EXPECT_NEAR(dst.data()[c], static_cast<double>(before[c]) + s, 1e-5 * (1.0 + std::abs(s)))
          << rows << " " << c;
    }
  }
}

}  // namespace
}  // namespace sift::cuda::rnn
