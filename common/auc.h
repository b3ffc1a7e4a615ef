// Exact ROC AUC (docs/data.md 5.2.7): rank-based, tied scores get their average rank,
//   AUC = (Σ_pos rank − n_p(n_p+1)/2) / (n_p·n_n),
// computed by one sort, O(n log n) time and O(n) extra memory (fine for tens of millions).
// A label > 0.5 is positive, anything else negative. Returns NaN when either class is empty or a
// score is NaN (no meaningful AUC exists). Pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "absl/types/span.h"

namespace sift {

// REQUIRES: scores.size() == labels.size().
double ExactAuc(absl::Span<const double> scores, absl::Span<const float> labels);
double ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels);

}  // namespace sift
