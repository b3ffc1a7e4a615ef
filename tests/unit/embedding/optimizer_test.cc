// Sparse optimizers against hand-written double-precision arithmetic (formulas of optimizer.h).
// Tolerance: |float result - double reference| <= 1e-6 * max(1, |reference|) (fp32 rounding of a
// few operations on values of order 1).
#include "server/embedding/optimizer.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "server/embedding/table.h"

namespace sift::embedding {
namespace {

constexpr double kTol = 1e-6;

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], kTol * std::max(1.0, std::fabs(want[i])))
        << what << " component " << i;
  }
}

TEST(Optimizer, NamesRoundTripAndUnknownIsRejected) {
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    auto parsed = ParseOptimizerKind(OptimizerName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  auto bad = ParseOptimizerKind("lamb");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lamb"), absl::string_view::npos);
}

TEST(Optimizer, StateSizes) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  EXPECT_EQ(StateFloats(c, 16), 0);
  c.kind = OptimizerKind::kAdagrad;
  EXPECT_EQ(StateFloats(c, 16), 16);
  c.kind = OptimizerKind::kAdam;
  EXPECT_EQ(StateFloats(c, 16), 33);
}

TEST(Optimizer, ValidationNamesTheField) {
  OptimizerConfig c;
  EXPECT_TRUE(ValidateOptimizerConfig(c).ok());
  c.learning_rate = 0.0f;
  EXPECT_NE(ValidateOptimizerConfig(c).message().find("learning_rate"), absl::string_view::npos);
  c = OptimizerConfig{};
  c.beta1 = 1.0f;
  EXPECT_NE(ValidateOptimizerConfig(c).message().find("beta1"), absl::string_view::npos);
  c = OptimizerConfig{};
  c.beta2 = -0.1f;
  EXPECT_NE(ValidateOptimizerConfig(c).message().find("beta2"), absl::string_view::npos);
  c = OptimizerConfig{};
  c.epsilon = 0.0f;
  EXPECT_NE(ValidateOptimizerConfig(c).message().find("epsilon"), absl::string_view::npos);
  c = OptimizerConfig{};
  c.kind = OptimizerKind::kAdagrad;
  c.initial_accumulator = -1.0f;
  EXPECT_NE(ValidateOptimizerConfig(c).message().find("initial_accumulator"),
            absl::string_view::npos);
  c.initial_accumulator = NAN;
  EXPECT_FALSE(ValidateOptimizerConfig(c).ok());
}

TEST(Optimizer, SgdThreeSteps) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.learning_rate = 0.1f;
  std::vector<float> w = {1.0f, -2.0f};
  const std::vector<std::vector<float>> grads = {{0.3f, 1.0f}, {-0.7f, 2.5f}, {0.05f, -4.0f}};
  std::vector<double> want = {1.0, -2.0};
  for (const auto& g : grads) {
    ApplyOptimizer(c, 2, g.data(), w.data(), nullptr);
    for (int i = 0; i < 2; ++i) want[i] -= double{0.1f} * g[i];
  }
  // By hand: 1 - 0.1*(0.3 - 0.7 + 0.05) = 1.035; -2 - 0.1*(1 + 2.5 - 4) = -1.95.
  EXPECT_NEAR(want[0], 1.035, 1e-7);
  EXPECT_NEAR(want[1], -1.95, 1e-7);
  ExpectClose(w, want, "sgd");
}

TEST(Optimizer, AdagradThreeSteps) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdagrad;
  c.learning_rate = 0.5f;
  ASSERT_FLOAT_EQ(c.initial_accumulator, 0.1f);
  ASSERT_FLOAT_EQ(c.epsilon, 1e-7f);
  std::vector<float> w = {0.5f, -0.25f, 0.0f};
  std::vector<float> acc(3);
  InitOptimizerState(c, 3, acc.data());
  EXPECT_EQ(acc, std::vector<float>(3, 0.1f));
  const std::vector<std::vector<float>> grads = {
      {1.0f, -0.5f, 0.0f}, {2.0f, 0.25f, 0.0f}, {-1.0f, 0.125f, 0.0f}};
  std::vector<double> want_w = {0.5, -0.25, 0.0};
  std::vector<double> want_acc(3, double{0.1f});
  for (const auto& g : grads) {
    ApplyOptimizer(c, 3, g.data(), w.data(), acc.data());
    for (int i = 0; i < 3; ++i) {
      want_acc[i] += double{g[i]} * g[i];
      want_w[i] -= 0.5 * g[i] / (std::sqrt(want_acc[i]) + 1e-7);
    }
  }
  // Component 0 by hand: acc 1.1, 5.1, 6.1;
  // w = 0.5 - 0.5/sqrt(1.1) - 1/sqrt(5.1) + 0.5/sqrt(6.1) = 0.5 - 0.476731 - 0.442807 + 0.202444.
  EXPECT_NEAR(want_w[0], -0.217094, 1e-5);
  EXPECT_EQ(w[2], 0.0f);  // a zero gradient never moves the weight
  ExpectClose(w, want_w, "adagrad weights");
  ExpectClose(acc, want_acc, "adagrad accumulator");
}

// Double-precision Keras Adam (model-spec 5.1) for one row, bias-corrected by its own step t.
struct AdamRef {
  double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  std::vector<double> w, m, v;
  int t = 0;
  void Step(const std::vector<float>& g) {
    ++t;
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * double{g[i]} * g[i];
      w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
};

uint32_t AdamStep(const float* state, int dim) {
  uint32_t t;
  std::memcpy(&t, state + 2 * dim, sizeof(t));
  return t;
}

TEST(Optimizer, AdamThreeStepsKerasForm) {
  OptimizerConfig c;  // adam with the defaults of model-spec 5.1
  ASSERT_EQ(c.kind, OptimizerKind::kAdam);
  std::vector<float> w = {0.1f, -0.2f, 0.3f};
  std::vector<float> state(StateFloats(c, 3), -1.0f);
  InitOptimizerState(c, 3, state.data());
  EXPECT_EQ(AdamStep(state.data(), 3), 0u);
  AdamRef ref;
  ref.w = {double{0.1f}, double{-0.2f}, double{0.3f}};
  ref.m.assign(3, 0.0);
  ref.v.assign(3, 0.0);
  const std::vector<std::vector<float>> grads = {
      {0.5f, -1.0f, 0.0f}, {0.25f, 2.0f, 0.0f}, {-0.5f, 0.5f, 0.0f}};
  for (size_t s = 0; s < grads.size(); ++s) {
    ApplyOptimizer(c, 3, grads[s].data(), w.data(), state.data());
    ref.Step(grads[s]);
    EXPECT_EQ(AdamStep(state.data(), 3), s + 1);
    ExpectClose(w, ref.w, "adam weights");
    ExpectClose({state.begin(), state.begin() + 3}, ref.m, "adam m");
    ExpectClose({state.begin() + 3, state.begin() + 6}, ref.v, "adam v");
  }
  // Step 1 by hand: m = 0.05, v = 0.00025, alpha = 0.01*sqrt(0.001)/0.1 = 0.0031623;
  // update = alpha * 0.05 / (0.0158114 + 1e-7) = 0.01 (minus 6e-8): first Adam step moves ~lr.
  AdamRef one;
  one.w = {0.0};
  one.m = {0.0};
  one.v = {0.0};
  one.Step({0.5f});
  EXPECT_NEAR(one.w[0], -0.01, 1e-7);
  EXPECT_EQ(w[2], 0.3f);  // zero gradient: m = v = 0, no move
}

// A push's learning-rate multiplier (the step's schedule factor) is the same update at
// learning_rate x multiplier, for every optimizer; 1 is the configured rate bit for bit.
TEST(Optimizer, MultiplierIsTheUpdateAtTheScaledRate) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    SCOPED_TRACE(std::string(OptimizerName(kind)));
    OptimizerConfig scheduled;
    scheduled.kind = kind;
    scheduled.learning_rate = 0.2f;
    const float multipliers[3] = {1.0f, 0.5f, 0.125f};
    const std::vector<std::vector<float>> grads = {
        {0.5f, -1.0f, 0.0f}, {0.25f, 2.0f, 0.0f}, {-0.5f, 0.5f, 0.0f}};
    std::vector<float> w = {0.1f, -0.2f, 0.3f}, state(StateFloats(scheduled, 3));
    InitOptimizerState(scheduled, 3, state.data());
    std::vector<float> w_ref = w, state_ref = state;
    for (size_t s = 0; s < grads.size(); ++s) {
      ApplyOptimizer(scheduled, 3, grads[s].data(), w.data(), state.data(), multipliers[s]);
      OptimizerConfig fixed = scheduled;  // the same step with the scaled rate configured
      fixed.learning_rate = scheduled.learning_rate * multipliers[s];
      ApplyOptimizer(fixed, 3, grads[s].data(), w_ref.data(), state_ref.data());
      EXPECT_EQ(w, w_ref) << "step " << s;
      EXPECT_EQ(state, state_ref) << "step " << s;
    }
    // By hand for sgd: 0.1 - 0.2 (1 x 0.5 + 0.5 x 0.25 - 0.125 x 0.5) = 0.1 - 0.1125 = -0.0125.
    if (kind == OptimizerKind::kSgd) EXPECT_NEAR(w[0], -0.0125, 1e-7);
  }
}

TEST(Optimizer, AdamIsLazyPerRowStepCount) {
  // Row A is pushed three times, row B only on the third push: B's update must be a FIRST Adam
  // step (t = 1), not one corrected with the global step 3.
  TableConfig config;
  config.table_id = 2;
  config.name = "item";
  config.dim = 2;
  config.cardinality = 1000;
  auto store_or = EmbeddingStore::Create({config}, StoreOptions{.seed = 7});
  ASSERT_TRUE(store_or.ok()) << store_or.status();
  EmbeddingStore& store = **store_or;
  const std::vector<float> ga = {0.5f, -0.25f};
  const std::vector<float> gb = {-1.0f, 0.125f};
  std::vector<float> a0(2), b0(2);
  InitRow(7, 2, 11, 1000, 2, a0.data());
  InitRow(7, 2, 99, 1000, 2, b0.data());
  AdamRef ra, rb;
  ra.w = {a0[0], a0[1]};
  rb.w = {b0[0], b0[1]};
  ra.m = ra.v = rb.m = rb.v = {0.0, 0.0};
  std::vector<float> pulled(4);
  ASSERT_TRUE(store.Pull(2, {11, 99}, absl::MakeSpan(pulled)).ok());
  ASSERT_TRUE(store.Push(2, {11}, ga, 1).ok());
  ASSERT_TRUE(store.Push(2, {11}, ga, 2).ok());
  std::vector<float> grads = {ga[0], ga[1], gb[0], gb[1]};
  ASSERT_TRUE(store.Push(2, {11, 99}, grads, 3).ok());
  ra.Step(ga);
  ra.Step(ga);
  ra.Step(ga);
  rb.Step(gb);
  std::vector<float> out(4);
  ASSERT_TRUE(store.Pull(2, {11, 99}, absl::MakeSpan(out)).ok());
  ExpectClose({out[0], out[1]}, ra.w, "row pushed 3 times");
  ExpectClose({out[2], out[3]}, rb.w, "row pushed once");
  EXPECT_EQ(ra.t, 3);
  EXPECT_EQ(rb.t, 1);
}

}  // namespace
}  // namespace sift::embedding
