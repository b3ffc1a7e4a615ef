#include "worker/models/soft_gsu_block.h"

namespace sift::worker::models {

SoftGsuBlock::SoftGsuBlock(int64_t max_batch, int slots, int item_width, int user_width, int top_k,
                           int time_dim)
    : max_batch_(max_batch),
      TL_(slots),
      I_(item_width),
      P_(user_width),
      K_(top_k),
      D_(time_dim),
      Iw_(item_width + time_dim),
      z1w_(item_width + Iw_ + user_width) {}

void SoftGsuBlock::Build(const ModelConfig& config, ParamRegistry* registry, BufferPlan* plan) {
  const int64_t B = max_batch_;
  head_.Build("gsu_mlp", z1w_, config.stage_one_mlp, kernels::Activation::kPrelu, B, registry);
  head_.SetDropout(config.dropout);
  plan->Add(&alpha_, B * TL_);
  plan->Add(&rho_, B * TL_);
  plan->Add(&z1_, B * z1w_);
  plan->Add(&dz1_, B * z1w_);
  plan->Add(&dlogit_, B);
}

void SoftGsuBlock::BuildTimeTerm(ParamRegistry* registry, BufferPlan* plan) {
  if (D_ == 0) return;
  const int64_t B = max_batch_;
  time_query_ = registry->Add("gsu_time/query", {D_}, InitKind::kConstant, 0.0f);
  plan->Add(&qg_, B * Iw_);
  plan->Add(&dqg_, B * Iw_);
  plan->Add(&zeros_, B);  // int32 zeros: every row's query gradient into the one query row
}

Status SoftGsuBlock::Init(kernels::Backend* be) {
  if (D_ > 0) be->Fill(max_batch_, 0.0f, zeros_.data());  // int32 0 has float 0's bits
  return absl::OkStatus();
}

void SoftGsuBlock::PrepareQuery(const Pass& p, const float* q) {
  query_ = q;
  if (D_ == 0) return;
  const int64_t B = p.batch;
  p.be->Copy(1, B, I_, q, 0, I_, qg_.data(), 0, Iw_, false);
  p.be->Copy(B, 1, D_, p.params + time_query_, 0, 0, qg_.data() + I_, Iw_, 0, false);
  query_ = qg_.data();
}

void SoftGsuBlock::Attend(const Pass& p, const float* x_long, const SlotChunk& k) {
  // g = Attn(q, long, m_L) -> z1's g columns.
  p.be->DotAttentionForward(k.c, k.width, Iw_, query_ + k.b0 * Iw_, Iw_, x_long, k.mask,
                            alpha_.data() + k.offset, z1_.data() + k.b0 * z1w_ + I_, z1w_);
}

void SoftGsuBlock::Finish(const Pass& p, const float* q, const float* user,
                          std::optional<uint64_t> dropout_seed,
                          absl::Span<const SlotChunk> chunks) {
  const int64_t B = p.batch;
  float* z1 = z1_.data();
  p.be->Copy(1, B, I_, q, 0, I_, z1, 0, z1w_, false);
  p.be->Copy(1, B, P_, user, 0, P_, z1 + I_ + Iw_, 0, z1w_, false);
  logit_ = head_.Forward(p.be, B, z1, z1w_, p.params, dropout_seed);
  // Top-k (3.3) as a mask.
  for (const SlotChunk& k : chunks) {
    p.be->TopKMask(k.c, k.width, K_, alpha_.data() + k.offset, rho_.data() + k.offset);
  }
}

void SoftGsuBlock::HeadBackward(const Pass& p, const float* labels, float cls_scale, float* dq,
                                float* duser) {
  kernels::Backend* be = p.be;
  const int64_t B = p.batch;
  // dz1 = [dq; dg; dp].
  be->Fill(B, 0.0f, dlogit_.data());
  be->BceWithLogits(B, logit_, labels, cls_scale, dlogit_.data());
  be->Fill(B * z1w_, 0.0f, dz1_.data());
  head_.Backward(be, B, z1_.data(), z1w_, p.params, dlogit_.data(), p.grads, dz1_.data(), z1w_,
                 p.workspace);
  const float* dz1 = dz1_.data();
  be->Copy(1, B, I_, dz1, 0, z1w_, dq, 0, I_, true);
  be->Copy(1, B, P_, dz1 + I_ + Iw_, 0, z1w_, duser, 0, P_, true);
  if (D_ > 0) be->Fill(B * Iw_, 0.0f, dqg_.data());
}

void SoftGsuBlock::AttendBackward(const Pass& p, const float* x_long, const SlotChunk& k, float* dq,
                                  float* dx_long) {
  // With the time term the query's gradient collects in dqg_ (FinishBackward splits it).
  float* dquery = D_ > 0 ? dqg_.data() : dq;
  p.be->DotAttentionBackward(k.c, k.width, Iw_, query_ + k.b0 * Iw_, Iw_, x_long, k.mask,
                             alpha_.data() + k.offset, dz1_.data() + k.b0 * z1w_ + I_, z1w_,
                             dquery + k.b0 * Iw_, Iw_, dx_long);
}

void SoftGsuBlock::FinishBackward(const Pass& p, float* dq) {
  if (D_ == 0) return;
  const int64_t B = p.batch;
  p.be->Copy(1, B, I_, dqg_.data(), 0, Iw_, dq, 0, I_, true);
  p.be->SegmentSumRows(B, D_, dqg_.data() + I_, Iw_, zeros_.ints(), nullptr, 1,
                       p.grads + time_query_);
}

}  // namespace sift::worker::models
