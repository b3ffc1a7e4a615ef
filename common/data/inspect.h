// Dataset summaries for `sift data inspect`: sizes, cardinalities, history-length percentiles,
// and the quality bounds stored by the generator (oracle and heuristic test AUCs).
// Pure functions over an opened Dataset; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace sift::data {

struct Percentiles {
  int64_t count = 0;
  double mean = 0;
  int64_t min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

struct DatasetSummary {
  std::string dir, source_type, source;  // source: metadata.source ("synthetic", "amazon", ...)
  int64_t users = 0;
  std::optional<int64_t> events;  // timelines only
  int64_t train_samples = 0, test_samples = 0;
  int64_t history_length = 0;  // slots per sample in the reference layout (feature_spec)
  std::vector<std::pair<std::string, int64_t>> cardinalities;  // table feature -> cardinality
  std::optional<Percentiles> events_per_user;                  // timelines only
  Percentiles train_history, test_history;  // valid history slots per sample, capped at T
  std::optional<double> oracle_test_auc, oracle_strong_test_auc;
  std::map<std::string, double> heuristic_test_auc;  // name -> AUC (metadata or computed)
  bool heuristics_computed = false;                  // true when not read from metadata
  bool verified = false;
};

// Index-free percentiles of a histogram (hist[v] = how many values equal v).
Percentiles PercentilesOfHistogram(const std::vector<int64_t>& hist);

// Summarises `ds`. History lengths are exact; for a timeline they are counted per user in
// O(users x T) without materialising samples.
StatusOr<DatasetSummary> Summarize(const Dataset& ds);

nlohmann::json SummaryToJson(const DatasetSummary& s);
std::string SummaryToText(const DatasetSummary& s);

}  // namespace sift::data
