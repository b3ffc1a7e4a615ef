// The key -> shard contract of the embedding servers (docs/architecture.md "Sharding"):
//   ShardOf(table, id, S) = HashCombine(HashCombine(kShardSalt, table), id) mod S
// — a pure, stable function (common/hash.h), so every worker and server agree, and a server
// restoring a checkpoint taken with another S keeps exactly the keys that hash to it now.
// SliceByShard is the one function that splits a request's keys by shard (ps-lite's slicer, written
// once): the client sends slice s to shard s and scatters the replies back with the same slices.
// Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace sift {

// Distinct from the embedding store's stripe salt, so the stripes of one shard stay balanced.
inline constexpr uint64_t kShardSalt = 0x5a4d'0000'5eed'0002ULL;

// REQUIRES: num_shards >= 1.
uint32_t ShardOf(uint32_t table_id, uint64_t id, uint32_t num_shards);

// keys[positions[offsets[s]] .. ] for offsets[s] <= k < offsets[s + 1] are the keys of shard s,
// in their order in `keys` (so sorted keys give sorted slices). Every key position appears exactly
// once. offsets has num_shards + 1 entries.
struct ShardSlices {
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> positions;
  uint32_t Size(uint32_t shard) const { return offsets[shard + 1] - offsets[shard]; }
};

// Splits `keys` (any order, duplicates allowed; < 2^32 of them) of table `table_id` by shard,
// reusing `slices`' memory. REQUIRES: num_shards >= 1.
void SliceByShard(uint32_t table_id, absl::Span<const uint64_t> keys, uint32_t num_shards,
                  ShardSlices* slices);

// The inverse for replies: shard s answered `width` floats per key of its slice, in slice order,
// in replies[s]; writes them to out[position * width ..]. REQUIRES: replies[s].size() ==
// slices.Size(s) * width for every s, out.size() == positions * width.
void ScatterShardReplies(const ShardSlices& slices, int width,
                         const std::vector<absl::Span<const float>>& replies,
                         absl::Span<float> out);

}  // namespace sift
