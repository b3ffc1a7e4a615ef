// Model selection on the validation split (training.keep_best, training.patience; docs/training.md
// "Model selection"): which epoch's model a run keeps, and when it stops early. One rule, used by
// the trainer (every rank, on the validation AUC every rank computes from the same gathered
// predictions) and by the coordinator (on the AUC it computes from the same predictions), so both
// decide alike without a message between them.
//
//   - an epoch improves iff its validation AUC is strictly above the best so far (the first
//     finite one always does; NaN never does): ties keep the earlier, smaller model;
//   - with patience P >= 1 training stops after epoch e when e - best_epoch >= P (P epochs in a
//     row without improvement); P = 0 never stops early.
// The kept model is the best epoch's (keep_best) or the last epoch's; the run reports the kept
// epoch's test AUC.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/dllogger.h"

namespace sift {

struct ModelSelection {
  int64_t best_epoch = -1;  // -1: no epoch evaluated yet
  double best_validation_auc = 0;
  double best_test_auc = 0;
  double best_test_loss = 0;

  // Records epoch `epoch`'s AUCs; returns whether it is the new best.
  bool Update(int64_t epoch, double validation_auc, double test_auc, double test_loss) {
    if (!std::isfinite(validation_auc)) return false;
    if (best_epoch >= 0 && !(validation_auc > best_validation_auc)) return false;
    best_epoch = epoch;
    best_validation_auc = validation_auc;
    best_test_auc = test_auc;
    best_test_loss = test_loss;
    return true;
  }
  // Whether training stops after `epoch` (the last one recorded) for `patience`.
  bool ShouldStop(int64_t epoch, int patience) const {
    return patience > 0 && best_epoch >= 0 && epoch - best_epoch >= patience;
  }
};

// The final DLLL record's model-selection fields (sift train's and the coordinator's), for a run
// with a validation split (else `m` stays as it is): `last_test_auc` (the last epoch's), and with
// keep_best `test_auc`/`test_loss` replaced by the kept (best) epoch's; then `kept_epoch`,
// `best_epoch`, `best_validation_auc` and `epochs_trained` (fewer than planned when patience
// stopped the run).
void AppendSelectionMetrics(const ModelSelection& selection, bool keep_best, int64_t kept_epoch,
                            int64_t last_epoch, bool has_validation, DllMetrics* m);

}  // namespace sift
