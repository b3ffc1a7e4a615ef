// Exact ROC AUC (docs/data.md 5.2.7): rank-based, tied scores get their average rank,
//   AUC = (Σ_pos rank − n_p(n_p+1)/2) / (n_p·n_n),
// computed by one sort, O(n log n) time and O(n) extra memory (fine for tens of millions).
// A label > 0.5 is positive, anything else negative. Returns NaN when either class is empty or a
// score is NaN (no meaningful AUC exists). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/status.h"

namespace sift {

// REQUIRES: scores.size() == labels.size().
double ExactAuc(absl::Span<const double> scores, absl::Span<const float> labels);
double ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels);

// The predictions an exact AUC was computed from, saved for ROC curves (`sift report`): a CSV
// with the header "score,label", one line per sample in the order given, scores with 17
// significant digits (they read back exactly). Written atomically (temp file, fsync, rename).
inline constexpr char kTestPredictionsFile[] = "test_predictions.csv";
Status WritePredictionsCsv(const std::string& path, absl::Span<const double> scores,
                           absl::Span<const float> labels);
struct Predictions {
  std::vector<double> scores;
  std::vector<float> labels;
};
// Reads WritePredictionsCsv's file; errors name the path and line.
StatusOr<Predictions> ReadPredictionsCsv(const std::string& path);

}  // namespace sift
