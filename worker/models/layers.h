// The layers every model block is built from (worker/models/, internal to sift_worker): the
// parameter registry that lays out the flat parameter buffer and initialises it, and an MLP of
// Dense layers over the op API (the MLP heads: the classifier, the GSU head, the DIEN attention
// unit and aux net). Plain objects owned by one Model; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "worker/models/model.h"

namespace sift::worker::models {

// How a tensor is initialised (model-spec 3.6, 3.9).
enum class InitKind {
  kGlorotUniform = 0,  // U(+-sqrt(6 / (fan_in + fan_out))), fans = the 2-D shape
  kConstant = 1,       // every element = value
  kOrthogonal = 2,     // Keras Orthogonal(gain 1) of a 2-D shape [rows, cols]
};

// The flat parameter layout: tensors appended in call order, packed (no padding).
class ParamRegistry {
 public:
  // Appends a tensor; returns its offset in the flat buffer.
  int64_t Add(const std::string& name, std::vector<int64_t> shape, InitKind kind,
              float value = 0.0f);
  int64_t total() const { return total_; }
  const std::vector<ParamTensor>& layout() const { return layout_; }
  // Writes every tensor's initial values into params[0, total()). Each tensor draws from its own
  // Rng stream seeded by HashCombine(seed, hash of its name), so a tensor's values depend only on
  // the seed, its name and its shape.
  void Initialise(uint64_t seed, float* params) const;

 private:
  struct Init {
    InitKind kind;
    float value;
  };
  std::vector<ParamTensor> layout_;
  std::vector<Init> inits_;
  int64_t total_ = 0;
};

// Fills out[rows, cols] (row-major) with a Keras-style orthogonal matrix drawn from rng: a normal
// matrix of shape (max, min) -> QR (modified Gram-Schmidt in double, R's diagonal made positive)
// -> Q, transposed when rows < cols. Rows (rows <= cols) or columns (rows > cols) are orthonormal.
void OrthogonalInit(uint64_t stream_seed, int64_t rows, int64_t cols, float* out);

// An MLP: `hidden` Dense layers with activation `act`, then a linear Dense layer with 1 output.
// Owns its activations for up to max_rows rows, in backend memory; parameters live in the
// model's flat buffer.
class Mlp {
 public:
  // Registers layers "<name>/dense_<i>/{kernel,bias[,prelu_slope]}" (output layer last).
  void Build(const std::string& name, int in, const std::vector<int>& hidden,
             kernels::Activation act, int64_t max_rows, ParamRegistry* registry);
  // Inverted dropout of rate r in [0, 1) on every hidden layer's output (not on the input, not on
  // the logit) in Forward calls given a dropout seed: hidden layer i's output y_i is used as
  // y_i * mask_i, mask_i = Backend::Dropout's factors under HashCombine(seed, i); Backward applies
  // the same mask to the gradient. 0 (the default) = none. REQUIRES: after Build, before Allocate.
  void SetDropout(float rate) { dropout_ = rate; }
  // Allocates the activations in `be`'s memory. REQUIRES: after Build, before Forward; `be`
  // outlives the MLP.
  Status Allocate(kernels::Backend* be);
  // Forward over `rows` rows of x (row stride ldx); returns the logits [rows] (owned by the MLP).
  // With dropout_seed set (training) and a dropout rate, the hidden outputs are dropped.
  const float* Forward(kernels::Backend* be, int64_t rows, const float* x, int64_t ldx,
                       const float* params, std::optional<uint64_t> dropout_seed = std::nullopt);
  // Backward of the last Forward given dout [rows]: parameter gradients += into grads (same
  // layout as params), dx += (row stride lddx; nullable). workspace: WorkspaceFloats().
  void Backward(kernels::Backend* be, int64_t rows, const float* x, int64_t ldx,
                const float* params, const float* dout, float* grads, float* dx, int64_t lddx,
                float* workspace);
  // The same over DIEN's attention features (kernels::FeatureDenseDims): the first layer reads
  // c_bt = [qp_b; h_bt; qp_b - h_bt; qp_b * h_bt] through Backend::FeatureDenseForward (no
  // materialised features), rows b*T + t; the MLP was built with in = 4 * hidden and max_rows =
  // max batch * time. workspace: WorkspaceFloats() (after SetFeatureInput).
  void SetFeatureInput(int time, int hidden);
  const float* ForwardFeatures(kernels::Backend* be, int64_t batch, const float* qp, const float* h,
                               const float* params, float* workspace);
  // dqp [batch, hidden] += and dh [batch*time, hidden] += (both nullable).
  void BackwardFeatures(kernels::Backend* be, int64_t batch, const float* qp, const float* h,
                        const float* params, const float* dout, float* grads, float* dqp, float* dh,
                        float* workspace);
  int64_t WorkspaceFloats() const;  // for max_rows
  int in() const { return in_; }

 private:
  struct Layer {
    kernels::DenseDims dims;  // rows set per call
    int64_t w = 0, b = 0, slope = -1;
    kernels::BackendBuffer pre, y, dy;  // [max_rows, out]; y, dy empty for the output layer
    kernels::BackendBuffer dropped;     // [max_rows, out]: y * mask (hidden layers, dropout > 0)
  };
  // The input the layer after hidden layer i reads: its dropped output when the last Forward
  // dropped.
  const float* HiddenOutput(size_t i) const {
    return dropped_seed_ ? layers_[i].dropped.floats() : layers_[i].y.floats();
  }
  uint64_t LayerSeed(size_t i) const;
  // The layers after the first, forward (from its output) and backward (down to its dy).
  const float* ForwardFrom(kernels::Backend* be, int64_t rows, const float* params);
  const float* BackwardTo(kernels::Backend* be, int64_t rows, const float* params,
                          const float* dout, float* grads, float* workspace);
  kernels::FeatureDenseDims FeatureDims(int64_t batch) const;

  std::vector<Layer> layers_;
  int in_ = 0;
  int64_t max_rows_ = 0;
  int feature_time_ = 0, feature_hidden_ = 0;  // SetFeatureInput
  float dropout_ = 0;
  std::optional<uint64_t> dropped_seed_;  // the last Forward's dropout seed, if it dropped
};

}  // namespace sift::worker::models
