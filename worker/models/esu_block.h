// EsuBlock: SIM's Exact Search Unit (model-spec 3.4, 3.5) — a dot-product attention of the target
// over the selected long slots and their damped mean, the two outputs a and v written into the
// classifier input — with the optional time-interval embedding (SIM paper 4.2, docs/training.md
// "Lifelong sequences"): each slot's time bucket looks up a D-wide row of "time_embedding/table",
// which is concatenated to the slot's item vector, and the query becomes [q; u] with a learned
// "time_embedding/query" u; a and v are then I + D wide. The slots are resident one chunk at a
// time (SlotChunk, block.h; one chunk for the whole batch unless the soft search streams):
// PrepareSlots, Forward and Backward take one chunk; the batch-wide arrays (q, z, dq) are indexed
// by the sample, the slot arrays (x_long, dx_long, the chunk's rho and time buckets) by the slot
// within the chunk, and the attention weights are ragged (each chunk's at its offset).
#pragma once

#include <cstdint>

#include "worker/models/block.h"
#include "worker/models/layers.h"

namespace sift::worker::models {

class EsuBlock {
 public:
  // For up to max_batch rows with the slots of up to `resident` samples at once, T_L = slots
  // per sample, item width I = item_width (F * D), D = dim; `time`: with the time embedding.
  EsuBlock(int64_t max_batch, int64_t resident, int slots, int item_width, int dim, bool time);

  // Registers "time_embedding/{table [kTimeBuckets, D], query [D]}" (with the time embedding;
  // nothing otherwise) and plans the activations.
  void Build(ParamRegistry* registry, BufferPlan* plan);
  Status Init(kernels::Backend* be);  // after the plan's Allocate
  int width() const { return Ie_; }   // of a and of v: I, or I + D with the time embedding

  // Per pass, before any slots: the ESU query of every row ([q; u] with the time embedding).
  void PrepareQuery(const Pass& p, const float* q);
  // The slots of chunk k, x_long [c, width, I] (with the time embedding: their [x; tau] rows,
  // tau from the chunk's buckets k.time, -1 = padding -> zeros).
  void PrepareSlots(const Pass& p, const float* x_long, const SlotChunk& k);
  // The attention (3.4) and damped mean (3.5) of chunk k's samples over its prepared slots with
  // slot mask rho [c, width] -> z's columns [0, width()) (a) and [width(), 2 width()) (v), row
  // stride ldz (z indexed by sample).
  void Forward(const Pass& p, const float* q, const float* x_long, const float* rho,
               const SlotChunk& k, float* z, int64_t ldz);

  // The prepared slots of the current chunk as the ESU attends over them, [c, width, width()]:
  // x_long itself, or [x; tau] with the time embedding (the soft GSU's time term reads them too).
  const float* Slots(const float* x_long) const { return time_ ? xe_.data() : x_long; }

  // Backward, per pass: BeginBackward, then for each chunk (after its PrepareSlots when the slots
  // were not kept) Backward and ScatterSlotGrads, then FinishBackward. dz is z's gradient (same
  // layout); dq += [B, I] (FinishBackward adds the query part with the time embedding). Backward
  // adds the chunk's slot gradients into SlotGrads(dx_long) (same layout as Slots; zeroed first
  // with the time embedding), where the soft GSU's time term adds its own before
  // ScatterSlotGrads: dx_long += [c, width, I] of the chunk, tau's into p.grads (no-op without
  // the time embedding).
  void BeginBackward(const Pass& p);
  float* SlotGrads(float* dx_long) const { return time_ ? dxe_.data() : dx_long; }
  void Backward(const Pass& p, const float* q, const float* x_long, const float* rho,
                const SlotChunk& k, const float* dz, int64_t ldz, float* dq, float* dx_long);
  void ScatterSlotGrads(const Pass& p, const SlotChunk& k, float* dx_long);
  void FinishBackward(const Pass& p, float* dq);

 private:
  const int64_t max_batch_, resident_;
  const int TL_, I_, D_;
  const bool time_;
  const int Ie_;
  int64_t time_table_ = 0, time_query_ = 0;  // parameter offsets
  Buf alpha2_;                               // attention weights, ragged (at most B * T_L)
  Buf qe_, xe_, dqe_, dxe_, zeros_;          // the time embedding's
};

}  // namespace sift::worker::models
