#include "common/data/synthetic.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "common/auc.h"
#include "common/data/sample_source.h"
#include "common/file_util.h"
#include "common/hash.h"

namespace sift::data {
namespace {

// Users per generation task: fixed, so chunking never depends on the thread count.
constexpr int64_t kUsersPerChunk = 256;
constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;

// Index of the first cumulative weight above u·total (an inverse-CDF draw), clamped to the range.
int64_t InverseCdf(const double* cum, int64_t n, double u) {
  const double x = u * cum[n - 1];
  const int64_t i = std::upper_bound(cum, cum + n, x) - cum;
  return std::min(i, n - 1);
}

Status CheckProbability(absl::string_view name, double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be in [0, 1], got ", p));
  }
  return absl::OkStatus();
}

Status CheckNonNegative(absl::string_view name, double v) {
  if (!(v >= 0.0) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be finite and >= 0, got ", v));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<SyntheticOptions> PresetOptions(absl::string_view name) {
  SyntheticOptions o;
  o.preset = std::string(name);
  if (name == "tiny") {
    o.users = 2000, o.items = 10000, o.categories = 100;
  } else if (name == "small") {
    o.users = 20000, o.items = 200000, o.categories = 500;
  } else if (name == "books") {
    o.users = 105925, o.items = 1209081, o.categories = 2330;
  } else if (name == "lifelong") {
    o.users = 4000, o.items = 5000, o.categories = 1000;
    SyntheticParams& p = o.params;
    p.len_min = 1000, p.len_alpha = 1.45, p.len_cap = 20000;
    p.k_min = 32, p.k_max = 48, p.dir_alpha = 2.0;
    p.p_switch = 0.10, p.p_rand = 0.50;
    p.p_sess = 0.30, p.p_lt = 0.50, p.p_noise = 0.20;
    o.train_targets_per_user = kLifelongTrainTargets;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preset '", name, "' (expected tiny, small, books or lifelong)"));
  }
  return o;
}

void ApplyLongTail(SyntheticOptions* options) {
  options->long_tail = true;
  options->params.len_cap = kLongTailLenCap;
  options->params.len_alpha = kLongTailLenAlpha;
}

Status ValidateSyntheticOptions(const SyntheticOptions& o) {
  const SyntheticParams& p = o.params;
  if (o.users < 1 || o.users > kMaxId) {
    return absl::InvalidArgumentError(
        absl::StrCat("users must be in [1, ", kMaxId, "], got ", o.users));
  }
  if (o.categories < 1 || o.categories > kMaxId) {
    return absl::InvalidArgumentError(
        absl::StrCat("categories must be in [1, ", kMaxId, "], got ", o.categories));
  }
  if (o.items < 1 || o.items > kMaxId) {
    return absl::InvalidArgumentError(
        absl::StrCat("items must be in [1, ", kMaxId, "], got ", o.items));
  }
  if (o.categories > o.items) {
    return absl::InvalidArgumentError(absl::StrCat("categories (", o.categories,
                                                   ") must not exceed items (", o.items,
                                                   "): every category owns at least one item"));
  }
  if (p.k_min < 1 || p.k_max < p.k_min || p.k_max > kMaxInterests) {
    return absl::InvalidArgumentError(absl::StrCat("need 1 <= k_min <= k_max <= ", kMaxInterests,
                                                   ", got k_min = ", p.k_min,
                                                   ", k_max = ", p.k_max));
  }
  if (p.k_max > o.categories) {
    return absl::InvalidArgumentError(
        absl::StrCat("categories (", o.categories, ") must be at least k_max (", p.k_max,
                     "): a user draws up to k_max distinct interest categories"));
  }
  if (p.len_min < 2 || p.len_cap < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "len_min and len_cap (--max-events) must be >= 2 (every user needs a test target and a "
        "history), got len_min = ",
        p.len_min, ", len_cap = ", p.len_cap));
  }
  if (!(p.len_alpha > 0.0) || !std::isfinite(p.len_alpha)) {
    return absl::InvalidArgumentError(absl::StrCat("len_alpha must be > 0, got ", p.len_alpha));
  }
  if (!(p.dir_alpha > 0.0) || !std::isfinite(p.dir_alpha)) {
    return absl::InvalidArgumentError(absl::StrCat("dir_alpha must be > 0, got ", p.dir_alpha));
  }
  SIFT_RETURN_IF_ERROR(CheckNonNegative("a_cat", p.a_cat));
  SIFT_RETURN_IF_ERROR(CheckNonNegative("a_cat_items", p.a_cat_items));
  SIFT_RETURN_IF_ERROR(CheckNonNegative("a_item", p.a_item));
  SIFT_RETURN_IF_ERROR(CheckProbability("p_switch", p.p_switch));
  SIFT_RETURN_IF_ERROR(CheckProbability("p_rand", p.p_rand));
  SIFT_RETURN_IF_ERROR(CheckProbability("p_sess", p.p_sess));
  SIFT_RETURN_IF_ERROR(CheckProbability("p_lt", p.p_lt));
  SIFT_RETURN_IF_ERROR(CheckProbability("p_noise", p.p_noise));
  if (std::abs(p.p_sess + p.p_lt + p.p_noise - 1.0) > 1e-9) {
    return absl::InvalidArgumentError(
        absl::StrCat("p_sess + p_lt + p_noise must be 1, got ", p.p_sess + p.p_lt + p.p_noise));
  }
  return absl::OkStatus();
}

std::vector<double> ZipfWeights(int64_t n, double a) {
  std::vector<double> w(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c) {
    w[c] = std::pow(static_cast<double>(c + 1), -a);
    sum += w[c];
  }
  for (double& x : w) x /= sum;
  return w;
}

StatusOr<ItemBlocks> ComputeItemBlocks(int64_t items, int64_t categories, double a_cat_items) {
  if (categories < 1 || items < categories) {
    return absl::InvalidArgumentError(
        absl::StrCat("item blocks need items >= categories >= 1, got ", items, " items, ",
                     categories, " categories"));
  }
  const std::vector<double> s = ZipfWeights(categories, a_cat_items);
  ItemBlocks b;
  b.size.resize(categories);
  b.start.resize(categories);
  int64_t total = 0;
  const double spare = static_cast<double>(items - categories);
  for (int64_t c = 0; c < categories; ++c) {
    b.size[c] = 1 + static_cast<int64_t>(std::floor(spare * s[c]));
    total += b.size[c];
  }
  b.leftover = items - total;
  if (b.leftover < 0 || b.leftover >= categories) {
    return absl::InternalError(absl::StrCat("item blocks: leftover R = ", b.leftover,
                                            " outside [0, C) for I = ", items,
                                            ", C = ", categories));
  }
  for (int64_t c = 0; c < b.leftover; ++c) ++b.size[c];
  int64_t start = 0;
  for (int64_t c = 0; c < categories; ++c) {
    b.start[c] = start;
    start += b.size[c];
  }
  return b;
}

StatusOr<SyntheticModel> SyntheticModel::Create(const SyntheticOptions& options) {
  SIFT_RETURN_IF_ERROR(ValidateSyntheticOptions(options));
  SyntheticModel m;
  m.options_ = options;
  const SyntheticParams& p = options.params;
  m.w_ = ZipfWeights(options.categories, p.a_cat);
  m.w_cum_.resize(m.w_.size());
  double acc = 0.0;
  for (size_t c = 0; c < m.w_.size(); ++c) m.w_cum_[c] = acc += m.w_[c];
  SIFT_ASSIGN_OR_RETURN(m.blocks_,
                        ComputeItemBlocks(options.items, options.categories, p.a_cat_items));
  const int64_t largest = *std::max_element(m.blocks_.size.begin(), m.blocks_.size.end());
  m.rank_cum_.resize(largest);
  acc = 0.0;
  for (int64_t r = 0; r < largest; ++r) {
    m.rank_cum_[r] = acc += std::pow(static_cast<double>(r + 1), -p.a_item);
  }
  return m;
}

int32_t SyntheticModel::CategoryOf(int64_t item) const {
  const auto it = std::upper_bound(blocks_.start.begin(), blocks_.start.end(), item);
  return static_cast<int32_t>((it - blocks_.start.begin()) - 1);
}

double SyntheticModel::ItemProbability(int64_t item) const {
  const int32_t c = CategoryOf(item);
  const int64_t r = item - blocks_.start[c];
  return std::pow(static_cast<double>(r + 1), -options_.params.a_item) /
         rank_cum_[blocks_.size[c] - 1];
}

int32_t SyntheticModel::SampleCategory(Rng* rng) const {
  return static_cast<int32_t>(
      InverseCdf(w_cum_.data(), static_cast<int64_t>(w_cum_.size()), rng->Uniform()));
}

int64_t SyntheticModel::SampleItem(int32_t category, Rng* rng) const {
  return blocks_.start[category] +
         InverseCdf(rank_cum_.data(), blocks_.size[category], rng->Uniform());
}

int32_t SyntheticModel::SampleInterest(const SyntheticUser& user, int32_t exclude, Rng* rng) const {
  double total = 0.0;
  for (int j = 0; j < user.k; ++j) {
    if (user.interest[j] != exclude) total += user.theta[j];
  }
  if (!(total > 0.0)) return exclude;  // θ^ex undefined (K = 1): keep the session
  const double x = rng->Uniform() * total;
  double acc = 0.0;
  int32_t last = exclude;
  for (int j = 0; j < user.k; ++j) {
    if (user.interest[j] == exclude) continue;
    acc += user.theta[j];
    last = user.interest[j];
    if (x < acc) return last;
  }
  return last;  // rounding: x reached the total
}

SyntheticUser SyntheticModel::DrawUser(Rng* rng) const {
  const SyntheticParams& p = options_.params;
  SyntheticUser u;
  const double v = 1.0 - rng->Uniform();  // (0, 1]
  const double raw = std::floor(static_cast<double>(p.len_min) * std::pow(v, -1.0 / p.len_alpha));
  u.length = raw >= static_cast<double>(p.len_cap) ? p.len_cap : static_cast<int64_t>(raw);
  u.k = p.k_min + static_cast<int>(rng->Below(static_cast<uint64_t>(p.k_max - p.k_min + 1)));
  for (int j = 0; j < u.k; ++j) {
    int32_t c;
    do {
      c = SampleCategory(rng);
    } while (std::find(u.interest.begin(), u.interest.begin() + j, c) != u.interest.begin() + j);
    u.interest[j] = c;
  }
  double sum = 0.0;
  for (int j = 0; j < u.k; ++j) sum += u.theta[j] = rng->Gamma(p.dir_alpha);
  for (int j = 0; j < u.k; ++j) {
    u.theta[j] = sum > 0.0 ? u.theta[j] / sum : 1.0 / u.k;
  }
  return u;
}

void SyntheticModel::DrawEvents(const SyntheticUser& user, Rng* rng, std::vector<int32_t>* items,
                                std::vector<int32_t>* categories,
                                std::vector<int32_t>* sessions) const {
  const SyntheticParams& p = options_.params;
  int32_t z = SampleInterest(user, -1, rng);
  for (int64_t t = 1; t <= user.length; ++t) {
    if (t >= 2 && rng->Uniform() < p.p_switch) {
      z = rng->Uniform() < p.p_rand ? SampleCategory(rng) : SampleInterest(user, z, rng);
    }
    const double u = rng->Uniform();
    int32_t c;
    if (u < p.p_sess) {
      c = z;
    } else if (u < p.p_sess + p.p_lt) {
      c = SampleInterest(user, -1, rng);
    } else {
      c = SampleCategory(rng);
    }
    items->push_back(static_cast<int32_t>(SampleItem(c, rng)));
    categories->push_back(c);
    sessions->push_back(z);
  }
}

SyntheticData GenerateSynthetic(const SyntheticModel& model, ThreadPool* pool) {
  const SyntheticOptions& o = model.options();
  const int64_t U = o.users;
  struct Chunk {
    std::vector<int32_t> items, categories, sessions;
  };
  const int64_t num_chunks = (U + kUsersPerChunk - 1) / kUsersPerChunk;
  std::vector<Chunk> chunks(num_chunks);
  SyntheticData d;
  d.users.resize(U);
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      Chunk& out = chunks[ch];
      for (int64_t u = ch * kUsersPerChunk; u < std::min(U, (ch + 1) * kUsersPerChunk); ++u) {
        Rng rng(HashCombine(o.seed, static_cast<uint64_t>(u)));
        d.users[u] = model.DrawUser(&rng);
        model.DrawEvents(d.users[u], &rng, &out.items, &out.categories, &out.sessions);
      }
    }
  };
  if (pool == nullptr) {
    run(0, num_chunks);
  } else {
    pool->ParallelFor(num_chunks, 1, run);
  }

  TimelineData& t = d.timeline;
  t.num_item_features = 2;
  t.num_user_features = 1;
  t.user_offsets.resize(U + 1);
  t.user_features.resize(U);
  t.user_offsets[0] = 0;
  for (int64_t u = 0; u < U; ++u) {
    t.user_offsets[u + 1] = t.user_offsets[u] + static_cast<uint64_t>(d.users[u].length);
    t.user_features[u] = static_cast<int32_t>(u + 1);
  }
  const int64_t E = static_cast<int64_t>(t.user_offsets[U]);
  t.events.resize(2 * E);
  t.timestamps.resize(E);
  d.sessions.resize(E);
  d.category_counts.assign(o.categories, 0);
  int64_t e = 0;
  for (const Chunk& ch : chunks) {
    for (size_t j = 0; j < ch.items.size(); ++j, ++e) {
      t.events[2 * e] = ch.items[j] + 1;
      t.events[2 * e + 1] = ch.categories[j] + 1;
      d.sessions[e] = ch.sessions[j];
      ++d.category_counts[ch.categories[j]];
    }
  }
  for (int64_t u = 0; u < U; ++u) {
    for (uint64_t i = t.user_offsets[u]; i < t.user_offsets[u + 1]; ++i) {
      t.timestamps[i] = static_cast<int64_t>(i - t.user_offsets[u]) + 1;
    }
  }
  return d;
}

double OracleScore(const SyntheticModel& model, const SyntheticData& data, int64_t user,
                   int64_t target_pos, int32_t c, bool strong) {
  const SyntheticParams& p = model.options().params;
  const SyntheticUser& su = data.users[user];
  const uint64_t off = data.timeline.user_offsets[user];
  const int32_t z_prev = data.sessions[off + target_pos - 1];
  const double w_c = model.category_weights()[c];
  const double theta_c = su.Theta(c);
  double p_z;
  if (strong) {
    p_z = c == data.sessions[off + target_pos] ? 1.0 : 0.0;
  } else {
    // θ^ex(c) with z_{t−1} := z'; an undefined θ^ex (no other interest) keeps the session.
    double ex_total = 0.0;
    for (int j = 0; j < su.k; ++j) {
      if (su.interest[j] != z_prev) ex_total += su.theta[j];
    }
    const double same = c == z_prev ? 1.0 : 0.0;
    const double to_interest = ex_total > 0.0 ? (c != z_prev ? theta_c / ex_total : 0.0) : same;
    p_z = (1.0 - p.p_switch) * same + p.p_switch * (1.0 - p.p_rand) * to_interest +
          p.p_switch * p.p_rand * w_c;
  }
  const double p_pos = p.p_sess * p_z + p.p_lt * theta_c + p.p_noise * w_c;
  const double g =
      static_cast<double>(data.category_counts[c]) / static_cast<double>(data.num_events());
  return p_pos / (p_pos + g);
}

StatusOr<OracleScores> ComputeOracleScores(const SyntheticModel& model, const SyntheticData& data,
                                           const Dataset& dataset, Split split, ThreadPool* pool) {
  const auto* src = dynamic_cast<const TimelineSamples*>(&dataset.samples());
  const Timeline* tl = dataset.timeline();
  if (src == nullptr || tl == nullptr || tl->num_users() != data.timeline.num_users() ||
      tl->num_events() != data.num_events() || tl->num_item_features() != 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        dataset.dir(), ": not the timeline dataset written from this generator state"));
  }
  const int64_t n = src->NumSamples(split);
  const int64_t C = model.options().categories;
  OracleScores out;
  out.oracle.resize(n);
  out.oracle_strong.resize(n);
  out.label.resize(n);
  std::atomic<int64_t> bad{-1};
  HistoryOptions history;
  history.max_history = SyntheticParams::hist_max;
  history.short_history = SyntheticParams::short_len;
  ForEachSampleBatch(dataset, split, history, pool, [&](const Batch& b) {
    for (int64_t r = 0; r < b.size; ++r) {
      const int64_t i = b.index[r];
      int64_t u, pos;
      src->Locate(split, i, &u, &pos);
      const int32_t c = b.Target(1)[r] - 1;
      const bool positive = b.label[r] > 0.5f;
      const int32_t* truth =
          data.timeline.events.data() + 2 * (data.timeline.user_offsets[u] + pos);
      if (c < 0 || c >= C || pos < 1 ||
          (positive && (truth[0] != b.Target(0)[r] || truth[1] != c + 1))) {
        bad.store(i);
        continue;
      }
      out.label[i] = b.label[r];
      out.oracle[i] = OracleScore(model, data, u, pos, c, false);
      out.oracle_strong[i] = OracleScore(model, data, u, pos, c, true);
    }
  });
  if (bad.load() >= 0) {
    return absl::DataLossError(absl::StrCat(dataset.dir(), ": ", SplitName(split), " sample ",
                                            bad.load(), " does not match the generated timeline"));
  }
  return out;
}

std::string FormatDouble(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

YAML::Node SyntheticMetadata(const SyntheticOptions& o) {
  const SyntheticParams& p = o.params;
  YAML::Node m(YAML::NodeType::Map);
  m["source"] = "synthetic";
  YAML::Node s(YAML::NodeType::Map);
  s["preset"] = o.preset;
  s["seed"] = o.seed;
  s["users"] = o.users;
  s["items"] = o.items;
  s["categories"] = o.categories;
  s["a_cat"] = FormatDouble(p.a_cat);
  s["a_cat_items"] = FormatDouble(p.a_cat_items);
  s["a_item"] = FormatDouble(p.a_item);
  s["len_min"] = p.len_min;
  s["len_alpha"] = FormatDouble(p.len_alpha);
  s["len_cap"] = p.len_cap;
  s["k_min"] = p.k_min;
  s["k_max"] = p.k_max;
  s["dir_alpha"] = FormatDouble(p.dir_alpha);
  s["p_switch"] = FormatDouble(p.p_switch);
  s["p_rand"] = FormatDouble(p.p_rand);
  s["p_sess"] = FormatDouble(p.p_sess);
  s["p_lt"] = FormatDouble(p.p_lt);
  s["p_noise"] = FormatDouble(p.p_noise);
  s["hist_max"] = SyntheticParams::hist_max;
  s["short_len"] = SyntheticParams::short_len;
  s["long_tail"] = o.long_tail;
  m["synthetic"] = s;
  if (o.train_targets_per_user > 0) {
    m["sift"]["train_targets_per_user"] = o.train_targets_per_user;
  }
  return m;
}

StatusOr<SyntheticSummary> WriteSyntheticDataset(const SyntheticOptions& options,
                                                 const std::string& dir, ThreadPool* pool) {
  SIFT_ASSIGN_OR_RETURN(const SyntheticModel model, SyntheticModel::Create(options));
  const SyntheticData data = GenerateSynthetic(model, pool);
  SIFT_RETURN_IF_ERROR(WriteTimelineDataset(dir, data.timeline, {options.users},
                                            {options.items, options.categories}, options.seed,
                                            SyntheticMetadata(options), SyntheticParams::hist_max));
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(dir));

  SyntheticSummary sum;
  sum.users = options.users;
  sum.events = data.num_events();
  sum.train_samples = dataset->samples().NumSamples(Split::kTrain);
  sum.test_samples = dataset->samples().NumSamples(Split::kTest);
  std::vector<int64_t> lengths(options.users);
  for (int64_t u = 0; u < options.users; ++u) lengths[u] = data.users[u].length;
  std::sort(lengths.begin(), lengths.end());
  sum.min_length = lengths.front();
  sum.max_length = lengths.back();
  sum.median_length = lengths[lengths.size() / 2];
  sum.mean_length = static_cast<double>(sum.events) / static_cast<double>(options.users);

  SIFT_ASSIGN_OR_RETURN(const OracleScores oracle,
                        ComputeOracleScores(model, data, *dataset, Split::kTest, pool));
  sum.oracle_test_auc = ExactAuc(oracle.oracle, oracle.label);
  sum.oracle_strong_test_auc = ExactAuc(oracle.oracle_strong, oracle.label);
  SIFT_ASSIGN_OR_RETURN(sum.heuristics, ComputeHeuristicAucs(*dataset, pool, Split::kTest));
  SIFT_ASSIGN_OR_RETURN(sum.full_history, ComputeFullHistoryAucs(*dataset, pool, Split::kTest));

  FeatureSpec spec = dataset->spec();
  spec.metadata = YAML::Clone(spec.metadata);  // a Node copy would share (and edit) the original
  spec.metadata["oracle_test_auc"] = FormatDouble(sum.oracle_test_auc);
  spec.metadata["oracle_strong_test_auc"] = FormatDouble(sum.oracle_strong_test_auc);
  YAML::Node h(YAML::NodeType::Map);
  for (int k = 0; k < kNumHeuristics; ++k) {
    h[HeuristicName(static_cast<Heuristic>(k))] = FormatDouble(sum.heuristics.auc[k]);
  }
  h[kFracFullHistory] = FormatDouble(sum.full_history.frac_full_history);
  h[kMixFullHistory] = FormatDouble(sum.full_history.mix_full_history);
  spec.metadata["heuristic_test_auc"] = h;
  SIFT_RETURN_IF_ERROR(spec.Save(JoinPath(dir, kFeatureSpecFile)));
  return sum;
}

}  // namespace sift::data
