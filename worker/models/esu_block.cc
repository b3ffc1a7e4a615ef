#include "worker/models/esu_block.h"

#include "common/data/batch.h"

namespace sift::worker::models {

EsuBlock::EsuBlock(int64_t max_batch, int64_t resident, int slots, int item_width, int dim,
                   bool time)
    : max_batch_(max_batch),
      resident_(resident),
      TL_(slots),
      I_(item_width),
      D_(dim),
      time_(time),
      Ie_(item_width + (time ? dim : 0)) {}

void EsuBlock::Build(ParamRegistry* registry, BufferPlan* plan) {
  const int64_t B = max_batch_;
  plan->Add(&alpha2_, B * TL_);
  if (!time_) return;
  time_table_ =
      registry->Add("time_embedding/table", {data::kTimeBuckets, D_}, InitKind::kGlorotUniform);
  time_query_ = registry->Add("time_embedding/query", {D_}, InitKind::kConstant, 0.0f);
  plan->Add(&qe_, B * Ie_);
  plan->Add(&dqe_, B * Ie_);
  plan->Add(&xe_, resident_ * TL_ * Ie_);
  plan->Add(&dxe_, resident_ * TL_ * Ie_);
  plan->Add(&zeros_, B);  // int32 zeros: every row's query gradient into the one query row
}

Status EsuBlock::Init(kernels::Backend* be) {
  if (time_) be->Fill(max_batch_, 0.0f, zeros_.data());  // int32 0 has float 0's bits
  return absl::OkStatus();
}

void EsuBlock::PrepareQuery(const Pass& p, const float* q) {
  if (!time_) return;
  const int64_t B = p.batch;
  p.be->Copy(1, B, I_, q, 0, I_, qe_.data(), 0, Ie_, false);
  p.be->Copy(B, 1, D_, p.params + time_query_, 0, 0, qe_.data() + I_, Ie_, 0, false);
}

void EsuBlock::PrepareSlots(const Pass& p, const float* x_long, const SlotChunk& k) {
  if (!time_) return;
  const int64_t n = k.slots();
  p.be->Copy(1, n, I_, x_long, 0, I_, xe_.data(), 0, Ie_, false);
  // Padding slots (bucket -1) get zeros, as their item vectors.
  p.be->GatherRows(n, D_, p.params + time_table_, k.time, nullptr, xe_.data() + I_, Ie_);
}

void EsuBlock::Forward(const Pass& p, const float* q, const float* x_long, const float* rho,
                       const SlotChunk& k, float* z, int64_t ldz) {
  // With the time embedding the ESU attends over [x; tau] with the query [q; u] (Ie_ wide).
  const float* query = time_ ? qe_.data() : q;
  const float* x = time_ ? xe_.data() : x_long;
  float* zb = z + k.b0 * ldz;
  p.be->DotAttentionForward(k.c, k.width, Ie_, query + k.b0 * Ie_, Ie_, x, rho,
                            alpha2_.data() + k.offset, zb, ldz);
  p.be->DampedMeanForward(k.c, k.width, Ie_, x, rho, zb + Ie_, ldz);
}

void EsuBlock::BeginBackward(const Pass& p) {
  if (time_) p.be->Fill(p.batch * Ie_, 0.0f, dqe_.data());
}

void EsuBlock::Backward(const Pass& p, const float* q, const float* x_long, const float* rho,
                        const SlotChunk& k, const float* dz, int64_t ldz, float* dq,
                        float* dx_long) {
  kernels::Backend* be = p.be;
  const float* dzb = dz + k.b0 * ldz;
  const float* alpha = alpha2_.data() + k.offset;
  if (!time_) {
    be->DotAttentionBackward(k.c, k.width, I_, q + k.b0 * I_, I_, x_long, rho, alpha, dzb, ldz,
                             dq + k.b0 * I_, I_, dx_long);
    be->DampedMeanBackward(k.c, k.width, I_, rho, dzb + I_, ldz, dx_long);
    return;
  }
  const int64_t n = k.slots();
  be->Fill(n * Ie_, 0.0f, dxe_.data());
  be->DotAttentionBackward(k.c, k.width, Ie_, qe_.data() + k.b0 * Ie_, Ie_, xe_.data(), rho, alpha,
                           dzb, ldz, dqe_.data() + k.b0 * Ie_, Ie_, dxe_.data());
  be->DampedMeanBackward(k.c, k.width, Ie_, rho, dzb + Ie_, ldz, dxe_.data());
}

void EsuBlock::ScatterSlotGrads(const Pass& p, const SlotChunk& k, float* dx_long) {
  if (!time_) return;
  // [dx; dtau]: the item part into the slots' gradient, tau's into the table rows.
  const int64_t n = k.slots();
  p.be->Copy(1, n, I_, dxe_.data(), 0, Ie_, dx_long, 0, I_, true);
  p.be->SegmentSumRows(n, D_, dxe_.data() + I_, Ie_, k.time, nullptr, data::kTimeBuckets,
                       p.grads + time_table_);
}

void EsuBlock::FinishBackward(const Pass& p, float* dq) {
  if (!time_) return;
  const int64_t B = p.batch;
  p.be->Copy(1, B, I_, dqe_.data(), 0, Ie_, dq, 0, I_, true);
  p.be->SegmentSumRows(B, D_, dqe_.data() + I_, Ie_, zeros_.ints(), nullptr, 1,
                       p.grads + time_query_);
}

}  // namespace sift::worker::models
