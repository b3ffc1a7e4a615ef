#include "worker/models/soft_gsu_block.h"

namespace sift::worker::models {

SoftGsuBlock::SoftGsuBlock(int64_t max_batch, int slots, int item_width, int user_width, int top_k)
    : max_batch_(max_batch),
      TL_(slots),
      I_(item_width),
      P_(user_width),
      K_(top_k),
      z1w_(2 * item_width + user_width) {}

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

void SoftGsuBlock::Attend(const Pass& p, const float* q, const float* x_long, const SlotChunk& k) {
  // g = Attn(q, long, m_L) -> z1's g columns.
  p.be->DotAttentionForward(k.c, k.width, I_, q + k.b0 * I_, I_, x_long, k.mask,
                            alpha_.data() + k.offset, z1_.data() + k.b0 * z1w_ + I_, z1w_);
}

void SoftGsuBlock::Finish(const Pass& p, const float* q, const float* user,
                          std::optional<uint64_t> dropout_seed,
                          absl::Span<const SlotChunk> chunks) {
  const int64_t B = p.batch;
  float* z1 = z1_.data();
  p.be->Copy(1, B, I_, q, 0, I_, z1, 0, z1w_, false);
  p.be->Copy(1, B, P_, user, 0, P_, z1 + 2 * I_, 0, z1w_, false);
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
  be->Copy(1, B, P_, dz1 + 2 * I_, 0, z1w_, duser, 0, P_, true);
}

void SoftGsuBlock::AttendBackward(const Pass& p, const float* q, const float* x_long,
                                  const SlotChunk& k, float* dq, float* dx_long) {
  p.be->DotAttentionBackward(k.c, k.width, I_, q + k.b0 * I_, I_, x_long, k.mask,
                             alpha_.data() + k.offset, dz1_.data() + k.b0 * z1w_ + I_, z1w_,
                             dq + k.b0 * I_, I_, dx_long);
}

}  // namespace sift::worker::models
