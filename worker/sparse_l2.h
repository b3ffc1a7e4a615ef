// Mini-batch-aware L2 regularisation of the embedding rows (the DIN paper, Zhou et al. 2018,
// section 4.3.1): instead of decaying every row of a table at every step (most rows are not in
// the batch), each row j that a step's batch touches gets, besides its data gradient,
//   λ · w_j / n_j,
// where n_j is the number of occurrences of id j in the training split's model inputs (every
// sample's user, target, history and negative slots the model reads), so a frequent id is
// regularised as much per epoch as a rare one. Rows the batch does not touch get nothing.
// With W data-parallel ranks and step pushes (the default) each rank sends the coefficients
// λ / n_j of the rows it touches with its push and the servers add c · w_j once per row to the
// rank-summed gradient: the formula exactly, as in one process. With per_rank pushes each rank
// adds (λ / W) · w_j / n_j for the rows it touches, after its gradients are in global-mean-loss
// units (ScaleSparseGradients): a row touched by r of the ranks gets r/W of it.
// Plain functions over BatchKeys; not thread-safe on one IdCounts.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"
#include "worker/batch_keys.h"

namespace sift::worker {

// Occurrences per id, per table (BatchKeys' numbering: user features, then item features).
struct IdCounts {
  std::vector<absl::flat_hash_map<uint64_t, int64_t>> tables;
};

// Adds the occurrences of `keys` (one per inverse index >= 0 of every slot the batch holds) to
// `counts` (resized to the batch's tables).
void CountOccurrences(const BatchKeys& keys, IdCounts* counts);

// grads[k] += scale · rows[k] / n(key k) for every key k of table `table` (`keys`, its TableKeys
// in a BatchKeys). REQUIRES: rows and grads filled. A key never counted (n < 1) is
// INVALID_ARGUMENT naming the table and id; the keys before it are already changed.
Status AddMiniBatchAwareL2(float scale, const IdCounts& counts, int dim, size_t table,
                           TableKeys* keys);

// keys->l2[k] = scale / n(key k) for every key k of table `table` (the coefficient
// AddMiniBatchAwareL2 multiplies the row by), sized to the keys. Errors as AddMiniBatchAwareL2.
Status MiniBatchAwareL2Coefficients(float scale, const IdCounts& counts, size_t table,
                                    TableKeys* keys);

}  // namespace sift::worker
