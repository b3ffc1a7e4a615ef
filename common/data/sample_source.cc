#include "common/data/sample_source.h"

#include <algorithm>
#include <cstring>

#include "common/data/negatives.h"
#include "common/thread_pool.h"

namespace sift::data {

TimelineSamples::TimelineSamples(const Timeline* timeline, uint64_t negative_seed,
                                 int64_t train_targets_per_user)
    : TimelineSamples(timeline, negative_seed,
                      TimelineSamplesOptions{train_targets_per_user, 1, nullptr, nullptr}) {}

TimelineSamples::TimelineSamples(const Timeline* timeline, uint64_t negative_seed,
                                 const TimelineSamplesOptions& options)
    : timeline_(timeline),
      seed_(negative_seed),
      train_targets_(options.train_targets_per_user),
      test_events_(std::max<int64_t>(options.test_events, 1)),
      train_imp_(options.train_impressions),
      test_imp_(options.test_impressions) {
  const int64_t U = timeline->num_users();
  pair_offsets_.resize(U + 1);
  pair_offsets_[0] = 0;
  for (int64_t u = 0; u < U; ++u) {
    max_length_ = std::max(max_length_, timeline->user_length(u));
    int64_t pairs =
        has_impressions() ? 0 : std::max<int64_t>(timeline->user_length(u) - 1 - test_events_, 0);
    if (train_targets_ > 0) pairs = std::min(pairs, train_targets_);
    pair_offsets_[u + 1] = pair_offsets_[u] + pairs;
  }
  // About one bucket per user: a power of two near the mean number of pairs per user.
  const int64_t pairs = pair_offsets_.back();
  while (bucket_shift_ < 40 && (int64_t{2} << bucket_shift_) * std::max<int64_t>(U, 1) <= pairs) {
    ++bucket_shift_;
  }
  const int64_t buckets = (pairs >> bucket_shift_) + 1;
  bucket_user_.resize(static_cast<size_t>(buckets + 1));
  int64_t u = 0;
  for (int64_t k = 0; k < buckets; ++k) {
    const int64_t pair = k << bucket_shift_;
    // The last user whose first pair is <= pair (skipping users that own no pairs).
    while (u + 1 < U && pair_offsets_[u + 1] <= pair) ++u;
    bucket_user_[k] = u;
  }
  bucket_user_[buckets] = std::max<int64_t>(U - 1, 0);
}

int64_t TimelineSamples::NumSamples(Split split) const {
  if (split == Split::kValidation) return 0;
  if (has_impressions()) return impressions(split)->size();
  return split == Split::kTest ? 2 * timeline_->num_users() * test_events_
                               : 2 * pair_offsets_.back();
}

void TimelineSamples::Locate(Split split, int64_t index, int64_t* user, int64_t* target_pos) const {
  if (const ImpressionsFile* imp = impressions(split)) {
    *user = imp->user(index);
    *target_pos = imp->cutoff(index);
    return;
  }
  const int64_t pair = index >> 1;
  if (split == Split::kTest) {
    const int64_t u = pair / test_events_;
    *user = u;
    *target_pos = timeline_->user_length(u) - test_events_ + pair % test_events_;
    return;
  }
  // The last user whose first pair is <= pair (users with L = 2 own no pairs and are skipped):
  // between the users of this bucket's first pair and of the next bucket's first pair.
  const int64_t k = pair >> bucket_shift_;
  const int64_t lo = bucket_user_[k], hi = bucket_user_[k + 1];
  auto it = std::upper_bound(pair_offsets_.begin() + lo + 1, pair_offsets_.begin() + hi + 1, pair);
  const int64_t u = (it - pair_offsets_.begin()) - 1;
  *user = u;
  // The user's pairs are its last ones: targets end at position L_u - 1 - K (0-based).
  const int64_t pairs = pair_offsets_[u + 1] - pair_offsets_[u];
  *target_pos = (timeline_->user_length(u) - test_events_ - pairs) + (pair - pair_offsets_[u]);
}

int64_t TimelineSamples::HistoryEvents(Split split, int64_t index) const {
  int64_t user = 0, target_pos = 0;
  Locate(split, index, &user, &target_pos);
  return target_pos;  // the user's events before the target
}

Status TimelineSamples::PrepareHardSearch() const {
  std::call_once(index_once_, [this] {
    ThreadPool pool(0);
    auto index = CategoryIndex::Build(timeline_, &pool);
    if (index.ok()) {
      index_ = std::move(index).value();
    } else {
      index_status_ = index.status();
    }
  });
  return index_status_;
}

int64_t TimelineSamples::UserOf(Split split, int64_t index) const {
  int64_t u, t;
  Locate(split, index, &u, &t);
  return u;
}

namespace {

// Negative draws computed (and their events prefetched) ahead of use, in blocks of this many.
constexpr int kNegativeBlock = 32;

// dst[j] for slots s0 + j, j < s1 - s0, of a left-padded history whose slot `first_valid` holds
// src[0] and whose later slots follow with a stride of `stride` ints; earlier slots are 0.
// kStride > 0 fixes the stride at compile time (F = 2 is the common case).
template <int kStride>
inline void CopyPadded(const int32_t* src, int dyn_stride, int64_t first_valid, int64_t s0,
                       int64_t s1, int32_t* dst) {
  const int64_t stride = kStride > 0 ? kStride : dyn_stride;
  const int64_t pad_end = std::clamp(first_valid, s0, s1);
  if (pad_end > s0) std::memset(dst, 0, static_cast<size_t>(pad_end - s0) * sizeof(int32_t));
  const int32_t* in = src + (pad_end - first_valid) * stride;
  int32_t* out = dst + (pad_end - s0);
  const int64_t n = s1 - pad_end;
  if (stride == 1) {
    if (n > 0) std::memcpy(out, in, static_cast<size_t>(n) * sizeof(int32_t));
    return;
  }
  for (int64_t j = 0; j < n; ++j) out[j] = in[j * stride];
}

// mask[j] = ids[j] > 0 ? 1 : 0 for the slots [s0, s1) of a history written by CopyPadded, whose
// slots before `first_valid` are known to be 0 (cleared without looking).
inline void FillMask(const int32_t* ids, int64_t first_valid, int64_t s0, int64_t s1, float* mask) {
  const int64_t pad = std::clamp(first_valid, s0, s1) - s0, n = s1 - s0;
  if (pad > 0) std::memset(mask, 0, static_cast<size_t>(pad) * sizeof(float));
  for (int64_t j = pad; j < n; ++j) mask[j] = static_cast<float>(ids[j] > 0);
}

// The events of the negative draws for slots [s0, s1) (keys T - slot), prefetched.
inline void DrawNegatives(const int32_t* events, int F, uint64_t E, uint64_t base, int64_t T,
                          int64_t s0, int64_t s1, const int32_t** out) {
  for (int64_t s = s0; s < s1; ++s) {
    const int32_t* ev =
        events + NegativeEvent(base, static_cast<uint32_t>(T - s), E) * static_cast<uint64_t>(F);
    __builtin_prefetch(ev);
    out[s - s0] = ev;
  }
}

// Writes the negative history of slots [a, b) into dst(f) + (slot - a): zeros before
// `first_valid`, then one draw per slot. `first_block` holds the draws of the first
// min(kNegativeBlock, b - max(a, first_valid)) valid slots when non-null.
template <int kF, typename Dst>
void FillNegatives(const int32_t* events, int dyn_F, uint64_t E, uint64_t base, int64_t T,
                   int64_t first_valid, int64_t a, int64_t b, const int32_t* const* first_block,
                   Dst dst) {
  const int F = kF > 0 ? kF : dyn_F;
  const int64_t v0 = std::clamp(first_valid, a, b);
  if (v0 > a) {
    for (int f = 0; f < F; ++f) std::memset(dst(f), 0, static_cast<size_t>(v0 - a) * 4);
  }
  const int32_t* block[kNegativeBlock];
  for (int64_t s = v0; s < b; s += kNegativeBlock) {
    const int64_t n = std::min<int64_t>(kNegativeBlock, b - s);
    const int32_t* const* ev = block;
    if (s == v0 && first_block != nullptr) {
      ev = first_block;
    } else {
      DrawNegatives(events, F, E, base, T, s, s + n, block);
    }
    for (int f = 0; f < F; ++f) {
      int32_t* out = dst(f) + (s - a);
      for (int64_t k = 0; k < n; ++k) out[k] = ev[k][f];
    }
  }
}

// TimelineSamples::Materialize with the item feature count fixed at compile time when kF > 0.
template <int kF>
void MaterializeTimelineRow(const TimelineSamples& src, const Timeline& tl, Split split,
                            int64_t index, int64_t row, Batch* b) {
  const int F = kF > 0 ? kF : tl.num_item_features();
  const int64_t TL = b->long_len, TS = b->short_len, T = TL + TS;
  const uint64_t E = static_cast<uint64_t>(tl.num_events());
  const int32_t* events = tl.events();
  int64_t u, t0;
  src.Locate(split, index, &u, &t0);
  const ImpressionsFile* imp = src.impressions(split);
  const bool positive = imp ? imp->label(index) != 0 : (index & 1) == 0;
  // Hard search: only the short slots hold the newest events; the long slots are searched.
  const bool hard = b->hard_search_window > 0;
  const int64_t L = std::min<int64_t>(t0, hard ? TS : T);  // history slots copied in time order
  const int64_t first_valid = T - L;                       // slots [first_valid, T) hold events
  const int64_t ubeg = static_cast<int64_t>(tl.user_begin(u));
  // Slot first_valid holds event ubeg + t0 - L; the following slots the following events.
  const int32_t* hist = tl.event(ubeg + t0 - L);
  __builtin_prefetch(hist);

  // Start the random reads first (negative target and short negatives) so that they arrive
  // while the history is copied.
  const uint64_t base = NegativeBase(src.negative_seed(), split, index);
  const int32_t* tgt;
  if (imp != nullptr) {
    tgt = imp->target(index);
  } else if (positive) {
    tgt = tl.event(ubeg + t0);
  } else {
    tgt = events + NegativeEvent(base, 0, E) * static_cast<uint64_t>(F);
    __builtin_prefetch(tgt);
  }
  // The time the long slots' time buckets count back from: the target's (the sample's, with
  // impressions; a label-0 twin shares its positive's).
  const int64_t target_time = !b->has_long_time ? 0
                              : imp             ? imp->time(index)
                                                : tl.timestamps()[ubeg + t0];
  const int64_t short_v0 = std::clamp(first_valid, TL, T);
  const int32_t* short_block[kNegativeBlock];
  DrawNegatives(events, F, E, base, T, short_v0, std::min(T, short_v0 + kNegativeBlock),
                short_block);

  b->index[row] = index;
  b->label[row] = positive ? 1.0f : 0.0f;
  const int32_t* uf = tl.user_features(u);
  for (int k = 0; k < tl.num_user_features(); ++k) b->User(k)[row] = uf[k];

  int64_t long_valid = 0;
  if (hard) {
    // The newest TL events of the target's category among the N before the short part, oldest
    // first in slots [TL - n, TL).
    const int64_t hi = t0 - L, lo = std::max<int64_t>(0, hi - b->hard_search_window);
    thread_local std::vector<uint32_t> found;
    found.resize(static_cast<size_t>(TL));
    long_valid = src.category_index()->Search(u, tgt[1], lo, hi, TL, found.data());
    const int64_t pad = TL - long_valid;
    for (int f = 0; f < F; ++f) {
      int32_t* out = b->LongHist(f, row);
      std::memset(out, 0, static_cast<size_t>(pad) * sizeof(int32_t));
      for (int64_t j = 0; j < long_valid; ++j) out[pad + j] = tl.event(ubeg + found[j])[f];
    }
    float* mask = b->LongMask(row);
    std::fill_n(mask, pad, 0.0f);
    std::fill_n(mask + pad, long_valid, 1.0f);
    if (b->has_long_time) {
      const int64_t* ts = tl.timestamps() + ubeg;
      int32_t* out = b->LongTime(row);
      std::fill_n(out, pad, -1);
      for (int64_t j = 0; j < long_valid; ++j)
        out[pad + j] = TimeBucket(target_time - ts[found[j]]);
    }
    for (int f = 0; f < F; ++f) {
      CopyPadded<kF>(hist + f, F, first_valid, TL, T, b->ShortHist(f, row));
    }
  } else {
    for (int f = 0; f < F; ++f) {
      CopyPadded<kF>(hist + f, F, first_valid, 0, TL, b->LongHist(f, row));
      CopyPadded<kF>(hist + f, F, first_valid, TL, T, b->ShortHist(f, row));
    }
    FillMask(b->LongHist(0, row), first_valid, 0, TL, b->LongMask(row));
    if (b->has_long_time) {
      // Slot j >= first_valid holds the event at position t0 - L + (j - first_valid).
      const int64_t* ts = tl.timestamps() + ubeg;
      int32_t* out = b->LongTime(row);
      const int64_t v0 = std::min<int64_t>(first_valid, TL);
      std::fill_n(out, v0, -1);
      for (int64_t j = v0; j < TL; ++j) {
        out[j] = TimeBucket(target_time - ts[t0 - L + (j - first_valid)]);
      }
    }
  }
  FillMask(b->ShortHist(0, row), first_valid, TL, T, b->ShortMask(row));
  b->hist_len[row] = static_cast<int32_t>(hard ? L + long_valid : L);

  for (int f = 0; f < F; ++f) b->Target(f)[row] = tgt[f];
  // Negative history: one draw per valid slot, keyed by its distance from the target (T - slot).
  FillNegatives<kF>(events, F, E, base, T, first_valid, TL, T, short_block,
                    [b, row](int f) { return b->ShortNeg(f, row); });
  if (b->has_long_negatives) {
    FillNegatives<kF>(events, F, E, base, T, first_valid, 0, TL, nullptr,
                      [b, row](int f) { return b->LongNeg(f, row); });
  }
}

}  // namespace

void TimelineSamples::Materialize(Split split, int64_t index, int64_t row, Batch* b) const {
  if (timeline_->num_item_features() == 2) {
    MaterializeTimelineRow<2>(*this, *timeline_, split, index, row, b);
  } else {
    MaterializeTimelineRow<0>(*this, *timeline_, split, index, row, b);
  }
}

ExplicitSamples::ExplicitSamples(const SamplesFile* train, const SamplesFile* test)
    : train_(train), test_(test) {}

int64_t ExplicitSamples::NumSamples(Split split) const {
  if (split == Split::kValidation) return 0;
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
  // Requested slot j (newest at T-1) maps to stored slot j + (TS_ - T); only the newest L count,
  // so the first valid requested slot T - L reads stored slot TS_ - L.
  const int64_t first_valid = T - L;
  const int64_t src_offset = TS_ - L;
  for (int f = 0; f < F; ++f) {
    const int32_t* p = pos + f * TS_ + src_offset;
    const int32_t* q = neg + f * TS_ + src_offset;
    CopyPadded<1>(p, 1, first_valid, 0, TL, b->LongHist(f, row));
    CopyPadded<1>(p, 1, first_valid, TL, T, b->ShortHist(f, row));
    CopyPadded<1>(q, 1, first_valid, TL, T, b->ShortNeg(f, row));
    if (b->has_long_negatives) CopyPadded<1>(q, 1, first_valid, 0, TL, b->LongNeg(f, row));
  }
  FillMask(b->LongHist(0, row), first_valid, 0, TL, b->LongMask(row));
  FillMask(b->ShortHist(0, row), first_valid, TL, T, b->ShortMask(row));
}

}  // namespace sift::data
