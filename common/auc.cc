#include "common/auc.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"

namespace sift {
namespace {

template <typename T>
double AucImpl(absl::Span<const T> scores, absl::Span<const float> labels) {
  const size_t n = std::min(scores.size(), labels.size());
  std::vector<std::pair<T, bool>> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(scores[i])) return std::numeric_limits<double>::quiet_NaN();
    v[i] = {scores[i], labels[i] > 0.5f};
  }
  std::sort(v.begin(), v.end(), [](const std::pair<T, bool>& a, const std::pair<T, bool>& b) {
    return a.first < b.first;
  });
  // Over groups of equal scores, in ascending order: every positive beats the negatives below
  // its group and half-beats the negatives inside it. Twice the Mann–Whitney U stays integral
  // (exact), and equals 2·(Σ_pos rank − n_p(n_p+1)/2) with average ranks for ties.
  unsigned __int128 twice_u = 0;
  uint64_t neg_below = 0, n_pos = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    uint64_t pos = 0, neg = 0;
    for (; j < n && v[j].first == v[i].first; ++j) (v[j].second ? pos : neg) += 1;
    twice_u += static_cast<unsigned __int128>(pos) * (2 * neg_below + neg);
    neg_below += neg;
    n_pos += pos;
    i = j;
  }
  const uint64_t n_neg = neg_below;
  if (n_pos == 0 || n_neg == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(twice_u) /
         (2.0 * static_cast<double>(n_pos) * static_cast<double>(n_neg));
}

}  // namespace

double ExactAuc(absl::Span<const double> scores, absl::Span<const float> labels) {
  return AucImpl(scores, labels);
}

double ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  return AucImpl(scores, labels);
}

}  // namespace sift

namespace sift {

Status WritePredictionsCsv(const std::string& path, absl::Span<const double> scores,
                           absl::Span<const float> labels) {
  if (scores.size() != labels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", scores.size(), " scores but ", labels.size(), " labels"));
  }
  std::string text = "score,label\n";
  text.reserve(text.size() + scores.size() * 26);
  char line[64];
  for (size_t i = 0; i < scores.size(); ++i) {
    const int n = std::snprintf(line, sizeof(line), "%.17g,%.9g\n", scores[i],
                                static_cast<double>(labels[i]));
    text.append(line, static_cast<size_t>(n));
  }
  return WriteFileAtomic(path, text);
}

StatusOr<Predictions> ReadPredictionsCsv(const std::string& path) {
  SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  Predictions p;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    if (line_no == 1) {
      if (line != "score,label") {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":1: expected the header \"score,label\""));
      }
      continue;
    }
    std::pair<absl::string_view, absl::string_view> f = absl::StrSplit(line, ',');
    double score = 0, label = 0;
    if (!absl::SimpleAtod(f.first, &score) || !absl::SimpleAtod(f.second, &label)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": expected \"<score>,<label>\", got \"", line, "\""));
    }
    p.scores.push_back(score);
    p.labels.push_back(static_cast<float>(label));
  }
  return p;
}

}  // namespace sift
