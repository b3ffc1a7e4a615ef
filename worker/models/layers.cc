#include "worker/models/layers.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/rng.h"

namespace sift::worker::models {
namespace {

uint64_t NameHash(const std::string& name) {
  uint64_t h = 0x5349465450524d53ULL;  // "SIFTPRMS"
  for (unsigned char c : name) h = HashCombine(h, c);
  return HashCombine(h, name.size());
}

}  // namespace

int64_t ParamRegistry::Add(const std::string& name, std::vector<int64_t> shape, InitKind kind,
                           float value) {
  ParamTensor t;
  t.name = name;
  t.offset = total_;
  t.shape = std::move(shape);
  total_ += t.size();
  layout_.push_back(std::move(t));
  inits_.push_back({kind, value});
  return layout_.back().offset;
}

void OrthogonalInit(uint64_t stream_seed, int64_t rows, int64_t cols, float* out) {
  const int64_t m = std::max(rows, cols), n = std::min(rows, cols);
  Rng rng(stream_seed);
  // a is (m, n) row-major: a[i * n + j]; its columns are orthonormalised in place.
  std::vector<double> a(static_cast<size_t>(m * n));
  for (double& x : a) x = rng.Normal();
  for (int64_t j = 0; j < n; ++j) {
    // Two passes of modified Gram-Schmidt against the previous columns ("twice is enough").
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t k = 0; k < j; ++k) {
        double dot = 0;
        for (int64_t i = 0; i < m; ++i) dot += a[i * n + k] * a[i * n + j];
        for (int64_t i = 0; i < m; ++i) a[i * n + j] -= dot * a[i * n + k];
      }
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += a[i * n + j] * a[i * n + j];
    norm = std::sqrt(norm);
    // Gram-Schmidt's R has a positive diagonal (the residual norms), which is the sign convention
    // Keras forces on the Householder QR with `q *= sign(diag(r))`.
    for (int64_t i = 0; i < m; ++i) a[i * n + j] /= norm;
  }
  if (rows >= cols) {  // out = q, (rows, cols) = (m, n)
    for (int64_t i = 0; i < m * n; ++i) out[i] = static_cast<float>(a[i]);
  } else {  // out = q^T, (rows, cols) = (n, m)
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < m; ++c) out[r * m + c] = static_cast<float>(a[c * n + r]);
    }
  }
}

void ParamRegistry::Initialise(uint64_t seed, float* params) const {
  for (size_t t = 0; t < layout_.size(); ++t) {
    const ParamTensor& p = layout_[t];
    float* dst = params + p.offset;
    const uint64_t stream = HashCombine(seed, NameHash(p.name));
    switch (inits_[t].kind) {
      case InitKind::kConstant:
        std::fill(dst, dst + p.size(), inits_[t].value);
        break;
      case InitKind::kGlorotUniform: {
        const double fan_in = static_cast<double>(p.shape[0]);
        const double fan_out = static_cast<double>(p.shape.size() > 1 ? p.shape[1] : 1);
        const double limit = std::sqrt(6.0 / (fan_in + fan_out));
        Rng rng(stream);
        for (int64_t i = 0; i < p.size(); ++i) {
          dst[i] = static_cast<float>((2.0 * rng.Uniform() - 1.0) * limit);
        }
        break;
      }
      case InitKind::kOrthogonal:
        OrthogonalInit(stream, p.shape[0], p.shape[1], dst);
        break;
    }
  }
}

void Mlp::Build(const std::string& name, int in, const std::vector<int>& hidden,
                kernels::Activation act, int64_t max_rows, ParamRegistry* registry) {
  in_ = in;
  max_rows_ = max_rows;
  layers_.clear();
  int width = in;
  const size_t n = hidden.size() + 1;
  for (size_t i = 0; i < n; ++i) {
    const bool last = i + 1 == n;
    Layer l;
    l.dims.in = width;
    l.dims.out = last ? 1 : hidden[i];
    l.dims.act = last ? kernels::Activation::kNone : act;
    const std::string prefix = absl::StrCat(name, "/dense_", i, "/");
    l.w = registry->Add(prefix + "kernel", {l.dims.in, l.dims.out}, InitKind::kGlorotUniform);
    l.b = registry->Add(prefix + "bias", {l.dims.out}, InitKind::kConstant, 0.0f);
    if (l.dims.act == kernels::Activation::kPrelu) {
      l.slope = registry->Add(prefix + "prelu_slope", {l.dims.out}, InitKind::kConstant, 0.1f);
    }
    width = l.dims.out;
    layers_.push_back(std::move(l));
  }
}

Status Mlp::Allocate(kernels::Backend* be) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    const int64_t bytes = max_rows_ * l.dims.out * static_cast<int64_t>(sizeof(float));
    SIFT_ASSIGN_OR_RETURN(l.pre, be->Allocate(bytes));
    if (i + 1 < layers_.size()) {
      SIFT_ASSIGN_OR_RETURN(l.y, be->Allocate(bytes));
      SIFT_ASSIGN_OR_RETURN(l.dy, be->Allocate(bytes));
      if (dropout_ > 0) {
        SIFT_ASSIGN_OR_RETURN(l.dropped, be->Allocate(bytes));
      }
    }
  }
  return absl::OkStatus();
}

uint64_t Mlp::LayerSeed(size_t i) const { return HashCombine(*dropped_seed_, i); }

const float* Mlp::Forward(kernels::Backend* be, int64_t rows, const float* x, int64_t ldx,
                          const float* params, std::optional<uint64_t> dropout_seed) {
  dropped_seed_.reset();
  if (dropout_ > 0 && dropout_seed.has_value()) dropped_seed_ = dropout_seed;
  const float scale = 1.0f / (1.0f - dropout_);
  const float* in = x;
  int64_t ld = ldx;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    l.dims.rows = rows;
    float* y = l.y.empty() ? l.pre.floats() : l.y.floats();  // the linear output layer: pre == y
    be->DenseForward(l.dims, in, ld, params + l.w, params + l.b,
                     l.slope >= 0 ? params + l.slope : nullptr, l.pre.floats(), y);
    in = y;
    ld = l.dims.out;
    if (dropped_seed_ && i + 1 < layers_.size()) {
      float* d = l.dropped.floats();
      be->Copy(1, rows, l.dims.out, y, 0, l.dims.out, d, 0, l.dims.out, /*accumulate=*/false);
      be->Dropout(rows * l.dims.out, LayerSeed(i), dropout_, scale, d);
      in = d;
    }
  }
  return in;
}

void Mlp::Backward(kernels::Backend* be, int64_t rows, const float* x, int64_t ldx,
                   const float* params, const float* dout, float* grads, float* dx, int64_t lddx,
                   float* workspace) {
  const float* dy = dout;
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& l = layers_[i];
    l.dims.rows = rows;
    const float* in = i == 0 ? x : HiddenOutput(i - 1);
    const int64_t ld = i == 0 ? ldx : layers_[i - 1].dims.out;
    float* din = nullptr;
    int64_t lddin = 0;
    if (i == 0) {
      din = dx;
      lddin = lddx;
    } else {
      din = layers_[i - 1].dy.floats();
      lddin = layers_[i - 1].dims.out;
      be->Fill(rows * layers_[i - 1].dims.out, 0.0f, din);
    }
    const float* y = l.y.empty() ? l.pre.floats() : l.y.floats();
    be->DenseBackward(l.dims, in, ld, params + l.w, l.slope >= 0 ? params + l.slope : nullptr,
                      l.pre.floats(), y, dy, din, lddin, grads + l.w, grads + l.b,
                      l.slope >= 0 ? grads + l.slope : nullptr, workspace);
    if (i > 0 && dropped_seed_) {
      // d(y * mask) / dy = mask: the same factors, regenerated from the seed.
      be->Dropout(rows * layers_[i - 1].dims.out, LayerSeed(i - 1), dropout_,
                  1.0f / (1.0f - dropout_), din);
    }
    dy = din;
  }
}

int64_t Mlp::WorkspaceFloats() const {
  int64_t ws = 0;
  for (const Layer& l : layers_) {
    kernels::DenseDims d = l.dims;
    d.rows = max_rows_;
    ws = std::max(ws, kernels::DenseWorkspaceFloats(d));
  }
  if (feature_time_ > 0) {
    ws = std::max(ws, kernels::FeatureDenseWorkspaceFloats(FeatureDims(max_rows_ / feature_time_)));
  }
  return ws;
}

void Mlp::SetFeatureInput(int time, int hidden) {
  feature_time_ = time;
  feature_hidden_ = hidden;
}

kernels::FeatureDenseDims Mlp::FeatureDims(int64_t batch) const {
  return kernels::FeatureDenseDims{batch, feature_time_, feature_hidden_, layers_[0].dims.out,
                                   layers_[0].dims.act};
}

const float* Mlp::ForwardFrom(kernels::Backend* be, int64_t rows, const float* params) {
  const float* in = layers_[0].y.empty() ? layers_[0].pre.floats() : layers_[0].y.floats();
  int64_t ld = layers_[0].dims.out;
  for (size_t i = 1; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    l.dims.rows = rows;
    float* y = l.y.empty() ? l.pre.floats() : l.y.floats();
    be->DenseForward(l.dims, in, ld, params + l.w, params + l.b,
                     l.slope >= 0 ? params + l.slope : nullptr, l.pre.floats(), y);
    in = y;
    ld = l.dims.out;
  }
  return in;
}

const float* Mlp::ForwardFeatures(kernels::Backend* be, int64_t batch, const float* qp,
                                  const float* h, const float* params, float* workspace) {
  dropped_seed_.reset();  // the attention unit never drops
  Layer& first = layers_[0];
  first.dims.rows = batch * feature_time_;
  float* y = first.y.empty() ? first.pre.floats() : first.y.floats();
  be->FeatureDenseForward(FeatureDims(batch), qp, h, params + first.w, params + first.b,
                          first.slope >= 0 ? params + first.slope : nullptr, first.pre.floats(), y,
                          workspace);
  return ForwardFrom(be, first.dims.rows, params);
}

const float* Mlp::BackwardTo(kernels::Backend* be, int64_t rows, const float* params,
                             const float* dout, float* grads, float* workspace) {
  const float* dy = dout;
  for (size_t i = layers_.size(); i-- > 1;) {
    Layer& l = layers_[i];
    l.dims.rows = rows;
    float* din = layers_[i - 1].dy.floats();
    be->Fill(rows * layers_[i - 1].dims.out, 0.0f, din);
    const float* y = l.y.empty() ? l.pre.floats() : l.y.floats();
    be->DenseBackward(l.dims, layers_[i - 1].y.floats(), layers_[i - 1].dims.out, params + l.w,
                      l.slope >= 0 ? params + l.slope : nullptr, l.pre.floats(), y, dy, din,
                      layers_[i - 1].dims.out, grads + l.w, grads + l.b,
                      l.slope >= 0 ? grads + l.slope : nullptr, workspace);
    dy = din;
  }
  return dy;
}

void Mlp::BackwardFeatures(kernels::Backend* be, int64_t batch, const float* qp, const float* h,
                           const float* params, const float* dout, float* grads, float* dqp,
                           float* dh, float* workspace) {
  const int64_t rows = batch * feature_time_;
  const float* dy = BackwardTo(be, rows, params, dout, grads, workspace);
  Layer& first = layers_[0];
  first.dims.rows = rows;
  const float* y = first.y.empty() ? first.pre.floats() : first.y.floats();
  be->FeatureDenseBackward(FeatureDims(batch), qp, h, params + first.w,
                           first.slope >= 0 ? params + first.slope : nullptr, first.pre.floats(), y,
                           dy, dqp, dh, grads + first.w, grads + first.b,
                           first.slope >= 0 ? grads + first.slope : nullptr, workspace);
}

}  // namespace sift::worker::models
