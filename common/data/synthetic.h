// The synthetic benchmark of docs/data.md section 5: a generative model of users with long-term
// interests and sessions over Zipf-popular categories and items, its exact Bayes oracle, and the
// writer behind `sift data gen` (timeline dataset + oracle/heuristic test AUCs in the metadata).
//
// Determinism: user u draws everything from its own Rng seeded with HashCombine(seed, u); users
// are generated in parallel and concatenated in user order, so the output bytes depend only on
// the options, never on the thread count. Ids inside this module are 0-based (as in 5.2); the
// written dataset adds 1 to item, category and user ids (0 = padding). SyntheticModel is immutable
// after Create and thread-safe; the free functions are thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/heuristics.h"
#include "common/data/timeline.h"
#include "common/rng.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "yaml-cpp/yaml.h"

namespace sift::data {

// Generative parameters, data.md 5.1 (names as in the table; also the metadata keys).
struct SyntheticParams {
  double a_cat = 0.9;        // Zipf exponent of category popularity w_c
  double a_cat_items = 0.9;  // Zipf exponent of items per category
  double a_item = 0.75;      // Zipf exponent of item popularity inside a category
  int64_t len_min = 20;      // L_u = min(len_cap, floor(len_min · V^(−1/len_alpha)))
  double len_alpha = 1.45;
  int64_t len_cap = 1000;
  int k_min = 3;  // K_u uniform in {k_min..k_max}
  int k_max = 8;
  double dir_alpha = 1.0;  // θ_u ~ Dirichlet(dir_alpha, ...)
  double p_switch = 0.10;
  double p_rand = 0.20;
  double p_sess = 0.60;
  double p_lt = 0.22;
  double p_noise = 0.18;
  // History window and short part used by the oracle/heuristic evaluation (the heuristics are
  // defined for exactly these; recorded in the metadata, not options).
  static constexpr int hist_max = 100;
  static constexpr int short_len = 10;
};

// Most interests a user may have (bounds SyntheticParams::k_max; the lifelong preset uses 48).
inline constexpr int kMaxInterests = 64;

// Long-tail mode (--long-tail): len_cap = 20,000 and len_alpha = 1.2 (a heavier Pareto tail), so
// about 1% of users exceed 1,000 events and 0.1% exceed 5,000 (lifelong sequences); the mean
// length grows from ≈ 56 to ≈ 90. Everything else is unchanged.
inline constexpr int64_t kLongTailLenCap = 20000;
inline constexpr double kLongTailLenAlpha = 1.2;

struct SyntheticOptions {
  std::string preset = "custom";  // recorded in the metadata
  int64_t users = 0;
  int64_t items = 0;
  int64_t categories = 0;
  uint64_t seed = 1;  // generator seed, also the dataset's negative seed
  bool long_tail = false;
  // > 0: every user's last M positions only are training targets
  // (metadata.sift.train_targets_per_user, common/data/sample_source.h); 0 = every position.
  int64_t train_targets_per_user = 0;
  SyntheticParams params;
};

// The "lifelong" preset (docs/training.md "Lifelong sequences"): 4,000 users, 5,000 items (5 per
// category: 256,000 training samples cannot train 100,000 item rows) and 1,000 categories;
// thousands of events each (len_min 1,000, len_alpha 1.45, len_cap 20,000: median ≈ 1,600, mean ≈
// 2,600) and many long-term interests (32-48, Dirichlet(2) weights: each ≈ 1/40) that carry half of
// the events (p_lt 0.5), so an interest recurs about once per 80 events: the newest 100 events miss
// about a third of the candidate's interests that the full history holds many times. Sessions
// (p_sess 0.3) switch to random categories half of the time. The last 32 positions of each user are
// its training targets (256,000 train samples).
inline constexpr int64_t kLifelongTrainTargets = 32;

// The presets of data.md section 3: "tiny", "small", "books", and "lifelong". Errors on an
// unknown name.
StatusOr<SyntheticOptions> PresetOptions(absl::string_view name);
// Switches on long-tail mode (see kLongTailLenCap); apply before a --max-events override.
void ApplyLongTail(SyntheticOptions* options);
// Checks every option (sizes, probabilities summing to 1, k_max <= categories, ...).
Status ValidateSyntheticOptions(const SyntheticOptions& options);

// Zipf weights: w_c = (c+1)^(−a) / Σ (c'+1)^(−a), c = 0..n−1 (data.md 5.2.1).
std::vector<double> ZipfWeights(int64_t n, double a);

// Item blocks of data.md 5.2.2: category c owns items [start[c], start[c] + size[c]).
struct ItemBlocks {
  std::vector<int64_t> start;
  std::vector<int64_t> size;
  int64_t leftover = 0;  // R, before it was spread over the first R categories
};
// REQUIRES: items >= categories >= 1.
StatusOr<ItemBlocks> ComputeItemBlocks(int64_t items, int64_t categories, double a_cat_items);

// A user's latent state (data.md 5.2.3).
struct SyntheticUser {
  int64_t length = 0;                             // L_u
  int k = 0;                                      // K_u
  std::array<int32_t, kMaxInterests> interest{};  // a_1..a_K (0-based categories)
  std::array<double, kMaxInterests> theta{};      // θ_1..θ_K, summing to 1
  // θ_u(c): the weight of category c, 0 when it is not an interest.
  double Theta(int32_t c) const {
    for (int j = 0; j < k; ++j) {
      if (interest[j] == c) return theta[j];
    }
    return 0.0;
  }
};

// The model's fixed tables and per-user samplers.
class SyntheticModel {
 public:
  static StatusOr<SyntheticModel> Create(const SyntheticOptions& options);

  const SyntheticOptions& options() const { return options_; }
  const std::vector<double>& category_weights() const { return w_; }  // w_c
  const ItemBlocks& blocks() const { return blocks_; }
  // The category owning item i.
  int32_t CategoryOf(int64_t item) const;
  // q(i | c(i)), data.md 5.2.2 step 6.
  double ItemProbability(int64_t item) const;

  int32_t SampleCategory(Rng* rng) const;                // ~ w
  int64_t SampleItem(int32_t category, Rng* rng) const;  // ~ q(·|c)
  // Draws L_u, K_u, A_u and θ_u, in that order (5.2.3).
  SyntheticUser DrawUser(Rng* rng) const;
  // Appends the user's L_u events (5.2.4): item, category and session category z_t, 0-based.
  void DrawEvents(const SyntheticUser& user, Rng* rng, std::vector<int32_t>* items,
                  std::vector<int32_t>* categories, std::vector<int32_t>* sessions) const;

 private:
  SyntheticModel() = default;
  int32_t SampleInterest(const SyntheticUser& user, int32_t exclude, Rng* rng) const;

  SyntheticOptions options_;
  std::vector<double> w_, w_cum_;  // weights and unnormalised cumulative weights
  ItemBlocks blocks_;
  std::vector<double> rank_cum_;  // Σ_{r' <= r} (r'+1)^(−a_item), r < max block size
};

// A generated benchmark: the timeline as written (1-based ids, user feature = u + 1, timestamp =
// t = 1..L_u) and the latent ground truth.
struct SyntheticData {
  TimelineData timeline;
  std::vector<SyntheticUser> users;      // [U]
  std::vector<int32_t> sessions;         // [E] z_t, 0-based category
  std::vector<int64_t> category_counts;  // [C] events per (0-based) category
  int64_t num_events() const { return timeline.num_events(); }
};

// Generates every user (in parallel on `pool`, null = calling thread).
SyntheticData GenerateSynthetic(const SyntheticModel& model, ThreadPool* pool);

// The oracle of data.md 5.2.6 for a candidate category c (0-based) of user u whose target is at
// 0-based position `target_pos` >= 1: P_pos/(P_pos + ĝ(c)) with z' = z at target_pos − 1.
// `strong` uses [c = z_target] instead of P_z (oracle_strong).
double OracleScore(const SyntheticModel& model, const SyntheticData& data, int64_t user,
                   int64_t target_pos, int32_t c, bool strong);

struct OracleScores {
  std::vector<double> oracle;         // [N] by sample index
  std::vector<double> oracle_strong;  // [N]
  std::vector<float> label;           // [N]
};
// Scores every sample of `split` of `dataset` (which must be the written form of `data`),
// materialised as the loader does (T = 100, T_S = 10). Fails when the dataset does not match.
StatusOr<OracleScores> ComputeOracleScores(const SyntheticModel& model, const SyntheticData& data,
                                           const Dataset& dataset, Split split, ThreadPool* pool);

// Shortest decimal text that reads back as exactly `v` (for deterministic YAML).
std::string FormatDouble(double v);
// metadata.source and metadata.synthetic (preset, seed, sizes, every 5.1 parameter, long_tail).
YAML::Node SyntheticMetadata(const SyntheticOptions& options);

struct SyntheticSummary {
  int64_t users = 0;
  int64_t events = 0;
  int64_t train_samples = 0;
  int64_t test_samples = 0;
  int64_t min_length = 0, median_length = 0, max_length = 0;
  double mean_length = 0;
  double oracle_test_auc = 0;
  double oracle_strong_test_auc = 0;
  HeuristicAucs heuristics;
  FullHistoryAucs full_history;
};

// `sift data gen`: generates, writes the timeline dataset into `dir`, computes the oracle and
// heuristic test AUCs on the written test split (the full-history ones too), and rewrites
// feature_spec.yaml (atomically) with them under metadata.{oracle_test_auc,
// oracle_strong_test_auc, heuristic_test_auc}.
StatusOr<SyntheticSummary> WriteSyntheticDataset(const SyntheticOptions& options,
                                                 const std::string& dir, ThreadPool* pool);

}  // namespace sift::data
