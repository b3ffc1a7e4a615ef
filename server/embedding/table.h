// EmbeddingStore: the sparse embedding tables of one embedding server, in memory. Rows are created
// by Pull (and LoadRows) on first touch, read by batched Pull and updated by batched Push through
// the table's sparse optimizer (optimizer.h). Owns all rows. Thread-safe: any number of threads may
// Pull/Push at once (striped locking: each table has N stripes, each a std::mutex guarding an id ->
// row map and the row arena; a row is always read and updated whole under its stripe's lock).
//
// Contracts (docs/architecture.md "Semantics that are contracts"):
// - Keys are (table_id: uint32, id: uint64). Ids are NOT required to be < cardinality (dynamic id
//   space); cardinality only sets the init bound.
// - Deterministic init: a row never seen before is created (by Pull) with
//     value[c] = (2 * UnitFromHash(HashCombine(HashCombine(HashCombine(seed, table_id), id), c)) -
//     1)
//                * 1/sqrt(cardinality + 1),   c = 0 .. dim-1,
//   computed in double and rounded to float (InitRow). It is a pure function of
//   (seed, table_id, id, c) — never an Rng stream — so every server, in any order of pulls, makes
//   the same row (model-spec 2: uniform in +-1/sqrt(R), R = cardinality + 1; 13, difference 3).
// - Push: gradients for the same id within one request must already be summed by the caller; a
//   push naming an id twice is rejected with INVALID_ARGUMENT and changes nothing. Validation
//   (table, sizes, duplicates, non-finite gradients, rows held) happens before any row is touched.
// - Push never creates a row: a push naming an id the store does not hold is refused whole
//   (INVALID_ARGUMENT naming the table and the id). A worker pulls every row before it pushes
//   it, and rows are never removed from a store (there is no eviction; Restore and Configure
//   with replace build a new store and drop the held step pushes with the old one), so a
//   legitimate push always finds its rows: an absent row means a push of another job, of
//   tables that were replaced since its pull, or a client bug, and creating the row would
//   bypass the memory budget and the capacity, which bind Pull only.
// - Bounds: the memory budget and the capacity bind Pull, the one call of training that creates
//   rows; a Pull that would exceed either creates nothing (see Pull).
// - A failed Pull or Push changes nothing (the one exception: a Push row whose update would be
//   non-finite, below).
// - Errors: unknown table, wrong buffer sizes, duplicate ids, absent rows in a push ->
//   INVALID_ARGUMENT naming the table.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "server/embedding/optimizer.h"

namespace sift::embedding {

struct TableConfig {
  uint32_t table_id = 0;
  std::string name;           // for messages and stats; non-empty
  int dim = 16;               // floats per row, in [1, 65536]
  uint64_t cardinality = 0;   // init bound 1/sqrt(cardinality + 1); not an id limit
  OptimizerConfig optimizer;  // validated by Create
  // Rows of the whole table over StoreOptions::num_shards stores (0 = no row limit): this store
  // creates at most ceil(capacity / num_shards) of them on Pull (a Pull needing more is
  // RESOURCE_EXHAUSTED naming the table and creates nothing). Push and Lookup create no rows;
  // LoadRows (a restore) is not limited, as for the memory budget.
  uint64_t capacity = 0;
};

// Pushes with a gradient component beyond +-this are refused whole (one FLT_MAX gradient made
// adam's second moment infinite and froze the row for good). Embedding gradients of a sane model
// are many orders of magnitude below it.
inline constexpr float kDefaultMaxAbsGradient = 1e6f;

struct StoreOptions {
  uint64_t seed = 0;     // the job seed of the deterministic init
  int num_stripes = 64;  // lock stripes per table, in [1, 65536]
  // Threads one Pull/Push call spreads its stripes over (1 = the caller only). Results
  // do not depend on it: stripes hold disjoint rows.
  int threads = 1;
  // Finite and > 0: the bound on |gradient| of every push (INVALID_ARGUMENT beyond it).
  float max_abs_gradient = kDefaultMaxAbsGradient;
  // The bytes all tables' rows may take (row floats plus the hash-map slot of each row; 0 = no
  // limit). A Pull that would create rows beyond it is RESOURCE_EXHAUSTED naming the table and
  // creates nothing; the rows already held are still served and updated. Push and Lookup create
  // no rows; LoadRows (a restore) is not limited: a snapshot's rows are loaded whole.
  int64_t memory_budget_bytes = 0;
  // The store is one of this many shards of each table (>= 1): it holds its share of
  // TableConfig::capacity.
  int num_shards = 1;
};

// Memory accounting of one table (bytes). value/state count live rows only; arena counts the
// allocated row blocks (live rows plus the unused tail of each stripe's last block); map is an
// estimate of the id -> row hash maps (capacity * (slot + control byte)).
struct TableStats {
  uint32_t table_id = 0;
  std::string name;
  int dim = 0;
  int state_floats = 0;
  int64_t rows = 0;
  int64_t value_bytes = 0;
  int64_t state_bytes = 0;
  int64_t arena_bytes = 0;
  int64_t map_bytes = 0;
  int64_t total_bytes = 0;  // arena_bytes + map_bytes
  int64_t last_step = -1;   // largest `step` pushed so far, -1 before any push
  // Refusals: pushes refused whole for a non-finite or out-of-range gradient; rows a push left
  // unchanged because the update would have made them non-finite; pulls refused because they
  // needed new rows beyond the memory budget or the capacity; pushes (plain or step parts)
  // refused whole for naming a row the store does not hold.
  uint64_t refused_pushes = 0;
  uint64_t refused_rows = 0;
  uint64_t refused_pulls = 0;
  uint64_t refused_absent_pushes = 0;
};

// The init bound 1/sqrt(cardinality + 1), in double.
double InitBound(uint64_t cardinality);
// Writes the deterministic initial value of row (table_id, id) to out[0 .. dim) (formula above).
void InitRow(uint64_t seed, uint32_t table_id, uint64_t id, uint64_t cardinality, int dim,
             float* out);

class EmbeddingStore {
 public:
  // INVALID_ARGUMENT (naming the table) on an empty name, a bad dim, a bad optimizer config, or
  // a repeated table_id; and on a bad num_stripes.
  static StatusOr<std::unique_ptr<EmbeddingStore>> Create(std::vector<TableConfig> tables,
                                                          const StoreOptions& options);
  ~EmbeddingStore();
  EmbeddingStore(const EmbeddingStore&) = delete;
  EmbeddingStore& operator=(const EmbeddingStore&) = delete;

  // Copies row ids[i] to out[i*dim .. (i+1)*dim), creating missing rows (deterministic init).
  // Repeated ids are allowed. REQUIRES: out.size() == ids.size() * dim (else INVALID_ARGUMENT).
  // Bounds: when the distinct missing ids would take the table past its capacity share or the
  // store past its memory budget, the pull is RESOURCE_EXHAUSTED naming the table, the bound and
  // its flag or spec field, creates no row and counts in refused_pulls. Exact under concurrency:
  // the missing rows are counted under the stripe locks and reserved against the bounds at once
  // before any is created, so concurrent pulls never take the store past a bound. Conservative
  // at the edge: a pull racing another for the same new ids may be refused when fewer rows than
  // those ids are left (the rows it would share are reserved twice for a moment).
  Status Pull(uint32_t table_id, absl::Span<const uint64_t> ids, absl::Span<float> out);

  // Like Pull, but creates nothing: a row never seen reads as its deterministic initial value
  // (InitRow) and stays absent (evaluation must not grow the tables or the checkpoints).
  Status Lookup(uint32_t table_id, absl::Span<const uint64_t> ids, absl::Span<float> out) const;

  // Applies the table's optimizer to each row ids[i] with gradient grads[i*dim .. (i+1)*dim).
  // Every row must be held (pulled before): an absent one refuses the whole push (contract above,
  // counted in refused_absent_pushes). `step` is the worker's global step (>= 0): recorded for
  // stats and checkpoints, not used by the optimizers (adam's bias correction uses the row's own
  // count). lr_multiplier scales the table's learning rate for this push (the step's schedule
  // factor, common/lr_schedule.h; 1 = the configured rate bit for bit; outside (0, 1] is
  // INVALID_ARGUMENT). REQUIRES: grads.size() == ids.size() * dim; ids unique; grads finite and
  // within
  // +-max_abs_gradient (else INVALID_ARGUMENT, nothing applied). A row whose update would hold a
  // non-finite weight or optimizer state is not written (the others are): INVALID_ARGUMENT
  // naming the first such id and the count.
  Status Push(uint32_t table_id, absl::Span<const uint64_t> ids, absl::Span<const float> grads,
              int64_t step, float lr_multiplier = 1.0f);

  // Push of several tables as one unit: every table is validated (as Push, rows held included,
  // plus: a table named twice is INVALID_ARGUMENT) before any row of any table is touched, so an
  // error applies nothing.
  struct TablePush {
    uint32_t table_id = 0;
    absl::Span<const uint64_t> ids;
    absl::Span<const float> grads;
  };
  Status PushMany(absl::Span<const TablePush> pushes, int64_t step, float lr_multiplier = 1.0f);

  // Every row of one table with its optimizer state (checkpoints and snapshots): ids sorted
  // ascending, data[i*row_floats .. (i+1)*row_floats) = [weights (dim) | optimizer state] of
  // ids[i], row_floats = dim + StateFloats. Consistent per stripe (each stripe is copied under its
  // lock); take it between pushes for a consistent table. INVALID_ARGUMENT for an unknown table.
  struct TableDump {
    uint32_t table_id = 0;
    int row_floats = 0;
    std::vector<uint64_t> ids;
    std::vector<float> data;
  };
  StatusOr<TableDump> DumpTable(uint32_t table_id) const;

  // The check Push makes of its rows, alone (a step push's part, checked as it arrives so that a
  // part that could not apply is never held): OK when the store holds a row for every id;
  // INVALID_ARGUMENT naming the table and an absent id otherwise (counted in
  // refused_absent_pushes); INVALID_ARGUMENT for an unknown table. Changes no row.
  Status CheckRowsHeld(uint32_t table_id, absl::Span<const uint64_t> ids);
  // Writes rows (creating or overwriting them) from a dump of a table with the same dim and
  // optimizer: data.size() == ids.size() * row_floats. INVALID_ARGUMENT (naming the table) on an
  // unknown table, a row_floats mismatch, a size mismatch or a duplicate id; nothing is written
  // then.
  Status LoadRows(uint32_t table_id, int row_floats, absl::Span<const uint64_t> ids,
                  absl::Span<const float> data);

  // One entry per table, in table_id order.
  std::vector<TableStats> Stats() const;
  // Sum of total_bytes over all tables.
  int64_t MemoryBytes() const;
  // The table's config, or nullptr when unknown.
  const TableConfig* FindTable(uint32_t table_id) const;

 private:
  struct Stripe;
  struct Table;
  EmbeddingStore(uint64_t seed, int num_stripes, int threads);
  // Runs fn(s) for every stripe s with offsets[s] < offsets[s+1], on the pool (or the caller);
  // returns the error of the lowest failing stripe (deterministic).
  Status ForEachStripe(const std::vector<uint32_t>& offsets,
                       const std::function<Status(int)>& fn) const;

  StatusOr<Table*> GetTable(uint32_t table_id, absl::string_view op) const;
  // The row of `id`, or nullptr when the stripe does not hold it. REQUIRES: stripe.mu held.
  static float* FindRow(const Table& table, Stripe& stripe, uint64_t id);
  // Creates the row of `id` (deterministic init, optimizer state) without touching the bounds'
  // counters: the caller has reserved it, or counts it (FindOrCreateUnbounded). RESOURCE_EXHAUSTED
  // when the stripe is full (2^32 - 1 rows). REQUIRES: stripe.mu held; id absent.
  StatusOr<float*> CreateRow(const Table& table, Stripe& stripe, uint64_t id) const;
  // FindRow, else CreateRow counted against no bound (LoadRows: a restore is not limited).
  StatusOr<float*> FindOrCreateUnbounded(Table& table, Stripe& stripe, uint64_t id) const;
  // Reserves `rows` new rows of `table` against its capacity share and the memory budget, both or
  // neither: RESOURCE_EXHAUSTED naming the bound when either would be exceeded.
  Status ReserveRows(Table& table, int64_t rows) const;
  // Gives back reserved rows that were not created.
  void ReleaseRows(Table& table, int64_t rows) const;
  // Pull's rows (its contract): serves the held rows and counts the distinct missing ids (one
  // pass under the stripe locks), reserves them against the bounds, then creates them (a second
  // pass, only when rows are missing). Reorders each stripe's range of `order`.
  Status PullRows(Table& table, absl::Span<const uint64_t> ids, absl::Span<float> out,
                  std::vector<uint32_t>& order, const std::vector<uint32_t>& offsets);
  // Finds the row of every id (rows[k] for ids[order[k]], when `rows` is non-null): OK, or
  // INVALID_ARGUMENT naming the table and the first absent id, counted in refused_absent_pushes.
  Status ResolveHeldRows(Table& table, absl::Span<const uint64_t> ids,
                         const std::vector<uint32_t>& order, const std::vector<uint32_t>& offsets,
                         float** rows) const;
  uint32_t StripeOf(uint32_t table_id, uint64_t id) const;
  // Indices of `ids` grouped by stripe: order[offsets[s] .. offsets[s+1]) are those in stripe s.
  void GroupByStripe(uint32_t table_id, absl::Span<const uint64_t> ids,
                     std::vector<uint32_t>& order, std::vector<uint32_t>& offsets) const;

  const uint64_t seed_;
  const int num_stripes_;
  float max_abs_gradient_ = kDefaultMaxAbsGradient;
  int64_t memory_budget_bytes_ = 0;
  // What rows have taken or have reserved, against the budget.
  mutable std::atomic<int64_t> row_bytes_{0};
  std::unique_ptr<ThreadPool> pool_;                              // null when threads == 1
  absl::flat_hash_map<uint32_t, std::unique_ptr<Table>> tables_;  // immutable after Create
};

}  // namespace sift::embedding
