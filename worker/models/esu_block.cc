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

void EsuBlock::PrepareSlots(const Pass& p, const float* x_long, const int32_t* long_time,
                            int64_t b0, int64_t c) {
  if (!time_) return;
  const int64_t n = c * TL_;
  p.be->Copy(1, n, I_, x_long, 0, I_, xe_.data(), 0, Ie_, false);
  // Padding slots (bucket -1) get zeros, as their item vectors.
  p.be->GatherRows(n, D_, p.params + time_table_, long_time + b0 * TL_, nullptr, xe_.data() + I_,
                   Ie_);
}

void EsuBlock::Forward(const Pass& p, const float* q, const float* x_long, const float* rho,
                       int64_t b0, int64_t c, float* z, int64_t ldz) {
  // With the time embedding the ESU attends over [x; tau] with the query [q; u] (Ie_ wide).
  const float* query = time_ ? qe_.data() : q;
  const float* x = time_ ? xe_.data() : x_long;
  float* zb = z + b0 * ldz;
  p.be->DotAttentionForward(c, TL_, Ie_, query + b0 * Ie_, Ie_, x, rho + b0 * TL_,
                            alpha2_.data() + b0 * TL_, zb, ldz);
  p.be->DampedMeanForward(c, TL_, Ie_, x, rho + b0 * TL_, zb + Ie_, ldz);
}

void EsuBlock::BeginBackward(const Pass& p) {
  if (time_) p.be->Fill(p.batch * Ie_, 0.0f, dqe_.data());
}

void EsuBlock::Backward(const Pass& p, const float* q, const float* x_long, const float* rho,
                        const int32_t* long_time, int64_t b0, int64_t c, const float* dz,
                        int64_t ldz, float* dq, float* dx_long) {
  kernels::Backend* be = p.be;
  const float* r = rho + b0 * TL_;
  const float* dzb = dz + b0 * ldz;
  if (!time_) {
    be->DotAttentionBackward(c, TL_, I_, q + b0 * I_, I_, x_long, r, alpha2_.data() + b0 * TL_, dzb,
                             ldz, dq + b0 * I_, I_, dx_long);
    be->DampedMeanBackward(c, TL_, I_, r, dzb + I_, ldz, dx_long);
    return;
  }
  be->Fill(c * TL_ * Ie_, 0.0f, dxe_.data());
  be->DotAttentionBackward(c, TL_, Ie_, qe_.data() + b0 * Ie_, Ie_, xe_.data(), r,
                           alpha2_.data() + b0 * TL_, dzb, ldz, dqe_.data() + b0 * Ie_, Ie_,
                           dxe_.data());
  be->DampedMeanBackward(c, TL_, Ie_, r, dzb + Ie_, ldz, dxe_.data());
  // [dx; dtau]: the item part into the slots' gradient, tau's into the table rows.
  const int64_t n = c * TL_;
  be->Copy(1, n, I_, dxe_.data(), 0, Ie_, dx_long, 0, I_, true);
  be->SegmentSumRows(n, D_, dxe_.data() + I_, Ie_, long_time + b0 * TL_, nullptr,
                     data::kTimeBuckets, p.grads + time_table_);
}

void EsuBlock::FinishBackward(const Pass& p, float* dq) {
  if (!time_) return;
  const int64_t B = p.batch;
  p.be->Copy(1, B, I_, dqe_.data(), 0, Ie_, dq, 0, I_, true);
  p.be->SegmentSumRows(B, D_, dqe_.data() + I_, Ie_, zeros_.ints(), nullptr, 1,
                       p.grads + time_query_);
}

}  // namespace sift::worker::models
