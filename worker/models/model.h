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
// read in place by host backends and copied in by device backends (one copy per array: by
// Forward itself, or ahead of it into an input slot through a copy channel); the per-key
// embedding gradients (through a copy channel) and the logits come back to host memory either
// way.
// Not thread-safe: one thread drives a Model (the backend parallelises inside ops), except the
// input uploads (UploadBatch etc.), which another thread may run for the slot not computed on.
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

// SIM's General Search Unit (docs/training.md "Lifelong sequences").
//   kSoft: the reference (model-spec 3.2-3.3): a parameter-free attention over the long_len long
//          slots with its own MLP head and loss, whose top_k weights select the ESU's slots.
//   kHard: the loader retrieves (common/data/category_index.h) the newest top_k events of the
//          target's category among the long_len events before the short part; the batch's long
//          slots are those top_k, the ESU (3.4, 3.5) attends over every valid one; no GSU head,
//          no GSU loss (classification = BCE_esu).
enum class Gsu { kSoft = 0, kHard = 1 };
const char* GsuName(Gsu gsu);  // "soft", "hard"
StatusOr<Gsu> ParseGsu(absl::string_view name);

// Defaults are the reference's (model-spec section 0).
struct ModelConfig {
  ModelType type = ModelType::kSim;
  int embedding_dim = 16;  // D
  int user_features = 1;   // UF
  int item_features = 2;   // F; item vector width F*D
  int long_len = 90;       // T_L (SIM, DIN)
  int short_len = 10;      // T_S (SIM, DIEN, DIN)
  int top_k = 50;          // SIM; 1 <= top_k (top_k >= long_len selects every slot)
  Gsu gsu = Gsu::kSoft;    // SIM; kHard: long_len = N searched, top_k = K slots
  // SIM: the time-interval embedding of the ESU (SIM paper 4.2): each long slot's
  // data::TimeBucket (batch.long_time) looks up a D-wide row of a dense table
  // "time_embedding/table" [64, D], concatenated to the slot's item vector; the ESU query is
  // [q; u] with a learned "time_embedding/query" u [D] (so u·tau adds a learned per-bucket
  // recency term to each score), and the attention and damped-mean outputs grow by D each.
  bool time_embedding = false;
  // SIM soft search with the time embedding: the GSU's time term (docs/training.md "Lifelong
  // sequences"; a sift extension, not in the paper). The GSU attends over the ESU's [x; tau] slots
  // (the same time_embedding/table rows) with the query [q; u_g], u_g a learned "gsu_time/query"
  // [D] starting at 0, so each GSU score gains a learned per-bucket recency term u_g . tau and the
  // top-k can prefer recent events, as the hard search's newest-K does; the GSU head's input
  // grows by D. Needs time_embedding and gsu soft.
  bool gsu_time = false;
  // SIM soft search over long histories (docs/training.md "Lifelong sequences"): the GSU and the
  // ESU run over the long slots of soft_search_chunk samples at a time, so [B, long_len, F*D] is
  // never materialised (the slots' vectors are gathered again from the batch's rows in the backward
  // pass). 0 = automatic: the whole batch at once (the reference's dense path, bit for bit) while
  // long_len <= kDenseSoftSearchMax, else chunks of at most kSoftSearchChunkFloats slot floats.
  // A chunk covers only the window of slots its samples fill (padding outside it is skipped):
  // consecutive samples of similar history length — the trainer's loader groups each batch's
  // rows by length — share a narrow window, and a chunk of short histories holds more samples.
  // Streamed and dense give the same model up to floating-point summation order.
  int soft_search_chunk = 0;
  static constexpr int kDenseSoftSearchMax = 4096;
  static constexpr int64_t kSoftSearchChunkFloats = int64_t{1} << 24;  // 64 MiB of fp32
  int gru_hidden = 0;                                                  // 0 = 6 * D (the reference)
  std::vector<int> stage_one_mlp = {200};                              // SIM GSU head
  std::vector<int> stage_two_mlp = {200, 80};  // final classifier of every model
  std::vector<int> aux_mlp = {100, 50};        // DIEN aux net (SIM, DIEN)
  std::vector<int> attention_mlp = {80, 40};   // DIEN attention unit (SIM, DIEN)
  // Inverted dropout of this rate on the hidden outputs of the MLP heads — the final classifier
  // (stage_two_mlp) and SIM's GSU head (stage_one_mlp) — in training Forwards only, with masks
  // from Model::SetDropoutSeed (kernels/dropout_mask.h). 0 = none (the reference). In [0, 0.9].
  float dropout = 0.0f;
};

// INVALID_ARGUMENT naming the field when a dim is < 1, an MLP list is empty or holds a width < 1,
// or the lengths do not fit (long_len >= 1 for SIM/DIN, short_len >= 2 for SIM/DIEN; hard search:
// SIM only, top_k <= long_len; time_embedding: SIM only; gsu_time: soft search with
// time_embedding; soft search: long_len <= 65,536, and
// beyond 4,096 (or with soft_search_chunk > 0) streamed; DIN: long_len <= 4,096).
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
  // The long slots of the batches this model reads: long_len, or top_k for hard search (0 for
  // DIEN).
  int batch_long_len() const;
  // Samples per chunk of SIM's streamed soft search as resolved for this model's max_batch
  // (ModelConfig::soft_search_chunk); 0 = the dense path.
  int64_t soft_search_chunk() const;
  // The long slots the last Forward searched: B * batch_long_len() unless the soft search
  // streams, whose chunks visit only their windows (ModelConfig::soft_search_chunk).
  int64_t long_slots_searched() const;
  // The id slots this model reads in `mode` (for BuildBatchKeys).
  KeyUsage key_usage(ForwardMode mode) const;

  // Reference initialisers (model-spec 3.6, 3.9): Glorot-uniform kernels, orthogonal GRU
  // recurrent kernel, zero biases except the AUGRU gate bias (1.0), PReLU slopes 0.1. A pure
  // function of `seed` (common/rng.h), identical on every machine.
  // Errors: a device backend's copy failing.
  Status InitParameters(uint64_t seed);
  // The seed of the dropout masks of the next kTrain Forwards (and their Backward): the trainer
  // sets one per step (config.dropout > 0). Evaluation and inference never drop.
  void SetDropoutSeed(uint64_t seed);

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
  // same keys. Backward = StartBackward, then FinishBackward.
  Status Backward(BatchKeys* keys, float loss_scale = 1.0f);
  // The same in two halves, so the host can issue more work (the dense allreduce and optimizer)
  // while the embedding gradients come back: StartBackward issues the pass — gradients() is then
  // valid for later backend ops, in stream order — and keys->tables[t].grads are valid only after
  // FinishBackward returned OK (which also waits for the backend and reports a failed op).
  // REQUIRES: keys->tables[t].grads are not resized or read in between.
  Status StartBackward(BatchKeys* keys, float loss_scale);
  Status FinishBackward();

  // ---- Inputs uploaded ahead of Forward (the step pipeline's copy stage) -----------------------
  // On a device backend the model keeps kInputSlots sets of input buffers in backend memory, each
  // with a copy channel (kernels/backend.h): step s's batch and pulled rows go into slot
  // s % kInputSlots — UploadBatch (the inverses, masks and labels, validated as Forward would),
  // UploadRows per table as its rows arrive from the pull, then FinishUpload — while this thread
  // computes the other slot; Forward(..., slot) waits for the copies on the backend's stream, not
  // on the host. The slot's next UploadBatch waits (on the copy stream) for the compute that read
  // it. On host backends these calls do nothing and Forward reads the host arrays in place.
  // Thread-safety: the upload calls for one slot may run on another thread than Forward/Backward,
  // provided a slot's next UploadBatch starts after its last Forward (and StartBackward) returned,
  // and its Forward after its FinishUpload returned (the step pipeline's order). Errors:
  // INVALID_ARGUMENT for a bad slot or inputs; FAILED_PRECONDITION out of order (rows before the
  // batch, a Forward of a slot holding another batch or an unfinished upload).
  static constexpr int kInputSlots = 2;
  bool uploads_inputs() const;  // device backends: the uploads copy
  Status UploadBatch(int slot, const data::Batch& batch, const BatchKeys& keys, ForwardMode mode);
  Status UploadRows(int slot, int table, const BatchKeys& keys);
  Status FinishUpload(int slot);
  // Forward on the inputs uploaded into `slot` (the same batch and keys).
  StatusOr<Losses> Forward(const data::Batch& batch, const BatchKeys& keys, ForwardMode mode,
                           int slot);

 private:
  class Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  static Status CheckSlot(int slot);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sift::worker
