#include "worker/batch_keys.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace sift::worker {
namespace {

// One contiguous run of id slots of a table (e.g. "long history, feature 1"): ids [n] read from
// the batch, inverse indices [n] written to `inv`.
struct SlotRun {
  const char* what;
  int feature;
  int64_t rows;        // batch rows covered
  int per_row;         // slots per row
  const int32_t* ids;  // [rows * per_row], contiguous (the batch's rows 0..B are contiguous)
  int32_t* inv;        // [rows * per_row]
};

// Scratch reused across calls on one thread (BuildBatchKeys runs once per batch; keeping the
// buffers avoids re-allocating several MB every step). `rank` is all zeros between calls.
struct Scratch {
  std::vector<uint64_t> pairs;
  std::vector<uint64_t> tmp;
  std::vector<int32_t> rank;
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Tables whose ids are all below this are deduplicated through a dense id -> rank array (at most
// 16 MiB per thread) instead of the radix sort: two sequential passes over the slots, no scatter.
constexpr int64_t kDenseRankIds = int64_t{1} << 22;

// Stable LSD radix sort of (id << 32 | slot) pairs by the id half only, 11 bits per pass, as many
// passes as max_id needs.
void RadixSortById(uint64_t max_id, std::vector<uint64_t>* pairs, std::vector<uint64_t>* tmp) {
  constexpr int kBits = 11;
  constexpr size_t kBuckets = size_t{1} << kBits;
  const size_t n = pairs->size();
  tmp->resize(n);
  uint64_t* src = pairs->data();
  uint64_t* dst = tmp->data();
  bool swapped = false;
  for (int shift = 0; (max_id >> shift) != 0; shift += kBits) {
    size_t count[kBuckets + 1] = {};
    const int s = 32 + shift;
    for (size_t i = 0; i < n; ++i) ++count[((src[i] >> s) & (kBuckets - 1)) + 1];
    for (size_t b = 1; b <= kBuckets; ++b) count[b] += count[b - 1];
    for (size_t i = 0; i < n; ++i) dst[count[(src[i] >> s) & (kBuckets - 1)]++] = src[i];
    std::swap(src, dst);
    swapped = !swapped;
  }
  if (swapped) pairs->swap(*tmp);
}

// Keys and inverses through the radix sort of the `valid` (id, slot) pairs: any id range.
void RankBySort(const std::vector<SlotRun>& runs, uint64_t max_id, int64_t valid, Scratch* sc,
                TableKeys* out) {
  sc->pairs.clear();
  sc->pairs.reserve(static_cast<size_t>(valid));
  uint32_t slot = 0;
  for (const SlotRun& r : runs) {
    const int64_t n = r.rows * r.per_row;
    for (int64_t i = 0; i < n; ++i, ++slot) {
      if (r.ids[i] > 0) sc->pairs.push_back((static_cast<uint64_t>(r.ids[i]) << 32) | slot);
    }
  }
  RadixSortById(max_id, &sc->pairs, &sc->tmp);

  // Slot -> run lookup: runs are few (<= 4), so a scan over their start slots is cheap.
  int64_t unique = -1;
  uint64_t prev = 0;
  int64_t starts[4];
  const int nruns = static_cast<int>(runs.size());
  int64_t acc = 0;
  for (int k = 0; k < nruns; ++k) {
    starts[k] = acc;
    acc += runs[k].rows * runs[k].per_row;
  }
  for (uint64_t p : sc->pairs) {
    const uint64_t id = p >> 32;
    const int64_t s = static_cast<int64_t>(p & 0xffffffffULL);
    if (id != prev) {
      out->keys.push_back(id);
      prev = id;
      ++unique;
    }
    int k = nruns - 1;
    while (starts[k] > s) --k;
    runs[k].inv[s - starts[k]] = static_cast<int32_t>(unique);
  }
}

// Zeroes the marks of ids 0..max_id (those below the array's size: no id past it was marked).
void ClearMarks(int64_t max_id, Scratch* sc) {
  const size_t n = std::min(static_cast<size_t>(max_id) + 1, sc->rank.size());
  std::fill(sc->rank.begin(), sc->rank.begin() + static_cast<std::ptrdiff_t>(n), 0);
}

// Keys and inverses through sc.rank, where the first pass marked every id present with 1:
// ascending ids give the keys, each id's rank its slots' inverse. Leaves sc.rank all zeros.
void RankByDenseIds(const std::vector<SlotRun>& runs, int64_t max_id, Scratch* sc, TableKeys* out) {
  int32_t* rank = sc->rank.data();
  int32_t unique = 0;
  for (int64_t id = 1; id <= max_id; ++id) {
    if (rank[id] != 0) {
      out->keys.push_back(static_cast<uint64_t>(id));
      rank[id] = unique++;
    }
  }
  for (const SlotRun& r : runs) {
    const int64_t n = r.rows * r.per_row;
    for (int64_t i = 0; i < n; ++i) {
      if (r.ids[i] > 0) r.inv[i] = rank[r.ids[i]];
    }
  }
  ClearMarks(max_id, sc);
}

// Dedups one table over its runs: fills keys (sorted, unique) and every run's inverse. The first
// pass checks the ids, writes the padding's inverses and, while every id is below kDenseRankIds,
// marks the ids present; the ranks come from those marks or, past that bound, from the sort.
Status BuildTable(const std::vector<SlotRun>& runs, int table, TableKeys* out) {
  Scratch& sc = ThreadScratch();
  int64_t total = 0;
  for (const SlotRun& r : runs) total += r.rows * r.per_row;
  if (total > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, ": ", total, " id slots exceed 2^32 per batch"));
  }
  int64_t max_id = 0, valid = 0;
  bool dense = true;
  for (const SlotRun& r : runs) {
    const int64_t n = r.rows * r.per_row;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = r.ids[i];
      if (id > 0) {
        ++valid;
        if (id > max_id) max_id = id;
        if (!dense) continue;
        if (id >= kDenseRankIds) {
          dense = false;
          continue;
        }
        if (static_cast<size_t>(id) >= sc.rank.size()) {
          sc.rank.resize(std::max(static_cast<size_t>(id) + 1, 2 * sc.rank.size()), 0);
        }
        sc.rank[static_cast<size_t>(id)] = 1;
      } else {
        if (id < 0) {
          ClearMarks(max_id, &sc);
          return absl::InvalidArgumentError(absl::StrCat(
              "negative id ", id, " in ", r.what, " feature ", r.feature, " row ", i / r.per_row,
              (r.per_row > 1 ? absl::StrCat(" slot ", i % r.per_row) : std::string()), " (table ",
              table, ")"));
        }
        r.inv[i] = -1;
      }
    }
  }
  out->slot_ids = valid;
  out->keys.clear();
  if (dense) {
    RankByDenseIds(runs, max_id, &sc, out);
  } else {
    ClearMarks(max_id, &sc);
    RankBySort(runs, static_cast<uint64_t>(max_id), valid, &sc, out);
  }
  if (out->keys.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, ": more than 2^31 - 1 unique keys in one batch"));
  }
  return absl::OkStatus();
}

}  // namespace

Status BuildBatchKeys(const data::Batch& batch, const KeyUsage& usage, int dim, BatchKeys* keys) {
  const int UF = batch.num_user_features, F = batch.num_item_features;
  const int64_t B = batch.size;
  const int TL = batch.long_len, TS = batch.short_len;
  if (B < 0 || B > batch.capacity || UF < 0 || F < 0 || TL < 0 || TS < 0 || dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("BuildBatchKeys: bad batch shape (size ", B,
                                                   ", capacity ", batch.capacity, ") or dim ",
                                                   dim));
  }
  const size_t cap = static_cast<size_t>(batch.capacity);
  if (batch.user.size() < UF * cap || batch.target.size() < F * cap ||
      (usage.long_history && batch.long_hist.size() < F * cap * TL) ||
      (usage.short_history && batch.short_hist.size() < F * cap * TS) ||
      (usage.short_negatives && batch.short_neg.size() < F * cap * TS)) {
    return absl::InvalidArgumentError(
        "BuildBatchKeys: batch arrays are smaller than its capacity and shape say (not "
        "Allocate()d?)");
  }
  keys->num_user_features = UF;
  keys->num_item_features = F;
  keys->batch = B;
  keys->tables.resize(static_cast<size_t>(UF + F));
  keys->user_inv.resize(static_cast<size_t>(UF) * B);
  keys->target_inv.resize(static_cast<size_t>(F) * B);
  keys->long_inv.resize(usage.long_history ? static_cast<size_t>(F) * B * TL : 0);
  keys->short_inv.resize(usage.short_history ? static_cast<size_t>(F) * B * TS : 0);
  keys->short_neg_inv.resize(usage.short_negatives ? static_cast<size_t>(F) * B * TS : 0);

  std::vector<SlotRun> runs;
  runs.reserve(4);
  for (int k = 0; k < UF; ++k) {
    runs.clear();
    runs.push_back({"user", k, B, 1, batch.User(k), keys->user_inv.data() + k * B});
    SIFT_RETURN_IF_ERROR(BuildTable(runs, k, &keys->tables[static_cast<size_t>(k)]));
  }
  for (int f = 0; f < F; ++f) {
    runs.clear();
    runs.push_back({"target", f, B, 1, batch.Target(f), keys->target_inv.data() + f * B});
    if (usage.long_history && TL > 0) {
      runs.push_back({"long history", f, B, TL, batch.LongHist(f, 0),
                      keys->long_inv.data() + static_cast<int64_t>(f) * B * TL});
    }
    if (usage.short_history && TS > 0) {
      runs.push_back({"short history", f, B, TS, batch.ShortHist(f, 0),
                      keys->short_inv.data() + static_cast<int64_t>(f) * B * TS});
    }
    if (usage.short_negatives && TS > 0) {
      runs.push_back({"short negatives", f, B, TS, batch.ShortNeg(f, 0),
                      keys->short_neg_inv.data() + static_cast<int64_t>(f) * B * TS});
    }
    SIFT_RETURN_IF_ERROR(BuildTable(runs, UF + f, &keys->tables[static_cast<size_t>(UF + f)]));
  }
  for (TableKeys& t : keys->tables) {
    t.rows.resize(t.keys.size() * static_cast<size_t>(dim));
    t.grads.resize(t.keys.size() * static_cast<size_t>(dim));
  }
  return absl::OkStatus();
}

KeyCounts CountKeys(const BatchKeys& keys) {
  KeyCounts c;
  for (const TableKeys& t : keys.tables) {
    c.slot_ids += t.slot_ids;
    c.unique += static_cast<int64_t>(t.keys.size());
  }
  return c;
}

}  // namespace sift::worker
