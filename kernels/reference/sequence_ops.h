// The naive reference loops of the sequence ops of kernels/backend.h (DIEN attention features,
// Keras reset-after GRU, original-code AUGRU; model-spec 3.6), written in the order the maths is
// written. Templates over the element type R (float for ReferenceBackend, double for the tests'
// finite-difference checks); long sums accumulate in double. Pure functions, no allocation: the
// caller passes cache and workspace sized by the *Floats() functions of kernels/backend.h (counted
// in elements of R). Cache layouts (both recurrences, one row of 4H per (b, t), rows b*T + t):
//   GRU:   [z | r | n | hn]       hn = h_{t-1} U_n + b_rec_n (the term the reset gate multiplies)
//   AUGRU: [gamma | u | c | gh]   gh = gamma * h'_{t-1}
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/backend.h"

namespace sift::kernels::ref {

template <typename R>
R Sigmoid(R v) {
  return R(1) / (R(1) + std::exp(-v));
}

// c[b,t] = [qp_b; h_bt; qp_b - h_bt; qp_b * h_bt].
template <typename R>
void AttentionFeaturesForward(int64_t batch, int time, int hidden, const R* qp, const R* h, R* c) {
  const int64_t hd = hidden;
  for (int64_t b = 0; b < batch; ++b) {
    for (int t = 0; t < time; ++t) {
      const R* hr = h + (b * time + t) * hd;
      R* cr = c + (b * time + t) * 4 * hd;
      for (int64_t j = 0; j < hd; ++j) {
        const R q = qp[b * hd + j];
        cr[j] = q;
        cr[hd + j] = hr[j];
        cr[2 * hd + j] = q - hr[j];
        cr[3 * hd + j] = q * hr[j];
      }
    }
  }
}

// dqp += sum_t (dc0 + dc2 + dc3 * h), dh += dc1 - dc2 + dc3 * qp. Both nullable.
template <typename R>
void AttentionFeaturesBackward(int64_t batch, int time, int hidden, const R* qp, const R* h,
                               const R* dc, R* dqp, R* dh) {
  const int64_t hd = hidden;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < hd; ++j) {
      const R q = qp[b * hd + j];
      double sum = 0;
      for (int t = 0; t < time; ++t) {
        const int64_t row = b * time + t;
        const R* dcr = dc + row * 4 * hd;
        const R hv = h[row * hd + j];
        sum += double(dcr[j]) + double(dcr[2 * hd + j]) + double(dcr[3 * hd + j]) * double(hv);
        if (dh != nullptr) dh[row * hd + j] += dcr[hd + j] - dcr[2 * hd + j] + dcr[3 * hd + j] * q;
      }
      if (dqp != nullptr) dqp[b * hd + j] += R(sum);
    }
  }
}

// Keras reset-after GRU (backend.h GruForward). The workspace is not used.
template <typename R>
void GruForward(const RnnDims& d, const R* x, const R* w_in, const R* w_rec, const R* b_in,
                const R* b_rec, R* h, R* cache) {
  const int64_t H = d.hidden, G = 3 * H, in = d.in;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int t = 0; t < d.time; ++t) {
      const int64_t row = b * d.time + t;
      const R* xr = x + row * in;
      const R* hp = t > 0 ? h + (row - 1) * H : nullptr;  // h_{t-1}; nullptr = the zero state
      R* cr = cache + row * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        double xs[3], hs[3];  // input and recurrent pre-activations of z, r, n for unit j
        for (int g = 0; g < 3; ++g) {
          const int64_t col = g * H + j;
          double sx = b_in[col], sh = b_rec[col];
          for (int64_t k = 0; k < in; ++k) sx += double(xr[k]) * double(w_in[k * G + col]);
          if (hp != nullptr) {
            for (int64_t k = 0; k < H; ++k) sh += double(hp[k]) * double(w_rec[k * G + col]);
          }
          xs[g] = sx;
          hs[g] = sh;
        }
        const R z = Sigmoid<R>(R(xs[0] + hs[0]));
        const R r = Sigmoid<R>(R(xs[1] + hs[1]));
        const R hn = R(hs[2]);
        const R n = std::tanh(R(xs[2]) + r * hn);
        const R prev = hp != nullptr ? hp[j] : R(0);
        cr[j] = z;
        cr[H + j] = r;
        cr[2 * H + j] = n;
        cr[3 * H + j] = hn;
        h[row * H + j] = z * prev + (R(1) - z) * n;
      }
    }
  }
}

// Backpropagation through time of GruForward. Workspace (>= GruWorkspaceFloats): the input-side
// gate gradients gx [B*T,3H], the recurrent-side ones gh [B*T,3H] (they differ in the n block:
// gh_n = gx_n * r), then the carried state gradient [H].
template <typename R>
void GruBackward(const RnnDims& d, const R* x, const R* w_in, const R* w_rec, const R* h,
                 const R* cache, const R* dh, R* dx, R* dw_in, R* dw_rec, R* db_in, R* db_rec,
                 R* workspace) {
  const int64_t H = d.hidden, G = 3 * H, in = d.in, rows = d.batch * d.time;
  R* gx = workspace;
  R* gh = gx + rows * G;
  R* carry = gh + rows * G;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t j = 0; j < H; ++j) carry[j] = 0;
    for (int t = d.time - 1; t >= 0; --t) {
      const int64_t row = b * d.time + t;
      const R* cr = cache + row * 4 * H;
      const R* hp = t > 0 ? h + (row - 1) * H : nullptr;
      R* gxr = gx + row * G;
      R* ghr = gh + row * G;
      for (int64_t j = 0; j < H; ++j) {
        const R z = cr[j], r = cr[H + j], n = cr[2 * H + j], hn = cr[3 * H + j];
        const R prev = hp != nullptr ? hp[j] : R(0);
        const R dht = dh[row * H + j] + carry[j];
        const R dz = dht * (prev - n);
        const R dn = dht * (R(1) - z);
        const R dan = dn * (R(1) - n * n);
        const R daz = dz * z * (R(1) - z);
        const R dar = dan * hn * r * (R(1) - r);
        gxr[j] = daz;
        gxr[H + j] = dar;
        gxr[2 * H + j] = dan;
        ghr[j] = daz;
        ghr[H + j] = dar;
        ghr[2 * H + j] = dan * r;
        carry[j] = dht * z;  // the direct path h_t = z * h_{t-1} + ...
      }
      for (int64_t k = 0; k < H; ++k) {
        double s = carry[k];
        for (int64_t col = 0; col < G; ++col) s += double(ghr[col]) * double(w_rec[k * G + col]);
        carry[k] = R(s);
      }
      if (dx != nullptr) {
        for (int64_t k = 0; k < in; ++k) {
          double s = 0;
          for (int64_t col = 0; col < G; ++col) s += double(gxr[col]) * double(w_in[k * G + col]);
          dx[row * in + k] += R(s);
        }
      }
    }
  }
  // Weight and bias gradients: sums over every (b, t) in double. h_{t-1} = 0 at t = 0.
  for (int64_t col = 0; col < G; ++col) {
    double si = 0, sr = 0;
    for (int64_t row = 0; row < rows; ++row) {
      si += gx[row * G + col];
      sr += gh[row * G + col];
    }
    db_in[col] += R(si);
    db_rec[col] += R(sr);
  }
  for (int64_t k = 0; k < in; ++k) {
    for (int64_t col = 0; col < G; ++col) {
      double s = 0;
      for (int64_t row = 0; row < rows; ++row) s += double(x[row * in + k]) * gx[row * G + col];
      dw_in[k * G + col] += R(s);
    }
  }
  for (int64_t k = 0; k < H; ++k) {
    for (int64_t col = 0; col < G; ++col) {
      double s = 0;
      for (int64_t b = 0; b < d.batch; ++b) {
        for (int t = 1; t < d.time; ++t) {
          const int64_t row = b * d.time + t;
          s += double(h[(row - 1) * H + k]) * gh[row * G + col];
        }
      }
      dw_rec[k * G + col] += R(s);
    }
  }
}

// AUGRU with the original-code gating (backend.h AugruForward). The workspace is not used.
template <typename R>
void AugruForward(const RnnDims& d, const R* x, const R* att, const R* g_w, const R* g_b,
                  const R* c_w, const R* c_b, R* hs, R* cache) {
  const int64_t H = d.hidden, in = d.in;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int t = 0; t < d.time; ++t) {
      const int64_t row = b * d.time + t;
      const R* xr = x + row * in;
      const R* hp = t > 0 ? hs + (row - 1) * H : nullptr;
      R* cr = cache + row * 4 * H;
      for (int64_t col = 0; col < 2 * H; ++col) {  // [gamma | u]
        double s = g_b[col];
        for (int64_t k = 0; k < in; ++k) s += double(xr[k]) * double(g_w[k * 2 * H + col]);
        if (hp != nullptr) {
          for (int64_t k = 0; k < H; ++k) {
            s += double(hp[k]) * double(g_w[(in + k) * 2 * H + col]);
          }
        }
        cr[col] = Sigmoid<R>(R(s));
      }
      for (int64_t k = 0; k < H; ++k) cr[3 * H + k] = hp != nullptr ? cr[k] * hp[k] : R(0);
      for (int64_t j = 0; j < H; ++j) {
        double s = c_b[j];
        for (int64_t k = 0; k < in; ++k) s += double(xr[k]) * double(c_w[k * H + j]);
        for (int64_t k = 0; k < H; ++k) s += double(cr[3 * H + k]) * double(c_w[(in + k) * H + j]);
        cr[2 * H + j] = std::tanh(R(s));
      }
      const R keep_scale = R(1) - att[row];
      for (int64_t j = 0; j < H; ++j) {
        const R u = keep_scale * cr[H + j];  // u' = (1 - att) u
        const R prev = hp != nullptr ? hp[j] : R(0);
        hs[row * H + j] = u * prev + (R(1) - u) * cr[2 * H + j];
      }
    }
  }
}

// Backpropagation through time of AugruForward from the gradient of the final state. Workspace
// (>= AugruWorkspaceFloats): the gate pre-activation gradients dg [B*T,2H], the candidate
// pre-activation gradients dcp [B*T,H], then the carried state gradient [H] and dgh [H].
template <typename R>
void AugruBackward(const RnnDims& d, const R* x, const R* att, const R* g_w, const R* c_w,
                   const R* hs, const R* cache, const R* dlast, R* dx, R* datt, R* dg_w, R* dg_b,
                   R* dc_w, R* dc_b, R* workspace) {
  const int64_t H = d.hidden, in = d.in, rows = d.batch * d.time;
  R* dg = workspace;
  R* dcp = dg + rows * 2 * H;
  R* carry = dcp + rows * H;
  R* dgh = carry + H;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t j = 0; j < H; ++j) carry[j] = dlast[b * H + j];
    for (int t = d.time - 1; t >= 0; --t) {
      const int64_t row = b * d.time + t;
      const R* cr = cache + row * 4 * H;
      const R* hp = t > 0 ? hs + (row - 1) * H : nullptr;
      const R a = att[row];
      R* dgr = dg + row * 2 * H;
      R* dcr = dcp + row * H;
      double da = 0;
      for (int64_t j = 0; j < H; ++j) {
        const R u = cr[H + j], c = cr[2 * H + j];
        const R prev = hp != nullptr ? hp[j] : R(0);
        const R uk = (R(1) - a) * u;
        const R dht = carry[j];
        const R duk = dht * (prev - c);
        dcr[j] = dht * (R(1) - uk) * (R(1) - c * c);
        dgr[H + j] = duk * (R(1) - a) * u * (R(1) - u);
        da -= double(duk) * double(u);
        carry[j] = dht * uk;  // the direct path h'_t = u' h'_{t-1} + ...
      }
      if (datt != nullptr) datt[row] += R(da);
      for (int64_t k = 0; k < H; ++k) {  // d(gamma * h'_{t-1})
        double s = 0;
        for (int64_t j = 0; j < H; ++j) s += double(dcr[j]) * double(c_w[(in + k) * H + j]);
        dgh[k] = R(s);
      }
      for (int64_t k = 0; k < H; ++k) {
        const R gamma = cr[k];
        const R prev = hp != nullptr ? hp[k] : R(0);
        dgr[k] = dgh[k] * prev * gamma * (R(1) - gamma);
      }
      for (int64_t k = 0; k < H; ++k) {
        double s = double(carry[k]) + double(dgh[k]) * double(cr[k]);
        for (int64_t col = 0; col < 2 * H; ++col) {
          s += double(dgr[col]) * double(g_w[(in + k) * 2 * H + col]);
        }
        carry[k] = R(s);
      }
      if (dx != nullptr) {
        for (int64_t k = 0; k < in; ++k) {
          double s = 0;
          for (int64_t col = 0; col < 2 * H; ++col) {
            s += double(dgr[col]) * double(g_w[k * 2 * H + col]);
          }
          for (int64_t j = 0; j < H; ++j) s += double(dcr[j]) * double(c_w[k * H + j]);
          dx[row * in + k] += R(s);
        }
      }
    }
  }
  // Weight and bias gradients: sums over every (b, t) in double. h'_{t-1} = 0 at t = 0.
  for (int64_t col = 0; col < 2 * H; ++col) {
    double s = 0;
    for (int64_t row = 0; row < rows; ++row) s += dg[row * 2 * H + col];
    dg_b[col] += R(s);
  }
  for (int64_t j = 0; j < H; ++j) {
    double s = 0;
    for (int64_t row = 0; row < rows; ++row) s += dcp[row * H + j];
    dc_b[j] += R(s);
  }
  for (int64_t k = 0; k < in + H; ++k) {
    for (int64_t col = 0; col < 2 * H; ++col) {
      double s = 0;
      for (int64_t b = 0; b < d.batch; ++b) {
        for (int t = 0; t < d.time; ++t) {
          const int64_t row = b * d.time + t;
          double v;  // row k of [x_t; h'_{t-1}]
          if (k < in) {
            v = x[row * in + k];
          } else {
            v = t > 0 ? double(hs[(row - 1) * H + (k - in)]) : 0.0;
          }
          s += v * dg[row * 2 * H + col];
        }
      }
      dg_w[k * 2 * H + col] += R(s);
    }
    for (int64_t j = 0; j < H; ++j) {
      double s = 0;
      for (int64_t row = 0; row < rows; ++row) {
        // row k of [x_t; gamma * h'_{t-1}]
        const double v =
            k < in ? double(x[row * in + k]) : double(cache[row * 4 * H + 3 * H + k - in]);
        s += v * dcp[row * H + j];
      }
      dc_w[k * H + j] += R(s);
    }
  }
}

}  // namespace sift::kernels::ref
