// Heuristic baselines of docs/data.md 5.2.7, scored on the samples of any opened Dataset exactly as
// the loader materialises them (Materialize with T = 100, T_S = 10), and their pooled exact AUCs.
//
// Popularity (pop_item, and ĝ used by pop_cat and the smoothed scores) comes from the timeline's
// events when the dataset has one; for an explicit-samples dataset (no timeline) it comes from the
// label-1 targets of the train split (the only unbiased record of interactions it holds).
// Category = item feature 1. Empty parts score 0: frac_short10 with |S| = 0, frac_long90 with
// |Lg| = 0, frac_all100 with no history. Functions are thread-safe; the Dataset must outlive calls.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/data/batch.h"
#include "common/data/dataset.h"
#include "common/status.h"
#include "common/thread_pool.h"

namespace sift::data {

enum Heuristic : int {
  kPopItem = 0,
  kPopCat,
  kFracShort10,
  kFracAll100,
  kFracLong90,
  kSmoothRecency,  // β = 2, α = 1
  kSmoothAll100,   // β = 0, α = 1
  kSmoothShort10,  // short slots only, α = 1
  kNumHeuristics
};
// Metadata key of each heuristic ("pop_item", ...).
const char* HeuristicName(Heuristic h);

struct HeuristicAucs {
  int64_t samples = 0;
  std::array<double, kNumHeuristics> auc{};  // indexed by Heuristic
  double pop_item() const { return auc[kPopItem]; }
  double frac_short10() const { return auc[kFracShort10]; }
  double frac_all100() const { return auc[kFracAll100]; }
  double smooth_recency() const { return auc[kSmoothRecency]; }
};

// Interaction counts of items and categories (ids as stored, 1-based; index 0 unused).
struct Popularity {
  std::vector<int64_t> item_count;
  std::vector<int64_t> category_count;
  int64_t total = 0;  // events (or train positives) counted
  int64_t Item(int64_t id) const {
    return id >= 0 && id < static_cast<int64_t>(item_count.size()) ? item_count[id] : 0;
  }
  // ĝ(c): the category's share of all counted interactions.
  double CategoryFreq(int64_t id) const {
    const int64_t n =
        id >= 0 && id < static_cast<int64_t>(category_count.size()) ? category_count[id] : 0;
    return total > 0 ? static_cast<double>(n) / static_cast<double>(total) : 0.0;
  }
};

// Counts from the timeline, or from the train split's positive targets (see above).
// Fails when the dataset has fewer than 2 item features or negative ids.
StatusOr<Popularity> ComputePopularity(const Dataset& dataset);

// The heuristic scores of row `row` of a materialised batch (category = item feature 1).
std::array<double, kNumHeuristics> ScoreHeuristics(const Batch& batch, int64_t row,
                                                   const Popularity& pop);

// Materialises every sample of `split` with `history`, in parallel chunks of `chunk` samples on
// `pool` (null: the calling thread), calling fn(batch) for each chunk; batch.index[b] is the
// sample index of row b. fn must be thread-safe across chunks.
void ForEachSampleBatch(const Dataset& dataset, Split split, const HistoryOptions& history,
                        ThreadPool* pool, const std::function<void(const Batch&)>& fn,
                        int64_t chunk = 4096);

// Every heuristic's pooled AUC over `split` (default the test split).
StatusOr<HeuristicAucs> ComputeHeuristicAucs(const Dataset& dataset, ThreadPool* pool,
                                             Split split = Split::kTest);

// Heuristics over the user's FULL history (every event before the target, not 100 slots): the
// headroom a lifelong model can reach for, measured before any model runs (docs/training.md
// "Lifelong sequences"). With m_A = events before the target whose category is the candidate's, |A|
// = events before the target:
//   frac_full_history  = Smoothed(m_A, |A|, ĝ) (α = 1, as smooth_all100 over every event);
//   mix_full_history   = ½ (smooth_recency + frac_full_history): the 100-slot recency score and
//                        the full-history interest, equally weighted.
struct FullHistoryAucs {
  int64_t samples = 0;
  double frac_full_history = 0;
  double mix_full_history = 0;
};
inline constexpr char kFracFullHistory[] = "frac_full_history";
inline constexpr char kMixFullHistory[] = "mix_full_history";
// FAILED_PRECONDITION without a timeline (stored samples hold only their own slots).
StatusOr<FullHistoryAucs> ComputeFullHistoryAucs(const Dataset& dataset, ThreadPool* pool,
                                                 Split split = Split::kTest);

}  // namespace sift::data
