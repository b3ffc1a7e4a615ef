#include "server/embedding/optimizer.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace sift::embedding {
namespace {

bool Finite(float x) { return std::isfinite(x); }

Status Invalid(absl::string_view field, float value, absl::string_view need) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer config: ", field, " = ", value, " (must be ", need, ")"));
}

uint32_t LoadStep(const float* slot) {
  uint32_t t;
  std::memcpy(&t, slot, sizeof(t));
  return t;
}

void StoreStep(float* slot, uint32_t t) { std::memcpy(slot, &t, sizeof(t)); }

}  // namespace

absl::string_view OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdagrad:
      return "adagrad";
    case OptimizerKind::kAdam:
      return "adam";
  }
  return "unknown";
}

StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    if (name == OptimizerName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown sparse optimizer '", name, "' (expected sgd, adagrad or adam)"));
}

Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  if (!Finite(c.learning_rate) || c.learning_rate <= 0.0f) {
    return Invalid("learning_rate", c.learning_rate, "finite and > 0");
  }
  if (c.kind == OptimizerKind::kAdam) {
    if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f)) return Invalid("beta1", c.beta1, "in [0, 1)");
    if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f)) return Invalid("beta2", c.beta2, "in [0, 1)");
  }
  if (c.kind != OptimizerKind::kSgd && (!Finite(c.epsilon) || c.epsilon <= 0.0f)) {
    return Invalid("epsilon", c.epsilon, "finite and > 0");
  }
  if (c.kind == OptimizerKind::kAdagrad &&
      (!Finite(c.initial_accumulator) || c.initial_accumulator < 0.0f)) {
    return Invalid("initial_accumulator", c.initial_accumulator, "finite and >= 0");
  }
  return absl::OkStatus();
}

int StateFloats(const OptimizerConfig& config, int dim) {
  switch (config.kind) {
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kAdagrad:
      return dim;
    case OptimizerKind::kAdam:
      return 2 * dim + 1;
  }
  return 0;
}

void InitOptimizerState(const OptimizerConfig& config, int dim, float* state) {
  switch (config.kind) {
    case OptimizerKind::kSgd:
      return;
    case OptimizerKind::kAdagrad:
      for (int i = 0; i < dim; ++i) state[i] = config.initial_accumulator;
      return;
    case OptimizerKind::kAdam:
      for (int i = 0; i < 2 * dim; ++i) state[i] = 0.0f;
      StoreStep(state + 2 * dim, 0);
      return;
  }
}

void ApplyOptimizer(const OptimizerConfig& c, int dim, const float* grad, float* w, float* state,
                    float lr_multiplier) {
  const float lr = c.learning_rate * lr_multiplier;
  switch (c.kind) {
    case OptimizerKind::kSgd:
      for (int i = 0; i < dim; ++i) w[i] -= lr * grad[i];
      return;
    case OptimizerKind::kAdagrad: {
      float* acc = state;
      for (int i = 0; i < dim; ++i) {
        acc[i] += grad[i] * grad[i];
        w[i] -= lr * grad[i] / (std::sqrt(acc[i]) + c.epsilon);
      }
      return;
    }
    case OptimizerKind::kAdam: {
      float* m = state;
      float* v = state + dim;
      uint32_t t = LoadStep(state + 2 * dim);
      if (t < std::numeric_limits<uint32_t>::max()) ++t;
      StoreStep(state + 2 * dim, t);
      const double td = static_cast<double>(t);
      const float alpha = static_cast<float>(
          static_cast<double>(lr) * std::sqrt(1.0 - std::pow(static_cast<double>(c.beta2), td)) /
          (1.0 - std::pow(static_cast<double>(c.beta1), td)));
      const float b1 = c.beta1, b2 = c.beta2;
      for (int i = 0; i < dim; ++i) {
        const float g = grad[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        w[i] -= alpha * m[i] / (std::sqrt(v[i]) + c.epsilon);
      }
      return;
    }
  }
}

}  // namespace sift::embedding
