// DenseAdamWStep (decoupled weight decay) on every host backend against a hand computation in
// double, and weight_decay 0 bit-identical to plain Adam.
#include <cfloat>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/kernels/backend_fixture.h"
#include "worker/trainer.h"

namespace sift::worker {
namespace {

using kernels::testing::BackendOpTest;

class DenseAdamWTest : public BackendOpTest {};

// Three AdamW steps, by hand in double: the decay of θ before the update, then the reference's
// Adam (lr_t = lr·√(1 − β2^t)/(1 − β1^t), θ ← θ − lr_t·m/(√v + ε)).
TEST_P(DenseAdamWTest, ThreeStepsMatchAHandComputationInDouble) {
  const kernels::AdamHyper h;  // lr 0.01, β1 0.9, β2 0.999, ε 1e-7
  const float wd = 0.5f;
  std::vector<float> theta = {1.0f, -2.0f, 0.25f, 3.0f, -0.125f}, m(5, 0.0f), v(5, 0.0f);
  const std::vector<std::vector<float>> grads = {{0.5f, -0.25f, 1.0f, 0.0f, 2.0f},
                                                 {0.25f, 0.5f, -1.0f, 0.125f, -2.0f},
                                                 {-0.5f, 0.75f, 0.5f, 1.0f, 0.0f}};
  std::vector<double> et(theta.begin(), theta.end()), em(5, 0.0), ev(5, 0.0);
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float>& g = grads[static_cast<size_t>(t - 1)];
    DenseAdamWStep(backend_.get(), h, wd, t, 5, g.data(), theta.data(), m.data(), v.data());
    const double b1 = h.beta1, b2 = h.beta2;
    const double lr_t = h.lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < 5; ++i) {
      et[i] *= 1.0 - static_cast<double>(h.lr) * wd;
      em[i] = b1 * em[i] + (1 - b1) * g[i];
      ev[i] = b2 * ev[i] + (1 - b2) * static_cast<double>(g[i]) * g[i];
      et[i] -= lr_t * em[i] / (std::sqrt(ev[i]) + h.epsilon);
    }
  }
  ASSERT_TRUE(backend_->Synchronize().ok());
  for (size_t i = 0; i < 5; ++i) {
    // Float arithmetic: a few roundings of terms of size |θ| and lr per step, over 3 steps.
    const double bound = 64 * FLT_EPSILON * (std::abs(et[i]) + h.lr);
    EXPECT_NEAR(theta[i], et[i], bound) << i;
  }
  // The decay is visible: plain Adam from the same start ends elsewhere by about lr·wd·Σθ.
  EXPECT_GT(std::abs(theta[3] - 3.0f), 3 * h.lr * wd * 2.9);
}

TEST_P(DenseAdamWTest, ZeroWeightDecayIsPlainAdamBitForBit) {
  const kernels::AdamHyper h;
  std::vector<float> a = {1.0f, -2.0f, 0.25f}, am(3, 0.0f), av(3, 0.0f);
  std::vector<float> b = a, bm = am, bv = av;
  const std::vector<float> g = {0.5f, -0.25f, 1.0f};
  for (int64_t t = 1; t <= 2; ++t) {
    DenseAdamWStep(backend_.get(), h, 0.0f, t, 3, g.data(), a.data(), am.data(), av.data());
    backend_->AdamUpdate(3, h, t, g.data(), b.data(), bm.data(), bv.data());
  }
  ASSERT_TRUE(backend_->Synchronize().ok());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i], b[i]);
    EXPECT_EQ(am[i], bm[i]);
    EXPECT_EQ(av[i], bv[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(HostBackends, DenseAdamWTest,
                         ::testing::ValuesIn(kernels::testing::HostTestBackends()),
                         kernels::testing::BackendParamName);

}  // namespace
}  // namespace sift::worker
