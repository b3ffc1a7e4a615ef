// The per-element arithmetic the CUDA kernels fuse (issue 6), written once for host and device:
// activations (sigmoid, tanh, PReLU), one GRU / AUGRU unit step forward and backward, the
// BCE-with-logits and DIEN aux-loss terms, and Adam's update of one parameter. Each function is the
// reference backend's formula (kernels/reference/*_ops.h) with its order of operations, so on the
// host a float instantiation gives the reference's bits (tests/unit/cuda_elementwise_math_test.cc).
// Header-only, no CUDA include: g++ compiles it for CPU tests, nvcc for kernels. Pure functions,
// thread-safe. Templates over T = float (the kernels) or double (finite-difference checks).
//
// Device notes: products and sums go through Mul/Add/Sub, which on the device are the _rn
// intrinsics, so nvcc never contracts them into FMAs (that would change bits vs the host); the
// transcendental functions are CUDA's expf/tanhf/exp/log1p/log (never the fast-math __expf or
// tanh.approx), which are within 2 ulp (float) / 1 ulp (double) of glibc's, so device results
// match the host to a few ulp, and exactly where only + - * / sqrt are involved (PReLU, Adam).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define SIFT_HD __host__ __device__ __forceinline__
#else
#define SIFT_HD inline
#endif

namespace sift::cuda::math {

// EPS of the aux probabilities: kernels/backend.h kAuxEps (a test checks they are equal; that
// header is not included here because it pulls Abseil into device code).
inline constexpr float kAuxEps = 1e-6f;

// ---- Rounded arithmetic and the math library, per type
// -------------------------------------------
SIFT_HD float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SIFT_HD double Mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SIFT_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SIFT_HD double Add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
SIFT_HD float Sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SIFT_HD double Sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
// std::exp(float) / std::tanh(float) / std::sqrt(float) are expf / tanhf / sqrtf.
SIFT_HD float Exp(float v) { return ::expf(v); }
SIFT_HD double Exp(double v) { return ::exp(v); }
SIFT_HD float Tanh(float v) { return ::tanhf(v); }
SIFT_HD double Tanh(double v) { return ::tanh(v); }
SIFT_HD float Sqrt(float v) { return ::sqrtf(v); }
SIFT_HD double Sqrt(double v) { return ::sqrt(v); }

// ---- Activations -------------------------------------------------------------------------------
// The recurrences' gate sigmoid in T: 1 / (1 + exp(-v)) (ref::Sigmoid<float>: expf).
template <typename T>
SIFT_HD T Sigmoid(T v) {
  return T(1) / Add(T(1), Exp(-v));
}

// The dense layer's sigmoid activation: computed in double, rounded to T once
// (reference::Activate kSigmoid) — NOT the same bits as Sigmoid<float>.
template <typename T>
SIFT_HD T DenseSigmoid(T p) {
  return static_cast<T>(1.0 / Add(1.0, Exp(-static_cast<double>(p))));
}
// d pre from dy through the dense sigmoid, given its output y: dy * y * (1 - y).
template <typename T>
SIFT_HD T DenseSigmoidBackward(T y, T dy) {
  return Mul(Mul(dy, y), Sub(T(1), y));
}

// PReLU (TF's relu form): p for p > 0, slope * p for p < 0, 0 at 0 (and for NaN p).
template <typename T>
SIFT_HD T Prelu(T p, T slope) {
  return p > T(0) ? p : (p < T(0) ? Mul(slope, p) : T(0));
}
// d pre from dy: dy for p > 0, dy * slope for p < 0, 0 at 0.
template <typename T>
SIFT_HD T PreluBackward(T p, T slope, T dy) {
  return p > T(0) ? dy : (p < T(0) ? Mul(dy, slope) : T(0));
}
// This element's term of d slope (exact in double; the reference sums the terms over rows in
// double, in increasing row order): dy * p for p < 0, else 0.
template <typename T>
SIFT_HD double PreluSlopeGradTerm(T p, T dy) {
  return p < T(0) ? Mul(static_cast<double>(dy), static_cast<double>(p)) : 0.0;
}

// ---- GRU (Keras reset-after, model-spec 3.6 a) ------------------------------------------------
// Cache layout (kernels/backend.h GruCacheFloats, 4H per (b, t), row b*T + t): blocks of H
// [z | r | n | hn]: cache[row*4H + block*H + j].
inline constexpr int kGruCacheZ = 0, kGruCacheR = 1, kGruCacheN = 2, kGruCacheHn = 3;

template <typename T>
struct GruUnitState {
  T z, r, n, hn;  // the cache values of this unit
  T h;            // h_t
};

// One unit's step from the gate pre-activations: pre_z = (x W_in + b_in)_z + (h U + b_rec)_z (the
// two sides summed BEFORE rounding to T, as the reference does in double), pre_r likewise,
// xn = (x W_in + b_in)_n, hn = (h_{t-1} U + b_rec)_n, prev = h_{t-1} (0 at t = 0):
//   z = sig(pre_z), r = sig(pre_r), n = tanh(xn + r * hn), h = z * prev + (1 - z) * n.
template <typename T>
SIFT_HD GruUnitState<T> GruUnitForward(T pre_z, T pre_r, T xn, T hn, T prev) {
  GruUnitState<T> s;
  s.z = Sigmoid(pre_z);
  s.r = Sigmoid(pre_r);
  s.hn = hn;
  s.n = Tanh(Add(xn, Mul(s.r, hn)));
  s.h = Add(Mul(s.z, prev), Mul(Sub(T(1), s.z), s.n));
  return s;
}

// The same step from separate input-side projections x* (b_in included) and recurrent-side h*
// (b_rec included), as a kernel reading two GEMM outputs has them: pre_z = xz + hz rounded in T
// (so within 1 ulp of the pre-activation the reference rounds from double).
template <typename T>
SIFT_HD GruUnitState<T> GruUnitForward(T xz, T xr, T xn, T hz, T hr, T hn, T prev) {
  return GruUnitForward(Add(xz, hz), Add(xr, hr), xn, hn, prev);
}

template <typename T>
struct GruUnitGrad {
  T daz, dar, dan;  // d of the input-side pre-activations [z | r | n] (the gx row)
  T dhn;            // d of hn = (h U + b_rec)_n; the recurrent side is [daz | dar | dhn] (gh row)
  T dprev;          // the direct part of d h_{t-1}: dht * z (the caller adds gh U^T to it)
};

// Backward of one unit's step from its cache (z, r, n, hn), prev = h_{t-1} and dht = dh_t + the
// carried gradient (the caller's float sum):
//   dz = dht (prev - n), dn = dht (1 - z), dan = dn (1 - n^2), daz = dz z (1 - z),
//   dar = dan hn r (1 - r), dhn = dan r, dprev = dht z.
template <typename T>
SIFT_HD GruUnitGrad<T> GruUnitBackward(T z, T r, T n, T hn, T prev, T dht) {
  const T dz = Mul(dht, Sub(prev, n));
  const T dn = Mul(dht, Sub(T(1), z));
  GruUnitGrad<T> g;
  g.dan = Mul(dn, Sub(T(1), Mul(n, n)));
  g.daz = Mul(Mul(dz, z), Sub(T(1), z));
  g.dar = Mul(Mul(Mul(g.dan, hn), r), Sub(T(1), r));
  g.dhn = Mul(g.dan, r);
  g.dprev = Mul(dht, z);
  return g;
}

// ---- AUGRU (original-code gating, model-spec 3.6 c) ---------------------------------------------
// Cache layout (AugruCacheFloats, 4H per (b, t), row b*T + t): [gamma | u | c | gh], gh =
// gamma * h'_{t-1}. The step has two element-wise phases around the candidate GEMM:
//   1. gates from [x_t; h'] G + g_b:       gamma, u, gh            (AugruUnitGates)
//   2. candidate from [x_t; gh] C + c_b:   c, h'_t                 (AugruUnitUpdate)
inline constexpr int kAugruCacheGamma = 0, kAugruCacheU = 1, kAugruCacheC = 2, kAugruCacheGh = 3;

template <typename T>
struct AugruGates {
  T gamma, u, gh;
};
// pre_gamma, pre_u: the gate pre-activations (g_b included) of this unit; prev = h'_{t-1}.
template <typename T>
SIFT_HD AugruGates<T> AugruUnitGates(T pre_gamma, T pre_u, T prev) {
  AugruGates<T> g;
  g.gamma = Sigmoid(pre_gamma);
  g.u = Sigmoid(pre_u);
  g.gh = Mul(g.gamma, prev);
  return g;
}

template <typename T>
struct AugruUpdate {
  T c;  // the candidate (cache block 2)
  T h;  // h'_t
};
// pre_c: the candidate pre-activation (c_b included); att = the step's attention weight:
//   c = tanh(pre_c), u' = (1 - att) u, h' = u' prev + (1 - u') c.
template <typename T>
SIFT_HD AugruUpdate<T> AugruUnitUpdate(T pre_c, T u, T att, T prev) {
  AugruUpdate<T> s;
  s.c = Tanh(pre_c);
  const T uk = Mul(Sub(T(1), att), u);
  s.h = Add(Mul(uk, prev), Mul(Sub(T(1), uk), s.c));
  return s;
}

template <typename T>
struct AugruUpdateGrad {
  T dpre_c;  // d of the candidate pre-activation (the dcp row)
  T dpre_u;  // d of the update-gate pre-activation (dg block 1)
  T duk;     // d u'; this unit's term of d att is -duk * u (the reference sums them in double)
  T dprev;   // the direct part of d h'_{t-1}: dht * u'
};
// Backward of phase 2 from the cache (u, c), att, prev = h'_{t-1} and dht = the carried gradient:
//   u' = (1 - att) u, duk = dht (prev - c), dpre_c = dht (1 - u') (1 - c^2),
//   dpre_u = duk (1 - att) u (1 - u), dprev = dht u'.
template <typename T>
SIFT_HD AugruUpdateGrad<T> AugruUnitUpdateBackward(T u, T c, T att, T prev, T dht) {
  const T keep = Sub(T(1), att);
  const T uk = Mul(keep, u);
  AugruUpdateGrad<T> g;
  g.duk = Mul(dht, Sub(prev, c));
  g.dpre_c = Mul(Mul(dht, Sub(T(1), uk)), Sub(T(1), Mul(c, c)));
  g.dpre_u = Mul(Mul(Mul(g.duk, keep), u), Sub(T(1), u));
  g.dprev = Mul(dht, uk);
  return g;
}

template <typename T>
struct AugruGatesGrad {
  T dpre_gamma;  // d of the reset-gate pre-activation (dg block 0)
  T dprev;       // dprev_direct + dgh gamma (the caller adds dg G_h^T to it)
};
// Backward of phase 1 for unit k, given dgh = (dcp C_h^T)_k (the gradient of gh_k), the cache's
// gamma, prev = h'_{t-1} and dprev_direct from AugruUnitUpdateBackward:
//   dpre_gamma = dgh prev gamma (1 - gamma), dprev = dprev_direct + dgh gamma.
// (The reference forms dprev_direct + dgh gamma + the G_h product in one double sum.)
template <typename T>
SIFT_HD AugruGatesGrad<T> AugruUnitGatesBackward(T gamma, T prev, T dgh, T dprev_direct) {
  AugruGatesGrad<T> g;
  g.dpre_gamma = Mul(Mul(Mul(dgh, prev), gamma), Sub(T(1), gamma));
  g.dprev = Add(dprev_direct, Mul(dgh, gamma));
  return g;
}

// ---- Losses (model-spec 4; computed in double like the reference) ------------------------------
// BCE(y, l) = max(l, 0) - l y + log(1 + exp(-|l|)) in double (summed in double by the caller).
template <typename T>
SIFT_HD double BceWithLogitsTerm(T logit, T label) {
  const double l = static_cast<double>(logit), y = static_cast<double>(label);
  const double relu = l < 0.0 ? 0.0 : l;  // std::max(l, 0.0): NaN stays NaN
  return Add(Sub(relu, Mul(l, y)), ::log1p(Exp(-::fabs(l))));
}
// scale * (sigmoid(l) - y), sigmoid in double, rounded to T once (the dlogits term, +=).
template <typename T>
SIFT_HD T BceWithLogitsGrad(T logit, T label, T scale) {
  const double l = static_cast<double>(logit);
  const double s = 1.0 / Add(1.0, Exp(-l));
  return static_cast<T>(Mul(static_cast<double>(scale), Sub(s, static_cast<double>(label))));
}

template <typename T>
struct AuxTerm {
  double loss;   // -log(sig(lp) + eps) - log(max(sig(-ln) - eps, eps))
  T dpos, dneg;  // scale * d loss / d logit, rounded once (the += terms)
};
// One unmasked pair of the DIEN aux loss (backend.h AuxLoss; a masked pair is skipped by the
// caller and contributes exactly 0). The clamped branch (sig(-ln) - eps <= eps) has dneg = 0.
template <typename T>
SIFT_HD AuxTerm<T> AuxLossTerm(T pos_logit, T neg_logit, T scale) {
  const double eps = static_cast<double>(kAuxEps);
  const double sp = 1.0 / Add(1.0, Exp(-static_cast<double>(pos_logit)));
  const double un = 1.0 / Add(1.0, Exp(static_cast<double>(neg_logit)));  // sigmoid(-ln)
  const bool clamped = Sub(un, eps) <= eps;
  AuxTerm<T> a;
  a.loss = Sub(-::log(Add(sp, eps)), ::log(clamped ? eps : Sub(un, eps)));
  const double sc = static_cast<double>(scale);
  a.dpos = static_cast<T>(Mul(sc, -Mul(sp, Sub(1.0, sp)) / Add(sp, eps)));
  a.dneg = static_cast<T>(Mul(sc, clamped ? 0.0 : Mul(un, Sub(1.0, un)) / Sub(un, eps)));
  return a;
}

// ---- Adam (model-spec 5.1, Keras form) ----------------------------------------------------------
// lr_t = lr sqrt(1 - b2^t) / (1 - b1^t) in double (reference::AdamStepSize); the kernels get it
// rounded to float once, computed on the host per step. t >= 1.
SIFT_HD double AdamStepSize(float lr, float beta1, float beta2, int64_t t) {
  const double b1t = ::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double b2t = ::pow(static_cast<double>(beta2), static_cast<double>(t));
  return static_cast<double>(lr) * ::sqrt(Sub(1.0, b2t)) / Sub(1.0, b1t);
}

// One parameter: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
// param -= lr_t m / (sqrt(v) + eps). All in T, in the reference's order.
template <typename T>
SIFT_HD void AdamParamUpdate(T lr_t, T beta1, T beta2, T epsilon, T grad, T* param, T* m, T* v) {
  *m = Add(Mul(beta1, *m), Mul(Sub(T(1), beta1), grad));
  *v = Add(Mul(beta2, *v), Mul(Mul(Sub(T(1), beta2), grad), grad));
  *param = Sub(*param, Mul(lr_t, *m) / Add(Sqrt(*v), epsilon));
}

}  // namespace sift::cuda::math
