#include "server/embedding/step_aggregator.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sift::embedding {
namespace {

// One rank's arrays of one table, its parts concatenated, keys strictly ascending.
struct RankTable {
  std::vector<uint64_t> keys;
  std::vector<float> grads, l2;
};

// Concatenates rank r's parts of `table_id` (part order) and sorts them by key when they are not
// already ascending (the client sends sorted keys; anything else is sorted here). A key sent twice
// is INVALID_ARGUMENT.
Status GatherRank(const std::vector<std::vector<HeldTable>>& parts, uint32_t table_id, int dim,
                  uint32_t rank, RankTable* out) {
  const size_t d = static_cast<size_t>(dim);
  bool any_l2 = false;
  for (const std::vector<HeldTable>& part : parts) {
    for (const HeldTable& t : part) any_l2 |= (t.table_id == table_id && !t.l2.empty());
  }
  for (const std::vector<HeldTable>& part : parts) {
    for (const HeldTable& t : part) {
      if (t.table_id != table_id) continue;
      if (t.dim != dim) {
        return absl::InvalidArgumentError(absl::StrCat("step push: table id ", table_id,
                                                       " has dim ", t.dim, " from rank ", rank,
                                                       " and ", dim, " from another"));
      }
      out->keys.insert(out->keys.end(), t.keys.begin(), t.keys.end());
      out->grads.insert(out->grads.end(), t.grads.begin(), t.grads.end());
      if (any_l2) {
        if (t.l2.empty()) {
          out->l2.insert(out->l2.end(), t.keys.size(), 0.0f);
        } else {
          out->l2.insert(out->l2.end(), t.l2.begin(), t.l2.end());
        }
      }
    }
  }
  const std::vector<uint64_t>& k = out->keys;
  bool ascending = true;
  for (size_t i = 1; i < k.size() && ascending; ++i) ascending = k[i - 1] < k[i];
  if (ascending) return absl::OkStatus();
  std::vector<uint32_t> order(k.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return k[a] < k[b]; });
  RankTable sorted;
  sorted.keys.resize(k.size());
  sorted.grads.resize(out->grads.size());
  if (any_l2) sorted.l2.resize(k.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const uint32_t j = order[i];
    if (i > 0 && k[j] == sorted.keys[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("step push: rank ", rank, " sent id ", k[j],
                                                     " of table id ", table_id,
                                                     " twice in one step (ids must be summed "
                                                     "by the client, each sent once)"));
    }
    sorted.keys[i] = k[j];
    std::memcpy(sorted.grads.data() + i * d, out->grads.data() + j * d, d * sizeof(float));
    if (any_l2) sorted.l2[i] = out->l2[j];
  }
  *out = std::move(sorted);
  return absl::OkStatus();
}

}  // namespace

uint64_t SummedStep::keys() const {
  uint64_t n = 0;
  for (const HeldTable& t : tables) n += t.keys.size();
  return n;
}

StatusOr<SummedStep> SumStepInRankOrder(std::vector<std::vector<std::vector<HeldTable>>> rank_parts,
                                        int64_t step, float lr_multiplier) {
  SummedStep out;
  out.step = step;
  out.lr_multiplier = lr_multiplier;
  std::map<uint32_t, int> dims;  // every table any rank sent, ascending
  for (const auto& parts : rank_parts) {
    for (const auto& part : parts) {
      for (const HeldTable& t : part) dims.emplace(t.table_id, t.dim);
    }
  }
  const uint32_t world = static_cast<uint32_t>(rank_parts.size());
  for (const auto& [table_id, dim] : dims) {
    const size_t d = static_cast<size_t>(dim);
    std::vector<RankTable> ranks(world);
    bool any_l2 = false;
    size_t total = 0;
    for (uint32_t r = 0; r < world; ++r) {
      SIFT_RETURN_IF_ERROR(GatherRank(rank_parts[r], table_id, dim, r, &ranks[r]));
      any_l2 |= !ranks[r].l2.empty();
      total += ranks[r].keys.size();
    }
    HeldTable sum;
    sum.table_id = table_id;
    sum.dim = dim;
    sum.keys.reserve(total);
    sum.grads.reserve(total * d);
    std::vector<bool> l2_set;
    // Merge by (key, rank): equal keys come out in rank order, so each key's sum is
    // ((g_r0 + g_r1) + g_r2) + ... over the ranks that sent it, whatever the arrival order.
    using Head = std::pair<uint64_t, uint32_t>;  // key, rank
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    std::vector<size_t> next(world, 0);
    for (uint32_t r = 0; r < world; ++r) {
      if (!ranks[r].keys.empty()) heads.emplace(ranks[r].keys[0], r);
    }
    while (!heads.empty()) {
      const auto [key, r] = heads.top();
      heads.pop();
      const size_t i = next[r]++;
      if (next[r] < ranks[r].keys.size()) heads.emplace(ranks[r].keys[next[r]], r);
      const float* g = ranks[r].grads.data() + i * d;
      const bool has_l2 = !ranks[r].l2.empty() && ranks[r].l2[i] != 0.0f;
      if (!sum.keys.empty() && sum.keys.back() == key) {
        float* acc = sum.grads.data() + (sum.keys.size() - 1) * d;
        for (size_t c = 0; c < d; ++c) acc[c] += g[c];
        if (has_l2 && !l2_set.back()) {
          sum.l2.back() = ranks[r].l2[i];
          l2_set.back() = true;
        }
        continue;
      }
      sum.keys.push_back(key);
      sum.grads.insert(sum.grads.end(), g, g + d);
      if (any_l2) {
        sum.l2.push_back(has_l2 ? ranks[r].l2[i] : 0.0f);
        l2_set.push_back(has_l2);
      }
    }
    out.tables.push_back(std::move(sum));
  }
  return out;
}

Status StepAggregator::CheckTag(const StepTag& t) {
  if (t.world < 2 || t.world > kMaxStepWorld) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push: field 'world' is ", t.world, ", a step push needs 2 to ", kMaxStepWorld, " ranks"));
  }
  if (t.rank >= t.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("push: field 'rank' is ", t.rank, ", must be < world = ", t.world));
  }
  if (t.parts < 1 || t.parts > kMaxStepParts || t.part >= t.parts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push: field 'part' is ", t.part, " of parts = ", t.parts, " (need 0 <= part < parts)"));
  }
  if (t.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push: field 'step' is ", t.step, ", must be >= 0"));
  }
  return absl::OkStatus();
}

StatusOr<std::optional<SummedStep>> StepAggregator::Add(const StepTag& tag, float lr_multiplier,
                                                        std::vector<HeldTable> tables) {
  SIFT_RETURN_IF_ERROR(CheckTag(tag));
  std::vector<std::vector<std::vector<HeldTable>>> complete;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto newest = newest_generation_.find(tag.group);
    if (newest != newest_generation_.end() && tag.generation < newest->second) {
      return absl::FailedPreconditionError(
          absl::StrCat("push: generation ", tag.generation, " of this job is stale (generation ",
                       newest->second, " has pushed since); the step is not applied"));
    }
    if (newest == newest_generation_.end() || tag.generation > newest->second) {
      newest_generation_[tag.group] = tag.generation;
      // An older generation's incomplete steps can never complete: drop them.
      for (auto it = pending_.begin(); it != pending_.end();) {
        it = std::get<0>(it->first) == tag.group && std::get<1>(it->first) < tag.generation
                 ? pending_.erase(it)
                 : std::next(it);
      }
    }
    const Key key{tag.group, tag.generation, tag.step};
    auto it = pending_.find(key);
    if (it == pending_.end()) {
      if (pending_.size() >= kMaxPendingSteps) {
        return absl::ResourceExhaustedError(
            absl::StrCat("push: ", pending_.size(), " incomplete steps are held, the limit is ",
                         kMaxPendingSteps, "; step ", tag.step, " is refused"));
      }
      auto p = std::make_unique<Pending>();
      p->world = tag.world;
      p->lr_multiplier = lr_multiplier;
      p->parts.assign(tag.world, 0);
      p->held.resize(tag.world);
      p->have.resize(tag.world);
      it = pending_.emplace(key, std::move(p)).first;
    }
    Pending& p = *it->second;
    const std::string what = absl::StrCat("push of step ", tag.step, " rank ", tag.rank);
    if (p.world != tag.world) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": world ", tag.world, ", but the step's other ranks said ", p.world));
    }
    if (std::memcmp(&p.lr_multiplier, &lr_multiplier, sizeof(float)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": lr_multiplier ", lr_multiplier,
                                                     ", the step's other ranks sent ",
                                                     p.lr_multiplier));
    }
    if (p.parts[tag.rank] != 0 && p.parts[tag.rank] != tag.parts) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": parts ", tag.parts, ", an earlier part said ", p.parts[tag.rank]));
    }
    if (p.parts[tag.rank] == 0) {
      p.parts[tag.rank] = tag.parts;
      p.held[tag.rank].resize(tag.parts);
      p.have[tag.rank].assign(tag.parts, false);
    }
    if (p.have[tag.rank][tag.part]) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": part ", tag.part, " of ", tag.parts, " is already held"));
    }
    p.held[tag.rank][tag.part] = std::move(tables);
    p.have[tag.rank][tag.part] = true;
    const auto& have = p.have[tag.rank];
    if (std::all_of(have.begin(), have.end(), [](bool b) { return b; })) ++p.ranks_complete;
    if (p.ranks_complete < p.world) return std::optional<SummedStep>();
    complete = std::move(p.held);
    pending_.erase(it);
  }
  SIFT_ASSIGN_OR_RETURN(SummedStep sum,
                        SumStepInRankOrder(std::move(complete), tag.step, lr_multiplier));
  return std::optional<SummedStep>(std::move(sum));
}

void StepAggregator::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.clear();
  newest_generation_.clear();
}

size_t StepAggregator::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

}  // namespace sift::embedding
