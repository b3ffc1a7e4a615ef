// Central-difference gradient checks shared by the model and model-block tests
// (tests/unit/worker/model_gradient_test.cc, tests/unit/worker/models/).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace sift::worker::fd_check {

// Tolerances. The model is float and piecewise smooth: PReLU has a kink at 0 (and top-k a jump
// where the selection changes), so a central difference whose step straddles a kink returns a
// one-sided average, not the derivative; with a batch of one row, a hidden unit within ~1e-2 of
// its kink is common. Each check therefore tries a step of 1e-3 and, if that disagrees, 1e-4 (a
// step small enough to resolve any kink these fixed inputs have). The loss is a double sum of
// float terms, so its rounding noise is ~1e-9 here (measured) and a central difference carries
// ~1e-6 / eps of noise, well below the absolute floor. A real gradient bug (a missed term, a
// wrong factor or slot) is off by far more than 1% at every step size.
constexpr double kSteps[] = {1e-3, 1e-4};
constexpr double kRelTol = 1e-2;
constexpr double kAbsTol = 5e-5;

// Central difference of the loss along v applied to the floats x, with the smallest error
// against `analytic` over kSteps; returns that error (and the fd value).
template <typename LossFn>
double BestFdError(LossFn&& loss, float* x, const std::vector<float>& v, double analytic,
                   double* fd_out) {
  std::vector<float> saved(x, x + v.size());
  double best = 1e300;
  for (double eps : kSteps) {
    for (size_t i = 0; i < v.size(); ++i) x[i] = saved[i] + static_cast<float>(eps * v[i]);
    const double plus = loss();
    for (size_t i = 0; i < v.size(); ++i) x[i] = saved[i] - static_cast<float>(eps * v[i]);
    const double minus = loss();
    std::copy(saved.begin(), saved.end(), x);
    const double fd = (plus - minus) / (2 * eps);
    if (std::abs(fd - analytic) < best) {
      best = std::abs(fd - analytic);
      *fd_out = fd;
    }
    if (best <= kRelTol * std::abs(analytic) + kAbsTol) break;
  }
  return best;
}

}  // namespace sift::worker::fd_check
