#include "common/data/inspect.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "common/data/heuristics.h"

namespace sift::data {
namespace {

std::optional<double> MetaDouble(const YAML::Node& meta, const char* key) {
  const YAML::Node n = meta[key];
  if (!n || !n.IsScalar()) return std::nullopt;
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

// Histogram of valid history slots (capped at T) over the samples of a timeline split: the events
// each sample has before its target (HistoryEvents knows the split rule: leave-last-K-out,
// train_targets_per_user, stored impressions).
std::vector<int64_t> TimelineHistoryHistogram(const SampleSource& src, Split split, int64_t T) {
  std::vector<int64_t> hist(static_cast<size_t>(T) + 1, 0);
  for (int64_t i = 0, n = src.NumSamples(split); i < n; ++i) {
    ++hist[std::min(src.HistoryEvents(split, i), T)];
  }
  return hist;
}

std::vector<int64_t> ExplicitHistoryHistogram(const SamplesFile& f, int64_t T) {
  std::vector<int64_t> hist(static_cast<size_t>(T) + 1, 0);
  for (int64_t i = 0; i < f.size(); ++i) {
    int64_t len = std::clamp<int64_t>(f.record(i)[1], 0, f.shape().history);
    hist[std::min(len, T)] += 1;
  }
  return hist;
}

nlohmann::json PercentilesJson(const Percentiles& p) {
  return nlohmann::json{{"count", p.count}, {"mean", p.mean}, {"min", p.min}, {"p50", p.p50},
                        {"p90", p.p90},     {"p99", p.p99},   {"max", p.max}};
}

std::string PercentilesText(const Percentiles& p) {
  return absl::StrFormat("mean %.1f  min %d  p50 %d  p90 %d  p99 %d  max %d", p.mean, p.min, p.p50,
                         p.p90, p.p99, p.max);
}

}  // namespace

Percentiles PercentilesOfHistogram(const std::vector<int64_t>& hist) {
  Percentiles p;
  double sum = 0;
  for (size_t v = 0; v < hist.size(); ++v) {
    p.count += hist[v];
    sum += static_cast<double>(v) * static_cast<double>(hist[v]);
  }
  if (p.count == 0) return p;
  p.mean = sum / static_cast<double>(p.count);
  auto quantile = [&](double q) -> int64_t {
    // Smallest v with at least ceil(q * count) values <= v (nearest-rank).
    const int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * p.count)));
    int64_t seen = 0;
    for (size_t v = 0; v < hist.size(); ++v) {
      seen += hist[v];
      if (seen >= rank) return static_cast<int64_t>(v);
    }
    return static_cast<int64_t>(hist.size()) - 1;
  };
  p.min = quantile(0.0);
  p.p50 = quantile(0.5);
  p.p90 = quantile(0.9);
  p.p99 = quantile(0.99);
  p.max = quantile(1.0);
  return p;
}

StatusOr<DatasetSummary> Summarize(const Dataset& ds) {
  DatasetSummary s;
  s.dir = ds.dir();
  s.source_type = ds.source_type();
  const FeatureSpec& spec = ds.spec();
  const YAML::Node& meta = spec.metadata;
  if (meta["source"] && meta["source"].IsScalar()) s.source = meta["source"].as<std::string>();
  s.history_length = spec.HistoryLength();
  s.train_samples = ds.samples().NumSamples(Split::kTrain);
  s.test_samples = ds.samples().NumSamples(Split::kTest);
  for (const char* ch : {kUserChannel, kTargetChannel}) {
    for (const auto& f : spec.channel_spec.at(ch)) {
      s.cardinalities.emplace_back(f, spec.feature_spec.at(f).cardinality);
    }
  }
  const int64_t T = std::max<int64_t>(1, s.history_length);
  if (const Timeline* t = ds.timeline()) {
    s.users = t->num_users();
    s.events = t->num_events();
    int64_t longest = 0;
    for (int64_t u = 0; u < t->num_users(); ++u) longest = std::max(longest, t->user_length(u));
    std::vector<int64_t> lengths(static_cast<size_t>(longest) + 1, 0);
    for (int64_t u = 0; u < t->num_users(); ++u) ++lengths[t->user_length(u)];
    s.events_per_user = PercentilesOfHistogram(lengths);
    s.train_history =
        PercentilesOfHistogram(TimelineHistoryHistogram(ds.samples(), Split::kTrain, T));
    s.test_history =
        PercentilesOfHistogram(TimelineHistoryHistogram(ds.samples(), Split::kTest, T));
  } else {
    // Explicit samples: users = distinct user ids over both splits.
    absl::flat_hash_set<int64_t> users;
    for (Split split : {Split::kTrain, Split::kTest}) {
      for (int64_t i = 0, n = ds.samples().NumSamples(split); i < n; ++i) {
        users.insert(ds.samples().UserOf(split, i));
      }
    }
    s.users = static_cast<int64_t>(users.size());
    s.train_history =
        PercentilesOfHistogram(ExplicitHistoryHistogram(*ds.samples_file(Split::kTrain), T));
    s.test_history =
        PercentilesOfHistogram(ExplicitHistoryHistogram(*ds.samples_file(Split::kTest), T));
  }
  s.oracle_test_auc = MetaDouble(meta, "oracle_test_auc");
  s.oracle_strong_test_auc = MetaDouble(meta, "oracle_strong_test_auc");
  const YAML::Node h = meta["heuristic_test_auc"];
  if (h && h.IsMap()) {
    for (const auto& kv : h) {
      // Convert only scalars, and never inside a handler: odd-but-valid YAML must not throw.
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      std::optional<double> v;
      if (kv.second.IsScalar()) {
        try {
          v = kv.second.as<double>();
        } catch (const YAML::Exception&) {
        }
      }
      if (key.empty() || !v) {
        return absl::InvalidArgumentError(
            absl::StrCat(JoinPath(ds.dir(), kFeatureSpecFile), ":", kv.first.Mark().line + 1,
                         ": metadata.heuristic_test_auc: expected 'name: number' entries"));
      }
      s.heuristic_test_auc[key] = *v;
    }
  }
  return s;
}

nlohmann::json SummaryToJson(const DatasetSummary& s) {
  using nlohmann::json;
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json j;
  j["dir"] = s.dir;
  j["source_type"] = s.source_type;
  j["source"] = s.source.empty() ? json(nullptr) : json(s.source);
  j["users"] = s.users;
  j["events"] = s.events ? json(*s.events) : json(nullptr);
  j["train_samples"] = s.train_samples;
  j["test_samples"] = s.test_samples;
  j["history_length"] = s.history_length;
  json card = json::object();
  for (const auto& [name, c] : s.cardinalities) card[name] = c;
  j["cardinalities"] = card;
  j["events_per_user"] = s.events_per_user ? PercentilesJson(*s.events_per_user) : json(nullptr);
  j["train_history_length"] = PercentilesJson(s.train_history);
  j["test_history_length"] = PercentilesJson(s.test_history);
  j["oracle_test_auc"] = opt(s.oracle_test_auc);
  j["oracle_strong_test_auc"] = opt(s.oracle_strong_test_auc);
  json h = json::object();
  for (const auto& [name, v] : s.heuristic_test_auc) h[name] = v;
  j["heuristic_test_auc"] = h;
  for (const char* name : {"frac_short10", "frac_all100", "smooth_recency", "pop_item"}) {
    auto it = s.heuristic_test_auc.find(name);
    j[name] = it == s.heuristic_test_auc.end() ? json(nullptr) : json(it->second);
  }
  j["heuristics_computed"] = s.heuristics_computed;
  j["verified"] = s.verified;
  return j;
}

std::string SummaryToText(const DatasetSummary& s) {
  std::string out;
  auto line = [&out](const std::string& k, const std::string& v) {
    absl::StrAppend(&out, absl::StrFormat("%-22s %s\n", k, v));
  };
  line("dataset", s.dir);
  line("format", s.source_type + (s.source.empty() ? "" : " (" + s.source + ")"));
  line("users", absl::StrCat(s.users));
  if (s.events) line("events", absl::StrCat(*s.events));
  line("train samples", absl::StrCat(s.train_samples));
  line("test samples", absl::StrCat(s.test_samples));
  std::string card;
  for (const auto& [name, c] : s.cardinalities) {
    absl::StrAppend(&card, card.empty() ? "" : ", ", name, "=", c);
  }
  line("cardinalities", card);
  if (s.events_per_user) line("events per user", PercentilesText(*s.events_per_user));
  line(absl::StrCat("train history (<=", s.history_length, ")"), PercentilesText(s.train_history));
  line(absl::StrCat("test history (<=", s.history_length, ")"), PercentilesText(s.test_history));
  if (s.oracle_test_auc) line("oracle test AUC", absl::StrFormat("%.4f", *s.oracle_test_auc));
  if (s.oracle_strong_test_auc) {
    line("oracle_strong test AUC", absl::StrFormat("%.4f", *s.oracle_strong_test_auc));
  }
  for (const char* name : {"smooth_recency", "frac_all100", "frac_short10", "pop_item",
                           kMixFullHistory, kFracFullHistory}) {
    auto it = s.heuristic_test_auc.find(name);
    if (it != s.heuristic_test_auc.end()) {
      line(absl::StrCat(name, " test AUC"),
           absl::StrFormat("%.4f%s", it->second, s.heuristics_computed ? " (computed now)" : ""));
    }
  }
  if (s.verified) line("checksums", "verified");
  return out;
}

}  // namespace sift::data
