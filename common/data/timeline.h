// The timeline dataset (docs/data.md section 1): every user's events stored once, user-major and
// time-ordered, from which samples are derived on the fly.
//
//   events.bin  magic "SIFTEVNT", counts {E, F, has_timestamps}
//               sections: int32 events[E][F] (row-major: item id, category id, ...),
//                         int64 timestamps[E] (only when has_timestamps)
//   users.bin   magic "SIFTUSER", counts {U, UF, E}
//               sections: uint64 offsets[U+1] (user u owns events [offsets[u], offsets[u+1])),
//                         int32 user_features[U][UF]
//
// Ids are 1-based (0 = padding). Every user has at least `min_events` events: 2 by default (one
// test target with a non-empty history); 0 for an impression dataset, whose samples are stored
// apart (impressions.h) and whose users may have no event before their first sample. Opening checks
// headers, sizes, that both files describe the same E, and that the offsets are monotone and end at
// E, so no later read can go out of bounds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/data/binary_file.h"
#include "common/status.h"

namespace sift::data {

inline constexpr char kEventsFile[] = "events.bin";
inline constexpr char kUsersFile[] = "users.bin";

// A timeline in memory, as produced by the generator or the Amazon import and written out.
struct TimelineData {
  int num_item_features = 2;
  int num_user_features = 1;
  std::vector<int32_t> events;         // [E][F]
  std::vector<int64_t> timestamps;     // [E] or empty
  std::vector<uint64_t> user_offsets;  // [U+1], starts at 0
  std::vector<int32_t> user_features;  // [U][UF]

  int64_t num_users() const { return static_cast<int64_t>(user_offsets.size()) - 1; }
  int64_t num_events() const {
    return num_item_features ? static_cast<int64_t>(events.size()) / num_item_features : 0;
  }
};

// Writes events.bin and users.bin into `dir` (each atomically). Fails on inconsistent sizes or a
// user with fewer than `min_events` events.
Status WriteTimeline(const std::string& dir, const TimelineData& t, int64_t min_events = 2);

// A memory-mapped, read-only timeline. Thread-safe (immutable after Open).
class Timeline {
 public:
  static StatusOr<std::unique_ptr<Timeline>> Open(const std::string& dir, bool verify,
                                                  int64_t min_events = 2);

  int64_t num_users() const { return num_users_; }
  int64_t num_events() const { return num_events_; }
  int num_item_features() const { return num_item_features_; }
  int num_user_features() const { return num_user_features_; }
  bool has_timestamps() const { return timestamps_ != nullptr; }

  // Features of event e: F int32 values.
  const int32_t* event(int64_t e) const { return events_ + e * num_item_features_; }
  const int32_t* events() const { return events_; }
  const int64_t* timestamps() const { return timestamps_; }  // null when absent
  uint64_t user_begin(int64_t u) const { return offsets_[u]; }
  uint64_t user_end(int64_t u) const { return offsets_[u + 1]; }
  int64_t user_length(int64_t u) const {
    return static_cast<int64_t>(offsets_[u + 1] - offsets_[u]);
  }
  const int32_t* user_features(int64_t u) const { return user_features_ + u * num_user_features_; }

  // Full payload checksums of both files.
  Status Verify() const;

 private:
  Timeline() = default;
  BinaryFile events_file_, users_file_;
  int64_t num_users_ = 0, num_events_ = 0;
  int num_item_features_ = 0, num_user_features_ = 0;
  const int32_t* events_ = nullptr;
  const int64_t* timestamps_ = nullptr;
  const uint64_t* offsets_ = nullptr;
  const int32_t* user_features_ = nullptr;
};

}  // namespace sift::data
