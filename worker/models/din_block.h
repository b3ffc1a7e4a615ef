// DinBlock: DIN's local activation unit as the reference builds it (model-spec 8): the long then
// the short history in time order form one history [B, T_L + T_S, I] with their masks, and a
// dot-product attention of the target q over it pools the user's interest g [B, I].
#pragma once

#include <cstdint>

#include "worker/models/block.h"

namespace sift::worker::models {

class DinBlock {
 public:
  // For up to max_batch rows, T_L long and T_S short slots, item width I.
  DinBlock(int64_t max_batch, int long_len, int short_len, int item_width);
  void Build(BufferPlan* plan);

  // g -> dst [B, I] (row stride lddst) from x_long [B, T_L, I], e_short [B, T_S, I] and their
  // masks.
  void Forward(const Pass& p, const float* q, const float* x_long, const float* e_short,
               const float* long_mask, const float* short_mask, float* dst, int64_t lddst);
  // Given dg (row stride lddg): dq +=, dx_long and de_short written (=).
  void Backward(const Pass& p, const float* q, const float* dg, int64_t lddg, float* dq,
                float* dx_long, float* de_short);

 private:
  const int64_t max_batch_;
  const int TL_, TS_, I_;
  Buf hist_, dhist_, hist_mask_, alpha_;
};

}  // namespace sift::worker::models
