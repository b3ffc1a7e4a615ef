// The naive loops behind ReferenceBackend's memory, GEMM, dense, embedding, attention, softmax,
// loss and Adam ops (the contracts are in kernels/backend.h), as templates over the element type
// T (float for the backend, double for finite-difference gradient checks in tests). Plain loops in
// the order the maths is written, long sums accumulated in double; never optimised: the oracle.
// Pure functions over caller-owned memory; thread-safe for disjoint outputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/backend.h"

namespace sift::kernels::reference {

template <typename T>
void Fill(int64_t n, T value, T* p) {
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

template <typename T>
void Copy(int64_t outer, int64_t rows, int64_t cols, const T* src, int64_t src_outer,
          int64_t src_row, T* dst, int64_t dst_outer, int64_t dst_row, bool accumulate) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const T v = src[o * src_outer + r * src_row + c];
        T& d = dst[o * dst_outer + r * dst_row + c];
        d = accumulate ? d + v : v;
      }
    }
  }
}

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const T av = trans_a ? a[l * lda + i] : a[i * lda + l];
        const T bv = trans_b ? b[j * ldb + l] : b[l * ldb + j];
        s += static_cast<double>(av) * static_cast<double>(bv);
      }
      const double old = beta == T(0) ? 0.0 : static_cast<double>(beta) * c[i * ldc + j];
      c[i * ldc + j] = static_cast<T>(static_cast<double>(alpha) * s + old);
    }
  }
}

// The activation and its derivative w.r.t. the pre-activation (model-spec 3.2: PReLU from TF's
// relu form, derivative 0 at 0).
template <typename T>
T Activate(Activation act, T p, T slope) {
  switch (act) {
    case Activation::kNone:
      return p;
    case Activation::kSigmoid:
      return static_cast<T>(1.0 / (1.0 + std::exp(-static_cast<double>(p))));
    case Activation::kPrelu:
      return p > T(0) ? p : (p < T(0) ? slope * p : T(0));
  }
  return p;
}

template <typename T>
void DenseForward(const DenseDims& d, const T* x, int64_t ldx, const T* w, const T* b,
                  const T* slope, T* pre, T* y) {
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int o = 0; o < d.out; ++o) {
      double s = b != nullptr ? static_cast<double>(b[o]) : 0.0;
      for (int i = 0; i < d.in; ++i) {
        s += static_cast<double>(x[r * ldx + i]) * static_cast<double>(w[int64_t{i} * d.out + o]);
      }
      const T p = static_cast<T>(s);
      pre[r * d.out + o] = p;
      y[r * d.out + o] = Activate<T>(d.act, p, d.act == Activation::kPrelu ? slope[o] : T(0));
    }
  }
}

// workspace: rows * out values (holds d loss / d pre).
template <typename T>
void DenseBackward(const DenseDims& d, const T* x, int64_t ldx, const T* w, const T* slope,
                   const T* pre, const T* y, const T* dy, T* dx, int64_t lddx, T* dw, T* db,
                   T* dslope, T* workspace) {
  T* dpre = workspace;
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int o = 0; o < d.out; ++o) {
      const int64_t idx = r * d.out + o;
      T g = dy[idx];
      switch (d.act) {
        case Activation::kNone:
          break;
        case Activation::kSigmoid:
          g = g * y[idx] * (T(1) - y[idx]);
          break;
        case Activation::kPrelu:
          g = pre[idx] > T(0) ? g : (pre[idx] < T(0) ? g * slope[o] : T(0));
          break;
      }
      dpre[idx] = g;
    }
  }
  if (d.act == Activation::kPrelu && dslope != nullptr) {
    for (int o = 0; o < d.out; ++o) {
      double s = 0.0;
      for (int64_t r = 0; r < d.rows; ++r) {
        const T p = pre[r * d.out + o];
        if (p < T(0)) s += static_cast<double>(dy[r * d.out + o]) * static_cast<double>(p);
      }
      dslope[o] += static_cast<T>(s);
    }
  }
  if (dx != nullptr) {
    for (int64_t r = 0; r < d.rows; ++r) {
      for (int i = 0; i < d.in; ++i) {
        double s = 0.0;
        for (int o = 0; o < d.out; ++o) {
          s += static_cast<double>(dpre[r * d.out + o]) *
               static_cast<double>(w[int64_t{i} * d.out + o]);
        }
        dx[r * lddx + i] += static_cast<T>(s);
      }
    }
  }
  if (dw != nullptr) {
    for (int i = 0; i < d.in; ++i) {
      for (int o = 0; o < d.out; ++o) {
        double s = 0.0;
        for (int64_t r = 0; r < d.rows; ++r) {
          s += static_cast<double>(x[r * ldx + i]) * static_cast<double>(dpre[r * d.out + o]);
        }
        dw[int64_t{i} * d.out + o] += static_cast<T>(s);
      }
    }
  }
  if (db != nullptr) {
    for (int o = 0; o < d.out; ++o) {
      double s = 0.0;
      for (int64_t r = 0; r < d.rows; ++r) s += static_cast<double>(dpre[r * d.out + o]);
      db[o] += static_cast<T>(s);
    }
  }
}

template <typename T>
void GatherRows(int64_t n, int dim, const T* rows, const int32_t* inv, const T* mask, T* out,
                int64_t ld_out) {
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < dim; ++c) {
      out[i * ld_out + c] =
          inv[i] < 0 ? T(0) : rows[int64_t{inv[i]} * dim + c] * (mask != nullptr ? mask[i] : T(1));
    }
  }
}

template <typename T>
void SegmentSumRows(int64_t n, int dim, const T* dout, int64_t ld_dout, const int32_t* inv,
                    const T* mask, int64_t /*num_unique*/, T* drows) {
  for (int64_t i = 0; i < n; ++i) {
    if (inv[i] < 0) continue;
    for (int c = 0; c < dim; ++c) {
      drows[int64_t{inv[i]} * dim + c] +=
          dout[i * ld_dout + c] * (mask != nullptr ? mask[i] : T(1));
    }
  }
}

// p[0..n) = softmax(s') with s'_j = s_j where mask_j != 0 (or mask is null), else kMaskedScore.
template <typename T>
void MaskedSoftmaxRow(int n, const T* s, const T* mask, T* p) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < n; ++j) {
    const double v = (mask == nullptr || mask[j] != T(0)) ? static_cast<double>(s[j])
                                                          : static_cast<double>(kMaskedScore);
    mx = std::max(mx, v);
  }
  double sum = 0.0;
  for (int j = 0; j < n; ++j) {
    const double v = (mask == nullptr || mask[j] != T(0)) ? static_cast<double>(s[j])
                                                          : static_cast<double>(kMaskedScore);
    sum += std::exp(v - mx);
  }
  for (int j = 0; j < n; ++j) {
    const double v = (mask == nullptr || mask[j] != T(0)) ? static_cast<double>(s[j])
                                                          : static_cast<double>(kMaskedScore);
    p[j] = static_cast<T>(std::exp(v - mx) / sum);
  }
}

template <typename T>
void MaskedSoftmaxForward(int64_t rows, int n, const T* scores, const T* mask, T* p) {
  for (int64_t r = 0; r < rows; ++r) {
    MaskedSoftmaxRow<T>(n, scores + r * n, mask != nullptr ? mask + r * n : nullptr, p + r * n);
  }
}

template <typename T>
void MaskedSoftmaxBackward(int64_t rows, int n, const T* p, const T* mask, const T* dp,
                           T* dscores) {
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (int j = 0; j < n; ++j) dot += static_cast<double>(p[r * n + j]) * dp[r * n + j];
    for (int j = 0; j < n; ++j) {
      if (mask != nullptr && mask[r * n + j] == T(0)) continue;
      dscores[r * n + j] += static_cast<T>(p[r * n + j] * (dp[r * n + j] - dot));
    }
  }
}

template <typename T>
void DotAttentionForward(int64_t batch, int n, int d, const T* q, int64_t ldq, const T* k,
                         const T* mask, T* alpha, T* out, int64_t ldout) {
  for (int64_t b = 0; b < batch; ++b) {
    const T* kb = k + b * n * d;
    T* ab = alpha + b * n;
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      for (int c = 0; c < d; ++c) s += static_cast<double>(q[b * ldq + c]) * kb[int64_t{j} * d + c];
      ab[j] = static_cast<T>(s);  // raw score, replaced by its softmax below
    }
    MaskedSoftmaxRow<T>(n, ab, mask != nullptr ? mask + b * n : nullptr, ab);
    for (int c = 0; c < d; ++c) {
      double s = 0.0;
      for (int j = 0; j < n; ++j) s += static_cast<double>(ab[j]) * kb[int64_t{j} * d + c];
      out[b * ldout + c] = static_cast<T>(s);
    }
  }
}

template <typename T>
void DotAttentionBackward(int64_t batch, int n, int d, const T* q, int64_t ldq, const T* k,
                          const T* mask, const T* alpha, const T* dout, int64_t lddout, T* dq,
                          int64_t lddq, T* dk) {
  for (int64_t b = 0; b < batch; ++b) {
    const T* kb = k + b * n * d;
    const T* ab = alpha + b * n;
    const T* g = dout + b * lddout;
    // dalpha_j = <dout, k_j>; ds_j = alpha_j (dalpha_j - sum_l alpha_l dalpha_l), 0 if masked.
    double dot = 0.0;
    for (int j = 0; j < n; ++j) {
      double da = 0.0;
      for (int c = 0; c < d; ++c) da += static_cast<double>(g[c]) * kb[int64_t{j} * d + c];
      dot += static_cast<double>(ab[j]) * da;
    }
    for (int j = 0; j < n; ++j) {
      double da = 0.0;
      for (int c = 0; c < d; ++c) da += static_cast<double>(g[c]) * kb[int64_t{j} * d + c];
      const bool valid = mask == nullptr || mask[b * n + j] != T(0);
      const double ds = valid ? static_cast<double>(ab[j]) * (da - dot) : 0.0;
      if (dq != nullptr) {
        for (int c = 0; c < d; ++c) dq[b * lddq + c] += static_cast<T>(ds * kb[int64_t{j} * d + c]);
      }
      if (dk != nullptr) {
        for (int c = 0; c < d; ++c) {
          dk[(b * n + j) * d + c] +=
              static_cast<T>(static_cast<double>(ab[j]) * g[c] + ds * q[b * ldq + c]);
        }
      }
    }
  }
}

template <typename T>
void TopKMask(int64_t batch, int n, int k, const T* alpha, T* rho) {
  for (int64_t b = 0; b < batch; ++b) {
    const T* a = alpha + b * n;
    for (int j = 0; j < n; ++j) {
      int rank = 0;  // slots ahead of j: larger, or equal with a lower index
      for (int l = 0; l < n; ++l) {
        if (a[l] > a[j] || (a[l] == a[j] && l < j)) ++rank;
      }
      rho[b * n + j] = (rank < k && a[j] > T(0)) ? T(1) : T(0);
    }
  }
}

template <typename T>
void DampedMeanForward(int64_t batch, int n, int d, const T* x, const T* rho, T* out,
                       int64_t ldout) {
  for (int64_t b = 0; b < batch; ++b) {
    double den = 1.0;
    for (int j = 0; j < n; ++j) den += rho[b * n + j];
    for (int c = 0; c < d; ++c) {
      double s = 0.0;
      for (int j = 0; j < n; ++j) s += static_cast<double>(rho[b * n + j]) * x[(b * n + j) * d + c];
      out[b * ldout + c] = static_cast<T>(s / den);
    }
  }
}

template <typename T>
void DampedMeanBackward(int64_t batch, int n, int d, const T* rho, const T* dout, int64_t lddout,
                        T* dx) {
  for (int64_t b = 0; b < batch; ++b) {
    double den = 1.0;
    for (int j = 0; j < n; ++j) den += rho[b * n + j];
    for (int j = 0; j < n; ++j) {
      for (int c = 0; c < d; ++c) {
        dx[(b * n + j) * d + c] +=
            static_cast<T>(static_cast<double>(rho[b * n + j]) * dout[b * lddout + c] / den);
      }
    }
  }
}

template <typename T>
double BceWithLogits(int64_t n, const T* logits, const T* labels, T scale, T* dlogits) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double l = logits[i], y = labels[i];
    total += std::max(l, 0.0) - l * y + std::log1p(std::exp(-std::abs(l)));
    if (dlogits != nullptr) {
      const double s = 1.0 / (1.0 + std::exp(-l));
      dlogits[i] += static_cast<T>(static_cast<double>(scale) * (s - y));
    }
  }
  return total;
}

template <typename T>
double AuxLoss(int64_t n, const T* pos_logits, const T* neg_logits, const T* mask, T scale, T* dpos,
               T* dneg) {
  const double eps = static_cast<double>(kAuxEps);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (mask != nullptr && mask[i] == T(0)) continue;
    const double sp = 1.0 / (1.0 + std::exp(-static_cast<double>(pos_logits[i])));
    const double un = 1.0 / (1.0 + std::exp(static_cast<double>(neg_logits[i])));  // sigmoid(-ln)
    const bool clamped = un - eps <= eps;
    total += -std::log(sp + eps) - std::log(clamped ? eps : un - eps);
    if (dpos != nullptr) {
      dpos[i] += static_cast<T>(static_cast<double>(scale) * (-sp * (1.0 - sp) / (sp + eps)));
    }
    if (dneg != nullptr) {
      const double g = clamped ? 0.0 : un * (1.0 - un) / (un - eps);
      dneg[i] += static_cast<T>(static_cast<double>(scale) * g);
    }
  }
  return total;
}

// The bias-corrected step lr * sqrt(1 - b2^t) / (1 - b1^t), in double.
inline double AdamStepSize(const AdamHyper& h, int64_t t) {
  const double b1t = std::pow(static_cast<double>(h.beta1), static_cast<double>(t));
  const double b2t = std::pow(static_cast<double>(h.beta2), static_cast<double>(t));
  return static_cast<double>(h.lr) * std::sqrt(1.0 - b2t) / (1.0 - b1t);
}

template <typename T>
void AdamUpdate(int64_t n, const AdamHyper& h, int64_t t, const T* grad, T* param, T* m, T* v) {
  const T lr_t = static_cast<T>(AdamStepSize(h, t));
  const T b1 = h.beta1, b2 = h.beta2, eps = h.epsilon;
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i];
    m[i] = b1 * m[i] + (T(1) - b1) * g;
    v[i] = b2 * v[i] + (T(1) - b2) * g * g;
    param[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
  }
}

}  // namespace sift::kernels::reference
