// Model: the dense part of SIM, DIEN and DIN (docs/model-spec.md sections 2-4 and 8) over the op
// API of kernels/backend.h, with forward, loss and backward for one batch. The embedding tables
// live outside (an EmbeddingStore, in-process or remote): the model reads the batch's pulled rows
// from BatchKeys and writes the per-unique-key embedding gradients back into it.
//
// Parameters: every dense tensor lives in one flat float buffer (parameters()), with gradients in a
// second buffer of the same layout (gradients()), so the dense optimizer and an allreduce see one
// contiguous array. param_layout() names each tensor (offset, shape), in a fixed order.
// Memory: parameters, gradients and activations are the backend's memory (kernels/backend.h: host
// memory for cpu and reference, device memory for cuda), allocated once for `max_batch` rows at
// Create: Forward/Backward do not allocate. The host-side inputs (the batch, the pulled rows) are
// read in place by host backends and copied in by device backends (one copy per array); the
// per-key embedding gradients and the logits come back to host memory either way.
// Not thread-safe: one thread drives a Model (the backend parallelises inside ops).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/data/batch.h"
#include "common/status.h"
#include "kernels/backend.h"
#include "worker/batch_keys.h"

namespace sift::worker {

enum class ModelType { kSim = 0, kDien = 1, kDin = 2 };
const char* ModelTypeName(ModelType type);  // "sim", "dien", "din"
StatusOr<ModelType> ParseModelType(absl::string_view name);

// Defaults are the reference's (model-spec section 0).
struct ModelConfig {
  ModelType type = ModelType::kSim;
  int embedding_dim = 16;                  // D
  int user_features = 1;                   // UF
  int item_features = 2;                   // F; item vector width F*D
  int long_len = 90;                       // T_L (SIM, DIN)
  int short_len = 10;                      // T_S (SIM, DIEN, DIN)
  int top_k = 50;                          // SIM; 1 <= top_k (top_k >= long_len selects every slot)
  int gru_hidden = 0;                      // 0 = 6 * D (the reference)
  std::vector<int> stage_one_mlp = {200};  // SIM GSU head
  std::vector<int> stage_two_mlp = {200, 80};  // final classifier of every model
  std::vector<int> aux_mlp = {100, 50};        // DIEN aux net (SIM, DIEN)
  std::vector<int> attention_mlp = {80, 40};   // DIEN attention unit (SIM, DIEN)
};

// INVALID_ARGUMENT naming the field when a dim is < 1, an MLP list is empty or holds a width < 1,
// or the lengths do not fit (long_len >= 1 for SIM/DIN, short_len >= 2 for SIM/DIEN).
Status ValidateModelConfig(const ModelConfig& config);

// One named tensor of the flat parameter buffer.
struct ParamTensor {
  std::string name;  // e.g. "gsu_mlp/dense_0/kernel", "gru/recurrent_kernel", "augru/gate_bias"
  int64_t offset = 0;
  std::vector<int64_t> shape;
  int64_t size() const;
};

enum class ForwardMode {
  kTrain = 0,      // with the aux branch; Backward may follow
  kEval = 1,       // with the aux branch (model-spec 5.5: eval loss = total loss); no Backward
  kInference = 2,  // no aux branch, no losses beyond BCE (model-spec 5.6); no Backward
};

// Losses of one batch, as the reference reports them (model-spec 4): means over the batch rows.
struct Losses {
  double total = 0;           // classification + aux
  double classification = 0;  // SIM: 0.5 (BCE_gsu + BCE_esu); DIEN, DIN: BCE
  double aux = 0;             // DIEN aux loss with the 9B normaliser (0 for DIN and inference)
};

class Model {
 public:
  // REQUIRES: backend outlives the model; max_batch >= 1.
  static StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config,
                                                 kernels::Backend* backend, int64_t max_batch);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  // The id slots this model reads in `mode` (for BuildBatchKeys).
  KeyUsage key_usage(ForwardMode mode) const;

  // Reference initialisers (model-spec 3.6, 3.9): Glorot-uniform kernels, orthogonal GRU
  // recurrent kernel, zero biases except the AUGRU gate bias (1.0), PReLU slopes 0.1. A pure
  // function of `seed` (common/rng.h), identical on every machine.
  // Errors: a device backend's copy failing.
  Status InitParameters(uint64_t seed);

  // Backend memory (device memory for cuda: not readable on the host; use the copies below).
  absl::Span<float> parameters();
  absl::Span<float> gradients();
  // Host copies of the parameters and gradients (checkpoints, tests). INVALID_ARGUMENT on a size
  // mismatch.
  Status CopyParametersToHost(absl::Span<float> out);
  Status CopyParametersFromHost(absl::Span<const float> in);
  Status CopyGradientsToHost(absl::Span<float> out);
  const std::vector<ParamTensor>& param_layout() const;

  // Forward pass and losses for rows [0, batch.size) of `batch` (batch.size <= max_batch), reading
  // each table's pulled rows from keys (built by BuildBatchKeys with key_usage(mode)).
  // INVALID_ARGUMENT when the batch's shape does not match the config or exceeds max_batch.
  StatusOr<Losses> Forward(const data::Batch& batch, const BatchKeys& keys, ForwardMode mode);
  // The ESU (final) logits of the last Forward, [batch.size], in host memory; predicted CTR =
  // sigmoid(logit).
  absl::Span<const float> logits() const;
  // Gradient of loss_scale * Losses::total of the last kTrain Forward: overwrites gradients()
  // (dense) and each keys->tables[t].grads (host memory, summed per unique key). loss_scale > 1 is
  // dynamic loss scaling (worker/loss_scaler.h). REQUIRES: the last Forward was kTrain with the
  // same keys.
  Status Backward(BatchKeys* keys, float loss_scale = 1.0f);

 private:
  class Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sift::worker
