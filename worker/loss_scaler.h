// Dynamic loss scaling for fp16 GEMMs (issue 6; the reference's --amp uses TF's
// LossScaleOptimizer with the same defaults): the backward pass computes the gradients of
// scale * loss so that small gradients survive fp16's range (6e-5 .. 65504); the step is applied
// with the gradients divided by the scale when they are all finite, and skipped otherwise, the
// scale halving. After `growth_interval` finite steps in a row the scale doubles. A pure state
// machine (no backend, no clock): every rank of a job sees the same finite/overflow sequence
// (the overflow flag travels with the allreduced gradients), so every rank's scale is the same.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace sift::worker {

struct LossScalerOptions {
  float initial_scale = 32768.0f;  // 2^15, TF's default
  int64_t growth_interval = 2000;  // finite steps before the scale doubles
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  float min_scale = 1.0f;         // never below: an overflow at 1 skips without going lower
  float max_scale = 16777216.0f;  // 2^24
};

// INVALID_ARGUMENT naming the field for a non-positive or non-finite value, growth_factor <= 1,
// backoff_factor outside (0, 1), or min_scale > initial_scale > max_scale ordering violated.
Status ValidateLossScalerOptions(const LossScalerOptions& o);

class DynamicLossScaler {
 public:
  // REQUIRES: ValidateLossScalerOptions(options).ok().
  explicit DynamicLossScaler(const LossScalerOptions& options = {})
      : o_(options), scale_(options.initial_scale) {}

  // The scale of the next backward pass.
  float scale() const { return scale_; }
  // Reports whether this step's gradients were all finite; returns true when the step must be
  // applied (its gradients divided by the scale used), false when it must be skipped.
  bool Update(bool grads_finite) {
    if (!grads_finite) {
      ++skipped_;
      good_steps_ = 0;
      scale_ =
          scale_ * o_.backoff_factor < o_.min_scale ? o_.min_scale : scale_ * o_.backoff_factor;
      return false;
    }
    if (++good_steps_ >= o_.growth_interval) {
      good_steps_ = 0;
      scale_ = scale_ * o_.growth_factor > o_.max_scale ? o_.max_scale : scale_ * o_.growth_factor;
    }
    return true;
  }
  int64_t skipped_steps() const { return skipped_; }
  // For checkpoints: the state that Update evolves.
  int64_t good_steps() const { return good_steps_; }
  void Restore(float scale, int64_t good_steps) {
    scale_ = scale;
    good_steps_ = good_steps;
  }

 private:
  LossScalerOptions o_;
  float scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace sift::worker
