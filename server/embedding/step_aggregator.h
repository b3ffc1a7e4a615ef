// StepAggregator: the embedding server's half of the synchronous sparse step
// (training.sparse_update: step, proto/embedding.proto PushRequest.step_group). It holds the parts
// of one global step's pushes — W ranks, each rank's push split into `parts` requests — until every
// part of every rank is in, then hands the caller ONE push: per table, each key's gradient summed
// over the ranks in rank order (deterministic whatever order the requests arrived in), keys in
// ascending order, with the L2 coefficient of the lowest rank that sent one. Applying it (one
// optimizer update per key) is the caller's (EmbeddingShard::Push).
//
// A step is applied whole or not at all: parts are held as copies, nothing reaches the tables
// before the step is complete, and Clear() (Restore, Configure with replace) or a later generation
// of the same group drops incomplete steps. Bounded: at most kMaxPendingSteps steps held.
// Thread-safe (one mutex; the summing runs outside it, on the completing caller's thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"

namespace sift::embedding {

// Steps held at once over all groups (a 2-deep pipeline per job needs 2).
inline constexpr size_t kMaxPendingSteps = 16;
// Largest world and parts a step push may name (a job has at most 4096 workers; a rank's push to
// one shard is split into ~1 MiB parts).
inline constexpr uint32_t kMaxStepWorld = 65536;
inline constexpr uint32_t kMaxStepParts = 65536;

// Which step, and which piece of it, a request is.
struct StepTag {
  uint64_t group = 0;  // != 0: the job (a hash of its id)
  uint64_t generation = 0;
  int64_t step = 0;
  uint32_t rank = 0, world = 0;
  uint32_t part = 0, parts = 0;
};

// One table of one part: keys unique within the rank's whole push of the step; grads keys x dim;
// l2 empty or one coefficient per key.
struct HeldTable {
  uint32_t table_id = 0;
  int dim = 0;
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  std::vector<float> l2;
};

// The step to apply: tables in ascending table_id, keys strictly ascending within each.
struct SummedStep {
  int64_t step = 0;
  float lr_multiplier = 1.0f;
  std::vector<HeldTable> tables;
  uint64_t keys() const;
};

class StepAggregator {
 public:
  // INVALID_ARGUMENT (naming the field) for world < 2 or > kMaxStepWorld, rank >= world,
  // parts < 1 or > kMaxStepParts, part >= parts.
  static Status CheckTag(const StepTag& tag);

  // Holds `tables` as part tag.part of rank tag.rank of the step. Returns the summed step when
  // this completes it (the step is then forgotten), nullopt when held. Errors, with nothing held:
  // FAILED_PRECONDITION for a generation older than the group's newest; INVALID_ARGUMENT for a
  // part already held, or a world / parts / lr_multiplier that disagrees with the step's other
  // requests; RESOURCE_EXHAUSTED beyond kMaxPendingSteps steps; on completion, INVALID_ARGUMENT
  // for a key that one rank sent twice (the step is dropped).
  StatusOr<std::optional<SummedStep>> Add(const StepTag& tag, float lr_multiplier,
                                          std::vector<HeldTable> tables);

  // Drops every held step and forgets the groups' generations (the tables were replaced).
  void Clear();
  // Steps held now (for tests and stats).
  size_t pending() const;

 private:
  struct Pending {
    uint32_t world = 0;
    float lr_multiplier = 1.0f;
    std::vector<uint32_t> parts;                            // per rank; 0 = none seen yet
    std::vector<std::vector<std::vector<HeldTable>>> held;  // [rank][part] -> tables
    std::vector<std::vector<bool>> have;                    // [rank][part]
    uint32_t ranks_complete = 0;
  };
  using Key = std::tuple<uint64_t, uint64_t, int64_t>;  // group, generation, step

  mutable std::mutex mu_;
  std::map<Key, std::unique_ptr<Pending>> pending_;            // guarded by mu_
  absl::flat_hash_map<uint64_t, uint64_t> newest_generation_;  // guarded by mu_
};

// Sums held parts in rank order (exposed for tests): rank_parts[r] = rank r's parts in part
// order. INVALID_ARGUMENT for a key one rank sent twice in a table, or a table whose dim differs
// between ranks.
StatusOr<SummedStep> SumStepInRankOrder(std::vector<std::vector<std::vector<HeldTable>>> rank_parts,
                                        int64_t step, float lr_multiplier);

}  // namespace sift::embedding
