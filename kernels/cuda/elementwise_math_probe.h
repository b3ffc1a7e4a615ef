// Every function of elementwise_math.h evaluated on one set of kProbeInputs arguments, so a GPU
// test can compare the device's results with the host's on the same inputs (and nvcc compiles
// every function for sm_80/sm_90). ProbeElementwiseMath is host/device (no CUDA include here);
// ProbeElementwiseMathOnDevice runs it in a kernel on the current device
// (elementwise_math_probe.cu, target sift_cuda). Thread-safe; the device call is synchronous.
#pragma once

#include <vector>

#include "common/status.h"
#include "kernels/cuda/elementwise_math.h"

namespace sift::cuda::math {

// Arguments a[0..6), each expected in [-1, 1]; outputs, all as double (see the body for which).
inline constexpr int kProbeInputs = 6;
inline constexpr int kProbeOutputs = 37;

// Which outputs involve only + - * / sqrt in float (bit-identical on host and device) rather than
// the math library (expf, tanhf, exp, log1p, log, pow: a few ulp apart).
SIFT_HD bool ProbeOutputIsExact(int k) { return (k >= 3 && k <= 5) || k >= 34; }
// Which outputs are computed in double (losses, Adam's step size) rather than float.
SIFT_HD bool ProbeOutputIsDouble(int k) { return k == 28 || k == 30 || k == 33; }

SIFT_HD void ProbeElementwiseMath(const float* a, double* out) {
  int k = 0;
  const auto put = [&](double v) { out[k++] = v; };
  // Activations: 0-6.
  put(Sigmoid(8.0f * a[0]));
  put(Tanh(8.0f * a[0]));
  put(DenseSigmoid(8.0f * a[0]));
  put(Prelu(a[0], a[1]));
  put(PreluBackward(a[0], a[1], a[2]));
  put(PreluSlopeGradTerm(a[0], a[2]));
  put(DenseSigmoidBackward(DenseSigmoid(8.0f * a[0]), a[2]));
  // GRU unit forward 7-11, backward 12-16.
  const GruUnitState<float> s = GruUnitForward(4.0f * a[0], 4.0f * a[1], 2.0f * a[2], a[3], a[4]);
  put(s.z);
  put(s.r);
  put(s.n);
  put(s.hn);
  put(s.h);
  const GruUnitGrad<float> g = GruUnitBackward(s.z, s.r, s.n, s.hn, a[4], a[5]);
  put(g.daz);
  put(g.dar);
  put(g.dan);
  put(g.dhn);
  put(g.dprev);
  // AUGRU gates 17-19, update 20-21, update backward 22-25, gates backward 26-27.
  const float att = 0.5f * (a[3] + 1.0f);
  const AugruGates<float> ag = AugruUnitGates(4.0f * a[0], 4.0f * a[1], a[4]);
  put(ag.gamma);
  put(ag.u);
  put(ag.gh);
  const AugruUpdate<float> au = AugruUnitUpdate(2.0f * a[2], ag.u, att, a[4]);
  put(au.c);
  put(au.h);
  const AugruUpdateGrad<float> aug = AugruUnitUpdateBackward(ag.u, au.c, att, a[4], a[5]);
  put(aug.dpre_c);
  put(aug.dpre_u);
  put(aug.duk);
  put(aug.dprev);
  const AugruGatesGrad<float> agg = AugruUnitGatesBackward(ag.gamma, a[4], a[2], aug.dprev);
  put(agg.dpre_gamma);
  put(agg.dprev);
  // Losses 28-32.
  const float label = a[1] > 0.0f ? 1.0f : 0.0f;
  put(BceWithLogitsTerm(20.0f * a[0], label));
  put(BceWithLogitsGrad(20.0f * a[0], label, 0.25f));
  const AuxTerm<float> aux = AuxLossTerm(25.0f * a[0], 25.0f * a[1], 0.1f);
  put(aux.loss);
  put(aux.dpos);
  put(aux.dneg);
  // Adam 33-36: the step size at t = 3, then one update from that step size rounded to float.
  const double step = AdamStepSize(0.01f, 0.9f, 0.999f, 3);
  put(step);
  float param = a[0], m = 0.1f * a[1], v = 0.01f * a[2] * a[2];
  AdamParamUpdate(static_cast<float>(step), 0.9f, 0.999f, 1e-7f, 0.1f * a[5], &param, &m, &v);
  put(param);
  put(m);
  put(v);
}

// Runs ProbeElementwiseMath on the current CUDA device for args.size() / kProbeInputs argument
// sets (args.size() must be a multiple of kProbeInputs); returns the outputs, kProbeOutputs per
// set. Errors (no device, a failed CUDA call) come back as a Status naming the call.
StatusOr<std::vector<double>> ProbeElementwiseMathOnDevice(const std::vector<float>& args);

}  // namespace sift::cuda::math
