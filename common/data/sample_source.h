// SampleSource: turns (split, sample index) into one row of a Batch. Two implementations:
//
// - TimelineSamples derives samples from a Timeline (docs/data.md section 1, model-spec 7.5),
//   leaving the last K = test_events events of each user out (metadata.sift.test_events, default
//   1, the reference's rule): train sample index s -> pair p = s / 2, label = 1 for even s, 0 for
//   odd s (the positive and its label-0 twin are adjacent); pairs are user-major: user u owns
//   L_u - 1 - K pairs whose targets are its events 2..L_u-K (1-based). Test sample s -> pair
//   q = s / 2 -> user q / K, target = the user's event L_u - K + 1 + q % K (1-based; K = 1: the
//   last event). The history is the up-to-T events before the target. Negatives come from
//   negatives.h. With train_targets_per_user = M > 0 (metadata.sift.train_targets_per_user:
//   lifelong datasets, where every position as a target would be millions of samples) user u
//   owns only its last min(L_u - 1 - K, M) pairs. With a batch's hard_search_window > 0 the long
//   slots come from the user's CategoryIndex (hard search).
//   With impressions (impressions.h: a labelled impression log) the samples are the stored ones
//   instead: sample s of a split is record s, its label as logged (no label-0 twin), its target
//   the stored one, its history the user's events before the stored cutoff.
// - ExplicitSamples reads stored samples (samples_file.h), re-padded to the requested length.
//
// Both are immutable and thread-safe: loader threads call Materialize() concurrently on
// different rows.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/data/batch.h"
#include "common/data/category_index.h"
#include "common/data/impressions.h"
#include "common/data/samples_file.h"
#include "common/data/timeline.h"
#include "common/status.h"

namespace sift::data {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t NumSamples(Split split) const = 0;
  virtual int num_user_features() const = 0;
  virtual int num_item_features() const = 0;
  // Writes sample `index` of `split` into row `row` of `batch`, whose history shape
  // (long_len, short_len, has_long_negatives) was set by Batch::Allocate.
  // REQUIRES: 0 <= index < NumSamples(split); 0 <= row < batch->capacity; the batch was
  // allocated with this source's feature counts.
  virtual void Materialize(Split split, int64_t index, int64_t row, Batch* batch) const = 0;
  // 0-based user of a sample (its row in the user table for timelines; the stored user id - 1
  // for explicit samples).
  virtual int64_t UserOf(Split split, int64_t index) const = 0;
  // Makes Materialize serve batches with hard_search_window > 0 (builds the category index, once;
  // thread-safe). FAILED_PRECONDITION when the source cannot: no timeline, or no category.
  // Whether Materialize can serve batches with has_long_time (the events carry timestamps).
  virtual bool has_timestamps() const { return false; }
  // The most events any sample has before its target (-1: not known, e.g. stored samples).
  virtual int64_t max_history_events() const { return -1; }
  // The events sample `index` of `split` has before its target, without materialising it (-1:
  // not known). Only an ordering key (BatchLoaderOptions::group_by_history): cheap, thread-safe.
  virtual int64_t HistoryEvents(Split /*split*/, int64_t /*index*/) const { return -1; }
  virtual Status PrepareHardSearch() const {
    return absl::FailedPreconditionError(
        "hard search (model.gsu: hard) needs a timeline dataset (users.bin + events.bin): stored "
        "samples hold only their own history slots");
  }
};

struct TimelineSamplesOptions {
  int64_t train_targets_per_user = 0;  // 0 = every position (see above)
  int64_t test_events = 1;             // K >= 1; every user must have L_u >= K + 1 events
  // Labelled samples per split (both or neither); they must outlive the source.
  const ImpressionsFile* train_impressions = nullptr;
  const ImpressionsFile* test_impressions = nullptr;
};

class TimelineSamples final : public SampleSource {
 public:
  // `timeline` must outlive this object. train_targets_per_user: 0 = every position (see above).
  TimelineSamples(const Timeline* timeline, uint64_t negative_seed,
                  int64_t train_targets_per_user = 0);
  TimelineSamples(const Timeline* timeline, uint64_t negative_seed,
                  const TimelineSamplesOptions& options);

  int64_t NumSamples(Split split) const override;
  int num_user_features() const override { return timeline_->num_user_features(); }
  int num_item_features() const override { return timeline_->num_item_features(); }
  void Materialize(Split split, int64_t index, int64_t row, Batch* batch) const override;
  int64_t UserOf(Split split, int64_t index) const override;
  Status PrepareHardSearch() const override;
  bool has_timestamps() const override { return timeline_->has_timestamps(); }
  int64_t max_history_events() const override {
    return has_impressions() ? max_length_ : max_length_ - 1;
  }
  int64_t HistoryEvents(Split split, int64_t index) const override;
  // The index once PrepareHardSearch returned OK (null before).
  const CategoryIndex* category_index() const { return index_.get(); }
  int64_t train_targets_per_user() const { return train_targets_; }
  int64_t test_events() const { return test_events_; }
  // The stored samples of `split`, or null when samples are derived from the timeline.
  const ImpressionsFile* impressions(Split split) const {
    return split == Split::kTrain ? train_imp_ : split == Split::kTest ? test_imp_ : nullptr;
  }
  bool has_impressions() const { return train_imp_ != nullptr; }

  // The user and the 0-based position of the target within the user's events (with impressions:
  // the cutoff, i.e. the number of the user's events before the sample).
  void Locate(Split split, int64_t index, int64_t* user, int64_t* target_pos) const;
  uint64_t negative_seed() const { return seed_; }
  // User u's training pairs are [first_train_pair(u), first_train_pair(u + 1)); 0 <= u <= U.
  // (No pairs with impressions: every first_train_pair is 0.)
  int64_t first_train_pair(int64_t u) const { return pair_offsets_[u]; }
  int64_t num_users() const { return timeline_->num_users(); }

 private:
  const Timeline* timeline_;
  uint64_t seed_;
  int64_t train_targets_ = 0;
  int64_t test_events_ = 1;
  const ImpressionsFile* train_imp_ = nullptr;
  const ImpressionsFile* test_imp_ = nullptr;
  int64_t max_length_ = 0;  // the longest user's events
  // Built once by PrepareHardSearch.
  mutable std::once_flag index_once_;
  mutable Status index_status_;
  mutable std::unique_ptr<CategoryIndex> index_;
  std::vector<int64_t> pair_offsets_;  // [U+1]: first train pair of each user
  // Locate's shortcut: bucket_user_[k] = user of train pair k << bucket_shift_ (one entry per
  // bucket, plus U - 1 as a sentinel), so a lookup searches only between two adjacent entries.
  int bucket_shift_ = 0;
  std::vector<int64_t> bucket_user_;
};

class ExplicitSamples final : public SampleSource {
 public:
  // Either file may be null (a split with no samples). Files must outlive this object.
  ExplicitSamples(const SamplesFile* train, const SamplesFile* test);

  int64_t NumSamples(Split split) const override;
  int num_user_features() const override;
  int num_item_features() const override;
  void Materialize(Split split, int64_t index, int64_t row, Batch* batch) const override;
  int64_t UserOf(Split split, int64_t index) const override;

 private:
  const SamplesFile* file(Split s) const { return s == Split::kTrain ? train_ : test_; }
  const SamplesFile* train_;
  const SamplesFile* test_;
};

}  // namespace sift::data
