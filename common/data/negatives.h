// Deterministic negatives (docs/data.md section 1).
//
// A negative — the target of a label-0 sample, or an item in any sample's negative history — is
// the (item, category, ...) of one event drawn uniformly from all E events of the dataset, i.e.
// from the global interaction distribution. The draw is a pure function of
// (dataset seed, split, sample index, slot): nothing is stored, every worker materialises the
// same sample, and the test split is identical in every run. Slot 0 is the target; slot s >= 1 is
// the history slot s positions back from the target (1 = the newest), so a longer history window
// keeps the same negatives for its newest slots. This is an on-disk contract: never change it.
#pragma once

#include <cstdint>

#include "common/data/batch.h"
#include "common/hash.h"

namespace sift::data {

// Per-sample base of the draws; compute once per sample, then NegativeEvent() per slot.
inline uint64_t NegativeBase(uint64_t seed, Split split, int64_t sample_index) {
  return HashCombine(HashCombine(seed, 0x6e65676174697665ULL + static_cast<uint64_t>(split)),
                     static_cast<uint64_t>(sample_index));
}

// Index of the drawn event in [0, num_events) for `slot` of the sample with `base`.
inline uint64_t NegativeEvent(uint64_t base, uint32_t slot, uint64_t num_events) {
  return BoundedFromHash(Mix64(base + 0x9e3779b97f4a7c15ULL * (slot + 1)), num_events);
}

}  // namespace sift::data
