// BatchKeys: the embedding keys of one batch (architecture.md step 2, "dedup"): for every table,
// the sorted unique ids the batch uses and, for every id slot of the batch, the index of its id in
// that list (the inverse index the model gathers with). Id 0 is padding: it gets no key and
// inverse -1 (the model reads it as a zero vector, exactly what the reference's mask makes of row
// 0). Also holds, per table, the pulled rows [U, dim] and the gradients [U, dim] the backward pass
// segment-sums into. Plain data; not thread-safe.
//
// Table numbering: tables 0 .. UF-1 are the user features, UF .. UF+F-1 the item features
// (shared by target, long, short and short-negative histories), as in the feature spec.
#pragma once

#include <cstdint>
#include <vector>

#include "common/data/batch.h"
#include "common/status.h"

namespace sift::worker {

// Which id slots of a batch a model reads (DIEN reads no long history, DIN no negatives, inference
// no negatives).
struct KeyUsage {
  bool long_history = true;
  bool short_history = true;
  bool short_negatives = true;
};

struct TableKeys {
  std::vector<uint64_t> keys;  // sorted, unique, no 0
  std::vector<float> rows;     // [keys.size(), dim], filled by the caller (pull)
  std::vector<float> grads;    // [keys.size(), dim], filled by Model::Backward
  // Step pushes with sparse L2 (worker/sparse_l2.h): [keys.size()] coefficients λ / n_j that the
  // servers apply once per row; empty otherwise.
  std::vector<float> l2;
  int64_t slot_ids = 0;  // the batch's id slots (not padding) these keys serve
};

struct BatchKeys {
  int num_user_features = 0;
  int num_item_features = 0;
  int64_t batch = 0;              // rows of the batch these were built for (Batch::size)
  std::vector<TableKeys> tables;  // UF + F
  // Inverse indices, same layout as the Batch arrays but with batch stride `batch` (not capacity):
  std::vector<int32_t> user_inv;       // [UF][B]
  std::vector<int32_t> target_inv;     // [F][B]
  std::vector<int32_t> long_inv;       // [F][B][T_L], empty when !usage.long_history
  std::vector<int32_t> short_inv;      // [F][B][T_S], empty when !usage.short_history
  std::vector<int32_t> short_neg_inv;  // [F][B][T_S], empty when !usage.short_negatives
};

// Fills `keys` for rows [0, batch.size) of `batch`, reusing its memory. `rows`/`grads` are sized
// to keys * dim (contents unspecified). Deterministic. INVALID_ARGUMENT when an id is negative or
// a table would exceed 2^31 - 1 unique keys.
Status BuildBatchKeys(const data::Batch& batch, const KeyUsage& usage, int dim, BatchKeys* keys);

// What the dedup saved: the id slots the keys serve (inverse entries other than padding) and the
// unique keys pulled for them, summed over the tables (counted by BuildBatchKeys). 1 - unique /
// slot_ids is the dedup hit rate.
struct KeyCounts {
  int64_t slot_ids = 0;
  int64_t unique = 0;
};
KeyCounts CountKeys(const BatchKeys& keys);

}  // namespace sift::worker
