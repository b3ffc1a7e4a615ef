// HeldOutSamples: a validation split carved deterministically from a source's training split, for
// model selection that never looks at the test split (training.validation_fraction, README
// "Model selection").
//
// The carve, for a fraction f in (0, 0.5] and a seed:
//   - a user u is a validation user iff UnitFromHash(HashCombine(seed ^ kSalt, u)) < f — about
//     f of the users, the same set for every run with the same seed whatever the world size;
//   - timelines (TimelineSamples): a validation user's LAST training pair — its positive and the
//     label-0 twin whose target is the event just before the user's test target — moves from
//     the training split to the validation split. So validation asks what the test asks (the
//     next event of a user whose earlier events were trained on) one event earlier, and no
//     training sample has a validation target in its history (histories only look back);
//   - explicit samples (imports without a timeline): every training sample of a validation user,
//     since stored samples carry no position within their user.
// Split::kTrain is what remains (the base order, validation samples skipped), Split::kValidation
// the carved samples in base order, Split::kTest the base's test split, unchanged.
//
// Memory: the sorted validation indices (O(validation samples)); a training index maps to the
// base index by one binary search. Immutable and thread-safe like every SampleSource.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/data/sample_source.h"
#include "common/status.h"

namespace sift::data {

class HeldOutSamples final : public SampleSource {
 public:
  // The largest fraction: a validation split must leave most users' data to training.
  static constexpr double kMaxFraction = 0.5;

  // INVALID_ARGUMENT when fraction is not in (0, kMaxFraction] or the carve leaves the
  // validation or the training split empty (a dataset too small for the fraction). `base` must
  // outlive the result.
  static StatusOr<std::unique_ptr<HeldOutSamples>> Create(const SampleSource* base, double fraction,
                                                          uint64_t seed);

  int64_t NumSamples(Split split) const override;
  int num_user_features() const override { return base_->num_user_features(); }
  int num_item_features() const override { return base_->num_item_features(); }
  void Materialize(Split split, int64_t index, int64_t row, Batch* batch) const override;
  int64_t UserOf(Split split, int64_t index) const override;
  Status PrepareHardSearch() const override { return base_->PrepareHardSearch(); }
  bool has_timestamps() const override { return base_->has_timestamps(); }
  int64_t max_history_events() const override { return base_->max_history_events(); }
  int64_t HistoryEvents(Split split, int64_t index) const override;

  // The base's training index of `index` in `split` (kTrain or kValidation; kTest: `index`).
  int64_t BaseIndex(Split split, int64_t index) const;
  int64_t validation_users() const { return validation_users_; }

 private:
  HeldOutSamples(const SampleSource* base, std::vector<int64_t> validation, int64_t users);

  const SampleSource* base_;
  std::vector<int64_t> validation_;  // sorted base training indices
  // shift_[j] = validation_[j] - j (non-decreasing): training index k is base index k + j for
  // the number j of entries <= k.
  std::vector<int64_t> shift_;
  int64_t validation_users_ = 0;
};

// Whether user `user` is a validation user of the carve (fraction, seed) — the rule above.
bool IsValidationUser(int64_t user, double fraction, uint64_t seed);

}  // namespace sift::data
