// Labelled samples of an impression log (docs/data-formats.md "Impression datasets"): what was
// shown to a user, when, and whether it was clicked. Stored per split as `<split>.impressions.bin`
// next to a timeline (users.bin + events.bin) that holds every user's behaviour; a sample's history
// is the user's events strictly before the sample's time, found at import and stored as a cutoff.
//
//   magic "SIFTIMPR", counts {N, F, 0}
//   sections: int64 user[N]     (0-based row of users.bin)
//             int64 cutoff[N]   (the user's events [0, cutoff) are the history)
//             int64 time[N]     (the sample's time, seconds: the time embedding's reference)
//             int32 label[N]    (0 or 1, as logged)
//             int32 target[N][F] (item id, category id, ...)
//
// Opening checks the header and the sizes; Dataset::Open checks every user row, cutoff, label and
// target id against the timeline and the cardinalities. Immutable after Open; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/data/binary_file.h"
#include "common/status.h"

namespace sift::data {

inline constexpr char kTrainImpressionsFile[] = "train.impressions.bin";
inline constexpr char kTestImpressionsFile[] = "test.impressions.bin";

// One split's samples in memory, as the importer builds them.
struct ImpressionData {
  int num_item_features = 2;
  std::vector<int64_t> user, cutoff, time;
  std::vector<int32_t> label;
  std::vector<int32_t> target;  // [N][F]
  int64_t size() const { return static_cast<int64_t>(user.size()); }
};

// Writes `path` atomically. Fails on inconsistent sizes.
Status WriteImpressions(const std::string& path, const ImpressionData& d);

class ImpressionsFile {
 public:
  static StatusOr<std::unique_ptr<ImpressionsFile>> Open(const std::string& path, bool verify);
  int64_t size() const { return size_; }
  int num_item_features() const { return num_item_features_; }
  int64_t user(int64_t i) const { return user_[i]; }
  int64_t cutoff(int64_t i) const { return cutoff_[i]; }
  int64_t time(int64_t i) const { return time_[i]; }
  int32_t label(int64_t i) const { return label_[i]; }
  const int32_t* target(int64_t i) const { return target_ + i * num_item_features_; }
  const std::string& path() const { return file_.path(); }
  Status Verify() const { return file_.VerifyPayload(); }

 private:
  ImpressionsFile() = default;
  BinaryFile file_;
  int64_t size_ = 0;
  int num_item_features_ = 0;
  const int64_t *user_ = nullptr, *cutoff_ = nullptr, *time_ = nullptr;
  const int32_t *label_ = nullptr, *target_ = nullptr;
};

}  // namespace sift::data
