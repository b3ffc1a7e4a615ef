// Small random timeline datasets for tests (fixed seeds), written with the real writers.
#pragma once

#include <cstdint>
#include <string>

#include "common/data/dataset.h"
#include "common/rng.h"

namespace sift::testing {

// A timeline of `users` users with lengths in [min_len, max_len] (a few users get the max),
// `items` items and `cats` categories, 2 item features, 1 user feature, timestamps = position.
inline data::TimelineData RandomTimeline(uint64_t seed, int64_t users, int64_t items, int64_t cats,
                                         int64_t min_len, int64_t max_len) {
  Rng rng(seed);
  data::TimelineData t;
  t.user_offsets.push_back(0);
  for (int64_t u = 0; u < users; ++u) {
    int64_t len = (u % 7 == 3) ? max_len
                               : min_len + static_cast<int64_t>(rng.Below(
                                               static_cast<uint64_t>(max_len - min_len + 1)));
    for (int64_t i = 0; i < len; ++i) {
      int32_t item = 1 + static_cast<int32_t>(rng.Below(static_cast<uint64_t>(items)));
      t.events.push_back(item);
      t.events.push_back(1 + (item - 1) % static_cast<int32_t>(cats));
      t.timestamps.push_back(i);
    }
    t.user_offsets.push_back(t.user_offsets.back() + static_cast<uint64_t>(len));
    t.user_features.push_back(static_cast<int32_t>(u + 1));
  }
  return t;
}

}  // namespace sift::testing
