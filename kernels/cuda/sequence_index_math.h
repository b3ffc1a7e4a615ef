// The host/device pieces of the CUDA sequence kernels (cuda_sequence_kernels.cu) that decide WHAT
// is computed rather than how fast: the top-k membership rule, the masked-softmax score, the
// segment sum's sort keys, segment bounds, scratch layout and per-column summation order, the
// damped mean's denominator and the attention features' element formulas. Each follows the
// reference backend (kernels/reference/dense_ops.h, sequence_ops.h) in its order of operations,
// so a host instantiation gives the reference's bits (tests/unit/cuda_sequence_index_math_test.cc).
// Header-only, no CUDA or Abseil include (nvcc device code and g++ tests share it); pure
// functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/elementwise_math.h"

namespace sift::cuda::seq {

// The masked-softmax score of an invalid slot: kernels/backend.h kMaskedScore (a test checks they
// are equal; that header pulls Abseil into device code).
inline constexpr float kMaskedScore = -3.4028235e38f;

// ---- Masks and softmax ----------------------------------------------------------------------
// Whether slot `idx` takes part: no mask, or a non-zero mask value.
SIFT_HD bool SlotValid(const float* mask, int64_t idx) {
  return mask == nullptr || mask[idx] != 0.0f;
}
// The score a masked softmax sees for slot `idx` (in double, as the reference compares them).
SIFT_HD double SoftmaxInput(float score, const float* mask, int64_t idx) {
  return SlotValid(mask, idx) ? static_cast<double>(score) : static_cast<double>(kMaskedScore);
}
// The running maximum of the reference (std::max(mx, v): mx unless v is larger).
SIFT_HD double MaxOf(double mx, double v) { return mx < v ? v : mx; }

// The softmax backward's value at a valid slot: p * (dp - dot), dot = sum_j p_j dp_j (double).
SIFT_HD double SoftmaxGradTerm(float p, float dp, double dot) {
  return math::Mul(static_cast<double>(p), math::Sub(static_cast<double>(dp), dot));
}

// ---- Dot attention (backend.h DotAttentionForward / Backward) ---------------------------------
// The score gradient of slot j: alpha_j (dalpha_j - dot) where valid, 0 at a masked slot (its
// score is a constant); dalpha_j = <dout, k_j>, dot = sum_l alpha_l dalpha_l.
SIFT_HD double AttentionScoreGrad(float alpha, double dalpha, double dot, bool valid) {
  return valid ? math::Mul(static_cast<double>(alpha), math::Sub(dalpha, dot)) : 0.0;
}
// What dk[j, c] gets (rounded to float by the caller): alpha_j dout_c + ds_j q_c.
SIFT_HD double AttentionKeyGradTerm(float alpha, float dout, double ds, float q) {
  return math::Add(math::Mul(static_cast<double>(alpha), static_cast<double>(dout)),
                   math::Mul(ds, static_cast<double>(q)));
}

// ---- Top-k mask (backend.h TopKMask) ---------------------------------------------------------
// Whether slot j of the row a[0..n) is kept: fewer than k slots rank ahead of it (larger alpha,
// or equal alpha and a lower index) and a[j] > 0. k >= n keeps every positive slot; k <= 0 none.
SIFT_HD bool TopKSelected(const float* a, int n, int k, int j) {
  const float v = a[j];
  if (!(v > 0.0f) || k <= 0) return false;
  int rank = 0;
  for (int l = 0; l < n && rank < k; ++l) {
    if (a[l] > v || (a[l] == v && l < j)) ++rank;
  }
  return rank < k;
}

// ---- Segment sum (backend.h SegmentSumRows) ---------------------------------------------------
// The sort key of row i: inv + 1 for a key in [0, num_unique), 0 for padding (inv < 0). A value
// >= num_unique (outside the contract) is treated as padding, so it can never write out of bounds.
SIFT_HD uint32_t SegmentSumKey(int32_t inv, int64_t num_unique) {
  return (inv < 0 || static_cast<int64_t>(inv) >= num_unique) ? 0u
                                                              : static_cast<uint32_t>(inv) + 1u;
}
// The radix-sort key bits covering every key in [0, num_unique] (at least 1, at most 32).
SIFT_HD int SegmentSumKeyBits(int64_t num_unique) {
  int bits = 1;
  while (bits < 32 && (static_cast<uint64_t>(num_unique) >> bits) != 0) ++bits;
  return bits;
}
// The first position p in the ascending keys[0..n) with keys[p] >= key (n if none).
SIFT_HD int64_t LowerBound(const uint32_t* keys, int64_t n, uint32_t key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}
// Column c of unique key u after the stable sort: rows order[begin..end) (increasing i, the rows
// whose key is u + 1) are added to `acc` (drows[u, c]) one at a time as the reference adds them:
// acc += dout[i, c] * (mask ? mask[i] : 1), each product rounded before the sum. The terms are
// loaded kSegmentBatch at a time before they are added (in the same order: the same bits), so a
// device thread has that many independent loads in flight along a long segment.
inline constexpr int kSegmentBatch = 8;
SIFT_HD float SegmentSumTerm(const int64_t* order, int64_t p, const float* dout, int64_t ld_dout,
                             int c, const float* mask) {
  const int64_t i = order[p];
  return math::Mul(dout[i * ld_dout + c], mask != nullptr ? mask[i] : 1.0f);
}
SIFT_HD float SegmentSumColumn(float acc, const int64_t* order, int64_t begin, int64_t end,
                               const float* dout, int64_t ld_dout, int c, const float* mask) {
  int64_t p = begin;
  for (; p + kSegmentBatch <= end; p += kSegmentBatch) {
    float terms[kSegmentBatch];
    for (int t = 0; t < kSegmentBatch; ++t) {
      terms[t] = SegmentSumTerm(order, p + t, dout, ld_dout, c, mask);
    }
    for (int t = 0; t < kSegmentBatch; ++t) acc = math::Add(acc, terms[t]);
  }
  for (; p < end; ++p) acc = math::Add(acc, SegmentSumTerm(order, p, dout, ld_dout, c, mask));
  return acc;
}

// Where the segment sum's buffers lie in one device scratch block (byte offsets, each aligned to
// kScratchAlign): sort keys in/out (uint32 [n]), row indices in/out (int64 [n]), segment bounds
// (int64 [num_unique + 1]) and the sort's temporary storage (`sort_temp_bytes`, from CUB).
inline constexpr int64_t kScratchAlign = 256;
struct SegmentSumLayout {
  int64_t keys_in = 0, keys_out = 0, order_in = 0, order_out = 0, bounds = 0, sort_temp = 0;
  int64_t sort_temp_bytes = 0;
  int64_t total_bytes = 0;
};
inline int64_t AlignUp(int64_t bytes, int64_t align) { return (bytes + align - 1) / align * align; }
inline SegmentSumLayout PlanSegmentSum(int64_t n, int64_t num_unique, int64_t sort_temp_bytes) {
  SegmentSumLayout l;
  int64_t at = 0;
  const auto take = [&at](int64_t bytes) {
    const int64_t offset = at;
    at = AlignUp(at + bytes, kScratchAlign);
    return offset;
  };
  l.keys_in = take(n * static_cast<int64_t>(sizeof(uint32_t)));
  l.keys_out = take(n * static_cast<int64_t>(sizeof(uint32_t)));
  l.order_in = take(n * static_cast<int64_t>(sizeof(int64_t)));
  l.order_out = take(n * static_cast<int64_t>(sizeof(int64_t)));
  l.bounds = take((num_unique + 1) * static_cast<int64_t>(sizeof(int64_t)));
  l.sort_temp = take(sort_temp_bytes);
  l.sort_temp_bytes = sort_temp_bytes;
  l.total_bytes = at;
  return l;
}

// ---- Damped mean (backend.h DampedMeanForward / Backward) -------------------------------------
// 1 + sum_j rho[j], summed in double in increasing j as the reference sums it.
SIFT_HD double DampedMeanDenominator(const float* rho, int n) {
  double den = 1.0;
  for (int j = 0; j < n; ++j) den = math::Add(den, static_cast<double>(rho[j]));
  return den;
}
// The backward term dx[j, c] gets: rho_j * dout_c / den, in double, rounded once.
SIFT_HD float DampedMeanGradTerm(float rho, float dout, double den) {
  return static_cast<float>(math::Mul(static_cast<double>(rho), static_cast<double>(dout)) / den);
}

// ---- Attention features (backend.h AttentionFeaturesForward / Backward) -----------------------
// The four entries of c[b, t] for unit j: [q; h; q - h; q * h].
struct FeatureEntries {
  float q, h, diff, prod;
};
SIFT_HD FeatureEntries AttentionFeatureEntries(float q, float h) {
  return {q, h, math::Sub(q, h), math::Mul(q, h)};
}
// What dh[b, t, j] gets from dc[b, t] (blocks dc0..dc3 at unit j): dc1 - dc2 + dc3 * q.
SIFT_HD float AttentionFeatureDh(float dc1, float dc2, float dc3, float q) {
  return math::Add(math::Sub(dc1, dc2), math::Mul(dc3, q));
}
// One time step's term of dqp[b, j], in double: dc0 + dc2 + dc3 * h.
SIFT_HD double AttentionFeatureDqpTerm(float dc0, float dc2, float dc3, float h) {
  return math::Add(math::Add(static_cast<double>(dc0), static_cast<double>(dc2)),
                   math::Mul(static_cast<double>(dc3), static_cast<double>(h)));
}

// ---- Launch shapes ------------------------------------------------------------------------
// Blocks for `work` items at `per_block` items per block, at least 1 and at most `max_blocks`
// (kernels loop over the rest with a grid stride). REQUIRES: work > 0, per_block > 0.
SIFT_HD int64_t GridBlocks(int64_t work, int64_t per_block, int64_t max_blocks) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks);
}
// Threads per block for a row of `width` items: width rounded up to a warp, in [32, max_threads].
SIFT_HD int RowThreads(int64_t width, int max_threads) {
  const int64_t t = (width + 31) / 32 * 32;
  return t < 32 ? 32 : (t > max_threads ? max_threads : static_cast<int>(t));
}

}  // namespace sift::cuda::seq
