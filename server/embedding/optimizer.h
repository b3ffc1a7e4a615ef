// Sparse (per-row) optimizers of the embedding server: each push updates only the rows it names
// (model-spec 13, difference 1). Pure functions over one row's weights and optimizer state; the
// caller (EmbeddingStore) holds the row's lock. Thread-compatible, no global state.
//
// Update of one touched row, per component i (g = the summed gradient pushed for this row):
//   sgd:     w -= lr * g
//   adagrad: acc += g^2;  w -= lr * g / (sqrt(acc) + eps)          (acc starts at
//            initial_accumulator, default 0.1 like TF's Adagrad; eps default 1e-7)
//   adam:    lazy Adam in the Keras form of model-spec 5.1, bias-corrected by the ROW's own step
//            count t (t += 1 on every push that touches the row, starting from 0):
//            m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//            w -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
//            (defaults lr 0.01, b1 0.9, b2 0.999, eps 1e-7; m = v = 0 initially).
// Arithmetic is fp32 except the adam bias-correction factor, computed in double and rounded once.
//
// State layout (floats following the row's dim weights, see StateFloats):
//   sgd: none.  adagrad: acc[dim].  adam: m[dim], v[dim], then one slot holding t as a uint32
//   (bit-copied, not converted: exact up to 2^32 - 1 pushes of the row, then it saturates).
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/status.h"

namespace sift::embedding {

enum class OptimizerKind { kSgd, kAdagrad, kAdam };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdam;
  float learning_rate = 0.01f;
  float beta1 = 0.9f;                // adam
  float beta2 = 0.999f;              // adam
  float epsilon = 1e-7f;             // adam, adagrad
  float initial_accumulator = 0.1f;  // adagrad
};

// "sgd", "adagrad", "adam".
absl::string_view OptimizerName(OptimizerKind kind);
// Inverse of OptimizerName; INVALID_ARGUMENT naming the accepted values otherwise.
StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);

// INVALID_ARGUMENT (naming the field) unless: lr finite and > 0; betas in [0, 1); eps finite and
// > 0; initial_accumulator finite and >= 0.
Status ValidateOptimizerConfig(const OptimizerConfig& config);

// Number of state floats stored after a row's `dim` weights.
int StateFloats(const OptimizerConfig& config, int dim);

// Writes the initial state of a new row. REQUIRES: state has StateFloats(config, dim) floats.
void InitOptimizerState(const OptimizerConfig& config, int dim, float* state);

// Applies one update with gradient grad[dim] to weights[dim] and state (layout above), at the
// learning rate config.learning_rate x lr_multiplier (the step's schedule factor,
// common/lr_schedule.h; 1 = the configured rate, bit for bit).
// REQUIRES: config validated; lr_multiplier finite and in (0, 1]; the caller holds exclusive
// access to the row.
void ApplyOptimizer(const OptimizerConfig& config, int dim, const float* grad, float* weights,
                    float* state, float lr_multiplier = 1.0f);

}  // namespace sift::embedding
