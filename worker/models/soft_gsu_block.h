// SoftGsuBlock: SIM's soft-search General Search Unit (model-spec 3.2, 3.3) — a parameter-free
// dot-product attention of the target q over every long slot, whose pooled vector g feeds the
// GSU head (an MLP over z1 = [q; g; p] with its own BCE loss), and whose weights' top_k select
// the ESU's slots (the mask rho). The attention runs chunk by chunk over resident slots
// (SlotChunk, block.h; one chunk for the whole batch on the dense path): Attend and AttendBackward
// take one chunk, x_long / dx_long its [c, width, I] slots; the batch-wide arrays (q, dq) are
// indexed by the sample, the attention weights and rho are ragged (each chunk's [c, width] at its
// offset).
//
// With the GSU time term (ModelConfig::gsu_time, docs/training.md "Lifelong sequences") the
// attention runs over the ESU's [x; tau] slots (EsuBlock::Slots: the time embedding's rows, shared)
// with the query [q; u_g] — u_g the GSU's own learned "gsu_time/query" [D], 0 at initialisation —
// so each score gains a learned per-bucket recency term u_g . tau and the top-k can prefer recent
// events; g is then I + D wide. Without it the block is the reference's, op for op.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/types/span.h"

#include "worker/models/block.h"
#include "worker/models/layers.h"
#include "worker/models/model.h"

namespace sift::worker::models {

class SoftGsuBlock {
 public:
  // For up to max_batch rows, T_L = slots, item width I, user width P, top_k = K; time_dim D > 0:
  // with the GSU time term (slots I + D wide), 0 without.
  SoftGsuBlock(int64_t max_batch, int slots, int item_width, int user_width, int top_k,
               int time_dim);

  // Registers "gsu_mlp/" (first in the layout) with the config's dropout; plans.
  void Build(const ModelConfig& config, ParamRegistry* registry, BufferPlan* plan);
  // With the time term: registers "gsu_time/query" [D] (last in the layout, after the ESU's
  // time embedding) and plans its buffers; nothing without it.
  void BuildTimeTerm(ParamRegistry* registry, BufferPlan* plan);
  int64_t WorkspaceFloats() const { return head_.WorkspaceFloats(); }
  Status Allocate(kernels::Backend* be) { return head_.Allocate(be); }
  Status Init(kernels::Backend* be);      // after the plan's Allocate
  int slot_width() const { return Iw_; }  // of the attended slots: I, or I + D with the time term

  // Forward: PrepareQuery, Attend every chunk (with its slot mask; x_long [c, width,
  // slot_width()] — the ESU's [x; tau] with the time term), then Finish over the same chunks.
  void PrepareQuery(const Pass& p, const float* q);
  void Attend(const Pass& p, const float* x_long, const SlotChunk& k);
  // z1 = [q; g; p] -> the head's logit (dropout under dropout_seed), and each chunk's top-k mask
  // rho (within its window: the slots outside it are padding, never selected).
  void Finish(const Pass& p, const float* q, const float* user,
              std::optional<uint64_t> dropout_seed, absl::Span<const SlotChunk> chunks);
  const float* logit() const { return logit_; }  // [B], the GSU head's
  // [c, width]: chunk k's ESU slot mask.
  const float* rho(const SlotChunk& k) const { return rho_.data() + k.offset; }

  // Backward: HeadBackward (the head's BCE at scale cls_scale: dq +=, duser +=, the head's
  // parameter gradients), then AttendBackward of every chunk (dx_long += of the chunk, same
  // layout as Attend's; dq += without the time term), then FinishBackward (dq += the query's
  // gradient and u_g's with the time term).
  void HeadBackward(const Pass& p, const float* labels, float cls_scale, float* dq, float* duser);
  void AttendBackward(const Pass& p, const float* x_long, const SlotChunk& k, float* dq,
                      float* dx_long);
  void FinishBackward(const Pass& p, float* dq);

 private:
  const int64_t max_batch_;
  const int TL_, I_, P_, K_, D_;
  const int Iw_;   // slot and query width: I, or I + D with the time term
  const int z1w_;  // [q; g; p]
  Mlp head_;
  Buf alpha_, rho_, z1_, dz1_, dlogit_;  // alpha_, rho_: ragged, at most B * T_L
  Buf qg_, dqg_, zeros_;                 // the time term's query [q; u_g], its gradient
  int64_t time_query_ = 0;               // u_g's parameter offset
  const float* query_ = nullptr;         // the attention's: q, or qg_
  const float* logit_ = nullptr;
};

}  // namespace sift::worker::models
