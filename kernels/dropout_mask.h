// Inverted dropout's mask as a pure function (Backend::Dropout; the MLP heads' model.dropout):
// element i of a tensor dropped under `seed` is kept iff u(seed, i) >= rate, where
// u = the high 53 bits of HashCombine(seed, i) (common/hash.h's SplitMix64 chain, repeated here
// so that nvcc's device code and the host share it without Abseil) as a double in [0, 1); kept
// elements are multiplied by `scale` = 1 / (1 - rate) (computed once on the host), dropped ones
// become 0. The same (seed, i, rate) gives the same factor on every backend, thread count and
// machine, so the forward pass and the backward pass regenerate one mask without storing it.
// Header-only; pure functions, thread-safe.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SIFT_DROPOUT_HD __host__ __device__ __forceinline__
#else
#define SIFT_DROPOUT_HD inline
#endif

namespace sift::kernels {

SIFT_DROPOUT_HD uint64_t DropoutMix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The factor of element i: 0 (dropped) or scale (kept). REQUIRES: 0 <= rate < 1.
SIFT_DROPOUT_HD float DropoutFactor(uint64_t seed, int64_t i, float rate, float scale) {
  const uint64_t h =
      DropoutMix64(DropoutMix64(seed + 0x9e3779b97f4a7c15ULL) + static_cast<uint64_t>(i));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return u < static_cast<double>(rate) ? 0.0f : scale;
}

}  // namespace sift::kernels
