// The synthetic generator (docs/data.md 5.2): model pieces, per-user draws, determinism, sample
// counts, the written metadata, and the oracle's calibration on train pairs.
#include "common/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "common/auc.h"
#include "common/file_util.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

SyntheticOptions Tiny() {
  auto o = PresetOptions("tiny");
  EXPECT_TRUE(o.ok()) << o.status();
  return *o;
}

TEST(SyntheticTest, Presets) {
  for (const auto& [name, u, i, c] :
       std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>>{
           {"tiny", 2000, 10000, 100},
           {"small", 20000, 200000, 500},
           {"books", 105925, 1209081, 2330}}) {
    auto o = PresetOptions(name);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->users, u);
    EXPECT_EQ(o->items, i);
    EXPECT_EQ(o->categories, c);
    EXPECT_EQ(o->preset, name);
    EXPECT_TRUE(ValidateSyntheticOptions(*o).ok());
  }
  EXPECT_FALSE(PresetOptions("huge").ok());
}

TEST(SyntheticTest, ValidationRejectsBadOptions) {
  auto expect_error = [](SyntheticOptions o, const std::string& fragment) {
    Status s = ValidateSyntheticOptions(o);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  };
  SyntheticOptions o = Tiny();
  o.users = 0;
  expect_error(o, "users");
  o = Tiny();
  o.categories = o.items + 1;
  expect_error(o, "must not exceed items");
  o = Tiny();
  o.categories = 5;  // < k_max = 8
  expect_error(o, "k_max");
  o = Tiny();
  o.params.len_cap = 1;
  expect_error(o, "len_cap");
  o = Tiny();
  o.params.p_lt = 0.3;  // p_sess + p_lt + p_noise != 1
  expect_error(o, "must be 1");
  o = Tiny();
  o.params.p_switch = 1.5;
  expect_error(o, "p_switch");
  o = Tiny();
  o.params.dir_alpha = 0;
  expect_error(o, "dir_alpha");
}

TEST(SyntheticTest, ZipfWeightsAreNormalisedAndDecreasing) {
  const std::vector<double> w = ZipfWeights(500, 0.9);
  EXPECT_NEAR(std::accumulate(w.begin(), w.end(), 0.0), 1.0, 1e-12);
  for (size_t c = 1; c < w.size(); ++c) EXPECT_LT(w[c], w[c - 1]);
  EXPECT_NEAR(w[0] / w[9], std::pow(10.0, 0.9), 1e-9);
}

TEST(SyntheticTest, ItemBlocksCoverAllItems) {
  for (const auto& [items, cats] : std::vector<std::pair<int64_t, int64_t>>{
           {10000, 100}, {200000, 500}, {1209081, 2330}, {7, 7}, {8, 7}, {12345, 77}}) {
    auto b = ComputeItemBlocks(items, cats, 0.9);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_GE(b->leftover, 0);
    EXPECT_LT(b->leftover, cats);
    EXPECT_EQ(std::accumulate(b->size.begin(), b->size.end(), int64_t{0}), items);
    int64_t start = 0;
    for (int64_t c = 0; c < cats; ++c) {
      EXPECT_EQ(b->start[c], start);
      EXPECT_GE(b->size[c], 1);
      if (c > 0) {
        EXPECT_LE(b->size[c], b->size[c - 1]);
      }
      start += b->size[c];
    }
  }
  // n_c = 1 + floor((I − C)·s_c) by hand for I = 10, C = 2, a = 1: s = (2/3, 1/3) -> 6 + 3 = 9,
  // R = 1 goes to category 0.
  auto b = ComputeItemBlocks(10, 2, 1.0);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->leftover, 1);
  EXPECT_EQ(b->size, (std::vector<int64_t>{7, 3}));
  EXPECT_FALSE(ComputeItemBlocks(5, 6, 0.9).ok());
}

TEST(SyntheticTest, InCategoryPopularityIsNormalised) {
  auto m = SyntheticModel::Create(Tiny());
  ASSERT_TRUE(m.ok()) << m.status();
  const ItemBlocks& b = m->blocks();
  for (int64_t c = 0; c < Tiny().categories; ++c) {
    double sum = 0;
    for (int64_t i = b.start[c]; i < b.start[c] + b.size[c]; ++i) {
      EXPECT_EQ(m->CategoryOf(i), c);
      sum += m->ItemProbability(i);
    }
    EXPECT_NEAR(sum, 1.0, 1e-9) << "category " << c;
    // q(r) ∝ (r+1)^−0.75: the top item over the second.
    if (b.size[c] >= 2) {
      EXPECT_NEAR(m->ItemProbability(b.start[c]) / m->ItemProbability(b.start[c] + 1),
                  std::pow(2.0, 0.75), 1e-9);
    }
  }
}

TEST(SyntheticTest, SampledItemsFollowQ) {
  auto m = SyntheticModel::Create(Tiny());
  ASSERT_TRUE(m.ok());
  Rng rng(7);
  const int n = 200000;
  int top = 0;
  for (int k = 0; k < n; ++k) {
    const int64_t i = m->SampleItem(3, &rng);
    ASSERT_EQ(m->CategoryOf(i), 3);
    top += i == m->blocks().start[3];
  }
  const double p = m->ItemProbability(m->blocks().start[3]);
  EXPECT_NEAR(static_cast<double>(top) / n, p, 5 * std::sqrt(p * (1 - p) / n));
}

TEST(SyntheticTest, UsersRespectTheirDistributions) {
  auto m = SyntheticModel::Create(Tiny());
  ASSERT_TRUE(m.ok());
  const SyntheticParams& p = m->options().params;
  Rng rng(11);
  const int n = 100000;
  int at_least_40 = 0, first_is_top = 0;
  double k_sum = 0;
  for (int j = 0; j < n; ++j) {
    const SyntheticUser u = m->DrawUser(&rng);
    ASSERT_GE(u.length, p.len_min);
    ASSERT_LE(u.length, p.len_cap);
    ASSERT_GE(u.k, p.k_min);
    ASSERT_LE(u.k, p.k_max);
    const std::set<int32_t> distinct(u.interest.begin(), u.interest.begin() + u.k);
    ASSERT_EQ(static_cast<int>(distinct.size()), u.k);
    double sum = 0;
    for (int k = 0; k < u.k; ++k) {
      ASSERT_GT(u.theta[k], 0.0);
      sum += u.theta[k];
      EXPECT_EQ(u.Theta(u.interest[k]), u.theta[k]);
    }
    ASSERT_NEAR(sum, 1.0, 1e-12);
    at_least_40 += u.length >= 40;
    first_is_top += u.interest[0] == 0;
    k_sum += u.k;
  }
  // P(L >= 40) = (20/40)^1.45; the first interest ~ w; K uniform on {3..8}.
  const double p40 = std::pow(0.5, 1.45), w0 = m->category_weights()[0];
  EXPECT_NEAR(static_cast<double>(at_least_40) / n, p40, 5 * std::sqrt(p40 * (1 - p40) / n));
  EXPECT_NEAR(static_cast<double>(first_is_top) / n, w0, 5 * std::sqrt(w0 * (1 - w0) / n));
  EXPECT_NEAR(k_sum / n, 5.5, 0.03);
}

TEST(SyntheticTest, LengthCapAndLongTail) {
  SyntheticOptions o = Tiny();
  o.params.len_cap = 25;
  auto m = SyntheticModel::Create(o);
  ASSERT_TRUE(m.ok());
  Rng rng(3);
  int capped = 0;
  for (int j = 0; j < 10000; ++j) {
    const int64_t len = m->DrawUser(&rng).length;
    ASSERT_GE(len, 20);
    ASSERT_LE(len, 25);
    capped += len == 25;
  }
  EXPECT_GT(capped, 10000 * 0.6);  // P(L >= 25) = 0.8^1.45 ≈ 0.72

  o = Tiny();
  ApplyLongTail(&o);
  EXPECT_TRUE(o.long_tail);
  EXPECT_EQ(o.params.len_cap, kLongTailLenCap);
  auto lt = SyntheticModel::Create(o);
  ASSERT_TRUE(lt.ok());
  const SyntheticData d = GenerateSynthetic(*lt, nullptr);
  int64_t longest = 0;
  for (const auto& u : d.users) longest = std::max(longest, u.length);
  EXPECT_GT(longest, 2000);
  EXPECT_LE(longest, kLongTailLenCap);
}

TEST(SyntheticTest, SessionsSwitchAtTheSpecifiedRate) {
  auto m = SyntheticModel::Create(Tiny());
  ASSERT_TRUE(m.ok());
  const SyntheticData d = GenerateSynthetic(*m, nullptr);
  const auto& off = d.timeline.user_offsets;
  int64_t changes = 0, steps = 0;
  for (size_t u = 0; u + 1 < off.size(); ++u) {
    for (uint64_t e = off[u] + 1; e < off[u + 1]; ++e) {
      changes += d.sessions[e] != d.sessions[e - 1];
      ++steps;
    }
  }
  // A switch always changes an interest session (θ^ex excludes z) and changes a random one
  // unless it redraws z: rate = p_switch·(1 − p_rand·E[w_z]) with E[w_z] in (0, 0.2).
  const double rate = static_cast<double>(changes) / static_cast<double>(steps);
  EXPECT_GT(rate, 0.1 * (1 - 0.2 * 0.2) - 0.004);
  EXPECT_LT(rate, 0.1 + 0.004);
}

TEST(SyntheticTest, OutputIndependentOfThreadCountAndSeeded) {
  auto m = SyntheticModel::Create(Tiny());
  ASSERT_TRUE(m.ok());
  const SyntheticData a = GenerateSynthetic(*m, nullptr);
  ThreadPool pool3(3);
  const SyntheticData b = GenerateSynthetic(*m, &pool3);
  EXPECT_EQ(a.timeline.events, b.timeline.events);
  EXPECT_EQ(a.timeline.user_offsets, b.timeline.user_offsets);
  EXPECT_EQ(a.timeline.timestamps, b.timeline.timestamps);
  EXPECT_EQ(a.sessions, b.sessions);
  EXPECT_EQ(a.category_counts, b.category_counts);

  SyntheticOptions o = Tiny();
  o.seed = 2;
  auto m2 = SyntheticModel::Create(o);
  ASSERT_TRUE(m2.ok());
  EXPECT_NE(GenerateSynthetic(*m2, nullptr).timeline.events, a.timeline.events);
}

TEST(SyntheticTest, TimelineLayout) {
  auto m = SyntheticModel::Create(Tiny());
  ASSERT_TRUE(m.ok());
  const SyntheticData d = GenerateSynthetic(*m, nullptr);
  const TimelineData& t = d.timeline;
  ASSERT_EQ(t.num_users(), 2000);
  EXPECT_EQ(t.num_item_features, 2);
  ASSERT_EQ(static_cast<int64_t>(d.sessions.size()), t.num_events());
  EXPECT_EQ(std::accumulate(d.category_counts.begin(), d.category_counts.end(), int64_t{0}),
            t.num_events());
  for (int64_t u = 0; u < t.num_users(); ++u) {
    EXPECT_EQ(t.user_features[u], u + 1);
    EXPECT_EQ(static_cast<int64_t>(t.user_offsets[u + 1] - t.user_offsets[u]), d.users[u].length);
    EXPECT_EQ(t.timestamps[t.user_offsets[u]], 1);
  }
  for (int64_t e = 0; e < t.num_events(); ++e) {
    const int32_t item = t.events[2 * e], cat = t.events[2 * e + 1];
    ASSERT_GE(item, 1);
    ASSERT_LE(item, 10000);
    ASSERT_EQ(m->CategoryOf(item - 1), cat - 1) << "event " << e;  // 1-based on disk
  }
}

// 10-bin expected calibration error of the oracle on the train pairs of the tiny preset: the
// oracle is the exact posterior, so it must be calibrated (data.md 5.2.6 reports 0.0007 on 400k).
TEST(SyntheticTest, OracleIsCalibratedOnTrainPairs) {
  testing::TempDir tmp;
  const SyntheticOptions o = Tiny();
  auto m = SyntheticModel::Create(o);
  ASSERT_TRUE(m.ok());
  const SyntheticData d = GenerateSynthetic(*m, nullptr);
  ASSERT_TRUE(WriteTimelineDataset(tmp.path(), d.timeline, {o.users}, {o.items, o.categories},
                                   o.seed, SyntheticMetadata(o))
                  .ok());
  auto ds = Dataset::Open(tmp.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  ThreadPool pool(2);
  auto scores = ComputeOracleScores(*m, d, **ds, Split::kTrain, &pool);
  ASSERT_TRUE(scores.ok()) << scores.status();
  const size_t n = scores->oracle.size();
  ASSERT_EQ(static_cast<int64_t>(n), (*ds)->samples().NumSamples(Split::kTrain));
  std::vector<double> sum_p(10, 0), sum_y(10, 0), count(10, 0);
  for (size_t i = 0; i < n; ++i) {
    const double p = scores->oracle[i];
    ASSERT_GT(p, 0.0);
    ASSERT_LT(p, 1.0);
    const int bin = std::min(9, static_cast<int>(p * 10));
    sum_p[bin] += p;
    sum_y[bin] += scores->label[i];
    count[bin] += 1;
  }
  double ece = 0;
  for (int b = 0; b < 10; ++b) ece += std::abs(sum_y[b] - sum_p[b]) / static_cast<double>(n);
  EXPECT_LT(ece, 0.006);  // measured 0.0017; sampling noise alone is about 0.002
  // The posterior beats the recency heuristic and the strong variant beats the posterior.
  const double auc = ExactAuc(scores->oracle, scores->label);
  EXPECT_GT(auc, 0.88);
  EXPECT_GT(ExactAuc(scores->oracle_strong, scores->label), auc);
}

TEST(SyntheticTest, OracleByHand) {
  // One user, interests {0, 1} with θ = (0.75, 0.25) — k_min lowered to 2 — sessions z = (0, 0).
  SyntheticOptions o = Tiny();
  o.params.k_min = 2;
  auto m = SyntheticModel::Create(o);
  ASSERT_TRUE(m.ok());
  SyntheticData d;
  d.timeline.user_offsets = {0, 2};
  d.timeline.events = {1, 1, 2, 1};
  d.users.resize(1);
  d.users[0].k = 2;
  d.users[0].interest = {0, 1};
  d.users[0].theta = {0.75, 0.25};
  d.sessions = {0, 0};
  d.category_counts.assign(100, 0);
  d.category_counts[0] = 1;
  d.category_counts[5] = 1;  // E = 2 via the timeline; ĝ(5) = 0.5
  const double w5 = m->category_weights()[5], w1 = m->category_weights()[1];
  // c = 5 (not an interest, not z'): P_z = p_s·p_r·w5; P_pos = 0.6·P_z + 0.18·w5; ĝ = 0.5.
  const double pz5 = 0.1 * 0.2 * w5, ppos5 = 0.6 * pz5 + 0.18 * w5;
  EXPECT_NEAR(OracleScore(*m, d, 0, 1, 5, false), ppos5 / (ppos5 + 0.5), 1e-12);
  // c = 1 (an interest, z' = 0): θ^ex(1) = 0.25 / (1 − 0.75) = 1; ĝ(1) = 0.
  const double pz1 = 0.1 * 0.8 * 1.0 + 0.1 * 0.2 * w1, ppos1 = 0.6 * pz1 + 0.22 * 0.25 + 0.18 * w1;
  EXPECT_NEAR(OracleScore(*m, d, 0, 1, 1, false), ppos1 / (ppos1 + 0.0), 1e-12);
  // c = 0 = z' = z_k: strong P_z = 1.
  const double w0 = m->category_weights()[0];
  const double ppos0 = 0.6 * 1.0 + 0.22 * 0.75 + 0.18 * w0;
  EXPECT_NEAR(OracleScore(*m, d, 0, 1, 0, true), ppos0 / (ppos0 + 0.5), 1e-12);
  const double pz0 = 0.9 + 0.1 * 0.2 * w0, ppos0w = 0.6 * pz0 + 0.22 * 0.75 + 0.18 * w0;
  EXPECT_NEAR(OracleScore(*m, d, 0, 1, 0, false), ppos0w / (ppos0w + 0.5), 1e-12);
}

TEST(SyntheticTest, WritesDatasetWithCountsAndMetadata) {
  testing::TempDir tmp;
  SyntheticOptions o = Tiny();
  o.seed = 5;
  ThreadPool pool(2);
  auto sum = WriteSyntheticDataset(o, tmp.path(), &pool);
  ASSERT_TRUE(sum.ok()) << sum.status();
  auto ds = Dataset::Open(tmp.path(), /*verify=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Timeline& tl = *(*ds)->timeline();
  int64_t pairs = 0;
  for (int64_t u = 0; u < tl.num_users(); ++u) pairs += tl.user_length(u) - 2;
  EXPECT_EQ(sum->train_samples, 2 * pairs);
  EXPECT_EQ((*ds)->samples().NumSamples(Split::kTrain), 2 * pairs);
  EXPECT_EQ(sum->test_samples, 2 * o.users);
  EXPECT_EQ(sum->events, tl.num_events());
  EXPECT_EQ((*ds)->negative_seed(), 5u);
  EXPECT_EQ((*ds)->spec().TableCardinalities(), (std::vector<int64_t>{2000, 10000, 100}));
  EXPECT_GE(sum->min_length, 20);

  const YAML::Node meta = (*ds)->spec().metadata;
  EXPECT_EQ(meta["source"].as<std::string>(), "synthetic");
  const YAML::Node s = meta["synthetic"];
  EXPECT_EQ(s["preset"].as<std::string>(), "tiny");
  EXPECT_EQ(s["seed"].as<uint64_t>(), 5u);
  EXPECT_EQ(s["users"].as<int64_t>(), 2000);
  EXPECT_EQ(s["items"].as<int64_t>(), 10000);
  EXPECT_EQ(s["categories"].as<int64_t>(), 100);
  EXPECT_EQ(s["len_cap"].as<int64_t>(), 1000);
  EXPECT_FALSE(s["long_tail"].as<bool>());
  for (const char* k : {"a_cat", "a_cat_items", "a_item", "len_alpha", "dir_alpha", "p_switch",
                        "p_rand", "p_sess", "p_lt", "p_noise"}) {
    EXPECT_TRUE(s[k].IsScalar()) << k;
  }
  EXPECT_DOUBLE_EQ(s["p_lt"].as<double>(), 0.22);
  EXPECT_DOUBLE_EQ(s["len_alpha"].as<double>(), 1.45);
  EXPECT_EQ(s["len_min"].as<int>(), 20);
  EXPECT_EQ(s["k_min"].as<int>(), 3);
  EXPECT_EQ(s["k_max"].as<int>(), 8);
  EXPECT_EQ(s["hist_max"].as<int>(), 100);
  EXPECT_EQ(s["short_len"].as<int>(), 10);
  EXPECT_EQ(meta["sift"]["negative_seed"].as<uint64_t>(), 5u);
  EXPECT_DOUBLE_EQ(meta["oracle_test_auc"].as<double>(), sum->oracle_test_auc);
  EXPECT_DOUBLE_EQ(meta["oracle_strong_test_auc"].as<double>(), sum->oracle_strong_test_auc);
  EXPECT_GT(sum->oracle_test_auc, 0.85);
  EXPECT_LT(sum->oracle_test_auc, 0.95);
  const YAML::Node h = meta["heuristic_test_auc"];
  for (int k = 0; k < kNumHeuristics; ++k) {
    const char* name = HeuristicName(static_cast<Heuristic>(k));
    ASSERT_TRUE(h[name]) << name;
    EXPECT_DOUBLE_EQ(h[name].as<double>(), sum->heuristics.auc[k]) << name;
  }
  // The oracle bounds every heuristic that uses only the history.
  for (Heuristic k : {kFracShort10, kFracAll100, kSmoothRecency, kSmoothAll100}) {
    EXPECT_GT(sum->oracle_test_auc, sum->heuristics.auc[k]) << HeuristicName(k);
  }
}

TEST(SyntheticTest, FormatDoubleRoundTrips) {
  for (double v : {0.9, 0.22, 1.0, 1.45, 0.904123456789, 1e-300, 123456789.0}) {
    EXPECT_EQ(std::stod(FormatDouble(v)), v);
  }
  EXPECT_EQ(FormatDouble(0.1), "0.1");
  EXPECT_EQ(YAML::Load(FormatDouble(0.875)).as<double>(), 0.875);
}

}  // namespace
}  // namespace sift::data
