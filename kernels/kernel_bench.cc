#include "kernels/kernel_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "kernels/cpu/cpu_backend.h"

namespace sift::kernels {
namespace {

// SIM's default dims (model-spec 0).
constexpr int kD = 16;   // embedding dim
constexpr int kI = 32;   // item vector: 2 features x D
constexpr int kH = 96;   // GRU / AUGRU hidden
constexpr int kTL = 90;  // long history
constexpr int kTS = 10;  // short history
constexpr int kTopK = 50;
constexpr int64_t kDenseParams = 223212;

// ---- Inputs ------------------------------------------------------------------------------------

uint64_t SplitMix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
std::vector<float> Uniform(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(SplitMix(&s) >> 40) * 0x1p-24f;
  return v;
}
std::vector<float> Mask(int64_t n, uint64_t seed, double p_one) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
  for (float& x : v) x = (SplitMix(&s) >> 11) * 0x1p-53 < p_one ? 1.0f : 0.0f;
  return v;
}
// Each row of `rows` slots gets its first slot valid, so no softmax row is all-masked.
std::vector<float> RowMask(int64_t rows, int n, uint64_t seed) {
  std::vector<float> v = Mask(rows * n, seed, 0.7);
  for (int64_t r = 0; r < rows; ++r) v[static_cast<size_t>(r * n + n - 1)] = 1.0f;
  return v;
}
std::vector<int32_t> Indices(int64_t n, int32_t unique, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint64_t s = seed * 0xd1b54a32d192ed03ull + 3;
  for (int32_t& x : v) {
    const uint64_t r = SplitMix(&s);
    x = (r & 15) == 0 ? -1 : static_cast<int32_t>((r >> 8) % static_cast<uint64_t>(unique));
  }
  return v;
}

// Backend memory for one bound op: inputs uploaded, outputs zeroed, read back for the check.
class Arena {
 public:
  explicit Arena(Backend& be) : be_(be) {}
  Backend& be() { return be_; }
  float* Zeros(int64_t n) { return static_cast<float*>(Alloc(n * 4)); }
  float* Floats(const std::vector<float>& host) {
    void* p = Alloc(static_cast<int64_t>(host.size()) * 4);
    Check(be_.CopyToBackend(host.data(), p, static_cast<int64_t>(host.size()) * 4));
    return static_cast<float*>(p);
  }
  int32_t* Ints(const std::vector<int32_t>& host) {
    void* p = Alloc(static_cast<int64_t>(host.size()) * 4);
    Check(be_.CopyToBackend(host.data(), p, static_cast<int64_t>(host.size()) * 4));
    return static_cast<int32_t*>(p);
  }
  std::vector<float> Read(const float* p, int64_t n) {
    std::vector<float> host(static_cast<size_t>(n));
    Check(be_.CopyToHost(p, host.data(), n * 4));
    return host;
  }
  const Status& status() const { return status_; }

 private:
  void* Alloc(int64_t bytes) {
    StatusOr<BackendBuffer> b = be_.Allocate(std::max<int64_t>(bytes, 64));
    if (!b.ok()) {
      Check(b.status());
      fallback_.emplace_back(static_cast<size_t>(std::max<int64_t>(bytes, 64) / 4 + 1));
      return fallback_.back().data();
    }
    buffers_.push_back(std::move(*b));
    return buffers_.back().data();
  }
  void Check(const Status& s) {
    if (status_.ok() && !s.ok()) status_ = s;
  }
  Backend& be_;
  std::vector<BackendBuffer> buffers_;
  std::vector<std::vector<float>> fallback_;  // only after a failed allocation (status_ set)
  Status status_;
};

struct Output {
  std::string name;
  const float* data;
  int64_t n;
};
struct Bound {
  std::function<void()> run;
  std::vector<Output> outputs;
};

struct OpDef {
  std::string name;
  std::function<std::string(int64_t)> shape;
  std::function<double(int64_t)> flops;  // 0: memory-bound, report GB/s
  std::function<double(int64_t)> bytes;
  int64_t dot_len = 1;    // the longest sum of products behind one output (tolerance)
  int steps = 1;          // recurrence steps an error can grow through
  bool fast_math = true;  // uses FastExp / FastSigmoid / FastTanh on the cpu backend
  bool gemm = false;      // its products follow the backend's MathMode
  std::function<Bound(Arena&, int64_t)> bind;
};

// A dense layer of the model: rows x in -> out with `act`.
OpDef DenseOp(const std::string& name, const std::string& layer, int64_t rows_per_sample, int in,
              int out, Activation act, bool backward) {
  OpDef op;
  op.name = name;
  op.shape = [=](int64_t B) {
    return absl::StrFormat("%s: rows=%d in=%d out=%d", layer, B * rows_per_sample, in, out);
  };
  op.flops = [=](int64_t B) {
    return (backward ? 4.0 : 2.0) * static_cast<double>(B * rows_per_sample) * in * out;
  };
  op.bytes = [=](int64_t B) { return 4.0 * B * rows_per_sample * (in + 2 * out); };
  op.dot_len = backward ? std::max<int64_t>(out, 1) : in;
  op.gemm = true;
  op.bind = [=](Arena& a, int64_t B) {
    const DenseDims d{B * rows_per_sample, in, out, act};
    float* x = a.Floats(Uniform(d.rows * in, 1));
    float* w = a.Floats(Uniform(int64_t{in} * out, 2, -0.3f, 0.3f));
    float* b = a.Floats(Uniform(out, 3, -0.1f, 0.1f));
    float* slope = a.Floats(Uniform(out, 4, 0.0f, 0.3f));
    float* pre = a.Zeros(d.rows * out);
    float* y = a.Zeros(d.rows * out);
    Backend* be = &a.be();
    if (!backward) {
      return Bound{[=] { be->DenseForward(d, x, in, w, b, slope, pre, y); },
                   {{"y", y, d.rows * out}}};
    }
    be->DenseForward(d, x, in, w, b, slope, pre, y);
    float* dy = a.Floats(Uniform(d.rows * out, 5));
    float* dx = a.Zeros(d.rows * in);
    float* dw = a.Zeros(int64_t{in} * out);
    float* db = a.Zeros(out);
    float* ds = a.Zeros(out);
    float* ws = a.Zeros(DenseWorkspaceFloats(d));
    return Bound{[=] { be->DenseBackward(d, x, in, w, slope, pre, y, dy, dx, in, dw, db, ds, ws); },
                 {{"dx", dx, d.rows * in}, {"dw", dw, int64_t{in} * out}, {"db", db, out}}};
  };
  return op;
}

std::vector<OpDef> Ops() {
  std::vector<OpDef> ops;
  // ---- GEMM: the attention MLP's first layer as a plain product.
  {
    OpDef op;
    op.name = "gemm";
    op.shape = [](int64_t B) {
      return absl::StrFormat("C[%d,80] = A[%d,384] B[384,80]", B * kTS, B * kTS);
    };
    op.flops = [](int64_t B) { return 2.0 * B * kTS * 384 * 80; };
    op.bytes = [](int64_t B) { return 4.0 * B * kTS * (384 + 80); };
    op.dot_len = 384;
    op.fast_math = false;
    op.gemm = true;
    op.bind = [](Arena& a, int64_t B) {
      const int64_t m = B * kTS;
      float* x = a.Floats(Uniform(m * 384, 11));
      float* w = a.Floats(Uniform(384 * 80, 12, -0.3f, 0.3f));
      float* c = a.Zeros(m * 80);
      Backend* be = &a.be();
      return Bound{[=] { be->Gemm(false, false, m, 80, 384, 1.0f, x, 384, w, 80, 0.0f, c, 80); },
                   {{"c", c, m * 80}}};
    };
    ops.push_back(op);
  }
  // ---- Dense layers of SIM (the biggest of each MLP).
  for (bool bwd : {false, true}) {
    const std::string dir = bwd ? "_backward" : "_forward";
    ops.push_back(DenseOp("dense" + dir + "_attention", "DIEN attention MLP 1", kTS, 4 * kH, 80,
                          Activation::kSigmoid, bwd));
    ops.push_back(DenseOp("dense" + dir + "_aux", "aux MLP 1", 2 * (kTS - 1), kH + kI, 100,
                          Activation::kSigmoid, bwd));
    ops.push_back(DenseOp("dense" + dir + "_stage2", "stage-2 MLP 1", 1, 3 * kI + kH + kD, 200,
                          Activation::kPrelu, bwd));
  }
  // ---- The attention MLP's first layer over the features, as the model runs it.
  for (bool bwd : {false, true}) {
    OpDef op;
    op.name = bwd ? "feature_dense_backward" : "feature_dense_forward";
    op.shape = [](int64_t B) {
      return absl::StrFormat("DIEN attention MLP 1 on features: B=%d T=%d H=%d out=80", B, kTS, kH);
    };
    // Counted as the reference's layer (4H inputs), whatever a backend saves.
    op.flops = [=](int64_t B) { return (bwd ? 4.0 : 2.0) * B * kTS * 4 * kH * 80; };
    op.bytes = [=](int64_t B) { return 4.0 * B * kTS * (kH + (bwd ? 3 : 2) * 80); };
    op.dot_len = bwd ? 80 * kTS : 4 * kH;
    op.gemm = true;
    op.bind = [=](Arena& a, int64_t B) {
      const FeatureDenseDims d{B, kTS, kH, 80, Activation::kSigmoid};
      Backend* be = &a.be();
      float* qp = a.Floats(Uniform(B * kH, 131));
      float* h = a.Floats(Uniform(B * kTS * kH, 132));
      float* w = a.Floats(Uniform(4 * kH * 80, 133, -0.2f, 0.2f));
      float* b = a.Floats(Uniform(80, 134, -0.1f, 0.1f));
      float* pre = a.Zeros(B * kTS * 80);
      float* y = a.Zeros(B * kTS * 80);
      float* ws = a.Zeros(FeatureDenseWorkspaceFloats(d));
      if (!bwd) {
        return Bound{[=] { be->FeatureDenseForward(d, qp, h, w, b, nullptr, pre, y, ws); },
                     {{"y", y, B * kTS * 80}}};
      }
      be->FeatureDenseForward(d, qp, h, w, b, nullptr, pre, y, ws);
      float* dy = a.Floats(Uniform(B * kTS * 80, 135));
      float* dqp = a.Zeros(B * kH);
      float* dh = a.Zeros(B * kTS * kH);
      float* dw = a.Zeros(4 * kH * 80);
      float* db = a.Zeros(80);
      return Bound{[=] {
                     be->FeatureDenseBackward(d, qp, h, w, nullptr, pre, y, dy, dqp, dh, dw, db,
                                              nullptr, ws);
                   },
                   {{"dqp", dqp, B * kH}, {"dh", dh, B * kTS * kH}, {"dw", dw, 4 * kH * 80}}};
    };
    ops.push_back(op);
  }
  // ---- Recurrences.
  for (bool augru : {false, true}) {
    for (bool bwd : {false, true}) {
      OpDef op;
      const int in = augru ? kH : kI;
      op.name = std::string(augru ? "augru" : "gru") + (bwd ? "_backward" : "_forward");
      op.shape = [=](int64_t B) { return absl::StrFormat("B=%d T=%d in=%d H=%d", B, kTS, in, kH); };
      const double macs_per_row = augru ? 3.0 * (in + kH) * kH : 3.0 * (in + kH) * kH;
      op.flops = [=](int64_t B) { return (bwd ? 4.0 : 2.0) * B * kTS * macs_per_row; };
      op.bytes = [=](int64_t B) { return 4.0 * B * kTS * (in + 5.0 * kH); };
      op.dot_len = in + kH;
      op.steps = kTS;
      op.gemm = true;
      op.bind = [=](Arena& a, int64_t B) {
        const RnnDims d{B, kTS, in, kH};
        Backend* be = &a.be();
        float* x = a.Floats(Uniform(B * kTS * in, 21));
        if (!augru) {
          float* w_in = a.Floats(Uniform(int64_t{in} * 3 * kH, 22, -0.3f, 0.3f));
          float* w_rec = a.Floats(Uniform(int64_t{kH} * 3 * kH, 23, -0.2f, 0.2f));
          float* b_in = a.Floats(Uniform(3 * kH, 24, -0.1f, 0.1f));
          float* b_rec = a.Floats(Uniform(3 * kH, 25, -0.1f, 0.1f));
          float* h = a.Zeros(B * kTS * kH);
          float* cache = a.Zeros(GruCacheFloats(d));
          float* ws = a.Zeros(GruWorkspaceFloats(d));
          if (!bwd) {
            return Bound{[=] { be->GruForward(d, x, w_in, w_rec, b_in, b_rec, h, cache, ws); },
                         {{"h", h, B * kTS * kH}}};
          }
          be->GruForward(d, x, w_in, w_rec, b_in, b_rec, h, cache, ws);
          float* dh = a.Floats(Uniform(B * kTS * kH, 26));
          float* dx = a.Zeros(B * kTS * in);
          float* dw_in = a.Zeros(int64_t{in} * 3 * kH);
          float* dw_rec = a.Zeros(int64_t{kH} * 3 * kH);
          float* db_in = a.Zeros(3 * kH);
          float* db_rec = a.Zeros(3 * kH);
          return Bound{[=] {
                         be->GruBackward(d, x, w_in, w_rec, h, cache, dh, dx, dw_in, dw_rec, db_in,
                                         db_rec, ws);
                       },
                       {{"dx", dx, B * kTS * in},
                        {"dw_in", dw_in, int64_t{in} * 3 * kH},
                        {"dw_rec", dw_rec, int64_t{kH} * 3 * kH},
                        {"db_in", db_in, 3 * kH}}};
        }
        const int64_t K = in + kH;
        float* att = a.Floats(Uniform(B * kTS, 31, 0.0f, 1.0f));
        float* g_w = a.Floats(Uniform(K * 2 * kH, 32, -0.2f, 0.2f));
        float* g_b = a.Floats(Uniform(2 * kH, 33, 0.8f, 1.2f));
        float* c_w = a.Floats(Uniform(K * kH, 34, -0.2f, 0.2f));
        float* c_b = a.Floats(Uniform(kH, 35, -0.1f, 0.1f));
        float* hs = a.Zeros(B * kTS * kH);
        float* cache = a.Zeros(AugruCacheFloats(d));
        float* ws = a.Zeros(AugruWorkspaceFloats(d));
        if (!bwd) {
          return Bound{[=] { be->AugruForward(d, x, att, g_w, g_b, c_w, c_b, hs, cache, ws); },
                       {{"hs", hs, B * kTS * kH}}};
        }
        be->AugruForward(d, x, att, g_w, g_b, c_w, c_b, hs, cache, ws);
        float* dlast = a.Floats(Uniform(B * kH, 36));
        float* dx = a.Zeros(B * kTS * in);
        float* datt = a.Zeros(B * kTS);
        float* dg_w = a.Zeros(K * 2 * kH);
        float* dg_b = a.Zeros(2 * kH);
        float* dc_w = a.Zeros(K * kH);
        float* dc_b = a.Zeros(kH);
        return Bound{[=] {
                       be->AugruBackward(d, x, att, g_w, c_w, hs, cache, dlast, dx, datt, dg_w,
                                         dg_b, dc_w, dc_b, ws);
                     },
                     {{"dx", dx, B * kTS * in},
                      {"datt", datt, B * kTS},
                      {"dg_w", dg_w, K * 2 * kH},
                      {"dc_w", dc_w, K * kH}}};
      };
      ops.push_back(op);
    }
  }
  // ---- Attention over the long history (GSU) and the ops around it.
  for (bool bwd : {false, true}) {
    OpDef op;
    op.name = bwd ? "dot_attention_backward" : "dot_attention_forward";
    op.shape = [](int64_t B) { return absl::StrFormat("B=%d n=%d d=%d", B, kTL, kI); };
    op.flops = [=](int64_t B) { return (bwd ? 8.0 : 4.0) * B * kTL * kI; };
    op.bytes = [](int64_t B) { return 4.0 * B * kTL * (kI + 2); };
    op.dot_len = std::max(kTL, kI);
    op.bind = [=](Arena& a, int64_t B) {
      Backend* be = &a.be();
      float* q = a.Floats(Uniform(B * kI, 41));
      float* k = a.Floats(Uniform(B * kTL * kI, 42));
      float* mask = a.Floats(RowMask(B, kTL, 43));
      float* alpha = a.Zeros(B * kTL);
      float* out = a.Zeros(B * kI);
      if (!bwd) {
        return Bound{[=] { be->DotAttentionForward(B, kTL, kI, q, kI, k, mask, alpha, out, kI); },
                     {{"alpha", alpha, B * kTL}, {"out", out, B * kI}}};
      }
      be->DotAttentionForward(B, kTL, kI, q, kI, k, mask, alpha, out, kI);
      float* dout = a.Floats(Uniform(B * kI, 44));
      float* dq = a.Zeros(B * kI);
      float* dk = a.Zeros(B * kTL * kI);
      return Bound{[=] {
                     be->DotAttentionBackward(B, kTL, kI, q, kI, k, mask, alpha, dout, kI, dq, kI,
                                              dk);
                   },
                   {{"dq", dq, B * kI}, {"dk", dk, B * kTL * kI}}};
    };
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "topk_mask";
    op.shape = [](int64_t B) { return absl::StrFormat("B=%d n=%d k=%d", B, kTL, kTopK); };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [](int64_t B) { return 8.0 * B * kTL; };
    op.fast_math = false;
    op.bind = [](Arena& a, int64_t B) {
      Backend* be = &a.be();
      float* alpha = a.Floats(Uniform(B * kTL, 51, 0.0f, 1.0f));
      float* rho = a.Zeros(B * kTL);
      return Bound{[=] { be->TopKMask(B, kTL, kTopK, alpha, rho); }, {{"rho", rho, B * kTL}}};
    };
    ops.push_back(op);
  }
  for (bool bwd : {false, true}) {
    OpDef op;
    op.name = bwd ? "damped_mean_backward" : "damped_mean_forward";
    op.shape = [](int64_t B) { return absl::StrFormat("B=%d n=%d d=%d", B, kTL, kI); };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [=](int64_t B) { return 4.0 * B * kTL * (kI + 1) * (bwd ? 2 : 1); };
    op.dot_len = kTL;
    op.fast_math = false;
    op.bind = [=](Arena& a, int64_t B) {
      Backend* be = &a.be();
      float* x = a.Floats(Uniform(B * kTL * kI, 61));
      float* rho = a.Floats(Mask(B * kTL, 62, 0.5));
      if (!bwd) {
        float* out = a.Zeros(B * kI);
        return Bound{[=] { be->DampedMeanForward(B, kTL, kI, x, rho, out, kI); },
                     {{"out", out, B * kI}}};
      }
      float* dout = a.Floats(Uniform(B * kI, 63));
      float* dx = a.Zeros(B * kTL * kI);
      return Bound{[=] { be->DampedMeanBackward(B, kTL, kI, rho, dout, kI, dx); },
                   {{"dx", dx, B * kTL * kI}}};
    };
    ops.push_back(op);
  }
  for (bool bwd : {false, true}) {
    OpDef op;
    op.name = bwd ? "masked_softmax_backward" : "masked_softmax_forward";
    op.shape = [](int64_t B) { return absl::StrFormat("rows=%d n=%d", B, kTS); };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [=](int64_t B) { return 4.0 * B * kTS * (bwd ? 4 : 3); };
    op.dot_len = kTS;
    op.bind = [=](Arena& a, int64_t B) {
      Backend* be = &a.be();
      float* s = a.Floats(Uniform(B * kTS, 71, -3.0f, 3.0f));
      float* mask = a.Floats(RowMask(B, kTS, 72));
      float* p = a.Zeros(B * kTS);
      if (!bwd) {
        return Bound{[=] { be->MaskedSoftmaxForward(B, kTS, s, mask, p); }, {{"p", p, B * kTS}}};
      }
      be->MaskedSoftmaxForward(B, kTS, s, mask, p);
      float* dp = a.Floats(Uniform(B * kTS, 73));
      float* ds = a.Zeros(B * kTS);
      return Bound{[=] { be->MaskedSoftmaxBackward(B, kTS, p, mask, dp, ds); },
                   {{"dscores", ds, B * kTS}}};
    };
    ops.push_back(op);
  }
  for (bool bwd : {false, true}) {
    OpDef op;
    op.name = bwd ? "attention_features_backward" : "attention_features_forward";
    op.shape = [](int64_t B) { return absl::StrFormat("B=%d T=%d H=%d", B, kTS, kH); };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [=](int64_t B) { return 4.0 * B * kTS * kH * (bwd ? 7 : 5); };
    op.fast_math = false;
    op.bind = [=](Arena& a, int64_t B) {
      Backend* be = &a.be();
      float* qp = a.Floats(Uniform(B * kH, 81));
      float* h = a.Floats(Uniform(B * kTS * kH, 82));
      if (!bwd) {
        float* c = a.Zeros(B * kTS * 4 * kH);
        return Bound{[=] { be->AttentionFeaturesForward(B, kTS, kH, qp, h, c); },
                     {{"c", c, B * kTS * 4 * kH}}};
      }
      float* dc = a.Floats(Uniform(B * kTS * 4 * kH, 83));
      float* dqp = a.Zeros(B * kH);
      float* dh = a.Zeros(B * kTS * kH);
      return Bound{[=] { be->AttentionFeaturesBackward(B, kTS, kH, qp, h, dc, dqp, dh); },
                   {{"dqp", dqp, B * kH}, {"dh", dh, B * kTS * kH}}};
    };
    ops.push_back(op);
  }
  // ---- Embeddings: the long history's gather and its gradient's segment sum.
  for (bool sum : {false, true}) {
    OpDef op;
    op.name = sum ? "segment_sum_rows" : "gather_rows";
    op.shape = [](int64_t B) {
      return absl::StrFormat("n=%d dim=%d unique=%d", B * kTL, kD, B * 20);
    };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [](int64_t B) { return 4.0 * B * kTL * (2 * kD + 2); };
    op.dot_len = sum ? 64 : 1;
    op.fast_math = false;
    op.bind = [=](Arena& a, int64_t B) {
      Backend* be = &a.be();
      const int64_t n = B * kTL, unique = B * 20;
      int32_t* inv = a.Ints(Indices(n, static_cast<int32_t>(unique), 91));
      float* mask = a.Floats(Mask(n, 92, 0.8));
      if (!sum) {
        float* rows = a.Floats(Uniform(unique * kD, 93));
        float* out = a.Zeros(n * kI);
        return Bound{[=] { be->GatherRows(n, kD, rows, inv, mask, out, kI); },
                     {{"out", out, n * kI}}};
      }
      float* dout = a.Floats(Uniform(n * kI, 94));
      float* drows = a.Zeros(unique * kD);
      return Bound{[=] { be->SegmentSumRows(n, kD, dout, kI, inv, mask, unique, drows); },
                   {{"drows", drows, unique * kD}}};
    };
    ops.push_back(op);
  }
  // ---- Losses and the optimizer.
  {
    OpDef op;
    op.name = "bce_with_logits";
    op.shape = [](int64_t B) { return absl::StrFormat("n=%d", B); };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [](int64_t B) { return 12.0 * B; };
    op.bind = [](Arena& a, int64_t B) {
      Backend* be = &a.be();
      float* l = a.Floats(Uniform(B, 101, -4.0f, 4.0f));
      float* y = a.Floats(Mask(B, 102, 0.5));
      float* dl = a.Zeros(B);
      return Bound{[=] { be->BceWithLogits(B, l, y, 1.0f, dl); }, {{"dlogits", dl, B}}};
    };
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "aux_loss";
    op.shape = [](int64_t B) { return absl::StrFormat("n=%d", B * (kTS - 1)); };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [](int64_t B) { return 20.0 * B * (kTS - 1); };
    op.bind = [](Arena& a, int64_t B) {
      Backend* be = &a.be();
      const int64_t n = B * (kTS - 1);
      float* lp = a.Floats(Uniform(n, 111, -4.0f, 4.0f));
      float* ln = a.Floats(Uniform(n, 112, -4.0f, 4.0f));
      float* m = a.Floats(Mask(n, 113, 0.8));
      float* dp = a.Zeros(n);
      float* dn = a.Zeros(n);
      return Bound{[=] { be->AuxLoss(n, lp, ln, m, 1.0f, dp, dn); },
                   {{"dpos", dp, n}, {"dneg", dn, n}}};
    };
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "adam_update";
    op.shape = [](int64_t) {
      return absl::StrFormat("n=%d (SIM's dense parameters)", kDenseParams);
    };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [](int64_t) { return 28.0 * kDenseParams; };
    op.fast_math = false;
    op.bind = [](Arena& a, int64_t) {
      Backend* be = &a.be();
      float* g = a.Floats(Uniform(kDenseParams, 121, -0.01f, 0.01f));
      float* p = a.Floats(Uniform(kDenseParams, 122));
      float* m = a.Zeros(kDenseParams);
      float* v = a.Zeros(kDenseParams);
      auto step = std::make_shared<int64_t>(0);
      return Bound{[=] { be->AdamUpdate(kDenseParams, AdamHyper{}, ++*step, g, p, m, v); },
                   {{"param", p, kDenseParams}}};
    };
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "fill";
    op.shape = [](int64_t B) {
      return absl::StrFormat("n=%d (the long history's gradient)", B * kTL * kI);
    };
    op.flops = [](int64_t) { return 0.0; };
    op.bytes = [](int64_t B) { return 4.0 * B * kTL * kI; };
    op.fast_math = false;
    op.bind = [](Arena& a, int64_t B) {
      Backend* be = &a.be();
      const int64_t n = B * kTL * kI;
      float* p = a.Zeros(n);
      return Bound{[=] { be->Fill(n, 0.5f, p); }, {{"p", p, n}}};
    };
    ops.push_back(op);
  }
  return ops;
}

// The tolerance of the check: fp32 — u = 2^-24 per term along a sum of k products of random sign
// (sqrt(k) growth, 8x margin) plus the fast activations' 1e-6 (vector_math.h); reduced precision
// — each GEMM input rounded to p mantissa bits: 2 * 2^-p * sqrt(k) (cuda_ops_test); recurrences
// grow both through their T steps. Relative to the largest expected magnitude of the output.
double Tolerance(const OpDef& op, MathMode mode, const std::string& output, int64_t batch) {
  int64_t k = op.dot_len;
  // Weight and bias gradients sum over every row of the batch (B * rows per sample).
  if (output == "dw" || output == "db" || output == "dw_in" || output == "dw_rec" ||
      output == "dg_w" || output == "dc_w" || output == "drows") {
    k = std::max<int64_t>(k, batch * 2 * (kTS - 1));  // the most rows per sample: the aux MLP's
  }
  k = std::max<int64_t>(k, 1);
  const double sk = std::sqrt(static_cast<double>(k));
  double tol = 8.0 * 0x1p-24 * sk + (op.fast_math ? 1e-6 : 0.0);
  if (op.gemm && mode != MathMode::kFp32) {
    const int p = mode == MathMode::kBf16 ? 7 : 10;
    tol += 2.0 * std::ldexp(1.0, -p) * sk;
  }
  return tol * op.steps;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

std::vector<std::string> KernelBenchOpNames() {
  std::vector<std::string> names;
  for (const OpDef& op : Ops()) names.push_back(op.name);
  return names;
}

StatusOr<std::unique_ptr<Backend>> CreateBenchBackend(const std::string& spec, int threads) {
  absl::string_view rest = spec;
  if (absl::ConsumePrefix(&rest, "cpu-")) {
    SIFT_ASSIGN_OR_RETURN(const CpuIsa isa, ParseCpuIsa(rest));
    CpuBackendOptions o;
    o.threads = threads;
    o.isa = isa;
    return CreateCpuBackend(o);
  }
  return CreateBackend(spec, threads);
}

StatusOr<std::vector<KernelBenchResult>> RunKernelBenchmarks(
    const KernelBenchOptions& options,
    const std::function<void(const KernelBenchResult&)>& progress,
    std::vector<std::string>* skipped) {
  std::vector<OpDef> ops;
  for (OpDef& op : Ops()) {
    if (options.filter.empty() || absl::StrContains(op.name, options.filter)) {
      ops.push_back(std::move(op));
    }
  }
  if (ops.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no kernel benchmark matches '", options.filter,
                                                   "' (ops: gemm, dense_*, gru_*, "
                                                   "augru_*, dot_attention_*, ...)"));
  }
  if (options.batch < 1 || options.check_batch < 1) {
    return absl::InvalidArgumentError("kernel benchmark: batch sizes must be >= 1");
  }
  const auto note = [&](std::string line) {
    if (skipped != nullptr) skipped->push_back(std::move(line));
  };
  std::unique_ptr<Backend> reference = CreateReferenceBackend();
  std::vector<KernelBenchResult> results;
  for (const std::string& spec : options.backends) {
    StatusOr<std::unique_ptr<Backend>> made = CreateBenchBackend(spec, options.threads);
    if (!made.ok()) {
      if (absl::IsInvalidArgument(made.status()) && !absl::StartsWith(spec, "cuda")) {
        return made.status();
      }
      note(absl::StrCat(spec, ": skipped: ", made.status().message()));
      continue;
    }
    std::unique_ptr<Backend> be = std::move(*made);
    for (MathMode mode : options.precisions) {
      const Status set = be->SetMathMode(mode);
      if (!set.ok()) {
        note(absl::StrCat(spec, " ", MathModeName(mode), ": skipped: ", set.message()));
        continue;
      }
      for (const OpDef& op : ops) {
        KernelBenchResult r;
        r.op = op.name;
        r.shape = op.shape(options.batch);
        r.backend = spec;
        r.precision = MathModeName(mode);
        r.describe = be->Describe();
        // Correctness: both backends on the check batch, one call each from zeroed outputs.
        if (options.check && be.get() != reference.get()) {
          Arena ra(*reference), ba(*be);
          Bound rb = op.bind(ra, options.check_batch);
          Bound bb = op.bind(ba, options.check_batch);
          rb.run();
          bb.run();
          SIFT_RETURN_IF_ERROR(be->Synchronize());
          SIFT_RETURN_IF_ERROR(ba.status());
          r.checked = true;
          for (size_t o = 0; o < rb.outputs.size(); ++o) {
            const std::vector<float> want = ra.Read(rb.outputs[o].data, rb.outputs[o].n);
            const std::vector<float> got = ba.Read(bb.outputs[o].data, bb.outputs[o].n);
            double scale = 0, err = 0;
            for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
            for (size_t i = 0; i < want.size(); ++i) {
              const double e = std::abs(static_cast<double>(got[i]) - want[i]);
              err = std::isnan(e) ? INFINITY : std::max(err, e);
            }
            const double rel = err / std::max(scale, 1e-30);
            const double tol = Tolerance(op, mode, rb.outputs[o].name, options.check_batch);
            if (rel / tol >= r.max_error / std::max(r.tolerance, 1e-300) || o == 0) {
              r.max_error = rel;
              r.tolerance = tol;
              r.note = rb.outputs[o].name;
            }
            if (!(rel <= tol)) r.ok = false;
          }
          SIFT_RETURN_IF_ERROR(be->Synchronize());
          SIFT_RETURN_IF_ERROR(ba.status());
        }
        // Timing at the full batch.
        Arena arena(*be);
        Bound bound = op.bind(arena, options.batch);
        SIFT_RETURN_IF_ERROR(be->Synchronize());
        SIFT_RETURN_IF_ERROR(arena.status());
        bound.run();  // warm-up: primitives created, caches and pages touched
        SIFT_RETURN_IF_ERROR(be->Synchronize());
        std::vector<double> times;
        const auto start = std::chrono::steady_clock::now();
        while (static_cast<int>(times.size()) < options.min_iters ||
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
                   options.min_time_s) {
          const auto t0 = std::chrono::steady_clock::now();
          bound.run();
          SIFT_RETURN_IF_ERROR(be->Synchronize());
          times.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          if (times.size() >= 100000) break;
        }
        r.iters = static_cast<int64_t>(times.size());
        r.seconds = Median(times);
        const double flops = op.flops(options.batch);
        if (flops > 0) r.gflops = flops / r.seconds / 1e9;
        r.gbytes_per_s = op.bytes(options.batch) / r.seconds / 1e9;
        if (progress) progress(r);
        results.push_back(std::move(r));
      }
    }
  }
  return results;
}

}  // namespace sift::kernels
