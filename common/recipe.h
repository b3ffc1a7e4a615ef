// Training recipes (training.recipe, sift train --recipe; docs/training.md "Training recipes"):
// named sets of defaults for the fields that decide how well a model generalises. A field given
// explicitly (in the job spec, or as a flag) always wins over its recipe's value.
//   reference — the TF2 reference's recipe: no regularisation, no validation split, the last
//               epoch reported. Parity runs and the bit-identity tests use it.
//   sift      — what the search on `small` seed 1 found (docs/training.md "Training recipes"): the
//   DIN
//               paper's mini-batch-aware L2 on the embedding rows, dropout in the MLP heads, a
//               validation split of half the users (each gives only its last training pair,
//               about 1% of the training samples) choosing the best epoch, early stopping, and
//               a cosine learning-rate decay from twice the reference's rate (lr 0.02) to 0
//               over the run's steps (common/lr_schedule.h).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace sift {

struct Recipe {
  std::string name;
  double sparse_l2 = 0;                  // training.sparse_l2
  double dropout = 0;                    // model.dropout
  double validation_fraction = 0;        // training.validation_fraction
  std::string keep_best = "last";        // training.keep_best
  int patience = 0;                      // training.patience
  double lr = 0.01;                      // training.lr
  std::string lr_schedule = "constant";  // training.lr_schedule
};

// The recipe a spec or a sift train run gets when it names none.
inline constexpr char kDefaultRecipe[] = "reference";

inline const std::vector<Recipe>& Recipes() {
  static const std::vector<Recipe> recipes = {
      {"reference", 0, 0, 0, "last", 0, 0.01, "constant"},
      {"sift", 0.3, 0.1, 0.5, "validation_auc", 2, 0.02, "cosine"},
  };
  return recipes;
}

// INVALID_ARGUMENT naming the known recipes for an unknown name.
inline StatusOr<Recipe> FindRecipe(const std::string& name) {
  std::vector<std::string> names;
  for (const Recipe& r : Recipes()) {
    if (r.name == name) return r;
    names.push_back(r.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown recipe '", name, "' (known: ", absl::StrJoin(names, ", "), ")"));
}

}  // namespace sift
