#include "common/sharding.h"

#include <algorithm>

#include "common/hash.h"

namespace sift {

uint32_t ShardOf(uint32_t table_id, uint64_t id, uint32_t num_shards) {
  return static_cast<uint32_t>(HashCombine(HashCombine(kShardSalt, table_id), id) % num_shards);
}

void SliceByShard(uint32_t table_id, absl::Span<const uint64_t> keys, uint32_t num_shards,
                  ShardSlices* slices) {
  // Counting sort by shard: stable, so each slice keeps the keys' order.
  std::vector<uint32_t>& offsets = slices->offsets;
  offsets.assign(num_shards + 1, 0);
  std::vector<uint32_t>& positions = slices->positions;
  positions.resize(keys.size());
  if (num_shards == 1) {
    offsets[1] = static_cast<uint32_t>(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) positions[i] = static_cast<uint32_t>(i);
    return;
  }
  std::vector<uint32_t> shard(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    shard[i] = ShardOf(table_id, keys[i], num_shards);
    ++offsets[shard[i] + 1];
  }
  for (uint32_t s = 0; s < num_shards; ++s) offsets[s + 1] += offsets[s];
  std::vector<uint32_t> next(offsets.begin(), offsets.end() - 1);
  for (size_t i = 0; i < keys.size(); ++i) positions[next[shard[i]]++] = static_cast<uint32_t>(i);
}

void ScatterShardReplies(const ShardSlices& slices, int width,
                         const std::vector<absl::Span<const float>>& replies,
                         absl::Span<float> out) {
  const size_t w = static_cast<size_t>(width);
  for (size_t s = 0; s + 1 < slices.offsets.size(); ++s) {
    const float* src = replies[s].data();
    for (uint32_t k = slices.offsets[s]; k < slices.offsets[s + 1]; ++k, src += w) {
      std::copy_n(src, w, out.data() + slices.positions[k] * w);
    }
  }
}

}  // namespace sift
