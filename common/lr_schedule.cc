#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sift {

absl::string_view LrScheduleName(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kConstant:
      return "constant";
    case LrScheduleKind::kLinear:
      return "linear";
    case LrScheduleKind::kCosine:
      return "cosine";
  }
  return "constant";
}

namespace {
constexpr LrScheduleKind kKinds[] = {LrScheduleKind::kConstant, LrScheduleKind::kLinear,
                                     LrScheduleKind::kCosine};
}  // namespace

const std::vector<std::string>& LrScheduleNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (LrScheduleKind k : kKinds) v.emplace_back(LrScheduleName(k));
    return v;
  }();
  return names;
}

StatusOr<LrScheduleKind> ParseLrScheduleKind(absl::string_view name) {
  for (LrScheduleKind k : kKinds) {
    if (name == LrScheduleName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown learning-rate schedule '", name,
                   "' (known: ", absl::StrJoin(LrScheduleNames(), ", "), ")"));
}

Status ValidateLrSchedule(const LrSchedule& s, absl::string_view warmup_field,
                          absl::string_view final_field) {
  if (s.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(warmup_field, " must be >= 0, got ", s.warmup_steps));
  }
  if (!std::isfinite(s.final_fraction) || s.final_fraction < 0 || s.final_fraction > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(final_field, " must be in [0, 1], got ", s.final_fraction));
  }
  return absl::OkStatus();
}

double LrFactor(const LrSchedule& s, int64_t step, int64_t total_steps) {
  // A step beyond the plan runs at the last planned step's rate (positive even when f = 0).
  step = std::min(step, total_steps - 1);
  if (step < s.warmup_steps) {
    return static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  if (s.kind == LrScheduleKind::kConstant) return 1.0;
  const int64_t span = std::max<int64_t>(total_steps - s.warmup_steps, 1);
  const double p = static_cast<double>(step - s.warmup_steps) / static_cast<double>(span);
  const double f = s.final_fraction;
  if (s.kind == LrScheduleKind::kLinear) return 1.0 - (1.0 - f) * p;
  constexpr double kPi = 3.14159265358979323846;
  return f + (1.0 - f) * 0.5 * (1.0 + std::cos(kPi * p));
}

}  // namespace sift
