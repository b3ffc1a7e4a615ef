// kernels/cuda/sequence_index_math.h on the CPU (no CUDA link): the CUDA sequence kernels' rules
// and element formulas against the reference backend's templates on random inputs. The kernels'
// sequential parts are emulated on the host with the header's functions in the kernels' order —
// the segment sum (stable sort of (key, i), bounds by binary search, per-column sums), the top-k
// mask, the damped mean, the attention features, the softmax and attention gradient terms — and
// must give the float reference's bits; the sort keys, key bits, binary search, scratch layout and
// launch shapes are checked against their definitions.
#include "kernels/cuda/sequence_index_math.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/reference/dense_ops.h"
#include "kernels/reference/sequence_ops.h"
#include "tests/unit/kernels/op_test_util.h"

namespace sift::cuda::seq {
namespace {

using kernels::testing::AllClose;
using kernels::testing::BitIdentical;
using kernels::testing::RandomFloats;
using kernels::testing::RandomIndices;
using kernels::testing::RandomMask;
using Vf = std::vector<float>;

static_assert(kMaskedScore == kernels::kMaskedScore,
              "sequence_index_math.h kMaskedScore must be backend.h's");

// ---- Top-k ------------------------------------------------------------------------------------
Vf TopKOnHost(int64_t batch, int n, int k, const Vf& alpha) {
  Vf rho(alpha.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int j = 0; j < n; ++j) {
      rho[b * n + j] = TopKSelected(alpha.data() + b * n, n, k, j) ? 1.0f : 0.0f;
    }
  }
  return rho;
}

TEST(CudaSequenceIndexMathTest, TopKSelectedMatchesReferenceWithTiesZerosAndLargeK) {
  // Hand-checked row: ties 1/2 (0.3) and 0/4 (0.2), slot 3 has alpha 0.
  const Vf a = {0.2f, 0.3f, 0.3f, 0.0f, 0.2f};
  EXPECT_EQ(TopKOnHost(1, 5, 2, a), (Vf{0, 1, 1, 0, 0}));
  EXPECT_EQ(TopKOnHost(1, 5, 4, a), (Vf{1, 1, 1, 0, 1}));
  EXPECT_EQ(TopKOnHost(1, 5, 9, a), (Vf{1, 1, 1, 0, 1}));
  EXPECT_EQ(TopKOnHost(1, 5, 0, a), Vf(5, 0.0f));
  const int64_t batch = 50;
  for (int n : {1, 7, 90, 300}) {
    Vf alpha(batch * n);
    Rng rng(1000 + n);
    for (auto& v : alpha) {
      const double u = rng.Uniform();
      // Zeros, negatives, many exact ties and distinct values.
      v = u < 0.3 ? 0.0f
                  : (u < 0.4 ? -static_cast<float>(rng.Uniform())
                             : (u < 0.7 ? static_cast<float>(rng.Below(6)) / 6
                                        : static_cast<float>(rng.Uniform())));
    }
    for (int k : {-1, 0, 1, 2, n / 2, n - 1, n, n + 1, 1000}) {
      Vf want(alpha.size());
      kernels::reference::TopKMask<float>(batch, n, k, alpha.data(), want.data());
      EXPECT_EQ(TopKOnHost(batch, n, k, alpha), want) << "n " << n << " k " << k;
    }
  }
}

// ---- Segment sum ------------------------------------------------------------------------------
// The kernels' pipeline on the host: keys, a stable sort by the low `bits` key bits (CUB's radix
// sort is stable), bounds by binary search, one SegmentSumColumn per (key, column).
void SegmentSumOnHost(int64_t n, int dim, const float* dout, int64_t ld_dout, const int32_t* inv,
                      const float* mask, int64_t num_unique, float* drows) {
  const int bits = SegmentSumKeyBits(num_unique);
  std::vector<std::pair<uint32_t, int64_t>> pairs(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = SegmentSumKey(inv[i], num_unique);
    ASSERT_TRUE(bits == 32 || key < (uint64_t{1} << bits)) << "key " << key << " bits " << bits;
    pairs[i] = {key, i};
  }
  std::stable_sort(pairs.begin(), pairs.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<uint32_t> keys(n);
  std::vector<int64_t> order(n);
  for (int64_t p = 0; p < n; ++p) {
    keys[p] = pairs[p].first;
    order[p] = pairs[p].second;
  }
  std::vector<int64_t> bounds(num_unique + 1);
  for (int64_t u = 0; u <= num_unique; ++u) {
    bounds[u] = LowerBound(keys.data(), n, static_cast<uint32_t>(u + 1));
  }
  for (int64_t u = 0; u < num_unique; ++u) {
    for (int c = 0; c < dim; ++c) {
      float& dst = drows[u * dim + c];
      if (bounds[u] == bounds[u + 1]) continue;
      dst = SegmentSumColumn(dst, order.data(), bounds[u], bounds[u + 1], dout, ld_dout, c, mask);
    }
  }
}

TEST(CudaSequenceIndexMathTest, SegmentSumPipelineGivesTheReferenceBits) {
  const int dim = 16;
  for (int64_t u : {int64_t{1}, int64_t{37}, int64_t{1000}}) {
    for (int64_t n : {int64_t{1}, int64_t{50}, int64_t{5000}}) {
      const std::vector<int32_t> inv = RandomIndices(n, 60 + n + u, -1, static_cast<int32_t>(u));
      const Vf dout = RandomFloats(n * (dim + 3), 61), mask = RandomMask(n, 62);
      for (const float* m : {static_cast<const float*>(nullptr), mask.data()}) {
        Vf got = RandomFloats(u * dim, 63), want = got;
        SegmentSumOnHost(n, dim, dout.data(), dim + 3, inv.data(), m, u, got.data());
        kernels::reference::SegmentSumRows<float>(n, dim, dout.data(), dim + 3, inv.data(), m, u,
                                                  want.data());
        EXPECT_TRUE(BitIdentical(got, want))
            << "u " << u << " n " << n << " mask " << (m != nullptr);
      }
    }
  }
  // Every row padding, or outside [0, num_unique): nothing changes.
  const std::vector<int32_t> pad = {-1, -5, 7, 8, -1};
  const Vf g = RandomFloats(5 * 4, 64);
  Vf drows(7 * 4, 0.5f);
  SegmentSumOnHost(5, 4, g.data(), 4, pad.data(), nullptr, 7, drows.data());
  EXPECT_EQ(drows, Vf(7 * 4, 0.5f));
}

TEST(CudaSequenceIndexMathTest, SegmentSumKeysAndKeyBits) {
  EXPECT_EQ(SegmentSumKey(-1, 10), 0u);
  EXPECT_EQ(SegmentSumKey(std::numeric_limits<int32_t>::min(), 10), 0u);
  EXPECT_EQ(SegmentSumKey(0, 10), 1u);
  EXPECT_EQ(SegmentSumKey(9, 10), 10u);
  EXPECT_EQ(SegmentSumKey(10, 10), 0u);  // outside the contract: treated as padding
  EXPECT_EQ(SegmentSumKey(std::numeric_limits<int32_t>::max(), int64_t{1} << 31),
            uint32_t{1} << 31);
  EXPECT_EQ(SegmentSumKeyBits(1), 1);
  EXPECT_EQ(SegmentSumKeyBits(2), 2);
  EXPECT_EQ(SegmentSumKeyBits(3), 2);
  EXPECT_EQ(SegmentSumKeyBits(4), 3);
  EXPECT_EQ(SegmentSumKeyBits(255), 8);
  EXPECT_EQ(SegmentSumKeyBits(256), 9);
  EXPECT_EQ(SegmentSumKeyBits((int64_t{1} << 31) - 1), 31);
  EXPECT_EQ(SegmentSumKeyBits(int64_t{1} << 31), 32);
  // Every key of [0, num_unique] fits the bits, and num_unique would not fit one bit fewer.
  for (int64_t u = 1; u < 5000; u += 7) {
    const int bits = SegmentSumKeyBits(u);
    EXPECT_LT(u, int64_t{1} << bits) << u;
    EXPECT_GE(u, int64_t{1} << (bits - 1)) << u;
  }
}

TEST(CudaSequenceIndexMathTest, LowerBoundMatchesTheStandardLibrary) {
  Rng rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = static_cast<int64_t>(rng.Below(40));
    std::vector<uint32_t> keys(n);
    for (auto& k : keys) k = static_cast<uint32_t>(rng.Below(12));
    std::sort(keys.begin(), keys.end());
    for (uint32_t key = 0; key < 14; ++key) {
      const int64_t want = std::lower_bound(keys.begin(), keys.end(), key) - keys.begin();
      ASSERT_EQ(LowerBound(keys.data(), n, key), want) << "n " << n << " key " << key;
    }
  }
}

TEST(CudaSequenceIndexMathTest, SegmentSumLayoutIsAlignedDisjointAndLargeEnough) {
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{368640}}) {
    for (int64_t u : {int64_t{1}, int64_t{64}, int64_t{100003}}) {
      for (int64_t temp : {int64_t{0}, int64_t{1}, int64_t{12345}}) {
        const SegmentSumLayout l = PlanSegmentSum(n, u, temp);
        const std::pair<int64_t, int64_t> parts[] = {{l.keys_in, n * 4},      {l.keys_out, n * 4},
                                                     {l.order_in, n * 8},     {l.order_out, n * 8},
                                                     {l.bounds, (u + 1) * 8}, {l.sort_temp, temp}};
        int64_t end = 0;
        for (const auto& [offset, bytes] : parts) {
          EXPECT_EQ(offset % kScratchAlign, 0) << offset;
          EXPECT_GE(offset, end) << "overlap at " << offset;
          end = offset + bytes;
        }
        EXPECT_GE(l.total_bytes, end);
        EXPECT_EQ(l.sort_temp_bytes, temp);
      }
    }
  }
}

// ---- Damped mean ------------------------------------------------------------------------------
TEST(CudaSequenceIndexMathTest, DampedMeanPiecesGiveTheReferenceBits) {
  for (int64_t batch : {int64_t{1}, int64_t{30}}) {
    const int n = 90, d = 32;
    const int64_t ldout = d + 2, lddout = d + 1;
    const Vf x = RandomFloats(batch * n * d, 100), rho = RandomMask(batch * n, 101, 0.5);
    // Forward as the kernel: one denominator per row, one sequential double sum per column.
    Vf got(batch * ldout, 3.0f), want = got;
    for (int64_t b = 0; b < batch; ++b) {
      const double den = DampedMeanDenominator(rho.data() + b * n, n);
      for (int c = 0; c < d; ++c) {
        double s = 0.0;
        for (int j = 0; j < n; ++j) s += double(rho[b * n + j]) * x[(b * n + j) * d + c];
        got[b * ldout + c] = static_cast<float>(s / den);
      }
    }
    kernels::reference::DampedMeanForward<float>(batch, n, d, x.data(), rho.data(), want.data(),
                                                 ldout);
    EXPECT_TRUE(BitIdentical(got, want));
    const Vf g = RandomFloats(batch * lddout, 102);
    Vf dx = RandomFloats(batch * n * d, 103), dx_want = dx;
    for (int64_t b = 0; b < batch; ++b) {
      const double den = DampedMeanDenominator(rho.data() + b * n, n);
      for (int64_t e = 0; e < int64_t{n} * d; ++e) {
        const int64_t j = e / d, c = e % d;
        dx[b * n * d + e] += DampedMeanGradTerm(rho[b * n + j], g[b * lddout + c], den);
      }
    }
    kernels::reference::DampedMeanBackward<float>(batch, n, d, rho.data(), g.data(), lddout,
                                                  dx_want.data());
    EXPECT_TRUE(BitIdentical(dx, dx_want));
  }
  // Fractional weights: the denominator is the reference's double sum.
  const Vf r = RandomFloats(90, 104, 0.0f, 1.0f);
  double den = 1.0;
  for (float v : r) den += v;
  EXPECT_EQ(DampedMeanDenominator(r.data(), 90), den);
  EXPECT_EQ(DampedMeanDenominator(r.data(), 0), 1.0);
}

// ---- Masked softmax and attention --------------------------------------------------------------
TEST(CudaSequenceIndexMathTest, SoftmaxPiecesGiveTheReferenceBits) {
  const int64_t rows = 100;
  const int n = 13;
  const Vf s = RandomFloats(rows * n, 110, -30.0f, 30.0f);
  Vf mask = RandomMask(rows * n, 111);
  for (int j = 0; j < n; ++j) mask[j] = 0.0f;  // row 0: all masked
  Vf got(rows * n), want(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* m = mask.data() + r * n;
    double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (int j = 0; j < n; ++j) mx = MaxOf(mx, SoftmaxInput(s[r * n + j], m, j));
    for (int j = 0; j < n; ++j) sum += std::exp(SoftmaxInput(s[r * n + j], m, j) - mx);
    for (int j = 0; j < n; ++j) {
      got[r * n + j] = static_cast<float>(std::exp(SoftmaxInput(s[r * n + j], m, j) - mx) / sum);
    }
  }
  kernels::reference::MaskedSoftmaxForward<float>(rows, n, s.data(), mask.data(), want.data());
  EXPECT_TRUE(BitIdentical(got, want));
  for (int j = 0; j < n; ++j) EXPECT_FLOAT_EQ(got[j], 1.0f / n);
  EXPECT_EQ(SoftmaxInput(2.5f, nullptr, 0), 2.5);
  EXPECT_EQ(SoftmaxInput(2.5f, mask.data(), 0), static_cast<double>(kMaskedScore));

  const Vf dp = RandomFloats(rows * n, 112);
  Vf ds = RandomFloats(rows * n, 113), ds_want = ds;
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (int j = 0; j < n; ++j) dot += double(want[r * n + j]) * dp[r * n + j];
    for (int j = 0; j < n; ++j) {
      if (!SlotValid(mask.data() + r * n, j)) continue;
      ds[r * n + j] += static_cast<float>(SoftmaxGradTerm(want[r * n + j], dp[r * n + j], dot));
    }
  }
  kernels::reference::MaskedSoftmaxBackward<float>(rows, n, want.data(), mask.data(), dp.data(),
                                                   ds_want.data());
  EXPECT_TRUE(BitIdentical(ds, ds_want));
}

TEST(CudaSequenceIndexMathTest, AttentionGradientTermsMatchTheReference) {
  const int64_t batch = 12;
  const int n = 20, d = 8;
  const int64_t ldq = d + 3, lddout = d + 1, lddq = d + 2;
  const Vf q = RandomFloats(batch * ldq, 120), k = RandomFloats(batch * n * d, 121);
  Vf mask = RandomMask(batch * n, 122, 0.6);
  for (int j = 0; j < n; ++j) mask[j] = 0.0f;
  Vf alpha(batch * n), out(batch * d);
  kernels::reference::DotAttentionForward<float>(batch, n, d, q.data(), ldq, k.data(), mask.data(),
                                                 alpha.data(), out.data(), d);
  const Vf g = RandomFloats(batch * lddout, 123);
  Vf dq = RandomFloats(batch * lddq, 124), dk = RandomFloats(batch * n * d, 125);
  Vf dq_want = dq, dk_want = dk;
  // The kernel's phases in sequential order: dalpha, dot, ds, then dq (one double sum per
  // column, rounded once) and dk (one term per element).
  for (int64_t b = 0; b < batch; ++b) {
    const float* kb = k.data() + b * n * d;
    std::vector<double> da(n), ds(n);
    double dot = 0.0;
    for (int j = 0; j < n; ++j) {
      for (int c = 0; c < d; ++c) da[j] += double(g[b * lddout + c]) * kb[j * d + c];
      dot += double(alpha[b * n + j]) * da[j];
    }
    for (int j = 0; j < n; ++j) {
      ds[j] = AttentionScoreGrad(alpha[b * n + j], da[j], dot, SlotValid(mask.data(), b * n + j));
    }
    for (int c = 0; c < d; ++c) {
      double s = 0.0;
      for (int j = 0; j < n; ++j) s += ds[j] * kb[j * d + c];
      dq[b * lddq + c] += static_cast<float>(s);
    }
    for (int j = 0; j < n; ++j) {
      for (int c = 0; c < d; ++c) {
        dk[(b * n + j) * d + c] += static_cast<float>(
            AttentionKeyGradTerm(alpha[b * n + j], g[b * lddout + c], ds[j], q[b * ldq + c]));
      }
    }
  }
  kernels::reference::DotAttentionBackward<float>(batch, n, d, q.data(), ldq, k.data(), mask.data(),
                                                  alpha.data(), g.data(), lddout, dq_want.data(),
                                                  lddq, dk_want.data());
  EXPECT_TRUE(BitIdentical(dk, dk_want));
  // The reference rounds each slot's dq term to float before adding; the kernel rounds once.
  EXPECT_TRUE(AllClose(dq, dq_want, 1e-5, 1.0));
  EXPECT_EQ(AttentionScoreGrad(0.5f, 2.0, 1.0, false), 0.0);
  EXPECT_EQ(AttentionScoreGrad(0.5f, 2.0, 1.0, true), 0.5);
}

// ---- Attention features -----------------------------------------------------------------------
TEST(CudaSequenceIndexMathTest, AttentionFeaturePiecesGiveTheReferenceBits) {
  const int64_t batch = 9;
  const int time = 7, hidden = 12;
  const int64_t H = hidden;
  const Vf qp = RandomFloats(batch * H, 130), h = RandomFloats(batch * time * H, 131);
  Vf c(batch * time * 4 * H), c_want(c.size());
  for (int64_t e = 0; e < batch * time * H; ++e) {
    const int64_t row = e / H, j = e % H, b = row / time;
    const FeatureEntries f = AttentionFeatureEntries(qp[b * H + j], h[e]);
    c[row * 4 * H + j] = f.q;
    c[row * 4 * H + H + j] = f.h;
    c[row * 4 * H + 2 * H + j] = f.diff;
    c[row * 4 * H + 3 * H + j] = f.prod;
  }
  kernels::ref::AttentionFeaturesForward<float>(batch, time, hidden, qp.data(), h.data(),
                                                c_want.data());
  EXPECT_TRUE(BitIdentical(c, c_want));

  const Vf dc = RandomFloats(batch * time * 4 * H, 132);
  Vf dqp = RandomFloats(batch * H, 133), dh = RandomFloats(batch * time * H, 134);
  Vf dqp_want = dqp, dh_want = dh;
  for (int64_t e = 0; e < batch * time * H; ++e) {
    const int64_t row = e / H, j = e % H, b = row / time;
    const float* dcr = dc.data() + row * 4 * H;
    dh[e] += AttentionFeatureDh(dcr[H + j], dcr[2 * H + j], dcr[3 * H + j], qp[b * H + j]);
  }
  for (int64_t e = 0; e < batch * H; ++e) {
    const int64_t b = e / H, j = e % H;
    double sum = 0.0;
    for (int t = 0; t < time; ++t) {
      const int64_t row = b * time + t;
      const float* dcr = dc.data() + row * 4 * H;
      sum += AttentionFeatureDqpTerm(dcr[j], dcr[2 * H + j], dcr[3 * H + j], h[row * H + j]);
    }
    dqp[e] += static_cast<float>(sum);
  }
  kernels::ref::AttentionFeaturesBackward<float>(batch, time, hidden, qp.data(), h.data(),
                                                 dc.data(), dqp_want.data(), dh_want.data());
  EXPECT_TRUE(BitIdentical(dh, dh_want));
  EXPECT_TRUE(BitIdentical(dqp, dqp_want));
}

// ---- Launch shapes ----------------------------------------------------------------------------
TEST(CudaSequenceIndexMathTest, LaunchShapesStayWithinLimits) {
  EXPECT_EQ(GridBlocks(1, 256, 65535), 1);
  EXPECT_EQ(GridBlocks(256, 256, 65535), 1);
  EXPECT_EQ(GridBlocks(257, 256, 65535), 2);
  EXPECT_EQ(GridBlocks(int64_t{1} << 40, 256, 65535), 65535);
  EXPECT_EQ(GridBlocks(4096, 1, 65535), 4096);
  EXPECT_EQ(RowThreads(1, 256), 32);
  EXPECT_EQ(RowThreads(32, 256), 32);
  EXPECT_EQ(RowThreads(33, 256), 64);
  EXPECT_EQ(RowThreads(90, 256), 96);
  EXPECT_EQ(RowThreads(90 * 32, 256), 256);
  for (int64_t w = 1; w < 2000; w += 13) {
    const int t = RowThreads(w, 256);
    EXPECT_EQ(t % 32, 0);
    EXPECT_GE(t, 32);
    EXPECT_LE(t, 256);
  }
}

}  // namespace
}  // namespace sift::cuda::seq
