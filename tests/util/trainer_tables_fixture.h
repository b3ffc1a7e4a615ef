// Shared inputs of the TrainerTables tests (worker/trainer_tables.h): two tables of dim 4 and a
// batch's keys for them, with gradients that depend on the key.
#pragma once

#include <cstdint>
#include <vector>

#include "server/embedding/table.h"
#include "worker/batch_keys.h"

namespace sift::testing {

inline constexpr int kTablesDim = 4;

inline std::vector<embedding::TableConfig> TwoTables() {
  std::vector<embedding::TableConfig> t(2);
  for (uint32_t i = 0; i < 2; ++i) {
    t[i].table_id = i;
    t[i].name = i == 0 ? "user_feat_0" : "item_feat_0";
    t[i].dim = kTablesDim;
    t[i].cardinality = 1000;
  }
  return t;
}

// Sorted unique keys per table (as BuildBatchKeys makes them), rows and grads sized.
inline worker::BatchKeys KeysOf(const std::vector<std::vector<uint64_t>>& per_table) {
  worker::BatchKeys k;
  k.num_user_features = 1;
  k.num_item_features = static_cast<int>(per_table.size()) - 1;
  for (const std::vector<uint64_t>& keys : per_table) {
    worker::TableKeys tk;
    tk.keys = keys;
    tk.rows.assign(keys.size() * kTablesDim, -1.0f);
    tk.grads.resize(keys.size() * kTablesDim);
    for (size_t i = 0; i < tk.grads.size(); ++i) {
      tk.grads[i] = 0.01f * static_cast<float>((keys[i / kTablesDim] + i) % 7) - 0.03f;
    }
    k.tables.push_back(std::move(tk));
  }
  return k;
}

}  // namespace sift::testing
