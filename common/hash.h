// Stable 64-bit hashing and counter-based randomness.
//
// Everything here is a pure function of its arguments and identical on every platform: these
// values decide which shard owns a key, how an unseen embedding row is initialised, and which
// negatives a sample gets, so they are part of the on-disk and on-wire contract. Never change them.
#pragma once

#include <cstdint>

namespace sift {

// SplitMix64's finaliser: a bijective 64-bit mixer.
constexpr uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Hash of an ordered pair; chained so that (a, b) and (b, a) differ.
constexpr uint64_t HashCombine(uint64_t a, uint64_t b) {
  return Mix64(Mix64(a + 0x9e3779b97f4a7c15ULL) + b);
}

// A uniform integer in [0, n) from a 64-bit hash (Lemire's multiply-high; bias < n / 2^64).
inline uint64_t BoundedFromHash(uint64_t h, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * n) >> 64);
}

// A double in [0, 1) from the high 53 bits of a hash.
constexpr double UnitFromHash(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

}  // namespace sift
