#include "worker/loss_scaler.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace sift::worker {

Status ValidateLossScalerOptions(const LossScalerOptions& o) {
  const struct {
    const char* name;
    float value;
  } positive[] = {{"initial_scale", o.initial_scale},
                  {"growth_factor", o.growth_factor},
                  {"backoff_factor", o.backoff_factor},
                  {"min_scale", o.min_scale},
                  {"max_scale", o.max_scale}};
  for (const auto& f : positive) {
    if (!(f.value > 0) || !std::isfinite(f.value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss scaler: ", f.name, " must be a positive finite number, got ", f.value));
    }
  }
  if (o.growth_interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: growth_interval must be >= 1, got ", o.growth_interval));
  }
  if (o.growth_factor <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: growth_factor must be > 1, got ", o.growth_factor));
  }
  if (o.backoff_factor >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: backoff_factor must be < 1, got ", o.backoff_factor));
  }
  if (!(o.min_scale <= o.initial_scale && o.initial_scale <= o.max_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: need min_scale <= initial_scale <= max_scale, got ", o.min_scale,
                     ", ", o.initial_scale, ", ", o.max_scale));
  }
  return absl::OkStatus();
}

}  // namespace sift::worker
