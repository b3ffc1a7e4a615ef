// Learning-rate schedules (training.lr_schedule, sift train --lr-schedule; docs/training.md
// "Training recipes"): the factor by which the base learning rate of dense Adam AND of the
// embedding rows' sparse optimizer is multiplied at one training step. A pure function of the step,
// so a run resumed from a checkpoint continues the schedule exactly.
//
// With s = the step's global index (0-based, the step being applied), T = the run's planned
// steps (epochs x steps per epoch), W = warmup_steps and f = final_fraction:
//   warm-up  (s < W):  factor = (s + 1) / W                       (linear, reaches 1 at s = W-1)
//   then, with p = (s - W) / (T - W) in [0, 1):
//     constant: 1
//     linear:   1 - (1 - f) p
//     cosine:   f + (1 - f) (1 + cos(pi p)) / 2
// so the factor is in (0, 1] at every step: p < 1 before T, and a step at or beyond T (a run
// resumed from a checkpoint taken under another plan: more steps, another batch size) runs at
// the rate of the last planned step T - 1 (positive even for f = 0).
// constant with W = 0 is the reference's fixed learning rate: the trainer then passes the
// factor 1 everywhere, bit for bit the run without a schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/status.h"

namespace sift {

enum class LrScheduleKind { kConstant, kLinear, kCosine };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;   // >= 0
  double final_fraction = 0;  // in [0, 1]: the factor the decay ends at
};

// "constant", "linear", "cosine".
absl::string_view LrScheduleName(LrScheduleKind kind);
// Every kind's name, in enum order: what --lr-schedule and training.lr_schedule accept.
const std::vector<std::string>& LrScheduleNames();
// Inverse of LrScheduleName; INVALID_ARGUMENT naming the accepted values otherwise.
StatusOr<LrScheduleKind> ParseLrScheduleKind(absl::string_view name);

// INVALID_ARGUMENT naming the bad field as the caller calls it (warmup_field for warmup_steps < 0,
// final_field for a final_fraction outside [0, 1] or not finite).
Status ValidateLrSchedule(const LrSchedule& schedule, absl::string_view warmup_field,
                          absl::string_view final_field);

// True when the factor is 1 at every step (constant without warm-up).
inline bool IsConstantLr(const LrSchedule& s) {
  return s.kind == LrScheduleKind::kConstant && s.warmup_steps == 0;
}

// The factor at step `step` of a run of `total_steps` (formulas above). REQUIRES: schedule
// validated, step >= 0, total_steps >= 1.
double LrFactor(const LrSchedule& schedule, int64_t step, int64_t total_steps);

}  // namespace sift
