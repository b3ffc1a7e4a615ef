// SIM, DIEN and DIN (model-spec 2-4, 8) composed from the blocks of worker/models/: the core here
// stages the batch's inputs, gathers the embeddings, runs the blocks a model type is made of and
// its classifier head, and scatters the embedding gradients back. See worker/README.md for the
// parameter layout (the order the blocks register in).
#include "worker/models/model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "worker/models/block.h"
#include "worker/models/dien_block.h"
#include "worker/models/din_block.h"
#include "worker/models/esu_block.h"
#include "worker/models/layers.h"
#include "worker/models/soft_gsu_block.h"

namespace sift::worker {

using kernels::Activation;
using models::Buf;
using models::Mlp;
using models::Pass;

const char* ModelTypeName(ModelType type) {
  switch (type) {
    case ModelType::kSim:
      return "sim";
    case ModelType::kDien:
      return "dien";
    case ModelType::kDin:
      return "din";
  }
  return "unknown";
}

StatusOr<ModelType> ParseModelType(absl::string_view name) {
  if (name == "sim") return ModelType::kSim;
  if (name == "dien") return ModelType::kDien;
  if (name == "din") return ModelType::kDin;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model type '", name, "' (expected sim, dien or din)"));
}

int64_t ParamTensor::size() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {

// Upper bound on every width and length, so that no size computation can overflow.
constexpr int kMaxDim = 1 << 16;
constexpr int kMaxLen = 1 << 12;
// SIM's soft search streams its long slots (ModelConfig::soft_search_chunk): far longer windows.
constexpr int kMaxSoftLen = 1 << 16;
constexpr int kMaxHidden = 1 << 13;

Status CheckDim(const char* field, int value, int min) {
  if (value < min || value > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat("model config: ", field, " must be in [", min,
                                                   ", ", kMaxDim, "], got ", value));
  }
  return absl::OkStatus();
}

Status CheckMlp(const char* field, const std::vector<int>& dims) {
  if (dims.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: ", field, " must list at least one hidden width"));
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1 || dims[i] > kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model config: ", field, "[", i, "] must be in [1, ", kMaxDim, "], got ", dims[i]));
    }
  }
  return absl::OkStatus();
}

bool UsesLong(ModelType t) { return t != ModelType::kDien; }
bool UsesDien(ModelType t) { return t != ModelType::kDin; }
// The long slots a batch holds for this config.
int BatchLongLen(const ModelConfig& c) {
  if (!UsesLong(c.type)) return 0;
  return c.type == ModelType::kSim && c.gsu == Gsu::kHard ? c.top_k : c.long_len;
}
// Hard search windows may be far longer than any slot count: they are never allocated.
constexpr int kMaxHardWindow = 1 << 30;

// Samples per chunk of SIM's streamed soft search (ModelConfig::soft_search_chunk); 0 = dense.
int64_t SoftSearchChunk(const ModelConfig& c, int64_t max_batch) {
  if (c.type != ModelType::kSim || c.gsu != Gsu::kSoft) return 0;
  if (c.soft_search_chunk > 0) return std::min<int64_t>(c.soft_search_chunk, max_batch);
  if (c.long_len <= ModelConfig::kDenseSoftSearchMax) return 0;
  const int64_t width = int64_t{c.embedding_dim} * (c.item_features + (c.time_embedding ? 1 : 0));
  const int64_t per_sample = int64_t{c.long_len} * width;
  return std::clamp<int64_t>(ModelConfig::kSoftSearchChunkFloats / per_sample, 1, max_batch);
}

}  // namespace

const char* GsuName(Gsu gsu) { return gsu == Gsu::kHard ? "hard" : "soft"; }

StatusOr<Gsu> ParseGsu(absl::string_view name) {
  if (name == "soft") return Gsu::kSoft;
  if (name == "hard") return Gsu::kHard;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown GSU '", name, "' (expected soft or hard)"));
}

Status ValidateModelConfig(const ModelConfig& c) {
  SIFT_RETURN_IF_ERROR(CheckDim("embedding_dim", c.embedding_dim, 1));
  SIFT_RETURN_IF_ERROR(CheckDim("user_features", c.user_features, 1));
  SIFT_RETURN_IF_ERROR(CheckDim("item_features", c.item_features, 1));
  if (c.type == ModelType::kSim && c.gsu == Gsu::kHard) {
    if (c.long_len < 1 || c.long_len > kMaxHardWindow) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: the hard search window long_len must be in [1, ",
                       kMaxHardWindow, "], got ", c.long_len));
    }
  } else {
    SIFT_RETURN_IF_ERROR(CheckDim("long_len", c.long_len, UsesLong(c.type) ? 1 : 0));
  }
  SIFT_RETURN_IF_ERROR(CheckDim("short_len", c.short_len, UsesDien(c.type) ? 2 : 0));
  const bool hard = c.type == ModelType::kSim && c.gsu == Gsu::kHard;
  if (c.time_embedding && c.type != ModelType::kSim) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: time_embedding is in SIM's search unit; model ",
                     ModelTypeName(c.type), " has none"));
  }
  if (c.gsu_time && (c.type != ModelType::kSim || c.gsu != Gsu::kSoft || !c.time_embedding)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: gsu_time is the soft search's time term: it needs model sim, gsu soft and "
        "time_embedding (got model ",
        ModelTypeName(c.type), ", gsu ", GsuName(c.gsu),
        c.time_embedding ? ", time_embedding on)" : ", time_embedding off)"));
  }
  if (c.gsu == Gsu::kHard && c.type != ModelType::kSim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: gsu hard is SIM's search unit; model ", ModelTypeName(c.type), " has none"));
  }
  if (hard && c.top_k > c.long_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: hard search retrieves top_k = ", c.top_k,
        " events out of the long_len = ", c.long_len, " searched: top_k must be <= long_len"));
  }
  // Sequence lengths and the recurrent width are bounded tighter, so that products such as
  // T_S * 4H and (T_L + T_S) * F * D stay far inside int. A hard search window is not allocated;
  // a soft search over more than kDenseSoftSearchMax slots is streamed.
  const bool soft = c.type == ModelType::kSim && !hard;
  const int max_long = soft ? kMaxSoftLen : kMaxLen;
  if ((hard ? c.top_k : c.long_len) > max_long || c.short_len > kMaxLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: ", hard ? "top_k (hard search)" : "long_len",
                     " must be <= ", max_long, " and short_len <= ", kMaxLen, ", got ",
                     hard ? c.top_k : c.long_len, " and ", c.short_len));
  }
  if (c.soft_search_chunk < 0 || c.soft_search_chunk > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: soft_search_chunk must be in [0, 2^24] samples, got ", c.soft_search_chunk));
  }

  const int64_t hidden = c.gru_hidden > 0 ? c.gru_hidden : 6 * int64_t{c.embedding_dim};
  if (UsesDien(c.type) && hidden > kMaxHidden) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: gru_hidden (", hidden, ") must be <= ", kMaxHidden));
  }
  if (static_cast<int64_t>(c.embedding_dim) * c.item_features > kMaxDim ||
      static_cast<int64_t>(c.embedding_dim) * c.user_features > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: embedding_dim * item_features/user_features must be <= ", kMaxDim));
  }
  if (c.type == ModelType::kSim) {
    SIFT_RETURN_IF_ERROR(CheckDim("top_k", c.top_k, 1));
    SIFT_RETURN_IF_ERROR(CheckMlp("stage_one_mlp", c.stage_one_mlp));
  }
  if (UsesDien(c.type)) {
    SIFT_RETURN_IF_ERROR(CheckDim("gru_hidden", c.gru_hidden, 0));
    if (c.gru_hidden == 0 && 6 * c.embedding_dim > kMaxDim) {
      return absl::InvalidArgumentError("model config: gru_hidden = 6 * embedding_dim is too big");
    }
    SIFT_RETURN_IF_ERROR(CheckMlp("aux_mlp", c.aux_mlp));
    SIFT_RETURN_IF_ERROR(CheckMlp("attention_mlp", c.attention_mlp));
  }
  SIFT_RETURN_IF_ERROR(CheckMlp("stage_two_mlp", c.stage_two_mlp));
  if (!(c.dropout >= 0 && c.dropout <= 0.9f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dropout (model.dropout) must be in [0, 0.9], got ", c.dropout));
  }
  return absl::OkStatus();
}

class Model::Impl {
 public:
  Impl(const ModelConfig& config, kernels::Backend* backend, int64_t max_batch);

  KeyUsage key_usage(ForwardMode mode) const {
    KeyUsage u;
    u.long_history = UsesLong(type_);
    u.short_history = true;
    u.short_negatives = UsesDien(type_) && mode != ForwardMode::kInference;
    return u;
  }
  // Allocates every buffer in the backend's memory (the constructor only plans them).
  Status Init();
  int64_t soft_search_chunk() const { return chunk_; }
  int64_t long_slots_searched() const {
    int64_t n = 0;
    for (const models::SlotChunk& k : chunks_) n += k.slots();
    return n;
  }
  // The dropout seed of head `head` (1: GSU, 2: classifier) for a Forward in `mode`.
  std::optional<uint64_t> DropoutSeed(ForwardMode mode, uint64_t head) const {
    if (mode != ForwardMode::kTrain || config_.dropout <= 0) return std::nullopt;
    return HashCombine(dropout_seed_, head);
  }
  uint64_t dropout_seed_ = 0;
  // slot: an uploaded input slot, or kDirect (the inputs are staged by Forward itself).
  StatusOr<Losses> Forward(const data::Batch& batch, const BatchKeys& keys, ForwardMode mode,
                           int slot);
  // Issues the backward pass; the embedding gradients arrive in FinishBackward.
  Status StartBackward(BatchKeys* keys, float loss_scale);
  Status FinishBackward();

  // Uploads ahead (Model::UploadBatch etc.): may run on another thread than the calls above.
  Status UploadBatch(int slot, const data::Batch& batch, const BatchKeys& keys, ForwardMode mode);
  Status UploadRows(int slot, int table, const BatchKeys& keys);
  Status FinishUpload(int slot);
  static constexpr int kDirect = Model::kInputSlots;  // the slot Forward stages itself

  ModelConfig config_;
  kernels::Backend* be_;
  const bool device_;  // the backend's memory is device memory: inputs and outputs are staged
  models::ParamRegistry registry_;
  Buf params_, grads_;
  const float* logits_ = nullptr;   // ESU / final logits of the last Forward (backend memory)
  std::vector<float> host_logits_;  // their host copy (device backends)
  int64_t last_batch_ = 0;

 private:
  // The batch's inputs in backend memory: the host arrays themselves on host backends, copies in
  // the staging buffers on device backends.
  struct Inputs {
    std::vector<const float*> rows;  // per table: its pulled rows
    const int32_t* user_inv = nullptr;
    const int32_t* target_inv = nullptr;
    const int32_t* long_inv = nullptr;
    const int32_t* short_inv = nullptr;
    const int32_t* short_neg_inv = nullptr;
    const float* long_mask = nullptr;
    const int32_t* long_time = nullptr;  // time buckets of the long slots (time embedding)
    const float* short_mask = nullptr;
    const float* label = nullptr;
  };
  // The batch's and keys' shapes against the config (and, with scan_inverses, every inverse
  // against its table's key count). Reads only the configuration: callable from any thread.
  Status CheckInputs(const data::Batch& batch, const BatchKeys& keys, ForwardMode mode,
                     bool scan_inverses = true) const;
  // Device backends: the inputs of one batch in backend memory. Slots 0..kInputSlots-1 are
  // filled ahead through their copy channels (UploadBatch / UploadRows / FinishUpload, possibly
  // on another thread); slot kDirect by Forward itself, in stream order (CopyToBackend).
  struct InputSlot {
    std::vector<Buf> rows;  // per table
    Buf user_inv, target_inv, long_inv, short_inv, short_neg_inv, long_mask, short_mask, label;
    Buf long_time;
    std::unique_ptr<kernels::CopyChannel> channel;  // null for kDirect
    kernels::Fence uploaded;                        // after its uploads
    kernels::Fence released;                        // after the last compute reading it
    // What it holds, for Forward's check: the batch rows, the negatives, each table's keys.
    int64_t batch = -1;
    bool negatives = false;
    std::vector<int64_t> keys;
    std::vector<bool> rows_done;
    bool finished = false;
  };
  template <typename T>
  Status Put(InputSlot& s, const T* host, int64_t n, const Buf& dst);
  // in_ = the host arrays (host backends) or slot `slot`'s buffers.
  void BindInputs(int slot, const data::Batch& batch, const BatchKeys& keys, bool negatives);
  void GatherEmbeddings(bool negatives);
  Status ScatterEmbeddingGrads(BatchKeys* keys);
  // The pass over the current batch (grads: backward passes).
  Pass MakePass(bool backward) {
    return Pass{be_, params_.data(), backward ? grads_.data() : nullptr, workspace_.data(), B_};
  }

  // The composition of each model type: its blocks' forward into the classifier input z, and
  // the backward from dz into dq_, dp_, dx_long_, de_short_, de_neg_ and the parameters.
  void SimForward(const Pass& p, ForwardMode mode);
  void SimBackward(const Pass& p, float cls_scale, float aux_scale);
  void DienForward(const Pass& p);
  void DienBackward(const Pass& p, float aux_scale);
  void DinForward(const Pass& p);
  void DinBackward(const Pass& p);

  // The long slots, one SlotChunk at a time (block.h). On the dense path the batch is one chunk
  // of every slot, gathered with the other embeddings. When the soft search streams, PlanChunks
  // packs consecutive samples into chunks of at most chunk_ * T_L resident slots, each over the
  // window of slots its samples fill (the rest is padding: a batch grouped by history length,
  // BatchLoaderOptions::group_by_history, skips most of it), and StageLong makes one chunk
  // resident: its mask, time buckets and inverses (copied when the window is narrower than T_L)
  // and its gathered rows in x_long_.
  void PlanChunks(const data::Batch& batch);
  void StageLong(models::SlotChunk* k);
  // Streamed soft search, backward: the ESU and GSU attention gradients chunk by chunk, each
  // chunk's slot gradients summed into its tables' row gradients g[f] (U[f] rows) before the next.
  void StreamedLongBackward(const Pass& p, const std::vector<float*>& g,
                            const std::vector<int64_t>& U);
  bool streamed() const { return chunk_ > 0; }
  // Chunk k's ESU slot mask: the top-k mask (soft search) or the slots' mask (hard search).
  const float* EsuMask(const models::SlotChunk& k) const { return gsu_ ? gsu_->rho(k) : k.mask; }
  // The slots the soft GSU attends over and their gradients: the staged x_long_, or with the
  // GSU time term the ESU's [x; tau] (EsuBlock::Slots, SlotGrads).
  const float* GsuSlots() const { return gsu_time_ ? esu_->Slots(x_long_.data()) : x_long_.data(); }
  float* GsuSlotGrads() const {
    return gsu_time_ ? esu_->SlotGrads(dx_long_.data()) : dx_long_.data();
  }

  const ModelType type_;
  const bool time_;      // SIM with the time-interval embedding in the ESU
  const bool gsu_time_;  // and the soft GSU's time term (ModelConfig::gsu_time)
  const int64_t max_batch_;
  const int D_, UF_, F_, I_, P_, TL_, TS_, H_;
  const int64_t chunk_;  // samples per chunk of the streamed soft search; 0 = dense
  int64_t B_ = 0;        // rows of the current batch
  std::vector<models::SlotChunk> chunks_;  // the current batch's (PlanChunks)
  // The staged chunk's inverses: feature f's [c, width] at long_inv_k_ + f * long_inv_stride_.
  const int32_t* long_inv_k_ = nullptr;
  int64_t long_inv_stride_ = 0;
  ForwardMode mode_ = ForwardMode::kInference;
  bool can_backward_ = false;
  std::vector<size_t> key_counts_;  // per table, of the last Forward's keys (a Backward check)

  // The blocks (those of the model type; the others absent) and the classifier head.
  std::optional<models::SoftGsuBlock> gsu_;  // SIM with the soft GSU
  std::optional<models::EsuBlock> esu_;      // SIM
  std::optional<models::DienBlock> dien_;    // SIM, DIEN
  std::optional<models::DinBlock> din_;      // DIN
  Mlp classifier_mlp_;
  int Ie_ = 0;  // SIM: the ESU's a and v width
  int zw_ = 0;  // classifier input: SIM [a; v; q; d; p], DIEN [q; d; p], DIN [q; g; p]

  models::BufferPlan plan_;  // filled by the constructor, allocated by Init
  Inputs in_;
  int slot_ = kDirect;  // the input slot of the last Forward
  // Device backends: the input slots and the per-table embedding gradients, sized for the
  // largest batch, and the channel that downloads those gradients.
  InputSlot slots_[Model::kInputSlots + 1];
  std::vector<Buf> row_grads_;
  std::vector<int64_t> table_capacity_;  // unique keys per table a slot holds
  std::unique_ptr<kernels::CopyChannel> grads_channel_;
  bool grads_pending_ = false;  // downloads issued, FinishBackward not yet called

  // The gathered embeddings [max_batch, ...] (x_long_: of the resident samples), the classifier
  // input, and their gradients.
  Buf q_, p_, x_long_, e_short_, e_neg_, z_;
  Buf dq_, dp_, dx_long_, de_short_, de_neg_, dz_, dlogit2_;
  Buf workspace_;
  // Streamed soft search: a staged chunk's mask, time buckets and inverses (F of them) when its
  // window is narrower than T_L (int32 in float-sized elements).
  Buf chunk_mask_, chunk_time_, chunk_inv_;
};

Model::Impl::Impl(const ModelConfig& config, kernels::Backend* backend, int64_t max_batch)
    : config_(config),
      be_(backend),
      device_(backend->memory_space() == kernels::MemorySpace::kDevice),
      type_(config.type),
      time_(config.type == ModelType::kSim && config.time_embedding),
      gsu_time_(time_ && config.gsu == Gsu::kSoft && config.gsu_time),
      max_batch_(max_batch),
      D_(config.embedding_dim),
      UF_(config.user_features),
      F_(config.item_features),
      I_(config.embedding_dim * config.item_features),
      P_(config.embedding_dim * config.user_features),
      TL_(BatchLongLen(config)),
      TS_(config.short_len),
      H_(config.gru_hidden > 0 ? config.gru_hidden : 6 * config.embedding_dim),
      chunk_(SoftSearchChunk(config, max_batch)) {
  const int64_t B = max_batch;
  const bool sim = type_ == ModelType::kSim;
  const bool dien = UsesDien(type_);
  // Samples whose long slots are gathered at once: the batch, or a chunk of the streamed search.
  const int64_t resident = chunk_ > 0 ? chunk_ : B;

  // ---- Blocks and parameters, in layout order (worker/README.md). ----
  int64_t ws = 0;
  if (sim && config.gsu == Gsu::kSoft) {
    gsu_.emplace(B, TL_, I_, P_, config.top_k, gsu_time_ ? D_ : 0);
    gsu_->Build(config, &registry_, &plan_);
    ws = std::max(ws, gsu_->WorkspaceFloats());
  }
  if (sim) esu_.emplace(B, resident, TL_, I_, D_, time_);
  Ie_ = sim ? esu_->width() : 0;
  zw_ = sim ? 2 * Ie_ + I_ + H_ + P_ : dien ? I_ + H_ + P_ : 2 * I_ + P_;
  classifier_mlp_.Build("classifier_mlp", zw_, config.stage_two_mlp, Activation::kPrelu, B,
                        &registry_);
  classifier_mlp_.SetDropout(config.dropout);
  ws = std::max(ws, classifier_mlp_.WorkspaceFloats());
  if (dien) {
    dien_.emplace(B, I_, H_, TS_);
    dien_->Build(config, &registry_, &plan_);
    ws = std::max(ws, dien_->WorkspaceFloats());
    plan_.Add(&e_neg_, B * TS_ * I_);
    plan_.Add(&de_neg_, B * TS_ * I_);
  }
  // Registered last: every other tensor keeps its offset (the time embedding's).
  if (sim) esu_->Build(&registry_, &plan_);
  if (gsu_) gsu_->BuildTimeTerm(&registry_, &plan_);
  if (type_ == ModelType::kDin) {
    din_.emplace(B, TL_, TS_, I_);
    din_->Build(&plan_);
  }
  key_counts_.assign(static_cast<size_t>(UF_ + F_), 0);
  plan_.Add(&params_, registry_.total());
  plan_.Add(&grads_, registry_.total());

  // ---- Shared activations. ----
  plan_.Add(&q_, B * I_);
  plan_.Add(&p_, B * P_);
  plan_.Add(&dq_, B * I_);
  plan_.Add(&dp_, B * P_);
  plan_.Add(&e_short_, B * TS_ * I_);
  plan_.Add(&de_short_, B * TS_ * I_);
  if (UsesLong(type_)) {
    plan_.Add(&x_long_, resident * TL_ * I_);
    plan_.Add(&dx_long_, resident * TL_ * I_);
  }
  if (streamed()) {
    static_assert(sizeof(int32_t) == sizeof(float));
    plan_.Add(&chunk_mask_, resident * TL_);
    if (time_) plan_.Add(&chunk_time_, resident * TL_);
    plan_.Add(&chunk_inv_, F_ * resident * TL_);
  }
  plan_.Add(&z_, B * zw_);
  plan_.Add(&dz_, B * zw_);
  plan_.Add(&dlogit2_, B);
  plan_.Add(&workspace_, ws);

  // Device backends: staging for the inputs and the embedding gradients (host backends read and
  // write the host arrays in place).
  row_grads_.resize(static_cast<size_t>(UF_ + F_));
  if (device_) {
    const int64_t item_slots = 1 + TL_ + 2 * int64_t{TS_};  // target, long, short, negatives
    for (int t = 0; t < UF_ + F_; ++t) {
      table_capacity_.push_back(t < UF_ ? B : B * item_slots);
      plan_.Add(&row_grads_[t], table_capacity_.back() * D_);
    }
    // int32 and float are both 4 bytes: the plan's float count is the element count.
    static_assert(sizeof(int32_t) == sizeof(float));
    for (InputSlot& in : slots_) {
      in.rows.resize(static_cast<size_t>(UF_ + F_));
      for (int t = 0; t < UF_ + F_; ++t) plan_.Add(&in.rows[t], table_capacity_[t] * D_);
      plan_.Add(&in.user_inv, UF_ * B);
      plan_.Add(&in.target_inv, F_ * B);
      plan_.Add(&in.long_inv, F_ * B * TL_);
      plan_.Add(&in.short_inv, F_ * B * TS_);
      if (dien) plan_.Add(&in.short_neg_inv, F_ * B * TS_);
      plan_.Add(&in.long_mask, B * TL_);
      if (time_) plan_.Add(&in.long_time, B * TL_);
      plan_.Add(&in.short_mask, B * TS_);
      plan_.Add(&in.label, B);
      in.keys.assign(static_cast<size_t>(UF_ + F_), 0);
      in.rows_done.assign(static_cast<size_t>(UF_ + F_), false);
    }
  }
}

Status Model::Impl::Init() {
  SIFT_RETURN_IF_ERROR(plan_.Allocate(be_));
  if (gsu_) SIFT_RETURN_IF_ERROR(gsu_->Allocate(be_));
  if (gsu_) SIFT_RETURN_IF_ERROR(gsu_->Init(be_));
  SIFT_RETURN_IF_ERROR(classifier_mlp_.Allocate(be_));
  if (dien_) SIFT_RETURN_IF_ERROR(dien_->Allocate(be_));
  if (esu_) SIFT_RETURN_IF_ERROR(esu_->Init(be_));
  host_logits_.resize(device_ ? static_cast<size_t>(max_batch_) : 0);
  if (device_) {
    // Page-locked staging up front: a slot's inverses, masks and labels, and an eighth of the
    // rows (and of the gradients) that all-unique keys would need — a batch's unique keys are far
    // fewer; a channel grows (doubling) in the first steps if needed. At the worst case (batch
    // 131072, default dims) it would be ~2 GB per channel.
    for (int s = 0; s < Model::kInputSlots; ++s) {
      int64_t bytes = 0;
      for (const Buf* b : {&slots_[s].user_inv, &slots_[s].target_inv, &slots_[s].long_inv,
                           &slots_[s].short_inv, &slots_[s].short_neg_inv, &slots_[s].long_mask,
                           &slots_[s].short_mask, &slots_[s].label, &slots_[s].long_time}) {
        bytes += b->mem.bytes() + 256;
      }
      for (const Buf& b : slots_[s].rows) bytes += b.mem.bytes() / 8 + 256;
      SIFT_ASSIGN_OR_RETURN(slots_[s].channel, be_->CreateCopyChannel(bytes));
    }
    int64_t grad_bytes = 0;
    for (const Buf& b : row_grads_) grad_bytes += b.mem.bytes() / 8 + 256;
    SIFT_ASSIGN_OR_RETURN(grads_channel_, be_->CreateCopyChannel(grad_bytes));
  }
  return be_->Synchronize();
}

Status Model::Impl::CheckInputs(const data::Batch& batch, const BatchKeys& keys, ForwardMode mode,
                                bool scan_inverses) const {
  const int64_t B = batch.size;
  if (B < 1 || B > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size ", B, " is outside [1, max_batch = ", max_batch_, "]"));
  }
  if (batch.num_user_features != UF_ || batch.num_item_features != F_ || batch.short_len != TS_ ||
      (UsesLong(type_) && batch.long_len != TL_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch shape (user features ", batch.num_user_features, ", item features ",
        batch.num_item_features, ", long_len ", batch.long_len, ", short_len ", batch.short_len,
        ") does not match the model config (", UF_, ", ", F_, ", ", TL_, ", ", TS_, ")"));
  }
  if (time_) {
    if (!batch.has_long_time ||
        batch.long_time.size() < static_cast<size_t>(batch.capacity) * TL_) {
      return absl::InvalidArgumentError(
          "the model embeds time intervals (time_embedding) but the batch has no time buckets "
          "(a loader without time_buckets)");
    }
    for (int64_t i = 0; i < B * TL_; ++i) {
      const int32_t t = batch.long_time[static_cast<size_t>(i)];
      if (t < -1 || t >= data::kTimeBuckets) {
        return absl::InvalidArgumentError(absl::StrCat(
            "time bucket ", t, " of long slot ", i, " is outside [-1, ", data::kTimeBuckets, ")"));
      }
    }
  }
  const bool hard = type_ == ModelType::kSim && !gsu_;
  if (type_ == ModelType::kSim && (batch.hard_search_window > 0) != hard) {
    return absl::InvalidArgumentError(
        hard ? "the model searches hard (gsu hard) but the batch's long slots are the newest "
               "events (hard_search_window 0)"
             : "the batch's long slots come from a hard search but the model's GSU is soft");
  }
  const size_t cap = static_cast<size_t>(batch.capacity);
  if (batch.label.size() < cap || batch.short_mask.size() < cap * TS_ ||
      batch.long_mask.size() < cap * TL_ || B > batch.capacity) {
    return absl::InvalidArgumentError("batch arrays are smaller than its capacity says");
  }
  if (keys.batch != B || keys.num_user_features != UF_ || keys.num_item_features != F_ ||
      keys.tables.size() != static_cast<size_t>(UF_ + F_)) {
    return absl::InvalidArgumentError(absl::StrCat("batch keys were built for another batch (rows ",
                                                   keys.batch, " vs ", B, ", tables ",
                                                   keys.tables.size(), " vs ", UF_ + F_, ")"));
  }
  const KeyUsage need = key_usage(mode);
  struct Inv {
    const char* what;
    const std::vector<int32_t>* inv;
    int64_t per_feature;  // slots per feature
    int features;
    int first_table;
    bool needed;
  };
  const Inv invs[] = {
      {"user", &keys.user_inv, B, UF_, 0, true},
      {"target", &keys.target_inv, B, F_, UF_, true},
      {"long history", &keys.long_inv, B * TL_, F_, UF_, need.long_history},
      {"short history", &keys.short_inv, B * TS_, F_, UF_, need.short_history},
      {"short negatives", &keys.short_neg_inv, B * TS_, F_, UF_, need.short_negatives},
  };
  for (size_t t = 0; t < keys.tables.size(); ++t) {
    const TableKeys& tk = keys.tables[t];
    if (tk.rows.size() != tk.keys.size() * static_cast<size_t>(D_)) {
      return absl::InvalidArgumentError(absl::StrCat("batch keys: table ", t, " has ",
                                                     tk.rows.size(), " row floats for ",
                                                     tk.keys.size(), " keys of dim ", D_));
    }
  }
  for (const Inv& v : invs) {
    if (!v.needed) continue;
    if (v.inv->size() != static_cast<size_t>(v.per_feature * v.features)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch keys: ", v.what, " inverse has ", v.inv->size(), " entries, expected ",
          v.per_feature * v.features, " (built with a KeyUsage that omits it?)"));
    }
    if (!scan_inverses) continue;  // checked when the slot was uploaded
    for (int f = 0; f < v.features; ++f) {
      const int64_t unique = static_cast<int64_t>(keys.tables[v.first_table + f].keys.size());
      const int32_t* p = v.inv->data() + f * v.per_feature;
      for (int64_t i = 0; i < v.per_feature; ++i) {
        if (p[i] < -1 || p[i] >= unique) {
          return absl::InvalidArgumentError(absl::StrCat("batch keys: ", v.what, " feature ", f,
                                                         " slot ", i, " has inverse ", p[i],
                                                         " outside [-1, ", unique, ")"));
        }
      }
    }
  }
  return absl::OkStatus();
}

template <typename T>
Status Model::Impl::Put(InputSlot& s, const T* host, int64_t n, const Buf& dst) {
  if (n <= 0) return absl::OkStatus();
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  return s.channel != nullptr ? s.channel->Upload(host, dst.mem.data(), bytes)
                              : be_->CopyToBackend(host, dst.mem.data(), bytes);
}

Status Model::Impl::UploadBatch(int slot, const data::Batch& batch, const BatchKeys& keys,
                                ForwardMode mode) {
  if (!device_) return absl::OkStatus();  // host backends read the host arrays in place
  // Whatever follows, the slot no longer holds its last upload.
  slots_[slot].finished = false;
  slots_[slot].batch = -1;
  SIFT_RETURN_IF_ERROR(CheckInputs(batch, keys, mode));
  for (size_t t = 0; t < keys.tables.size(); ++t) {
    const int64_t unique = static_cast<int64_t>(keys.tables[t].keys.size());
    if (unique > table_capacity_[t]) {
      return absl::InvalidArgumentError(absl::StrCat("batch keys: table ", t, " has ", unique,
                                                     " unique keys, more than its ",
                                                     table_capacity_[t], " slots can hold"));
    }
  }
  InputSlot& s = slots_[slot];
  if (s.channel != nullptr) {
    // The slot's last uploads are done (their staging is free), and the compute that read them.
    SIFT_RETURN_IF_ERROR(s.channel->Synchronize());
    SIFT_RETURN_IF_ERROR(s.channel->WaitFence(s.released));
  }
  const int64_t B = batch.size;
  s.batch = B;
  s.negatives = key_usage(mode).short_negatives;
  for (size_t t = 0; t < keys.tables.size(); ++t) {
    s.keys[t] = static_cast<int64_t>(keys.tables[t].keys.size());
    s.rows_done[t] = false;
  }
  SIFT_RETURN_IF_ERROR(Put(s, keys.user_inv.data(), UF_ * B, s.user_inv));
  SIFT_RETURN_IF_ERROR(Put(s, keys.target_inv.data(), F_ * B, s.target_inv));
  if (TL_ > 0) {
    SIFT_RETURN_IF_ERROR(Put(s, keys.long_inv.data(), F_ * B * TL_, s.long_inv));
    SIFT_RETURN_IF_ERROR(Put(s, batch.long_mask.data(), B * TL_, s.long_mask));
    if (time_) SIFT_RETURN_IF_ERROR(Put(s, batch.long_time.data(), B * TL_, s.long_time));
  }
  SIFT_RETURN_IF_ERROR(Put(s, keys.short_inv.data(), F_ * B * TS_, s.short_inv));
  if (s.negatives) {
    SIFT_RETURN_IF_ERROR(Put(s, keys.short_neg_inv.data(), F_ * B * TS_, s.short_neg_inv));
  }
  SIFT_RETURN_IF_ERROR(Put(s, batch.short_mask.data(), B * TS_, s.short_mask));
  return Put(s, batch.label.data(), B, s.label);
}

Status Model::Impl::UploadRows(int slot, int table, const BatchKeys& keys) {
  if (!device_) return absl::OkStatus();
  InputSlot& s = slots_[slot];
  if (table < 0 || table >= UF_ + F_ || keys.tables.size() != s.keys.size() || s.batch < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Model::UploadRows: table ", table, " of slot ", slot, " before its UploadBatch"));
  }
  const TableKeys& tk = keys.tables[table];
  if (static_cast<int64_t>(tk.keys.size()) != s.keys[table] ||
      tk.rows.size() != tk.keys.size() * static_cast<size_t>(D_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Model::UploadRows: table ", table, " has ", tk.keys.size(), " keys and ", tk.rows.size(),
        " row floats; its UploadBatch had ", s.keys[table], " keys of dim ", D_));
  }
  SIFT_RETURN_IF_ERROR(Put(s, tk.rows.data(), s.keys[table] * D_, s.rows[table]));
  s.rows_done[table] = true;
  return absl::OkStatus();
}

Status Model::Impl::FinishUpload(int slot) {
  if (!device_) return absl::OkStatus();
  InputSlot& s = slots_[slot];
  for (size_t t = 0; t < s.rows_done.size(); ++t) {
    if (s.batch < 0 || !s.rows_done[t]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Model::FinishUpload: slot ", slot, " has no rows of table ", t, " (UploadRows)"));
    }
  }
  if (s.channel != nullptr) {
    SIFT_ASSIGN_OR_RETURN(s.uploaded, s.channel->RecordFence());
  }
  s.finished = true;
  return absl::OkStatus();
}

void Model::Impl::BindInputs(int slot, const data::Batch& batch, const BatchKeys& keys,
                             bool negatives) {
  if (!device_) {
    in_.rows.resize(keys.tables.size());
    for (size_t t = 0; t < keys.tables.size(); ++t) in_.rows[t] = keys.tables[t].rows.data();
    in_.user_inv = keys.user_inv.data();
    in_.target_inv = keys.target_inv.data();
    in_.long_inv = TL_ > 0 ? keys.long_inv.data() : nullptr;
    in_.short_inv = keys.short_inv.data();
    in_.short_neg_inv = negatives ? keys.short_neg_inv.data() : nullptr;
    in_.long_mask = TL_ > 0 ? batch.long_mask.data() : nullptr;
    in_.long_time = time_ ? batch.long_time.data() : nullptr;
    in_.short_mask = batch.short_mask.data();
    in_.label = batch.label.data();
    return;
  }
  const InputSlot& s = slots_[slot];
  in_.rows.resize(s.rows.size());
  for (size_t t = 0; t < s.rows.size(); ++t) in_.rows[t] = s.rows[t].data();
  in_.user_inv = s.user_inv.ints();
  in_.target_inv = s.target_inv.ints();
  in_.long_inv = TL_ > 0 ? s.long_inv.ints() : nullptr;
  in_.short_inv = s.short_inv.ints();
  in_.short_neg_inv = negatives ? s.short_neg_inv.ints() : nullptr;
  in_.long_mask = TL_ > 0 ? s.long_mask.data() : nullptr;
  in_.long_time = time_ ? s.long_time.ints() : nullptr;
  in_.short_mask = s.short_mask.data();
  in_.label = s.label.data();
}

void Model::Impl::GatherEmbeddings(bool negatives) {
  const int64_t B = B_;
  for (int k = 0; k < UF_; ++k) {
    be_->GatherRows(B, D_, in_.rows[k], in_.user_inv + k * B, nullptr, p_.data() + k * D_, P_);
  }
  for (int f = 0; f < F_; ++f) {
    const float* rows = in_.rows[UF_ + f];
    be_->GatherRows(B, D_, rows, in_.target_inv + f * B, nullptr, q_.data() + f * D_, I_);
    if (TL_ > 0 && !streamed()) {
      be_->GatherRows(B * TL_, D_, rows, in_.long_inv + f * B * TL_, in_.long_mask,
                      x_long_.data() + f * D_, I_);
    }
    be_->GatherRows(B * TS_, D_, rows, in_.short_inv + f * B * TS_, in_.short_mask,
                    e_short_.data() + f * D_, I_);
    if (negatives) {
      be_->GatherRows(B * TS_, D_, rows, in_.short_neg_inv + f * B * TS_, in_.short_mask,
                      e_neg_.data() + f * D_, I_);
    }
  }
}

void Model::Impl::PlanChunks(const data::Batch& batch) {
  chunks_.clear();
  const int64_t B = B_;
  if (TL_ == 0) return;
  if (!streamed()) {
    chunks_.push_back({0, B, 0, TL_, 0, in_.long_mask, in_.long_time});
    return;
  }
  const int64_t budget = chunk_ * TL_;  // resident slots (x_long_, the ESU's)
  const float* mask = batch.long_mask.data();
  models::SlotChunk k;
  int lo = 0, hi = 0;  // the open chunk's window [lo, hi)
  int64_t offset = 0;
  const auto close = [&] {
    k.start = lo;
    k.width = hi - lo;
    k.offset = offset;
    offset += k.slots();
    chunks_.push_back(k);
  };
  for (int64_t b = 0; b < B; ++b) {
    const float* m = mask + b * TL_;
    int first = 0, last = TL_;
    while (first < TL_ && m[first] == 0.0f) ++first;
    while (last > first && m[last - 1] == 0.0f) --last;
    if (first == TL_) first = TL_ - 1;  // no slot: a window of one padding slot
    const int nlo = k.c > 0 ? std::min(lo, first) : first;
    const int nhi = k.c > 0 ? std::max(hi, last) : last;
    if (k.c > 0 && (k.c + 1) * (nhi - nlo) > budget) {
      close();
      k = models::SlotChunk{};
      k.b0 = b;
      lo = first, hi = last;
    } else {
      lo = nlo, hi = nhi;
    }
    ++k.c;
  }
  close();
}

void Model::Impl::StageLong(models::SlotChunk* k) {
  const int64_t B = B_;
  const int64_t at = k->b0 * TL_ + k->start;
  if (k->width == TL_) {  // every slot of its samples: the batch's arrays themselves
    k->mask = in_.long_mask + at;
    k->time = time_ ? in_.long_time + at : nullptr;
    long_inv_k_ = in_.long_inv + at;
    long_inv_stride_ = B * TL_;
  } else {  // the window's columns, copied (a bit copy: the int32 arrays go through as floats)
    const int64_t c = k->c, w = k->width;
    be_->Copy(1, c, w, in_.long_mask + at, 0, TL_, chunk_mask_.data(), 0, w, false);
    k->mask = chunk_mask_.data();
    if (time_) {
      be_->Copy(1, c, w, reinterpret_cast<const float*>(in_.long_time + at), 0, TL_,
                chunk_time_.data(), 0, w, false);
      k->time = reinterpret_cast<const int32_t*>(chunk_time_.data());
    }
    be_->Copy(F_, c, w, reinterpret_cast<const float*>(in_.long_inv + at), B * TL_, TL_,
              chunk_inv_.data(), c * w, w, false);
    long_inv_k_ = reinterpret_cast<const int32_t*>(chunk_inv_.data());
    long_inv_stride_ = c * w;
  }
  for (int f = 0; f < F_; ++f) {
    be_->GatherRows(k->slots(), D_, in_.rows[UF_ + f], long_inv_k_ + f * long_inv_stride_, k->mask,
                    x_long_.data() + f * D_, I_);
  }
}

// ---- The model types, composed. ----

// SIM (model-spec 3): the GSU picks the ESU's slots — the soft search's top-k of its attention
// (3.2, 3.3), or the hard search's retrieved slots (every valid one) — the ESU attends over them
// (3.4, 3.5), the DIEN block reads the short history (3.6); z = [a; v; q; d; p].
void Model::Impl::SimForward(const Pass& p, ForwardMode mode) {
  const int64_t B = B_;
  float* z = z_.data();
  // Streamed: each chunk staged for the GSU pass, and again for the ESU's unless it is the only
  // one (still resident).
  // With the GSU time term the GSU attends over the ESU's [x; tau] slots, prepared in its pass.
  const bool restage = streamed() && chunks_.size() > 1;
  if (gsu_) {
    gsu_->PrepareQuery(p, q_.data());
    for (models::SlotChunk& k : chunks_) {
      if (streamed()) StageLong(&k);
      if (gsu_time_) esu_->PrepareSlots(p, x_long_.data(), k);
      gsu_->Attend(p, GsuSlots(), k);
    }
    gsu_->Finish(p, q_.data(), p_.data(), DropoutSeed(mode, 1), chunks_);
  }
  esu_->PrepareQuery(p, q_.data());
  for (models::SlotChunk& k : chunks_) {
    if (restage) StageLong(&k);
    if (restage || !gsu_time_) esu_->PrepareSlots(p, x_long_.data(), k);
    esu_->Forward(p, q_.data(), x_long_.data(), EsuMask(k), k, z, zw_);
  }
  be_->Copy(1, B, I_, q_.data(), 0, I_, z + 2 * Ie_, 0, zw_, false);
  dien_->Forward(p, q_.data(), e_short_.data(), in_.short_mask, z + 2 * Ie_ + I_, zw_);
  be_->Copy(1, B, P_, p_.data(), 0, P_, z + 2 * Ie_ + I_ + H_, 0, zw_, false);
}

void Model::Impl::SimBackward(const Pass& p, float cls_scale, float aux_scale) {
  const int64_t B = B_;
  const float* dz = dz_.data();
  // dz = [da; dv; dq; dd; dp].
  be_->Copy(1, B, I_, dz + 2 * Ie_, 0, zw_, dq_.data(), 0, I_, false);
  be_->Copy(1, B, P_, dz + 2 * Ie_ + I_ + H_, 0, zw_, dp_.data(), 0, P_, false);
  be_->Copy(B, 1, H_, dz + 2 * Ie_ + I_, zw_, 0, dien_->output_grad(), H_, 0, false);
  // Streamed soft search: the ESU's and the GSU attention's gradients are taken chunk by chunk
  // in ScatterEmbeddingGrads (StreamedLongBackward), after the GSU head's below.
  if (!streamed()) {
    esu_->BeginBackward(p);
    const models::SlotChunk& k = chunks_.front();
    esu_->Backward(p, q_.data(), x_long_.data(), EsuMask(k), k, dz, zw_, dq_.data(),
                   dx_long_.data());
    if (!gsu_time_) esu_->ScatterSlotGrads(p, k, dx_long_.data());
    esu_->FinishBackward(p, dq_.data());
  }
  dien_->Backward(p, q_.data(), e_short_.data(), in_.short_mask, mode_ != ForwardMode::kInference,
                  aux_scale, dq_.data(), de_short_.data(), de_neg_.data());
  if (!gsu_) return;
  gsu_->HeadBackward(p, in_.label, cls_scale, dq_.data(), dp_.data());
  if (!streamed()) {
    const models::SlotChunk& k = chunks_.front();
    gsu_->AttendBackward(p, GsuSlots(), k, dq_.data(), GsuSlotGrads());
    // With the time term the GSU's slot gradients joined the ESU's before they are split.
    if (gsu_time_) esu_->ScatterSlotGrads(p, k, dx_long_.data());
    gsu_->FinishBackward(p, dq_.data());
  }
}

// DIEN (model-spec 3.6, 3.7 without SIM's search): z = [q; d; p].
void Model::Impl::DienForward(const Pass& p) {
  const int64_t B = B_;
  float* z = z_.data();
  be_->Copy(1, B, I_, q_.data(), 0, I_, z, 0, zw_, false);
  dien_->Forward(p, q_.data(), e_short_.data(), in_.short_mask, z + I_, zw_);
  be_->Copy(1, B, P_, p_.data(), 0, P_, z + I_ + H_, 0, zw_, false);
}

void Model::Impl::DienBackward(const Pass& p, float aux_scale) {
  const int64_t B = B_;
  const float* dz = dz_.data();
  be_->Copy(1, B, I_, dz, 0, zw_, dq_.data(), 0, I_, false);
  be_->Copy(1, B, P_, dz + I_ + H_, 0, zw_, dp_.data(), 0, P_, false);
  be_->Copy(B, 1, H_, dz + I_, zw_, 0, dien_->output_grad(), H_, 0, false);
  dien_->Backward(p, q_.data(), e_short_.data(), in_.short_mask, mode_ != ForwardMode::kInference,
                  aux_scale, dq_.data(), de_short_.data(), de_neg_.data());
}

// DIN (model-spec 8): z = [q; g; p].
void Model::Impl::DinForward(const Pass& p) {
  const int64_t B = B_;
  float* z = z_.data();
  be_->Copy(1, B, I_, q_.data(), 0, I_, z, 0, zw_, false);
  din_->Forward(p, q_.data(), x_long_.data(), e_short_.data(), in_.long_mask, in_.short_mask,
                z + I_, zw_);
  be_->Copy(1, B, P_, p_.data(), 0, P_, z + 2 * I_, 0, zw_, false);
}

void Model::Impl::DinBackward(const Pass& p) {
  const int64_t B = B_;
  const float* dz = dz_.data();
  be_->Copy(1, B, I_, dz, 0, zw_, dq_.data(), 0, I_, false);
  be_->Copy(1, B, P_, dz + 2 * I_, 0, zw_, dp_.data(), 0, P_, false);
  din_->Backward(p, q_.data(), dz + I_, zw_, dq_.data(), dx_long_.data(), de_short_.data());
}

void Model::Impl::StreamedLongBackward(const Pass& p, const std::vector<float*>& g,
                                       const std::vector<int64_t>& U) {
  esu_->BeginBackward(p);
  for (models::SlotChunk& k : chunks_) {
    if (chunks_.size() > 1) {  // one chunk: the slots still resident from the forward pass
      StageLong(&k);
      esu_->PrepareSlots(p, x_long_.data(), k);
    }
    be_->Fill(k.slots() * I_, 0.0f, dx_long_.data());
    esu_->Backward(p, q_.data(), x_long_.data(), EsuMask(k), k, dz_.data(), zw_, dq_.data(),
                   dx_long_.data());
    if (!gsu_time_) esu_->ScatterSlotGrads(p, k, dx_long_.data());
    gsu_->AttendBackward(p, GsuSlots(), k, dq_.data(), GsuSlotGrads());
    if (gsu_time_) esu_->ScatterSlotGrads(p, k, dx_long_.data());
    for (int f = 0; f < F_; ++f) {
      be_->SegmentSumRows(k.slots(), D_, dx_long_.data() + f * D_, I_,
                          long_inv_k_ + f * long_inv_stride_, k.mask, U[static_cast<size_t>(f)],
                          g[static_cast<size_t>(f)]);
    }
  }
  esu_->FinishBackward(p, dq_.data());
  gsu_->FinishBackward(p, dq_.data());
}

StatusOr<Losses> Model::Impl::Forward(const data::Batch& batch, const BatchKeys& keys,
                                      ForwardMode mode, int slot) {
  can_backward_ = false;
  logits_ = nullptr;
  last_batch_ = 0;
  const bool uploaded = device_ && slot != kDirect;
  // On a device backend UploadBatch range-checks the inverses (the slot's, or kDirect's below).
  SIFT_RETURN_IF_ERROR(CheckInputs(batch, keys, mode, /*scan_inverses=*/!device_));
  const bool aux = UsesDien(type_) && mode != ForwardMode::kInference;
  if (uploaded) {
    InputSlot& s = slots_[slot];
    bool same =
        s.finished && s.batch == batch.size && s.negatives == key_usage(mode).short_negatives;
    for (size_t t = 0; same && t < s.keys.size(); ++t) {
      same = s.keys[t] == static_cast<int64_t>(keys.tables[t].keys.size());
    }
    if (!same) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Model::Forward: input slot ", slot,
          " holds no finished upload of this batch (UploadBatch, UploadRows per table, "
          "FinishUpload)"));
    }
    SIFT_RETURN_IF_ERROR(be_->WaitFence(s.uploaded));
  } else if (device_) {
    SIFT_RETURN_IF_ERROR(UploadBatch(kDirect, batch, keys, mode));
    for (int t = 0; t < UF_ + F_; ++t) SIFT_RETURN_IF_ERROR(UploadRows(kDirect, t, keys));
  }
  slot_ = slot;
  B_ = batch.size;
  mode_ = mode;
  for (size_t t = 0; t < key_counts_.size(); ++t) key_counts_[t] = keys.tables[t].keys.size();
  const int64_t B = B_;
  BindInputs(slot, batch, keys, aux);
  const float* labels = in_.label;
  GatherEmbeddings(aux);
  PlanChunks(batch);

  const Pass pass = MakePass(/*backward=*/false);
  switch (type_) {
    case ModelType::kSim:
      SimForward(pass, mode);
      break;
    case ModelType::kDien:
      DienForward(pass);
      break;
    case ModelType::kDin:
      DinForward(pass);
      break;
  }
  logits_ = classifier_mlp_.Forward(be_, B, z_.data(), zw_, pass.params, DropoutSeed(mode, 2));

  Losses losses;
  const double bce2 = be_->BceWithLogits(B, logits_, labels, 0.0f, nullptr) / B;
  if (gsu_) {
    const double bce1 = be_->BceWithLogits(B, gsu_->logit(), labels, 0.0f, nullptr) / B;
    losses.classification = 0.5 * (bce1 + bce2);
  } else {
    losses.classification = bce2;
  }
  if (aux) {
    losses.aux = dien_->AuxForward(pass, e_short_.data(), e_neg_.data(), in_.short_mask) /
                 static_cast<double>(B * (TS_ - 1));
  }
  losses.total = losses.classification + losses.aux;
  if (device_) {
    SIFT_RETURN_IF_ERROR(
        be_->CopyToHost(logits_, host_logits_.data(), B * static_cast<int64_t>(sizeof(float))));
  }
  SIFT_RETURN_IF_ERROR(be_->Synchronize());
  if (uploaded) {
    // After this pass's reads of the slot (a Backward records a later one).
    SIFT_ASSIGN_OR_RETURN(slots_[slot].released, be_->RecordFence());
  }
  last_batch_ = B;
  can_backward_ = mode == ForwardMode::kTrain;
  return losses;
}

Status Model::Impl::StartBackward(BatchKeys* keys, float loss_scale) {
  if (grads_pending_) {
    return absl::FailedPreconditionError(
        "Model::StartBackward: the last backward pass's FinishBackward has not been called");
  }
  if (!can_backward_) {
    return absl::FailedPreconditionError(
        "Model::Backward needs a successful kTrain Forward first (and only one Backward per "
        "Forward)");
  }
  bool same_keys =
      keys != nullptr && keys->batch == B_ && keys->tables.size() == key_counts_.size();
  for (size_t t = 0; same_keys && t < key_counts_.size(); ++t) {
    same_keys = keys->tables[t].keys.size() == key_counts_[t];
  }
  if (!same_keys) {
    return absl::FailedPreconditionError(
        "Model::Backward: keys differ from those of the last Forward");
  }
  if (!(loss_scale > 0) || !std::isfinite(loss_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Model::Backward: loss_scale must be a positive finite number, got ", loss_scale));
  }
  can_backward_ = false;
  const int64_t B = B_;
  const Pass pass = MakePass(/*backward=*/true);
  be_->Fill(registry_.total(), 0.0f, pass.grads);
  const float cls_scale = static_cast<float>((gsu_ ? 0.5 : 1.0) * static_cast<double>(loss_scale) /
                                             static_cast<double>(B));

  // Final classifier -> dz.
  be_->Fill(B, 0.0f, dlogit2_.data());
  be_->BceWithLogits(B, logits_, in_.label, cls_scale, dlogit2_.data());
  be_->Fill(B * zw_, 0.0f, dz_.data());
  classifier_mlp_.Backward(be_, B, z_.data(), zw_, pass.params, dlogit2_.data(), pass.grads,
                           dz_.data(), zw_, pass.workspace);
  if (!e_short_.empty()) be_->Fill(B * TS_ * I_, 0.0f, de_short_.data());
  if (!x_long_.empty() && !streamed()) be_->Fill(B * TL_ * I_, 0.0f, dx_long_.data());
  const float aux_scale =
      UsesDien(type_)
          ? static_cast<float>(static_cast<double>(loss_scale) / static_cast<double>(B * (TS_ - 1)))
          : 0.0f;
  switch (type_) {
    case ModelType::kSim:
      SimBackward(pass, cls_scale, aux_scale);
      break;
    case ModelType::kDien:
      DienBackward(pass, aux_scale);
      break;
    case ModelType::kDin:
      DinBackward(pass);
      break;
  }
  SIFT_RETURN_IF_ERROR(ScatterEmbeddingGrads(keys));
  if (device_ && slot_ != kDirect) {
    // The segment sums were the last reads of the slot: its next upload waits for them.
    SIFT_ASSIGN_OR_RETURN(slots_[slot_].released, be_->RecordFence());
  }
  return absl::OkStatus();
}

Status Model::Impl::FinishBackward() {
  Status s;
  if (grads_pending_) {
    grads_pending_ = false;
    s = grads_channel_->Synchronize();
  }
  // Also reports a failed op of the backward pass, whose gradients must not be used.
  s.Update(be_->Synchronize());
  return s;
}

Status Model::Impl::ScatterEmbeddingGrads(BatchKeys* keys) {
  const int64_t B = B_;
  const bool negatives = UsesDien(type_);
  // Summed in backend memory: the host array itself, or the device staging copied out below.
  std::vector<float*> gs(static_cast<size_t>(UF_ + F_));
  std::vector<int64_t> Us(gs.size());
  for (int t = 0; t < UF_ + F_; ++t) {
    TableKeys& tk = keys->tables[t];
    Us[t] = static_cast<int64_t>(tk.keys.size());
    tk.grads.resize(static_cast<size_t>(Us[t]) * D_);
    gs[t] = device_ ? row_grads_[t].data() : tk.grads.data();
    be_->Fill(Us[t] * D_, 0.0f, gs[t]);
  }
  if (streamed()) {
    StreamedLongBackward(MakePass(/*backward=*/true),
                         std::vector<float*>(gs.begin() + UF_, gs.end()),
                         std::vector<int64_t>(Us.begin() + UF_, Us.end()));
  }
  for (int t = 0; t < UF_ + F_; ++t) {
    TableKeys& tk = keys->tables[t];
    const int64_t U = Us[t];
    float* g = gs[t];
    if (t < UF_) {
      be_->SegmentSumRows(B, D_, dp_.data() + t * D_, P_, in_.user_inv + t * B, nullptr, U, g);
    } else {
      const int f = t - UF_;
      be_->SegmentSumRows(B, D_, dq_.data() + f * D_, I_, in_.target_inv + f * B, nullptr, U, g);
      if (TL_ > 0 && !streamed()) {
        be_->SegmentSumRows(B * TL_, D_, dx_long_.data() + f * D_, I_, in_.long_inv + f * B * TL_,
                            in_.long_mask, U, g);
      }
      be_->SegmentSumRows(B * TS_, D_, de_short_.data() + f * D_, I_, in_.short_inv + f * B * TS_,
                          in_.short_mask, U, g);
      if (negatives) {
        be_->SegmentSumRows(B * TS_, D_, de_neg_.data() + f * D_, I_,
                            in_.short_neg_inv + f * B * TS_, in_.short_mask, U, g);
      }
    }
    if (device_ && U > 0) {
      // Back on the copy channel once this table's sums are done, while the compute goes on.
      SIFT_ASSIGN_OR_RETURN(const kernels::Fence summed, be_->RecordFence());
      SIFT_RETURN_IF_ERROR(grads_channel_->WaitFence(summed));
      SIFT_RETURN_IF_ERROR(grads_channel_->Download(g, tk.grads.data(),
                                                    U * D_ * static_cast<int64_t>(sizeof(float))));
      grads_pending_ = true;
    }
  }
  return absl::OkStatus();
}

// ---- Model --------------------------------------------------------------------------------

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config, kernels::Backend* backend,
                                               int64_t max_batch) {
  SIFT_RETURN_IF_ERROR(ValidateModelConfig(config));
  if (backend == nullptr) return absl::InvalidArgumentError("Model::Create: null backend");
  if (max_batch < 1 || max_batch > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Model::Create: max_batch must be in [1, 2^24], got ", max_batch));
  }
  auto impl = std::make_unique<Impl>(config, backend, max_batch);
  SIFT_RETURN_IF_ERROR(Annotate(
      impl->Init(),
      absl::StrCat("Model::Create (backend ", backend->name(), ", max_batch ", max_batch, ")")));
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const { return impl_->config_; }
int Model::batch_long_len() const { return BatchLongLen(impl_->config_); }
int64_t Model::soft_search_chunk() const { return impl_->soft_search_chunk(); }
int64_t Model::long_slots_searched() const { return impl_->long_slots_searched(); }
KeyUsage Model::key_usage(ForwardMode mode) const { return impl_->key_usage(mode); }
void Model::SetDropoutSeed(uint64_t seed) { impl_->dropout_seed_ = seed; }
Status Model::InitParameters(uint64_t seed) {
  if (!impl_->device_) {
    impl_->registry_.Initialise(seed, impl_->params_.data());
    return absl::OkStatus();
  }
  std::vector<float> host(static_cast<size_t>(impl_->registry_.total()));
  impl_->registry_.Initialise(seed, host.data());
  return CopyParametersFromHost(host);
}
absl::Span<float> Model::parameters() {
  return absl::MakeSpan(impl_->params_.data(), static_cast<size_t>(impl_->registry_.total()));
}
absl::Span<float> Model::gradients() {
  return absl::MakeSpan(impl_->grads_.data(), static_cast<size_t>(impl_->registry_.total()));
}
Status Model::CopyParametersToHost(absl::Span<float> out) {
  if (out.size() != parameters().size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyParametersToHost: ", out.size(), " floats for ", parameters().size(), " parameters"));
  }
  return impl_->be_->CopyToHost(impl_->params_.data(), out.data(),
                                static_cast<int64_t>(out.size() * sizeof(float)));
}
Status Model::CopyGradientsToHost(absl::Span<float> out) {
  if (out.size() != gradients().size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyGradientsToHost: ", out.size(), " floats for ", gradients().size(), " gradients"));
  }
  return impl_->be_->CopyToHost(impl_->grads_.data(), out.data(),
                                static_cast<int64_t>(out.size() * sizeof(float)));
}
Status Model::CopyParametersFromHost(absl::Span<const float> in) {
  if (in.size() != parameters().size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyParametersFromHost: ", in.size(), " floats for ", parameters().size(), " parameters"));
  }
  SIFT_RETURN_IF_ERROR(impl_->be_->CopyToBackend(in.data(), impl_->params_.data(),
                                                 static_cast<int64_t>(in.size() * sizeof(float))));
  return impl_->be_->Synchronize();
}
const std::vector<ParamTensor>& Model::param_layout() const { return impl_->registry_.layout(); }
StatusOr<Losses> Model::Forward(const data::Batch& batch, const BatchKeys& keys, ForwardMode mode) {
  return impl_->Forward(batch, keys, mode, Impl::kDirect);
}
StatusOr<Losses> Model::Forward(const data::Batch& batch, const BatchKeys& keys, ForwardMode mode,
                                int slot) {
  SIFT_RETURN_IF_ERROR(CheckSlot(slot));
  return impl_->Forward(batch, keys, mode, slot);
}
Status Model::UploadBatch(int slot, const data::Batch& batch, const BatchKeys& keys,
                          ForwardMode mode) {
  SIFT_RETURN_IF_ERROR(CheckSlot(slot));
  return impl_->UploadBatch(slot, batch, keys, mode);
}
Status Model::UploadRows(int slot, int table, const BatchKeys& keys) {
  SIFT_RETURN_IF_ERROR(CheckSlot(slot));
  return impl_->UploadRows(slot, table, keys);
}
Status Model::FinishUpload(int slot) {
  SIFT_RETURN_IF_ERROR(CheckSlot(slot));
  return impl_->FinishUpload(slot);
}
bool Model::uploads_inputs() const { return impl_->device_; }
Status Model::CheckSlot(int slot) {
  if (slot >= 0 && slot < kInputSlots) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Model: input slot ", slot, " is outside [0, ", kInputSlots, ")"));
}
absl::Span<const float> Model::logits() const {
  if (impl_->logits_ == nullptr || impl_->last_batch_ == 0) return {};
  const float* host = impl_->device_ ? impl_->host_logits_.data() : impl_->logits_;
  return absl::MakeConstSpan(host, static_cast<size_t>(impl_->last_batch_));
}
Status Model::Backward(BatchKeys* keys, float loss_scale) {
  const Status started = impl_->StartBackward(keys, loss_scale);
  Status finished = impl_->FinishBackward();
  if (!started.ok()) return started;
  return finished;
}
Status Model::StartBackward(BatchKeys* keys, float loss_scale) {
  return impl_->StartBackward(keys, loss_scale);
}
Status Model::FinishBackward() { return impl_->FinishBackward(); }

}  // namespace sift::worker
