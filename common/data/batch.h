// Batch: the model's input tensors for B samples (docs/model-spec.md 1.6), host memory.
//
// Histories are left-padded (valid entries form a suffix, the newest last) and split into a long
// part (the oldest T_L = T - T_S slots) and a short part (the newest T_S slots). Id arrays are
// feature-major, so each embedding table's ids are contiguous: long_hist[f][b][j]. Ids are 1-based;
// 0 is padding. Row b of every array describes sample index[b] of the split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sift::data {

// kValidation exists only in a HeldOutSamples view (common/data/validation_split.h): samples
// carved from the training split for model selection; the dataset's own sources have none.
enum class Split { kTrain = 0, kTest = 1, kValidation = 2 };
inline const char* SplitName(Split s) {
  return s == Split::kTrain ? "train" : s == Split::kTest ? "test" : "validation";
}

struct HistoryOptions {
  int max_history = 100;        // T: history slots per sample (may exceed 100: lifelong sequences)
  int short_history = 10;       // T_S: the newest slots, fed to DIEN; long = T - T_S
  bool long_negatives = false;  // also draw negatives for the long slots (TFRecord export only)
  // Hard search (SIM's GSU `model.gsu: hard`, common/data/category_index.h): > 0 fills the long
  // slots (T_L = max_history - short_history = K) with the newest K events whose category (item
  // feature 1) equals the target's among the `hard_search_window` = N events before the short
  // part. 0: the long slots hold the newest T_L events before the short part (the reference).
  // Timelines only; not with long_negatives.
  int64_t hard_search_window = 0;
  // Time intervals (SIM's `model.time_embedding`): also write each long slot's TimeBucket of the
  // gap between the sample's time (its positive target's timestamp) and the slot's event. Needs
  // timestamps (a timeline that has them).
  bool time_buckets = false;
};

// The time-interval buckets of SIM's ESU (SIM paper 4.2): a gap g (timestamp units: the
// generator's event clock, Amazon's seconds) maps to 0 for g <= 0, else 1 + floor(log2 g),
// capped at kTimeBuckets - 1: 1 -> 1, 2..3 -> 2, 4..7 -> 3, ..., >= 2^62 -> 63.
inline constexpr int kTimeBuckets = 64;
inline int32_t TimeBucket(int64_t gap) {
  if (gap <= 0) return 0;
  const int log2 = 63 - __builtin_clzll(static_cast<unsigned long long>(gap));
  return log2 + 1 < kTimeBuckets ? log2 + 1 : kTimeBuckets - 1;
}

struct Batch {
  int64_t size = 0;      // B: rows in use (<= capacity)
  int64_t capacity = 0;  // rows allocated
  int num_user_features = 0;
  int num_item_features = 0;  // F
  int long_len = 0;           // T_L
  int short_len = 0;          // T_S
  bool has_long_negatives = false;
  int64_t hard_search_window = 0;  // HistoryOptions::hard_search_window (0 = the newest events)
  bool has_long_time = false;      // HistoryOptions::time_buckets

  std::vector<int64_t> index;  // [cap] sample index within the split
  // [cap] the row's place among the batch's samples in the epoch order: r, unless the loader
  // grouped the rows by history length (BatchLoaderOptions::group_by_history).
  std::vector<int32_t> epoch_row;
  std::vector<float> label;         // [cap] 1 or 0
  std::vector<int32_t> hist_len;    // [cap] valid history slots (short + long), <= T
  std::vector<int32_t> user;        // [UF][cap]
  std::vector<int32_t> target;      // [F][cap]
  std::vector<int32_t> long_hist;   // [F][cap][T_L]
  std::vector<int32_t> short_hist;  // [F][cap][T_S]
  std::vector<int32_t> short_neg;   // [F][cap][T_S]
  std::vector<int32_t> long_neg;    // [F][cap][T_L], only when has_long_negatives
  std::vector<int32_t>
      long_time;  // [cap][T_L] TimeBucket per long slot, -1 = padding (has_long_time)
  std::vector<float> long_mask;   // [cap][T_L] 1 where long_hist[0] > 0
  std::vector<float> short_mask;  // [cap][T_S]

  // Sizes every array for `capacity` rows. Reuses memory when already large enough.
  void Allocate(int64_t cap, int user_features, int item_features, const HistoryOptions& h) {
    capacity = cap;
    size = 0;
    num_user_features = user_features;
    num_item_features = item_features;
    short_len = h.short_history;
    long_len = h.max_history - h.short_history;
    has_long_negatives = h.long_negatives;
    hard_search_window = h.hard_search_window;
    has_long_time = h.time_buckets;
    const size_t c = static_cast<size_t>(cap), F = static_cast<size_t>(item_features);
    index.resize(c);
    epoch_row.resize(c);
    label.resize(c);
    hist_len.resize(c);
    user.resize(static_cast<size_t>(user_features) * c);
    target.resize(F * c);
    long_hist.resize(F * c * long_len);
    short_hist.resize(F * c * short_len);
    short_neg.resize(F * c * short_len);
    long_neg.resize(h.long_negatives ? F * c * long_len : 0);
    long_time.resize(h.time_buckets ? c * long_len : 0);
    long_mask.resize(c * long_len);
    short_mask.resize(c * short_len);
  }

  int32_t* User(int k) { return user.data() + static_cast<size_t>(k) * capacity; }
  int32_t* Target(int f) { return target.data() + static_cast<size_t>(f) * capacity; }
  int32_t* LongHist(int f, int64_t b) {
    return long_hist.data() + (static_cast<size_t>(f) * capacity + b) * long_len;
  }
  int32_t* ShortHist(int f, int64_t b) {
    return short_hist.data() + (static_cast<size_t>(f) * capacity + b) * short_len;
  }
  int32_t* ShortNeg(int f, int64_t b) {
    return short_neg.data() + (static_cast<size_t>(f) * capacity + b) * short_len;
  }
  int32_t* LongNeg(int f, int64_t b) {
    return long_neg.data() + (static_cast<size_t>(f) * capacity + b) * long_len;
  }
  float* LongMask(int64_t b) { return long_mask.data() + static_cast<size_t>(b) * long_len; }
  int32_t* LongTime(int64_t b) { return long_time.data() + static_cast<size_t>(b) * long_len; }
  float* ShortMask(int64_t b) { return short_mask.data() + static_cast<size_t>(b) * short_len; }

  const int32_t* User(int k) const { return const_cast<Batch*>(this)->User(k); }
  const int32_t* Target(int f) const { return const_cast<Batch*>(this)->Target(f); }
  const int32_t* LongHist(int f, int64_t b) const {
    return const_cast<Batch*>(this)->LongHist(f, b);
  }
  const int32_t* ShortHist(int f, int64_t b) const {
    return const_cast<Batch*>(this)->ShortHist(f, b);
  }
  const int32_t* ShortNeg(int f, int64_t b) const {
    return const_cast<Batch*>(this)->ShortNeg(f, b);
  }
  const int32_t* LongNeg(int f, int64_t b) const { return const_cast<Batch*>(this)->LongNeg(f, b); }
  const float* LongMask(int64_t b) const { return const_cast<Batch*>(this)->LongMask(b); }
  const int32_t* LongTime(int64_t b) const { return const_cast<Batch*>(this)->LongTime(b); }
  const float* ShortMask(int64_t b) const { return const_cast<Batch*>(this)->ShortMask(b); }
};

}  // namespace sift::data
