#include "common/data/validation_split.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace sift::data {

namespace {
constexpr uint64_t kSalt = 0x7a11da7e5eedull;  // keeps the carve apart from other seeded draws
}  // namespace

bool IsValidationUser(int64_t user, double fraction, uint64_t seed) {
  return UnitFromHash(HashCombine(seed ^ kSalt, static_cast<uint64_t>(user))) < fraction;
}

StatusOr<std::unique_ptr<HeldOutSamples>> HeldOutSamples::Create(const SampleSource* base,
                                                                 double fraction, uint64_t seed) {
  if (!(fraction > 0 && fraction <= kMaxFraction)) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation_fraction must be in (0, ", kMaxFraction, "], got ", fraction));
  }
  std::vector<int64_t> validation;
  int64_t users = 0;
  const auto* t = dynamic_cast<const TimelineSamples*>(base);
  if (t != nullptr && !t->has_impressions()) {
    // The last training pair of each validation user that owns at least two (so it keeps one).
    for (int64_t u = 0; u < t->num_users(); ++u) {
      const int64_t begin = t->first_train_pair(u), end = t->first_train_pair(u + 1);
      if (end - begin < 2 || !IsValidationUser(u, fraction, seed)) continue;
      validation.push_back(2 * (end - 1));
      validation.push_back(2 * (end - 1) + 1);
      ++users;
    }
  } else {
    // Stored samples: every sample of a validation user; without a user feature (every sample
    // reads user 0) the rule applies to the sample index instead.
    const int64_t n = base->NumSamples(Split::kTrain);
    const bool by_user = base->num_user_features() > 0;
    int64_t last_user = -1;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t key = by_user ? base->UserOf(Split::kTrain, i) : i;
      if (!IsValidationUser(key, fraction, seed)) continue;
      validation.push_back(i);
      if (key != last_user) ++users, last_user = key;  // counts runs: exact for user-major files
    }
  }
  const int64_t train = base->NumSamples(Split::kTrain) - static_cast<int64_t>(validation.size());
  if (validation.empty() || train <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation_fraction ", fraction, " carves ", validation.size(), " of the ",
        base->NumSamples(Split::kTrain),
        " training samples: the validation and the training split must both be non-empty"));
  }
  return std::unique_ptr<HeldOutSamples>(new HeldOutSamples(base, std::move(validation), users));
}

HeldOutSamples::HeldOutSamples(const SampleSource* base, std::vector<int64_t> validation,
                               int64_t users)
    : base_(base), validation_(std::move(validation)), validation_users_(users) {
  shift_.resize(validation_.size());
  for (size_t j = 0; j < validation_.size(); ++j) {
    shift_[j] = validation_[j] - static_cast<int64_t>(j);
  }
}

int64_t HeldOutSamples::NumSamples(Split split) const {
  switch (split) {
    case Split::kTrain:
      return base_->NumSamples(Split::kTrain) - static_cast<int64_t>(validation_.size());
    case Split::kValidation:
      return static_cast<int64_t>(validation_.size());
    case Split::kTest:
      return base_->NumSamples(Split::kTest);
  }
  return 0;
}

int64_t HeldOutSamples::BaseIndex(Split split, int64_t index) const {
  if (split == Split::kValidation) return validation_[index];
  if (split == Split::kTest) return index;
  const int64_t j = std::upper_bound(shift_.begin(), shift_.end(), index) - shift_.begin();
  return index + j;
}

namespace {
// The base's split that holds `split`'s samples: validation comes out of the training split.
Split BaseSplit(Split split) { return split == Split::kTest ? Split::kTest : Split::kTrain; }
}  // namespace

void HeldOutSamples::Materialize(Split split, int64_t index, int64_t row, Batch* batch) const {
  base_->Materialize(BaseSplit(split), BaseIndex(split, index), row, batch);
}

int64_t HeldOutSamples::HistoryEvents(Split split, int64_t index) const {
  return base_->HistoryEvents(BaseSplit(split), BaseIndex(split, index));
}

int64_t HeldOutSamples::UserOf(Split split, int64_t index) const {
  return base_->UserOf(BaseSplit(split), BaseIndex(split, index));
}

}  // namespace sift::data
