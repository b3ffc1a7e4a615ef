#include "common/data/sample_source.h"

#include <algorithm>
#include <cstring>

#include "common/data/negatives.h"

namespace sift::data {

TimelineSamples::TimelineSamples(const Timeline* timeline, uint64_t negative_seed)
    : timeline_(timeline), seed_(negative_seed) {
  const int64_t U = timeline->num_users();
  pair_offsets_.resize(U + 1);
  pair_offsets_[0] = 0;
  for (int64_t u = 0; u < U; ++u) {
    pair_offsets_[u + 1] = pair_offsets_[u] + timeline->user_length(u) - 2;
  }
}

int64_t TimelineSamples::NumSamples(Split split) const {
  return split == Split::kTest ? 2 * timeline_->num_users() : 2 * pair_offsets_.back();
}

void TimelineSamples::Locate(Split split, int64_t index, int64_t* user, int64_t* target_pos) const {
  const int64_t pair = index >> 1;
  if (split == Split::kTest) {
    *user = pair;
    *target_pos = timeline_->user_length(pair) - 1;
    return;
  }
  // The last user whose first pair is <= pair (users with L = 2 own no pairs and are skipped).
  auto it = std::upper_bound(pair_offsets_.begin(), pair_offsets_.end(), pair);
  const int64_t u = (it - pair_offsets_.begin()) - 1;
  *user = u;
  *target_pos = 1 + (pair - pair_offsets_[u]);
}

int64_t TimelineSamples::UserOf(Split split, int64_t index) const {
  int64_t u, t;
  Locate(split, index, &u, &t);
  return u;
}

void TimelineSamples::Materialize(Split split, int64_t index, int64_t row, Batch* b) const {
  const Timeline& tl = *timeline_;
  const int F = tl.num_item_features();
  const int TL = b->long_len, TS = b->short_len, T = TL + TS;
  const uint64_t E = static_cast<uint64_t>(tl.num_events());
  int64_t u, t0;
  Locate(split, index, &u, &t0);
  const bool positive = (index & 1) == 0;
  const int64_t L = std::min<int64_t>(t0, T);  // valid history slots
  const int64_t first_valid = T - L;           // slots [first_valid, T) hold events
  const uint64_t ubeg = tl.user_begin(u);

  b->index[row] = index;
  b->label[row] = positive ? 1.0f : 0.0f;
  b->hist_len[row] = static_cast<int32_t>(L);
  const int32_t* uf = tl.user_features(u);
  for (int k = 0; k < tl.num_user_features(); ++k) b->User(k)[row] = uf[k];

  const uint64_t base = NegativeBase(seed_, split, index);
  const int32_t* tgt = positive ? tl.event(static_cast<int64_t>(ubeg) + t0)
                                : tl.event(static_cast<int64_t>(NegativeEvent(base, 0, E)));
  for (int f = 0; f < F; ++f) b->Target(f)[row] = tgt[f];

  // Slot j of the history holds event (ubeg + t0 - L) + (j - first_valid) when j >= first_valid.
  const int32_t* hist = tl.event(static_cast<int64_t>(ubeg) + t0 - L);
  auto fill = [&](int32_t* dst, int j0, int n, int f) {
    for (int j = 0; j < n; ++j) {
      const int64_t slot = j0 + j;
      dst[j] = slot >= first_valid ? hist[(slot - first_valid) * F + f] : 0;
    }
  };
  for (int f = 0; f < F; ++f) {
    fill(b->LongHist(f, row), 0, TL, f);
    fill(b->ShortHist(f, row), TL, TS, f);
  }
  const int32_t* lh0 = b->LongHist(0, row);
  float* lm = b->LongMask(row);
  for (int j = 0; j < TL; ++j) lm[j] = lh0[j] > 0 ? 1.0f : 0.0f;
  const int32_t* sh0 = b->ShortHist(0, row);
  float* sm = b->ShortMask(row);
  for (int j = 0; j < TS; ++j) sm[j] = sh0[j] > 0 ? 1.0f : 0.0f;

  // Negative history: one draw per valid slot, keyed by its distance from the target (T - slot).
  auto fill_neg = [&](int j0, int n, bool is_long) {
    for (int j = 0; j < n; ++j) {
      const int64_t slot = j0 + j;
      if (slot < first_valid) {
        for (int f = 0; f < F; ++f) (is_long ? b->LongNeg(f, row) : b->ShortNeg(f, row))[j] = 0;
        continue;
      }
      const int32_t* ev =
          tl.event(static_cast<int64_t>(NegativeEvent(base, static_cast<uint32_t>(T - slot), E)));
      for (int f = 0; f < F; ++f) (is_long ? b->LongNeg(f, row) : b->ShortNeg(f, row))[j] = ev[f];
    }
  };
  fill_neg(TL, TS, false);
  if (b->has_long_negatives) fill_neg(0, TL, true);
}

ExplicitSamples::ExplicitSamples(const SamplesFile* train, const SamplesFile* test)
    : train_(train), test_(test) {}

int64_t ExplicitSamples::NumSamples(Split split) const {
  const SamplesFile* f = file(split);
  return f ? f->size() : 0;
}

int ExplicitSamples::num_user_features() const {
  const SamplesFile* f = train_ ? train_ : test_;
  return f ? f->shape().user_features : 0;
}

int ExplicitSamples::num_item_features() const {
  const SamplesFile* f = train_ ? train_ : test_;
  return f ? f->shape().item_features : 0;
}

int64_t ExplicitSamples::UserOf(Split split, int64_t index) const {
  const SamplesFile* f = file(split);
  if (f->shape().user_features == 0) return 0;
  return static_cast<int64_t>(f->record(index)[2]) - 1;
}

void ExplicitSamples::Materialize(Split split, int64_t index, int64_t row, Batch* b) const {
  const SamplesFile& file_ref = *file(split);
  const SampleRecordShape& s = file_ref.shape();
  const int F = s.item_features, UF = s.user_features;
  const int64_t TS_ = s.history;  // stored slots
  const int TL = b->long_len, TS = b->short_len, T = TL + TS;
  const int32_t* r = file_ref.record(index);
  const int32_t stored_len = std::clamp<int32_t>(r[1], 0, static_cast<int32_t>(TS_));
  const int64_t L = std::min<int64_t>(stored_len, T);
  b->index[row] = index;
  b->label[row] = r[0] != 0 ? 1.0f : 0.0f;
  b->hist_len[row] = static_cast<int32_t>(L);
  for (int k = 0; k < UF; ++k) b->User(k)[row] = r[2 + k];
  const int32_t* tgt = r + 2 + UF;
  for (int f = 0; f < F; ++f) b->Target(f)[row] = tgt[f];
  const int32_t* pos = tgt + F;
  const int32_t* neg = pos + F * TS_;
  // Requested slot j (newest at T-1) maps to stored slot j + (TS_ - T); only the newest L count.
  const int64_t first_valid = T - L;
  auto copy = [&](const int32_t* src_row, int32_t* dst, int j0, int n) {
    for (int j = 0; j < n; ++j) {
      const int64_t slot = j0 + j;
      dst[j] = slot >= first_valid ? src_row[slot + (TS_ - T)] : 0;
    }
  };
  for (int f = 0; f < F; ++f) {
    copy(pos + f * TS_, b->LongHist(f, row), 0, TL);
    copy(pos + f * TS_, b->ShortHist(f, row), TL, TS);
    copy(neg + f * TS_, b->ShortNeg(f, row), TL, TS);
    if (b->has_long_negatives) copy(neg + f * TS_, b->LongNeg(f, row), 0, TL);
  }
  const int32_t* lh0 = b->LongHist(0, row);
  float* lm = b->LongMask(row);
  for (int j = 0; j < TL; ++j) lm[j] = lh0[j] > 0 ? 1.0f : 0.0f;
  const int32_t* sh0 = b->ShortHist(0, row);
  float* sm = b->ShortMask(row);
  for (int j = 0; j < TS; ++j) sm[j] = sh0[j] > 0 ? 1.0f : 0.0f;
}

}  // namespace sift::data
