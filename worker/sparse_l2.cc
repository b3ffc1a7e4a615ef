#include "worker/sparse_l2.h"

#include "absl/strings/str_cat.h"

namespace sift::worker {

void CountOccurrences(const BatchKeys& keys, IdCounts* counts) {
  const int uf = keys.num_user_features;
  const int nf = keys.num_item_features;
  if (counts->tables.size() < keys.tables.size()) counts->tables.resize(keys.tables.size());
  // inv: [features][b][slots] of table offset + feature; -1 is padding (no key).
  auto add = [&](const std::vector<int32_t>& inv, int features, int offset) {
    if (inv.empty() || features == 0) return;
    const size_t per_feature = inv.size() / static_cast<size_t>(features);
    for (int f = 0; f < features; ++f) {
      const TableKeys& t = keys.tables[static_cast<size_t>(offset + f)];
      auto& table = counts->tables[static_cast<size_t>(offset + f)];
      const int32_t* p = inv.data() + static_cast<size_t>(f) * per_feature;
      for (size_t i = 0; i < per_feature; ++i) {
        if (p[i] >= 0) ++table[t.keys[static_cast<size_t>(p[i])]];
      }
    }
  };
  add(keys.user_inv, uf, 0);
  add(keys.target_inv, nf, uf);
  add(keys.long_inv, nf, uf);
  add(keys.short_inv, nf, uf);
  add(keys.short_neg_inv, nf, uf);
}

namespace {

// Calls fn(k, c) with c = scale / n(key k) for every key of `table`, in key order.
template <typename Fn>
Status ForEachCoefficient(float scale, const IdCounts& counts, size_t table, const TableKeys& keys,
                          Fn fn) {
  if (keys.keys.empty()) return absl::OkStatus();
  if (table >= counts.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table, " has no id counts"));
  }
  const auto& n = counts.tables[table];
  for (size_t k = 0; k < keys.keys.size(); ++k) {
    const auto it = n.find(keys.keys[k]);
    if (it == n.end() || it->second < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table ", table, ": id ", keys.keys[k], " is in a training batch but was never counted"));
    }
    fn(k, scale / static_cast<float>(it->second));
  }
  return absl::OkStatus();
}

}  // namespace

Status AddMiniBatchAwareL2(float scale, const IdCounts& counts, int dim, size_t table,
                           TableKeys* keys) {
  const size_t d = static_cast<size_t>(dim);
  return ForEachCoefficient(scale, counts, table, *keys, [&](size_t k, float c) {
    float* g = keys->grads.data() + k * d;
    const float* w = keys->rows.data() + k * d;
    for (size_t i = 0; i < d; ++i) g[i] += c * w[i];
  });
}

Status MiniBatchAwareL2Coefficients(float scale, const IdCounts& counts, size_t table,
                                    TableKeys* keys) {
  keys->l2.resize(keys->keys.size());
  return ForEachCoefficient(scale, counts, table, *keys,
                            [&](size_t k, float c) { keys->l2[k] = c; });
}

}  // namespace sift::worker
