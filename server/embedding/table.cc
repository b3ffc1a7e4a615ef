#include "server/embedding/table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/hash.h"

namespace sift::embedding {
namespace {

// Rows per arena block: a stripe grows by whole blocks, so existing rows never move.
constexpr uint32_t kRowsPerBlock = 256;
constexpr int kMaxDim = 65536;
constexpr int kMaxStripes = 65536;
// Salt of the stripe hash, so that stripes are independent of the server sharding hash.
constexpr uint64_t kStripeSalt = 0x5eed'57a1'9e00'0001ULL;

std::string TableLabel(uint32_t table_id, absl::string_view name) {
  return absl::StrCat("table '", name, "' (id ", table_id, ")");
}

// The shape checks Pull and Push share: at most 2^32 - 1 ids (row order is kept in uint32), and
// exactly ids x dim floats of `what` ("output", "gradient").
Status CheckBatchShape(const std::string& label, absl::string_view op, size_t ids, size_t dim,
                       size_t floats, absl::string_view what) {
  if (ids > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": ", op, " of ", ids, " ids exceeds 2^32 - 1"));
  }
  if (floats != ids * dim) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", op, " of ", ids, " ids of dim ",
                                                   dim, " needs ", ids * dim, " ", what,
                                                   " floats, got ", floats));
  }
  return absl::OkStatus();
}

// True when no value is inf or NaN (exponent bits all ones). Blocks of 16 with a fixed trip count
// let -O2 vectorise the loop.
bool AllFinite(absl::Span<const float> x) {
  constexpr size_t kBlock = 16;
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad = 0;
  size_t i = 0;
  for (; i + kBlock <= x.size(); i += kBlock) {
    uint32_t bits[kBlock];
    std::memcpy(bits, x.data() + i, sizeof(bits));
    for (size_t j = 0; j < kBlock; ++j) bad |= (bits[j] & kExponent) == kExponent ? ~0u : 0u;
  }
  for (; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, x.data() + i, sizeof(bits));
    bad |= (bits & kExponent) == kExponent ? ~0u : 0u;
  }
  return bad == 0;
}

// True when every value is finite and within [-bound, bound] (NaN fails the comparison).
bool AllWithin(absl::Span<const float> x, float bound) {
  constexpr size_t kBlock = 16;
  uint32_t bad = 0;
  size_t i = 0;
  for (; i + kBlock <= x.size(); i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) bad |= std::fabs(x[i + j]) <= bound ? 0u : 1u;
  }
  for (; i < x.size(); ++i) bad |= std::fabs(x[i]) <= bound ? 0u : 1u;
  return bad == 0;
}

// Adds n to `counter` when the sum stays within `limit` (0 = no limit), else adds nothing: exact
// under concurrency (compare-and-swap), so concurrent reservations never take it past the limit.
// *before is the value it was added to, or the value that had no room for n.
bool AddWithin(std::atomic<int64_t>& counter, int64_t n, int64_t limit, int64_t* before) {
  int64_t current = counter.load(std::memory_order_relaxed);
  do {
    *before = current;
    if (limit > 0 && n > limit - current) return false;
  } while (!counter.compare_exchange_weak(current, current + n, std::memory_order_relaxed));
  return true;
}

bool StrictlyAscending(absl::Span<const uint64_t> ids) {
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] <= ids[i - 1]) return false;
  }
  return true;
}

}  // namespace

struct EmbeddingStore::Stripe {
  std::mutex mu;
  absl::flat_hash_map<uint64_t, uint32_t> index;  // id -> row number in this stripe
  std::vector<std::unique_ptr<float[]>> blocks;   // kRowsPerBlock rows of row_floats each
  uint32_t rows = 0;
};

struct EmbeddingStore::Table {
  TableConfig config;
  std::string label;
  int state_floats = 0;
  int row_floats = 0;  // dim + state_floats: [value | optimizer state]
  std::unique_ptr<Stripe[]> stripes;
  std::atomic<int64_t> last_step{-1};
  std::atomic<uint64_t> refused_pushes{0}, refused_rows{0}, refused_pulls{0};
  std::atomic<uint64_t> refused_absent_pushes{0};
  // Rows of this store's share (all stripes) created or reserved, and the share: 0 = no limit.
  std::atomic<int64_t> rows{0};
  int64_t row_limit = 0;
};

// A new row's share of the memory budget: its floats and its hash-map slot.
int64_t RowBudgetBytes(int row_floats) {
  return static_cast<int64_t>(row_floats) * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(std::pair<const uint64_t, uint32_t>) + 1);
}

double InitBound(uint64_t cardinality) {
  return 1.0 / std::sqrt(static_cast<double>(cardinality) + 1.0);
}

void InitRow(uint64_t seed, uint32_t table_id, uint64_t id, uint64_t cardinality, int dim,
             float* out) {
  const double bound = InitBound(cardinality);
  const uint64_t row_hash = HashCombine(HashCombine(seed, table_id), id);
  for (int c = 0; c < dim; ++c) {
    const double u = UnitFromHash(HashCombine(row_hash, static_cast<uint64_t>(c)));
    out[c] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
}

EmbeddingStore::EmbeddingStore(uint64_t seed, int num_stripes, int threads)
    : seed_(seed),
      num_stripes_(num_stripes),
      pool_(threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr) {}

Status EmbeddingStore::ForEachStripe(const std::vector<uint32_t>& offsets,
                                     const std::function<Status(int)>& fn) const {
  if (pool_ == nullptr) {
    for (int s = 0; s < num_stripes_; ++s) {
      if (offsets[s] == offsets[s + 1]) continue;
      SIFT_RETURN_IF_ERROR(fn(s));
    }
    return absl::OkStatus();
  }
  std::vector<Status> status(static_cast<size_t>(num_stripes_));
  pool_->ParallelFor(num_stripes_, 1, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      if (offsets[s] != offsets[s + 1]) status[s] = fn(static_cast<int>(s));
    }
  });
  for (const Status& st : status) SIFT_RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

EmbeddingStore::~EmbeddingStore() = default;

StatusOr<std::unique_ptr<EmbeddingStore>> EmbeddingStore::Create(std::vector<TableConfig> tables,
                                                                 const StoreOptions& options) {
  if (options.num_stripes < 1 || options.num_stripes > kMaxStripes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding store: num_stripes ", options.num_stripes, " not in [1, ", kMaxStripes, "]"));
  }
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding store: threads ", options.threads, " not in [1, 1024]"));
  }
  if (!(options.max_abs_gradient > 0) || !std::isfinite(options.max_abs_gradient)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding store: max_abs_gradient ", options.max_abs_gradient, " must be finite and > 0"));
  }
  if (options.num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding store: num_shards ", options.num_shards, " < 1"));
  }
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding store: memory_budget_bytes ", options.memory_budget_bytes, " < 0"));
  }
  std::unique_ptr<EmbeddingStore> store(
      new EmbeddingStore(options.seed, options.num_stripes, options.threads));
  store->max_abs_gradient_ = options.max_abs_gradient;
  store->memory_budget_bytes_ = options.memory_budget_bytes;
  for (TableConfig& config : tables) {
    const std::string label = TableLabel(config.table_id, config.name);
    if (config.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": empty name"));
    }
    if (config.dim < 1 || config.dim > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": dim ", config.dim, " not in [1, ", kMaxDim, "]"));
    }
    SIFT_RETURN_IF_ERROR(Annotate(ValidateOptimizerConfig(config.optimizer), label));
    if (store->tables_.contains(config.table_id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": table_id ", config.table_id, " used by two tables"));
    }
    auto table = std::make_unique<Table>();
    table->label = label;
    table->state_floats = StateFloats(config.optimizer, config.dim);
    table->row_floats = config.dim + table->state_floats;
    table->stripes = std::make_unique<Stripe[]>(static_cast<size_t>(options.num_stripes));
    const uint64_t shards = static_cast<uint64_t>(options.num_shards);
    table->row_limit = static_cast<int64_t>(
        std::min<uint64_t>(config.capacity / shards + (config.capacity % shards != 0),
                           std::numeric_limits<int64_t>::max()));
    table->config = std::move(config);
    const uint32_t id = table->config.table_id;
    store->tables_.emplace(id, std::move(table));
  }
  return store;
}

const TableConfig* EmbeddingStore::FindTable(uint32_t table_id) const {
  auto it = tables_.find(table_id);
  return it == tables_.end() ? nullptr : &it->second->config;
}

StatusOr<EmbeddingStore::Table*> EmbeddingStore::GetTable(uint32_t table_id,
                                                          absl::string_view op) const {
  auto it = tables_.find(table_id);
  if (it == tables_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": unknown table (id ", table_id, ") on this embedding server"));
  }
  return it->second.get();
}

uint32_t EmbeddingStore::StripeOf(uint32_t table_id, uint64_t id) const {
  const uint64_t h = HashCombine(HashCombine(kStripeSalt, table_id), id);
  return static_cast<uint32_t>(BoundedFromHash(h, static_cast<uint64_t>(num_stripes_)));
}

void EmbeddingStore::GroupByStripe(uint32_t table_id, absl::Span<const uint64_t> ids,
                                   std::vector<uint32_t>& order,
                                   std::vector<uint32_t>& offsets) const {
  std::vector<uint32_t> stripe_of(ids.size());
  offsets.assign(static_cast<size_t>(num_stripes_) + 1, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    stripe_of[i] = StripeOf(table_id, ids[i]);
    ++offsets[stripe_of[i] + 1];
  }
  for (int s = 0; s < num_stripes_; ++s) offsets[s + 1] += offsets[s];
  std::vector<uint32_t> next(offsets.begin(), offsets.end() - 1);
  order.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) order[next[stripe_of[i]]++] = static_cast<uint32_t>(i);
}

float* EmbeddingStore::FindRow(const Table& table, Stripe& stripe, uint64_t id) {
  auto it = stripe.index.find(id);
  if (it == stripe.index.end()) return nullptr;
  const uint32_t r = it->second;
  return stripe.blocks[r / kRowsPerBlock].get() +
         (r % kRowsPerBlock) * static_cast<size_t>(table.row_floats);
}

StatusOr<float*> EmbeddingStore::CreateRow(const Table& table, Stripe& stripe, uint64_t id) const {
  if (stripe.rows == std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(table.label, ": a lock stripe is full (2^32 - 1 rows); use more stripes"));
  }
  const size_t row_floats = static_cast<size_t>(table.row_floats);
  const uint32_t r = stripe.rows;
  if (r % kRowsPerBlock == 0) {
    stripe.blocks.push_back(std::make_unique_for_overwrite<float[]>(kRowsPerBlock * row_floats));
  }
  float* row = stripe.blocks[r / kRowsPerBlock].get() + (r % kRowsPerBlock) * row_floats;
  const TableConfig& c = table.config;
  InitRow(seed_, c.table_id, id, c.cardinality, c.dim, row);
  InitOptimizerState(c.optimizer, c.dim, row + c.dim);
  stripe.index.emplace(id, r);
  ++stripe.rows;
  return row;
}

StatusOr<float*> EmbeddingStore::FindOrCreateUnbounded(Table& table, Stripe& stripe,
                                                       uint64_t id) const {
  if (float* row = FindRow(table, stripe, id)) return row;
  SIFT_ASSIGN_OR_RETURN(float* row, CreateRow(table, stripe, id));
  table.rows.fetch_add(1, std::memory_order_relaxed);
  row_bytes_.fetch_add(RowBudgetBytes(table.row_floats), std::memory_order_relaxed);
  return row;
}

Status EmbeddingStore::ReserveRows(Table& table, int64_t rows) const {
  int64_t held = 0;
  if (!AddWithin(table.rows, rows, table.row_limit, &held)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        table.label, ": the table is full: this pull needs ", rows, " new rows; this shard holds ",
        held, " of its ", table.row_limit, "-row share of the table's capacity of ",
        table.config.capacity, " rows (job spec tables.", table.config.name,
        ".capacity); the pull created none, rows already held are still served"));
  }
  const int64_t cost = RowBudgetBytes(table.row_floats);
  int64_t used = 0;
  if (!AddWithin(row_bytes_, rows * cost, memory_budget_bytes_, &used)) {
    table.rows.fetch_sub(rows, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        table.label, ": no room for new rows: this pull needs ", rows, " new rows (", rows * cost,
        " bytes); this server's tables hold ", used, " bytes of their memory budget of ",
        memory_budget_bytes_,
        " (embedding-server --table-memory-budget); the pull created none, rows already held are "
        "still served"));
  }
  return absl::OkStatus();
}

void EmbeddingStore::ReleaseRows(Table& table, int64_t rows) const {
  if (rows == 0) return;
  table.rows.fetch_sub(rows, std::memory_order_relaxed);
  row_bytes_.fetch_sub(rows * RowBudgetBytes(table.row_floats), std::memory_order_relaxed);
}

Status EmbeddingStore::Pull(uint32_t table_id, absl::Span<const uint64_t> ids,
                            absl::Span<float> out) {
  SIFT_ASSIGN_OR_RETURN(Table * table, GetTable(table_id, "pull"));
  const size_t dim = static_cast<size_t>(table->config.dim);
  SIFT_RETURN_IF_ERROR(
      CheckBatchShape(table->label, "pull", ids.size(), dim, out.size(), "output"));
  std::vector<uint32_t> order, offsets;
  GroupByStripe(table_id, ids, order, offsets);
  const Status status = PullRows(*table, ids, out, order, offsets);
  if (absl::IsResourceExhausted(status)) {
    table->refused_pulls.fetch_add(1, std::memory_order_relaxed);
  }
  return status;
}

Status EmbeddingStore::PullRows(Table& table, absl::Span<const uint64_t> ids, absl::Span<float> out,
                                std::vector<uint32_t>& order,
                                const std::vector<uint32_t>& offsets) {
  const size_t dim = static_cast<size_t>(table.config.dim);
  // Pass 1, per stripe under its lock: serve the held rows, move the missing ids' entries to the
  // front of the stripe's range of `order` (sorted by id) and count the distinct ones.
  std::vector<uint32_t> missing_end(offsets.begin(), offsets.end() - 1);
  std::atomic<int64_t> missing{0};
  SIFT_RETURN_IF_ERROR(ForEachStripe(offsets, [&](int s) -> Status {
    Stripe& stripe = table.stripes[s];
    const uint32_t begin = offsets[s], end = offsets[s + 1];
    uint32_t m = begin;
    uint32_t stripe_rows = 0;
    {
      std::lock_guard<std::mutex> lock(stripe.mu);
      for (uint32_t k = begin; k < end; ++k) {
        const uint32_t i = order[k];
        if (const float* row = FindRow(table, stripe, ids[i])) {
          std::copy(row, row + dim, out.data() + i * dim);
        } else {
          std::swap(order[k], order[m++]);  // [begin, m) missing; [m, k] held
        }
      }
      stripe_rows = stripe.rows;
    }
    if (m == begin) return absl::OkStatus();
    std::sort(order.begin() + begin, order.begin() + m,
              [&](uint32_t a, uint32_t b) { return ids[a] < ids[b]; });
    uint32_t distinct = 1;
    for (uint32_t k = begin + 1; k < m; ++k) distinct += ids[order[k]] != ids[order[k - 1]];
    if (distinct > std::numeric_limits<uint32_t>::max() - stripe_rows) {
      return absl::ResourceExhaustedError(
          absl::StrCat(table.label, ": a lock stripe is full (2^32 - 1 rows); use more stripes"));
    }
    missing_end[s] = m;
    missing.fetch_add(distinct, std::memory_order_relaxed);
    return absl::OkStatus();
  }));
  const int64_t wanted = missing.load();
  if (wanted == 0) return absl::OkStatus();
  SIFT_RETURN_IF_ERROR(ReserveRows(table, wanted));
  // Pass 2: create the reserved rows. A concurrent pull may have created some meanwhile; their
  // reservations are given back.
  std::atomic<int64_t> created{0};
  const Status status = ForEachStripe(offsets, [&](int s) -> Status {
    const uint32_t begin = offsets[s], end = missing_end[s];
    if (begin == end) return absl::OkStatus();
    Stripe& stripe = table.stripes[s];
    int64_t made = 0;
    std::lock_guard<std::mutex> lock(stripe.mu);
    for (uint32_t k = begin; k < end; ++k) {
      const uint32_t i = order[k];
      const float* row = FindRow(table, stripe, ids[i]);
      if (row == nullptr) {
        StatusOr<float*> fresh = CreateRow(table, stripe, ids[i]);
        if (!fresh.ok()) {
          created.fetch_add(made, std::memory_order_relaxed);
          return fresh.status();
        }
        row = *fresh;
        ++made;
      }
      std::copy(row, row + dim, out.data() + i * dim);
    }
    created.fetch_add(made, std::memory_order_relaxed);
    return absl::OkStatus();
  });
  ReleaseRows(table, wanted - created.load());
  return status;
}

Status EmbeddingStore::Lookup(uint32_t table_id, absl::Span<const uint64_t> ids,
                              absl::Span<float> out) const {
  SIFT_ASSIGN_OR_RETURN(Table * table, GetTable(table_id, "lookup"));
  const size_t dim = static_cast<size_t>(table->config.dim);
  SIFT_RETURN_IF_ERROR(
      CheckBatchShape(table->label, "lookup", ids.size(), dim, out.size(), "output"));
  const size_t row_floats = static_cast<size_t>(table->row_floats);
  const TableConfig& c = table->config;
  std::vector<uint32_t> order, offsets;
  GroupByStripe(table_id, ids, order, offsets);
  return ForEachStripe(offsets, [&](int s) -> Status {
    Stripe& stripe = table->stripes[s];
    std::lock_guard<std::mutex> lock(stripe.mu);
    for (uint32_t k = offsets[s]; k < offsets[s + 1]; ++k) {
      const uint32_t i = order[k];
      float* dst = out.data() + i * dim;
      auto it = stripe.index.find(ids[i]);
      if (it == stripe.index.end()) {
        InitRow(seed_, c.table_id, ids[i], c.cardinality, c.dim, dst);
      } else {
        const uint32_t r = it->second;
        const float* row =
            stripe.blocks[r / kRowsPerBlock].get() + (r % kRowsPerBlock) * row_floats;
        std::copy(row, row + dim, dst);
      }
    }
    return absl::OkStatus();
  });
}

Status EmbeddingStore::Push(uint32_t table_id, absl::Span<const uint64_t> ids,
                            absl::Span<const float> grads, int64_t step, float lr_multiplier) {
  const TablePush push{table_id, ids, grads};
  return PushMany(absl::MakeConstSpan(&push, 1), step, lr_multiplier);
}

Status EmbeddingStore::PushMany(absl::Span<const TablePush> pushes, int64_t step,
                                float lr_multiplier) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("push with negative step ", step));
  if (!(lr_multiplier > 0.0f && lr_multiplier <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("push with learning-rate multiplier ", lr_multiplier, " (must be in (0, 1])"));
  }
  struct Plan {
    Table* table = nullptr;
    std::vector<uint32_t> order, offsets;
    std::vector<float*> rows;  // rows[k]: the row of ids[order[k]]
  };
  std::vector<Plan> plans(pushes.size());
  // Validate every table and every stripe before touching any row: ids are equal only within one
  // stripe, so a duplicate is two equal ids among one stripe's (sorted) ids.
  for (size_t p = 0; p < pushes.size(); ++p) {
    const TablePush& push = pushes[p];
    SIFT_ASSIGN_OR_RETURN(Table * table, GetTable(push.table_id, "push"));
    for (size_t q = 0; q < p; ++q) {
      if (pushes[q].table_id == push.table_id) {
        return absl::InvalidArgumentError(
            absl::StrCat(table->label, ": named twice in one push; send each table once"));
      }
    }
    const size_t dim = static_cast<size_t>(table->config.dim);
    SIFT_RETURN_IF_ERROR(
        CheckBatchShape(table->label, "push", push.ids.size(), dim, push.grads.size(), "gradient"));
    Plan& plan = plans[p];
    plan.table = table;
    GroupByStripe(push.table_id, push.ids, plan.order, plan.offsets);
    // The usual push (a client's sorted, summed keys; finite gradients) is valid at a glance;
    // anything else goes through the per-stripe checks, which name the first offender.
    const float bound = max_abs_gradient_;
    if (StrictlyAscending(push.ids) && AllWithin(push.grads, bound)) continue;
    const Status validated = ForEachStripe(plan.offsets, [&](int s) -> Status {
      std::vector<std::pair<uint64_t, uint32_t>> sorted;
      sorted.reserve(plan.offsets[s + 1] - plan.offsets[s]);
      for (uint32_t k = plan.offsets[s]; k < plan.offsets[s + 1]; ++k) {
        const uint32_t i = plan.order[k];
        sorted.emplace_back(push.ids[i], i);
        for (size_t j = i * dim; j < (i + 1) * dim; ++j) {
          if (!std::isfinite(push.grads[j])) {
            return absl::InvalidArgumentError(absl::StrCat(table->label, ": non-finite gradient ",
                                                           push.grads[j], " for id ", push.ids[i],
                                                           " component ", j % dim));
          }
          if (!(std::fabs(push.grads[j]) <= bound)) {
            return absl::InvalidArgumentError(
                absl::StrCat(table->label, ": gradient ", push.grads[j], " for id ", push.ids[i],
                             " component ", j % dim, " is beyond +-", bound,
                             " (embedding-server --max-abs-gradient); the push is refused whole"));
          }
        }
      }
      std::sort(sorted.begin(), sorted.end());
      for (size_t j = 1; j < sorted.size(); ++j) {
        if (sorted[j].first == sorted[j - 1].first) {
          return absl::InvalidArgumentError(absl::StrCat(
              table->label, ": push names id ", sorted[j].first, " twice (at index ",
              sorted[j].second, "); gradients of one id must be summed by the caller"));
        }
      }
      return absl::OkStatus();
    });
    if (!validated.ok()) {
      table->refused_pushes.fetch_add(1, std::memory_order_relaxed);
      return validated;
    }
  }
  // Then find every row: a push never creates one, and rows are never removed, so the rows found
  // stay the push's until it is applied.
  for (size_t p = 0; p < pushes.size(); ++p) {
    Plan& plan = plans[p];
    plan.rows.resize(pushes[p].ids.size());
    SIFT_RETURN_IF_ERROR(
        ResolveHeldRows(*plan.table, pushes[p].ids, plan.order, plan.offsets, plan.rows.data()));
  }
  for (size_t p = 0; p < pushes.size(); ++p) {
    const TablePush& push = pushes[p];
    Plan& plan = plans[p];
    Table* table = plan.table;
    const TableConfig& c = table->config;
    const size_t dim = static_cast<size_t>(c.dim);
    const size_t row_floats = static_cast<size_t>(table->row_floats);
    std::atomic<uint64_t> unchanged{0};
    const Status applied = ForEachStripe(plan.offsets, [&](int s) -> Status {
      Stripe& stripe = table->stripes[s];
      std::lock_guard<std::mutex> lock(stripe.mu);
      const uint32_t begin = plan.offsets[s], end = plan.offsets[s + 1];
      const float* grads = push.grads.data();
      // The rows were found above: fetch the next rows and gradients while one is updated.
      constexpr uint32_t kAhead = 8;
      for (uint32_t k = begin; k < std::min(end, begin + kAhead); ++k) {
        __builtin_prefetch(plan.rows[k]);
        __builtin_prefetch(grads + plan.order[k] * dim);
      }
      // Each update is computed on a copy and written only when every weight and state stays
      // finite: a row is never left holding inf or NaN (which would freeze it for good).
      thread_local std::vector<float> scratch;
      scratch.resize(row_floats);
      uint64_t first_bad = 0, bad = 0;
      for (uint32_t k = begin; k < end; ++k) {
        if (k + kAhead < end) {
          __builtin_prefetch(plan.rows[k + kAhead]);
          __builtin_prefetch(grads + plan.order[k + kAhead] * dim);
        }
        const uint32_t i = plan.order[k];
        float* row = plan.rows[k];
        std::copy(row, row + row_floats, scratch.data());
        ApplyOptimizer(c.optimizer, c.dim, grads + i * dim, scratch.data(), scratch.data() + c.dim,
                       lr_multiplier);
        if (AllFinite(scratch)) {
          std::copy(scratch.begin(), scratch.end(), row);
        } else if (bad++ == 0) {
          first_bad = push.ids[i];
        }
      }
      if (bad == 0) return absl::OkStatus();
      unchanged.fetch_add(bad, std::memory_order_relaxed);
      return absl::InvalidArgumentError(absl::StrCat("id ", first_bad));
    });
    if (!applied.ok()) {
      const uint64_t n = unchanged.load();
      table->refused_rows.fetch_add(n, std::memory_order_relaxed);
      return absl::InvalidArgumentError(absl::StrCat(
          table->label, ": ", n, " row(s) left unchanged (first: ", applied.message(),
          "): the update would have made a weight or optimizer state non-finite; the other rows "
          "of the push were applied"));
    }
    int64_t prev = table->last_step.load(std::memory_order_relaxed);
    while (prev < step && !table->last_step.compare_exchange_weak(prev, step)) {
    }
  }
  return absl::OkStatus();
}

Status EmbeddingStore::ResolveHeldRows(Table& table, absl::Span<const uint64_t> ids,
                                       const std::vector<uint32_t>& order,
                                       const std::vector<uint32_t>& offsets, float** rows) const {
  // Every stripe is looked at: the error counts the whole push's absent ids, and names the first
  // one of the lowest stripe (deterministic).
  std::mutex absent_mu;
  uint64_t absent = 0, first = 0;
  int first_stripe = num_stripes_;
  SIFT_RETURN_IF_ERROR(ForEachStripe(offsets, [&](int s) -> Status {
    Stripe& stripe = table.stripes[s];
    uint64_t missing = 0, first_here = 0;
    {
      std::lock_guard<std::mutex> lock(stripe.mu);
      for (uint32_t k = offsets[s]; k < offsets[s + 1]; ++k) {
        const uint64_t id = ids[order[k]];
        float* row = FindRow(table, stripe, id);
        if (rows != nullptr) rows[k] = row;
        if (row == nullptr && missing++ == 0) first_here = id;
      }
    }
    if (missing == 0) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(absent_mu);
    absent += missing;
    if (s < first_stripe) {
      first_stripe = s;
      first = first_here;
    }
    return absl::OkStatus();
  }));
  if (absent == 0) return absl::OkStatus();
  table.refused_absent_pushes.fetch_add(1, std::memory_order_relaxed);
  return absl::InvalidArgumentError(absl::StrCat(
      table.label, ": id ", first,
      ": push for a row this shard does not hold: a worker pushes only rows it pulled (", absent,
      " of the push's ", ids.size(), " ids are absent); the push is refused whole"));
}

Status EmbeddingStore::CheckRowsHeld(uint32_t table_id, absl::Span<const uint64_t> ids) {
  SIFT_ASSIGN_OR_RETURN(Table * table, GetTable(table_id, "push"));
  std::vector<uint32_t> order, offsets;
  GroupByStripe(table_id, ids, order, offsets);
  return ResolveHeldRows(*table, ids, order, offsets, nullptr);
}

StatusOr<EmbeddingStore::TableDump> EmbeddingStore::DumpTable(uint32_t table_id) const {
  SIFT_ASSIGN_OR_RETURN(Table * table, GetTable(table_id, "dump"));
  const size_t row_floats = static_cast<size_t>(table->row_floats);
  std::vector<std::pair<uint64_t, std::vector<float>::size_type>> order;  // (id, offset in rows)
  std::vector<float> rows;
  for (int s = 0; s < num_stripes_; ++s) {
    Stripe& stripe = table->stripes[s];
    std::lock_guard<std::mutex> lock(stripe.mu);
    for (const auto& [id, r] : stripe.index) {
      const float* row = stripe.blocks[r / kRowsPerBlock].get() + (r % kRowsPerBlock) * row_floats;
      order.emplace_back(id, rows.size());
      rows.insert(rows.end(), row, row + row_floats);
    }
  }
  std::sort(order.begin(), order.end());
  TableDump dump;
  dump.table_id = table_id;
  dump.row_floats = table->row_floats;
  dump.ids.reserve(order.size());
  dump.data.resize(order.size() * row_floats);
  for (size_t i = 0; i < order.size(); ++i) {
    dump.ids.push_back(order[i].first);
    std::copy_n(rows.data() + order[i].second, row_floats, dump.data.data() + i * row_floats);
  }
  return dump;
}

Status EmbeddingStore::LoadRows(uint32_t table_id, int row_floats, absl::Span<const uint64_t> ids,
                                absl::Span<const float> data) {
  SIFT_ASSIGN_OR_RETURN(Table * table, GetTable(table_id, "load"));
  if (row_floats != table->row_floats) {
    return absl::InvalidArgumentError(absl::StrCat(table->label, ": rows of ", row_floats,
                                                   " floats given, the table has ",
                                                   table->row_floats, " (dim + optimizer state)"));
  }
  const size_t rf = static_cast<size_t>(row_floats);
  if (data.size() != ids.size() * rf) {
    return absl::InvalidArgumentError(absl::StrCat(table->label, ": load of ", ids.size(),
                                                   " rows needs ", ids.size() * rf, " floats, got ",
                                                   data.size()));
  }
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!seen.insert(ids[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(table->label, ": load names id ", ids[i], " twice (at index ", i, ")"));
    }
  }
  std::vector<uint32_t> order, offsets;
  GroupByStripe(table_id, ids, order, offsets);
  for (int s = 0; s < num_stripes_; ++s) {
    if (offsets[s] == offsets[s + 1]) continue;
    Stripe& stripe = table->stripes[s];
    std::lock_guard<std::mutex> lock(stripe.mu);
    for (uint32_t k = offsets[s]; k < offsets[s + 1]; ++k) {
      const uint32_t i = order[k];
      SIFT_ASSIGN_OR_RETURN(float* row, FindOrCreateUnbounded(*table, stripe, ids[i]));
      std::copy_n(data.data() + i * rf, rf, row);
    }
  }
  return absl::OkStatus();
}

std::vector<TableStats> EmbeddingStore::Stats() const {
  std::vector<TableStats> result;
  result.reserve(tables_.size());
  for (const auto& [id, table] : tables_) {
    TableStats st;
    st.table_id = id;
    st.name = table->config.name;
    st.dim = table->config.dim;
    st.state_floats = table->state_floats;
    int64_t blocks = 0;
    for (int s = 0; s < num_stripes_; ++s) {
      Stripe& stripe = table->stripes[s];
      std::lock_guard<std::mutex> lock(stripe.mu);
      st.rows += stripe.rows;
      blocks += static_cast<int64_t>(stripe.blocks.size());
      // Slot (key, row) plus one control byte per slot of capacity.
      st.map_bytes += static_cast<int64_t>(stripe.index.capacity()) *
                      static_cast<int64_t>(sizeof(std::pair<const uint64_t, uint32_t>) + 1);
    }
    st.value_bytes = st.rows * st.dim * static_cast<int64_t>(sizeof(float));
    st.state_bytes = st.rows * st.state_floats * static_cast<int64_t>(sizeof(float));
    st.arena_bytes =
        blocks * kRowsPerBlock * table->row_floats * static_cast<int64_t>(sizeof(float));
    st.total_bytes = st.arena_bytes + st.map_bytes;
    st.last_step = table->last_step.load();
    st.refused_pushes = table->refused_pushes.load(std::memory_order_relaxed);
    st.refused_rows = table->refused_rows.load(std::memory_order_relaxed);
    st.refused_pulls = table->refused_pulls.load(std::memory_order_relaxed);
    st.refused_absent_pushes = table->refused_absent_pushes.load(std::memory_order_relaxed);
    result.push_back(std::move(st));
  }
  std::sort(result.begin(), result.end(),
            [](const TableStats& a, const TableStats& b) { return a.table_id < b.table_id; });
  return result;
}

int64_t EmbeddingStore::MemoryBytes() const {
  int64_t total = 0;
  for (const TableStats& st : Stats()) total += st.total_bytes;
  return total;
}

}  // namespace sift::embedding
