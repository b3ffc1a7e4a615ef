#include "common/model_selection.h"

#include <limits>

namespace sift {

void AppendSelectionMetrics(const ModelSelection& sel, bool keep_best, int64_t kept_epoch,
                            int64_t last_epoch, bool has_validation, DllMetrics* m) {
  if (!has_validation) return;
  const bool best = keep_best && sel.best_epoch >= 0;
  double last_test_auc = std::numeric_limits<double>::quiet_NaN();
  for (auto& [name, value] : *m) {
    if (name == "test_auc") {
      last_test_auc = value;
      if (best) value = sel.best_test_auc;
    }
    if (name == "test_loss" && best) value = sel.best_test_loss;
  }
  m->emplace_back("last_test_auc", last_test_auc);
  m->emplace_back("kept_epoch", static_cast<double>(kept_epoch));
  m->emplace_back("best_epoch", static_cast<double>(sel.best_epoch));
  m->emplace_back("best_validation_auc", sel.best_validation_auc);
  m->emplace_back("epochs_trained", static_cast<double>(last_epoch + 1));
}

}  // namespace sift
