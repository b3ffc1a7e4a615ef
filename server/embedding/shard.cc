#include "server/embedding/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/proto_wire.h"
#include "common/wire_float.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/embedding/snapshot.h"

namespace sift::embedding {
namespace {

using wire::PutVarint;
using wire::PutVarintField;
using wire::VarintFieldSize;
using wire::VarintSize;

constexpr int kMaxDim = 65536;

StatusOr<WireFloat> EncodingFromProto(pb::RowEncoding encoding) {
  switch (encoding) {
    case pb::ROW_ENCODING_FP32:
      return WireFloat::kFp32;
    case pb::ROW_ENCODING_FP16:
      return WireFloat::kFp16;
    case pb::ROW_ENCODING_BF16:
      return WireFloat::kBf16;
    default:
      return absl::InvalidArgumentError(absl::StrCat("field 'encoding': unknown row encoding ",
                                                     static_cast<int>(encoding),
                                                     " (0 fp32, 1 fp16, 2 bf16)"));
  }
}

// Sorted by table_id, so that two configs listing the same tables in another order compare equal.
pb::ConfigureRequest Canonical(const pb::ConfigureRequest& request) {
  pb::ConfigureRequest c = request;
  c.set_replace(false);
  std::sort(c.mutable_tables()->begin(), c.mutable_tables()->end(),
            [](const pb::TableConfig& a, const pb::TableConfig& b) {
              return a.table_id() < b.table_id();
            });
  return c;
}

// Names each request table once, and at most kMaxTables tables; INVALID_ARGUMENT otherwise.
// Linear in the table count (a hash set), so a request listing millions of tables cannot stall a
// request thread.
Status CheckTableCount(int tables, absl::string_view op) {
  if (tables > static_cast<int>(kMaxTables)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", tables, " tables in one request, more than the limit of ", kMaxTables));
  }
  return absl::OkStatus();
}

template <typename Tables>
Status CheckTablesOnce(const Tables& tables, absl::string_view op) {
  SIFT_RETURN_IF_ERROR(CheckTableCount(tables.size(), op));
  absl::flat_hash_set<uint32_t> seen;
  seen.reserve(static_cast<size_t>(tables.size()));
  for (const auto& t : tables) {
    if (!seen.insert(t.table_id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": table id ", t.table_id(), " appears twice in one request"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<TableConfig> TableConfigFromProto(const pb::TableConfig& proto) {
  TableConfig c;
  c.table_id = proto.table_id();
  c.name = proto.name();
  const std::string label = absl::StrCat("table '", proto.name(), "' (id ", proto.table_id(), ")");
  if (proto.dim() < 1 || proto.dim() > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": field 'dim' ", proto.dim(), " not in [1, ", kMaxDim, "]"));
  }
  c.dim = static_cast<int>(proto.dim());
  c.cardinality = proto.cardinality();
  c.capacity = proto.capacity();
  const pb::OptimizerConfig& o = proto.optimizer();
  switch (o.kind()) {
    case pb::OPTIMIZER_ADAM:
      c.optimizer.kind = OptimizerKind::kAdam;
      break;
    case pb::OPTIMIZER_ADAGRAD:
      c.optimizer.kind = OptimizerKind::kAdagrad;
      break;
    case pb::OPTIMIZER_SGD:
      c.optimizer.kind = OptimizerKind::kSgd;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": field 'optimizer.kind': unknown optimizer ", static_cast<int>(o.kind())));
  }
  c.optimizer.learning_rate = o.learning_rate();
  c.optimizer.beta1 = o.beta1();
  c.optimizer.beta2 = o.beta2();
  c.optimizer.epsilon = o.epsilon();
  c.optimizer.initial_accumulator = o.initial_accumulator();
  return c;
}

pb::TableConfig TableConfigToProto(const TableConfig& config) {
  pb::TableConfig p;
  p.set_table_id(config.table_id);
  p.set_name(config.name);
  p.set_dim(static_cast<uint32_t>(config.dim));
  p.set_cardinality(config.cardinality);
  p.set_capacity(config.capacity);
  pb::OptimizerConfig* o = p.mutable_optimizer();
  switch (config.optimizer.kind) {
    case OptimizerKind::kAdam:
      o->set_kind(pb::OPTIMIZER_ADAM);
      break;
    case OptimizerKind::kAdagrad:
      o->set_kind(pb::OPTIMIZER_ADAGRAD);
      break;
    case OptimizerKind::kSgd:
      o->set_kind(pb::OPTIMIZER_SGD);
      break;
  }
  o->set_learning_rate(config.optimizer.learning_rate);
  o->set_beta1(config.optimizer.beta1);
  o->set_beta2(config.optimizer.beta2);
  o->set_epsilon(config.optimizer.epsilon);
  o->set_initial_accumulator(config.optimizer.initial_accumulator);
  return p;
}

Status ValidateSnapshotName(const std::string& name) {
  const bool ok_chars = std::all_of(name.begin(), name.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
  });
  if (name.empty() || name.size() > 128 || !ok_chars || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat(
        "field 'name': snapshot name '", name, "' must match [A-Za-z0-9._-]{1,128} (not . or ..)"));
  }
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<EmbeddingShard>> EmbeddingShard::Create(const ShardOptions& options) {
  if (options.num_shards < 1 || options.shard >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard ", options.shard, " must be in [0, --num-shards ", options.num_shards, ")"));
  }
  if (options.threads < 1) return absl::InvalidArgumentError("--threads must be >= 1");
  if (options.num_stripes < 1) return absl::InvalidArgumentError("stripes must be >= 1");
  if (options.max_keys_per_request < 1) {
    return absl::InvalidArgumentError("--max-keys-per-request must be >= 1");
  }
  if (options.max_message_bytes < 1024) {
    return absl::InvalidArgumentError("--max-message-bytes must be >= 1024");
  }
  return std::unique_ptr<EmbeddingShard>(new EmbeddingShard(options));
}

StatusOr<std::unique_ptr<EmbeddingStore>> EmbeddingShard::MakeStore(
    const pb::ConfigureRequest& config) const {
  if (config.tables_size() == 0) {
    return absl::InvalidArgumentError("configure: field 'tables' is empty");
  }
  std::vector<TableConfig> tables;
  for (const pb::TableConfig& t : config.tables()) {
    SIFT_ASSIGN_OR_RETURN(TableConfig c, TableConfigFromProto(t));
    tables.push_back(std::move(c));
  }
  return EmbeddingStore::Create(
      std::move(tables),
      StoreOptions{config.seed(), options_.num_stripes, options_.threads, options_.max_abs_gradient,
                   options_.memory_budget_bytes, static_cast<int>(options_.num_shards)});
}

Status EmbeddingShard::InstallLocked(const pb::ConfigureRequest& config,
                                     std::unique_ptr<EmbeddingStore> store) {
  config_ = Canonical(config);
  store_ = std::move(store);
  counters_.clear();
  for (const pb::TableConfig& t : config_.tables()) {
    counters_[t.table_id()] = std::make_unique<Counters>();
  }
  // Held step pushes were for the rows that are gone.
  steps_.Clear();
  // The rows changed under every remembered push: a retry from before must apply again.
  std::lock_guard<std::mutex> dedup_lock(dedup_mu_);
  dedup_set_.clear();
  dedup_order_.clear();
  return absl::OkStatus();
}

Status EmbeddingShard::Configure(const pb::ConfigureRequest& request,
                                 pb::ConfigureResponse* response) {
  SIFT_RETURN_IF_ERROR(CheckTablesOnce(request.tables(), "configure"));
  const pb::ConfigureRequest wanted = Canonical(request);
  // The usual repeat from another worker: compare under the shared lock, build nothing.
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (store_ != nullptr && !request.replace() &&
        google::protobuf::util::MessageDifferencer::Equals(config_, wanted)) {
      response->set_shard(options_.shard);
      response->set_num_shards(options_.num_shards);
      response->set_max_keys_per_request(options_.max_keys_per_request);
      response->set_max_message_bytes(options_.max_message_bytes);
      response->set_created(false);
      return absl::OkStatus();
    }
  }
  // Validate (and build) outside the lock: a bad config never touches the current tables.
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingStore> store, MakeStore(wanted));
  std::unique_lock<std::shared_mutex> lock(mu_);
  response->set_shard(options_.shard);
  response->set_num_shards(options_.num_shards);
  response->set_max_keys_per_request(options_.max_keys_per_request);
  response->set_max_message_bytes(options_.max_message_bytes);
  if (store_ != nullptr && !request.replace()) {
    std::string diff;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    if (!differ.Compare(config_, wanted)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "configure: this shard already serves a different config (send replace=true to drop "
          "it); differences (current -> requested):\n",
          diff));
    }
    response->set_created(false);
    return absl::OkStatus();
  }
  response->set_created(true);
  return InstallLocked(wanted, std::move(store));
}

Status EmbeddingShard::CheckKeyLimit(uint64_t keys, absl::string_view op) const {
  if (keys > options_.max_keys_per_request) {
    return absl::ResourceExhaustedError(
        absl::StrCat(op, " of ", keys, " keys exceeds this server's limit of ",
                     options_.max_keys_per_request, " keys per request; split the request"));
  }
  return absl::OkStatus();
}

Status EmbeddingShard::CheckPull(const pb::PullRequest& request) const {
  SIFT_RETURN_IF_ERROR(EncodingFromProto(request.encoding()).status());
  uint64_t total = 0;
  for (const pb::TableKeys& t : request.tables()) total += static_cast<uint64_t>(t.keys_size());
  SIFT_RETURN_IF_ERROR(CheckKeyLimit(total, "pull"));
  return CheckTablesOnce(request.tables(), "pull");
}

Status EmbeddingShard::CheckPullTablesLocked(const pb::PullRequest& request) const {
  if (store_ == nullptr) {
    return absl::FailedPreconditionError("pull: this embedding server is not configured yet");
  }
  // Validate every table before creating any row, and the size of the reply before building it
  // (a small request for wide rows could ask for more than the message limit, or than memory).
  const uint64_t width =
      static_cast<uint64_t>(WireFloatBytes(*EncodingFromProto(request.encoding())));
  uint64_t reply_bytes = 0;
  for (const pb::TableKeys& t : request.tables()) {
    const TableConfig* config = store_->FindTable(t.table_id());
    if (config == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull: unknown table (id ", t.table_id(), ") on this embedding server"));
    }
    reply_bytes +=
        16 + static_cast<uint64_t>(t.keys_size()) * static_cast<uint64_t>(config->dim) * width;
  }
  if (reply_bytes > options_.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "pull: the reply would take ", reply_bytes, " bytes, more than this server's limit of ",
        options_.max_message_bytes, " bytes per message; split the request"));
  }
  return absl::OkStatus();
}

Status EmbeddingShard::Pull(const pb::PullRequest& request, pb::PullResponse* response) {
  // One implementation: PullTo's wire bytes, parsed (so every caller of Pull also checks them
  // against protobuf's own parser).
  std::vector<std::unique_ptr<std::string>> pieces;
  SIFT_RETURN_IF_ERROR(PullTo(request, [&pieces](absl::string_view framing, size_t rows_bytes) {
    pieces.push_back(std::make_unique<std::string>(framing));
    pieces.push_back(std::make_unique<std::string>(rows_bytes, '\0'));
    return pieces.back()->data();
  }));
  std::string wire;
  for (const auto& piece : pieces) wire += *piece;
  if (!response->ParseFromString(wire)) {
    return absl::InternalError("pull: the reply's wire bytes do not parse as a PullResponse");
  }
  return absl::OkStatus();
}

Status EmbeddingShard::PullTo(const pb::PullRequest& request, const PullPiece& piece) {
  SIFT_RETURN_IF_ERROR(CheckPull(request));
  const WireFloat encoding = *EncodingFromProto(request.encoding());
  std::shared_lock<std::shared_mutex> lock(mu_);
  SIFT_RETURN_IF_ERROR(CheckPullTablesLocked(request));
  const size_t width = static_cast<size_t>(WireFloatBytes(encoding));
  std::vector<float> scratch;
  for (const pb::TableKeys& t : request.tables()) {
    const TableConfig& config = *store_->FindTable(t.table_id());
    const size_t n = static_cast<size_t>(t.keys_size());
    const size_t floats = n * static_cast<size_t>(config.dim);
    const size_t rows_bytes = floats * width;
    // TableRows {table_id = 1; dim = 2; rows = 3}, as an element of PullResponse.tables (1).
    const size_t inner = VarintFieldSize(t.table_id()) +
                         VarintFieldSize(static_cast<uint32_t>(config.dim)) +
                         (rows_bytes == 0 ? 0 : 1 + VarintSize(rows_bytes) + rows_bytes);
    char framing[48];
    char* p = framing;
    p = wire::PutLenHeader(p, tags::kTables, inner);
    p = PutVarintField(p, tags::kTableId, t.table_id());
    p = PutVarintField(p, tags::kDim, static_cast<uint32_t>(config.dim));
    if (rows_bytes > 0) p = wire::PutLenHeader(p, tags::kValues, rows_bytes);
    char* bytes = piece(absl::string_view(framing, static_cast<size_t>(p - framing)), rows_bytes);
    if (rows_bytes == 0) continue;
    float* out = nullptr;
    if (encoding == WireFloat::kFp32) {
      out = reinterpret_cast<float*>(bytes);
    } else {
      scratch.resize(floats);
      out = scratch.data();
    }
    const absl::Span<const uint64_t> keys(t.keys().data(), n);
    const absl::Span<float> out_span(out, floats);
    SIFT_RETURN_IF_ERROR(request.create_missing() ? store_->Pull(t.table_id(), keys, out_span)
                                                  : store_->Lookup(t.table_id(), keys, out_span));
    if (encoding != WireFloat::kFp32) EncodeFloatsTo(encoding, out_span, bytes);
    counters_.at(t.table_id())->pulled.fetch_add(n, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

bool EmbeddingShard::MarkPushApplied(uint64_t client_id, uint64_t sequence) {
  std::lock_guard<std::mutex> lock(dedup_mu_);
  if (!dedup_set_.insert({client_id, sequence}).second) return false;
  dedup_order_.emplace_back(client_id, sequence);
  if (dedup_order_.size() > kPushDedupWindow) {
    dedup_set_.erase(dedup_order_.front());
    dedup_order_.pop_front();
  }
  return true;
}

void EmbeddingShard::ForgetPush(uint64_t client_id, uint64_t sequence) {
  std::lock_guard<std::mutex> lock(dedup_mu_);
  dedup_set_.erase({client_id, sequence});
  auto it =
      std::find(dedup_order_.begin(), dedup_order_.end(), std::make_pair(client_id, sequence));
  if (it != dedup_order_.end()) dedup_order_.erase(it);
}

Status EmbeddingShard::Push(const pb::PushRequest& request, pb::PushResponse* response) {
  SIFT_ASSIGN_OR_RETURN(const WireFloat encoding, EncodingFromProto(request.encoding()));
  uint64_t total = 0;
  for (const pb::TableGradients& t : request.tables()) {
    total += static_cast<uint64_t>(t.keys_size());
  }
  SIFT_RETURN_IF_ERROR(CheckKeyLimit(total, "push"));
  // Repeats are found by PushMany (naming the table); bounding the count keeps that cheap.
  SIFT_RETURN_IF_ERROR(CheckTableCount(request.tables_size(), "push"));
  if (request.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push: field 'step' is ", request.step(), ", must be >= 0"));
  }
  const float lr_multiplier = request.lr_multiplier() == 0.0f ? 1.0f : request.lr_multiplier();
  if (!(lr_multiplier > 0.0f && lr_multiplier <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("push: field 'lr_multiplier' is ",
                                                   request.lr_multiplier(),
                                                   ", must be in (0, 1] (0 or absent: 1)"));
  }
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (store_ == nullptr) {
    return absl::FailedPreconditionError("push: this embedding server is not configured yet");
  }
  // Gradients as floats: fp32 bytes are used in place when aligned, anything else is decoded.
  std::vector<EmbeddingStore::TablePush> pushes;
  std::vector<std::vector<float>> decoded(static_cast<size_t>(request.tables_size()));
  const size_t width = static_cast<size_t>(WireFloatBytes(encoding));
  for (int i = 0; i < request.tables_size(); ++i) {
    const pb::TableGradients& t = request.tables(i);
    const TableConfig* config = store_->FindTable(t.table_id());
    if (config == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("push: unknown table (id ", t.table_id(), ") on this embedding server"));
    }
    const size_t n = static_cast<size_t>(t.keys_size());
    const size_t floats = n * static_cast<size_t>(config->dim);
    const std::string& bytes = t.gradients();
    absl::Span<const float> grads;
    if (encoding == WireFloat::kFp32 && bytes.size() == floats * width &&
        reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0) {
      grads = absl::MakeConstSpan(reinterpret_cast<const float*>(bytes.data()), floats);
    } else {
      const std::string what =
          absl::StrCat("push: table '", config->name, "' (id ", t.table_id(),
                       ") field 'gradients' (", n, " keys x dim ", config->dim, ")");
      if (bytes.size() != floats * width) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": ", bytes.size(), " bytes, expected ", floats * width));
      }
      decoded[i].resize(floats);
      SIFT_RETURN_IF_ERROR(DecodeFloats(encoding, bytes, absl::MakeSpan(decoded[i]), what));
      grads = decoded[i];
    }
    pushes.push_back({t.table_id(), absl::MakeConstSpan(t.keys().data(), n), grads});
  }
  if (request.step_group() != 0) return PushStepLocked(request, pushes, lr_multiplier, response);
  const bool dedup = request.client_id() != 0;
  if (dedup && !MarkPushApplied(request.client_id(), request.sequence())) {
    response->set_duplicate(true);
    response->set_applied_keys(0);
    return absl::OkStatus();
  }
  const Status status = store_->PushMany(pushes, request.step(), lr_multiplier);
  if (!status.ok()) {
    if (dedup) ForgetPush(request.client_id(), request.sequence());
    return status;
  }
  for (const EmbeddingStore::TablePush& p : pushes) {
    counters_.at(p.table_id)->pushed.fetch_add(p.ids.size(), std::memory_order_relaxed);
  }
  response->set_applied_keys(total);
  return absl::OkStatus();
}

Status EmbeddingShard::PushStepLocked(const pb::PushRequest& request,
                                      absl::Span<const EmbeddingStore::TablePush> pushes,
                                      float lr_multiplier, pb::PushResponse* response) {
  StepTag tag;
  tag.group = request.step_group();
  tag.generation = request.generation();
  tag.step = request.step();
  tag.rank = request.rank();
  tag.world = request.world();
  tag.part = request.part();
  tag.parts = request.parts();
  SIFT_RETURN_IF_ERROR(StepAggregator::CheckTag(tag));
  // Everything a held part could be refused for is checked now: once held it must apply.
  std::vector<HeldTable> held(pushes.size());
  for (size_t i = 0; i < pushes.size(); ++i) {
    const EmbeddingStore::TablePush& p = pushes[i];
    const pb::TableGradients& t = request.tables(static_cast<int>(i));
    const TableConfig* config = store_->FindTable(p.table_id);
    const std::string what = absl::StrCat("push: table '", config->name, "' (id ", p.table_id, ")");
    for (size_t j = 0; j < i; ++j) {
      if (pushes[j].table_id == p.table_id) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": named twice in one push"));
      }
    }
    for (size_t k = 0; k < p.grads.size(); ++k) {
      if (!(std::fabs(p.grads[k]) <= options_.max_abs_gradient)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": gradient ", p.grads[k], " for id ", p.ids[k / config->dim],
                         " component ", k % config->dim, " is non-finite or beyond +-",
                         options_.max_abs_gradient, "; the push is refused whole"));
      }
    }
    HeldTable& h = held[i];
    const std::string& l2 = t.l2_coefficients();
    if (!l2.empty()) {
      if (l2.size() != p.ids.size() * sizeof(float)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " field 'l2_coefficients': ", l2.size(), " bytes, expected ",
                         p.ids.size() * sizeof(float)));
      }
      h.l2.resize(p.ids.size());
      std::memcpy(h.l2.data(), l2.data(), l2.size());
      for (size_t k = 0; k < h.l2.size(); ++k) {
        if (!(std::isfinite(h.l2[k]) && h.l2[k] >= 0.0f)) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, " field 'l2_coefficients': ", h.l2[k], " for id ", p.ids[k],
                           " (must be finite and >= 0)"));
        }
      }
    }
    // A part naming an absent row is refused now, never held: completing the step creates no
    // row (the store's Push refuses absent rows), and a held part must apply.
    SIFT_RETURN_IF_ERROR(store_->CheckRowsHeld(p.table_id, p.ids));
    h.table_id = p.table_id;
    h.dim = config->dim;
    h.keys.assign(p.ids.begin(), p.ids.end());
    h.grads.assign(p.grads.begin(), p.grads.end());
  }
  const bool dedup = request.client_id() != 0;
  if (dedup && !MarkPushApplied(request.client_id(), request.sequence())) {
    response->set_duplicate(true);
    return absl::OkStatus();
  }
  StatusOr<std::optional<SummedStep>> added = steps_.Add(tag, lr_multiplier, std::move(held));
  if (!added.ok()) {
    if (dedup) ForgetPush(request.client_id(), request.sequence());
    return added.status();
  }
  if (!added->has_value()) {
    response->set_held(true);
    return absl::OkStatus();
  }
  SummedStep& step = **added;
  std::vector<EmbeddingStore::TablePush> sums;
  std::vector<float> rows;
  for (HeldTable& t : step.tables) {
    if (!t.l2.empty()) {
      // The mini-batch-aware L2 once per key: c * w with the row as it is now (the pulled value
      // at staleness 0), added to the summed data gradient as one process adds it.
      const size_t d = static_cast<size_t>(t.dim);
      rows.resize(t.keys.size() * d);
      SIFT_RETURN_IF_ERROR(store_->Lookup(t.table_id, t.keys, absl::MakeSpan(rows)));
      for (size_t k = 0; k < t.keys.size(); ++k) {
        const float c = t.l2[k];
        if (c == 0.0f) continue;
        float* g = t.grads.data() + k * d;
        const float* w = rows.data() + k * d;
        for (size_t i = 0; i < d; ++i) g[i] += c * w[i];
      }
    }
    sums.push_back({t.table_id, absl::MakeConstSpan(t.keys), absl::MakeConstSpan(t.grads)});
  }
  SIFT_RETURN_IF_ERROR(store_->PushMany(sums, step.step, step.lr_multiplier));
  for (const EmbeddingStore::TablePush& p : sums) {
    counters_.at(p.table_id)->pushed.fetch_add(p.ids.size(), std::memory_order_relaxed);
  }
  response->set_applied_keys(step.keys());
  return absl::OkStatus();
}

Status EmbeddingShard::Stats(pb::StatsResponse* response) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  response->set_shard(options_.shard);
  response->set_num_shards(options_.num_shards);
  response->set_max_keys_per_request(options_.max_keys_per_request);
  response->set_max_message_bytes(options_.max_message_bytes);
  response->set_version(options_.version);
  response->set_configured(store_ != nullptr);
  response->set_held_steps(static_cast<uint32_t>(steps_.pending()));
  response->set_push_request_bytes(push_request_bytes_.load(std::memory_order_relaxed));
  if (store_ == nullptr) return absl::OkStatus();
  response->set_seed(config_.seed());
  *response->mutable_configs() = config_.tables();
  for (const TableStats& s : store_->Stats()) {
    pb::TableStats* t = response->add_tables();
    t->set_table_id(s.table_id);
    t->set_name(s.name);
    t->set_dim(static_cast<uint32_t>(s.dim));
    t->set_rows(s.rows);
    t->set_value_bytes(s.value_bytes);
    t->set_state_bytes(s.state_bytes);
    t->set_total_bytes(s.total_bytes);
    t->set_last_step(s.last_step);
    const Counters& c = *counters_.at(s.table_id);
    t->set_pulled_keys(c.pulled.load(std::memory_order_relaxed));
    t->set_pushed_keys(c.pushed.load(std::memory_order_relaxed));
  }
  response->set_memory_bytes(store_->MemoryBytes());
  return absl::OkStatus();
}

std::vector<EmbeddingShard::TableMetrics> EmbeddingShard::Metrics() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<TableMetrics> out;
  if (store_ == nullptr) return out;
  for (const TableStats& s : store_->Stats()) {
    const Counters& c = *counters_.at(s.table_id);
    out.push_back({s.name, s.rows, s.total_bytes, c.pulled.load(std::memory_order_relaxed),
                   c.pushed.load(std::memory_order_relaxed), s.refused_pushes, s.refused_rows,
                   s.refused_pulls, s.refused_absent_pushes});
  }
  return out;
}

namespace {

// "<family>-g<G>-step-<N>" (the checkpoint protocol's names) -> family, G, N; false otherwise.
bool ParseCheckpointSnapshotName(const std::string& name, std::string* family, int64_t* gen,
                                 int64_t* step) {
  const size_t s = name.rfind("-step-");
  if (s == std::string::npos) return false;
  const size_t g = name.rfind("-g", s == 0 ? 0 : s - 1);
  if (g == std::string::npos || g == 0) return false;
  if (!absl::SimpleAtoi(absl::string_view(name).substr(s + 6), step)) return false;
  if (!absl::SimpleAtoi(absl::string_view(name).substr(g + 2, s - g - 2), gen)) return false;
  *family = name.substr(0, g);
  return true;
}

}  // namespace

void EmbeddingShard::PruneOlderSnapshots(const pb::SnapshotRequest& written) const {
  std::string family;
  int64_t gen = 0, step = 0;
  if ((!written.retain_only() && options_.keep_snapshots <= 0) ||
      !ParseCheckpointSnapshotName(written.name(), &family, &gen, &step)) {
    return;
  }
  const std::string file = ShardSnapshotFileName(options_.shard, options_.num_shards);
  // This shard's files of the family, newest (step, generation) first.
  std::vector<std::tuple<int64_t, int64_t, std::string>> mine;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(options_.snapshot_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::string f;
    int64_t g = 0, n = 0;
    if (!ParseCheckpointSnapshotName(name, &f, &g, &n) || f != family) continue;
    if (!PathExists(JoinPath(it->path().string(), file))) continue;
    mine.emplace_back(n, g, name);
  }
  std::sort(mine.begin(), mine.end(), std::greater<>());
  const absl::flat_hash_set<int64_t> retain(written.retain_steps().begin(),
                                            written.retain_steps().end());
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto& [n, g, name] = mine[i];
    // retain_only: the job names the steps it keeps. Else the newest keep_snapshots (see
    // ShardOptions: the last committed checkpoint's snapshot is among them; a retried save
    // rewrites the same name).
    const bool keep = written.retain_only() ? name == written.name() || retain.contains(n)
                                            : i < static_cast<size_t>(options_.keep_snapshots);
    if (keep) continue;
    const std::string dir = JoinPath(options_.snapshot_dir, name);
    std::filesystem::remove(JoinPath(dir, file), ec);
    std::filesystem::remove(dir, ec);  // only when no other shard's file is left
  }
}

Status EmbeddingShard::Snapshot(const pb::SnapshotRequest& request,
                                pb::SnapshotResponse* response) {
  SIFT_RETURN_IF_ERROR(ValidateSnapshotName(request.name()));
  if (request.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot: field 'step' is ", request.step(), ", must be >= 0"));
  }
  if (options_.snapshot_dir.empty()) {
    return absl::FailedPreconditionError("snapshot: the server was started without --snapshot-dir");
  }
  const std::string dir = JoinPath(options_.snapshot_dir, request.name());
  // Exclusive: no push runs while the shard is written, so the file is a consistent cut.
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (store_ == nullptr) {
    return absl::FailedPreconditionError("snapshot: this embedding server is not configured yet");
  }
  SnapshotMeta meta;
  meta.shard = options_.shard;
  meta.num_shards = options_.num_shards;
  meta.step = request.step();
  meta.seed = config_.seed();
  for (const pb::TableConfig& t : config_.tables()) {
    SIFT_ASSIGN_OR_RETURN(TableConfig c, TableConfigFromProto(t));
    meta.tables.push_back(std::move(c));
  }
  Status made = MakeDirs(dir);
  if (!made.ok()) return absl::InternalError(std::string(made.message()));
  SnapshotFileInfo info;
  const Status written =
      WriteShardSnapshot(JoinPath(dir, ShardSnapshotFileName(options_.shard, options_.num_shards)),
                         meta, *store_, &info);
  if (!written.ok()) {
    return absl::InternalError(
        absl::StrCat("snapshot '", request.name(), "': ", written.message()));
  }
  PruneOlderSnapshots(request);
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(info.path, ec);
  response->set_path(ec ? info.path : abs.string());
  response->set_bytes(info.bytes);
  response->set_crc32c(info.payload_crc);
  response->set_rows(info.rows);
  return absl::OkStatus();
}

Status EmbeddingShard::Restore(const pb::RestoreRequest& request, pb::RestoreResponse* response) {
  SIFT_RETURN_IF_ERROR(ValidateSnapshotName(request.name()));
  if (options_.snapshot_dir.empty()) {
    return absl::FailedPreconditionError("restore: the server was started without --snapshot-dir");
  }
  // Read and verify everything before taking the lock: a bad snapshot changes nothing.
  SIFT_ASSIGN_OR_RETURN(ShardSnapshot snap,
                        LoadSnapshotForShard(JoinPath(options_.snapshot_dir, request.name()),
                                             options_.shard, options_.num_shards));
  pb::ConfigureRequest config;
  config.set_seed(snap.meta.seed);
  for (const TableConfig& t : snap.meta.tables) *config.add_tables() = TableConfigToProto(t);
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingStore> store, MakeStore(config));
  int64_t rows = 0;
  for (const EmbeddingStore::TableDump& dump : snap.tables) {
    SIFT_RETURN_IF_ERROR(store->LoadRows(dump.table_id, dump.row_floats, dump.ids, dump.data));
    rows += static_cast<int64_t>(dump.ids.size());
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  SIFT_RETURN_IF_ERROR(InstallLocked(config, std::move(store)));
  response->set_rows(rows);
  response->set_source_shards(snap.source_shards);
  response->set_step(snap.meta.step);
  return absl::OkStatus();
}

}  // namespace sift::embedding
