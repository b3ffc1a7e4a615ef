// CategoryIndex: the hard-search index of SIM's General Search Unit (SIM paper 4.1, the "User
// Behaviour Tree"; docs/training.md "Lifelong sequences"): for every user, the positions of its
// events sorted by (category, position), so the user's events of one category inside a window of
// positions are one contiguous run found by two binary searches — O(log L_u) per query, whatever
// the window's length N.
//
// Category = item feature 1 of the timeline. Positions are 0-based within the user (uint32: a
// user holds < 2^32 events). Memory: 4 bytes per event, next to the timeline's 4·F. Built once
// per opened dataset (TimelineSamples builds it on first use); immutable and thread-safe after
// Build. The timeline must outlive the index.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/data/timeline.h"
#include "common/status.h"
#include "common/thread_pool.h"

namespace sift::data {

class CategoryIndex {
 public:
  // FAILED_PRECONDITION when the timeline has fewer than 2 item features (no category) or a user
  // with 2^32 events or more. `pool` (may be null: the calling thread) sorts users in parallel.
  static StatusOr<std::unique_ptr<CategoryIndex>> Build(const Timeline* timeline, ThreadPool* pool);

  // The positions p (0-based within user u, ascending) of u's events with category `category`
  // and lo <= p < hi, at most the newest `k` of them, written to out[0..n); returns n.
  // REQUIRES: 0 <= u < num_users; 0 <= lo <= hi <= L_u; k >= 0; out holds k entries.
  int64_t Search(int64_t u, int32_t category, int64_t lo, int64_t hi, int64_t k,
                 uint32_t* out) const;
  // The number of such events (no limit).
  int64_t Count(int64_t u, int32_t category, int64_t lo, int64_t hi) const;

  int64_t bytes() const { return static_cast<int64_t>(sorted_.size() * sizeof(uint32_t)); }

 private:
  explicit CategoryIndex(const Timeline* timeline) : tl_(timeline) {}
  // The run [first, last) of u's sorted positions with category c and lo <= p < hi.
  void Range(int64_t u, int32_t c, int64_t lo, int64_t hi, const uint32_t** first,
             const uint32_t** last) const;

  const Timeline* tl_;
  std::vector<uint32_t> sorted_;  // [E]: user u's positions at [user_begin(u), user_end(u))
};

}  // namespace sift::data
