// SoftGsuBlock: SIM's soft-search General Search Unit (model-spec 3.2, 3.3) — a parameter-free
// dot-product attention of the target q over every long slot, whose pooled vector g feeds the
// GSU head (an MLP over z1 = [q; g; p] with its own BCE loss), and whose weights' top_k select
// the ESU's slots (the mask rho). The attention may run chunk by chunk over resident slots (the
// streamed soft search): Attend and AttendBackward take samples [b0, b0 + c) with x_long / dx_long
// indexed by the sample within the chunk; the batch-wide arrays are indexed by the sample.
#pragma once

#include <cstdint>
#include <optional>

#include "worker/models/block.h"
#include "worker/models/layers.h"
#include "worker/models/model.h"

namespace sift::worker::models {

class SoftGsuBlock {
 public:
  // For up to max_batch rows, T_L = slots, item width I, user width P, top_k = K.
  SoftGsuBlock(int64_t max_batch, int slots, int item_width, int user_width, int top_k);

  // Registers "gsu_mlp/" (first in the layout) with the config's dropout; plans.
  void Build(const ModelConfig& config, ParamRegistry* registry, BufferPlan* plan);
  int64_t WorkspaceFloats() const { return head_.WorkspaceFloats(); }
  Status Allocate(kernels::Backend* be) { return head_.Allocate(be); }

  // Forward: Attend every chunk, then Finish. long_mask [B, T_L] is the batch's slot mask.
  void Attend(const Pass& p, const float* q, const float* x_long, const float* long_mask,
              int64_t b0, int64_t c);
  // z1 = [q; g; p] -> the head's logit (dropout under dropout_seed), and the top-k mask rho.
  void Finish(const Pass& p, const float* q, const float* user,
              std::optional<uint64_t> dropout_seed);
  const float* logit() const { return logit_; }     // [B], the GSU head's
  const float* rho() const { return rho_.data(); }  // [B, T_L], the ESU's slot mask

  // Backward: HeadBackward (the head's BCE at scale cls_scale: dq +=, duser +=, the head's
  // parameter gradients), then AttendBackward of every chunk (dq +=, dx_long += of the chunk).
  void HeadBackward(const Pass& p, const float* labels, float cls_scale, float* dq, float* duser);
  void AttendBackward(const Pass& p, const float* q, const float* x_long, const float* long_mask,
                      int64_t b0, int64_t c, float* dq, float* dx_long);

 private:
  const int64_t max_batch_;
  const int TL_, I_, P_, K_;
  const int z1w_;  // [q; g; p]
  Mlp head_;
  Buf alpha_, rho_, z1_, dz1_, dlogit_;
  const float* logit_ = nullptr;
};

}  // namespace sift::worker::models
