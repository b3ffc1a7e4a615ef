#include "worker/models/dien_block.h"

#include <algorithm>

namespace sift::worker::models {

using kernels::Activation;
using kernels::DenseDims;
using kernels::RnnDims;

DienBlock::DienBlock(int64_t max_batch, int item_width, int hidden, int short_len)
    : max_batch_(max_batch), I_(item_width), H_(hidden), TS_(short_len) {}

void DienBlock::Build(const ModelConfig& config, ParamRegistry* registry, BufferPlan* plan) {
  const int64_t B = max_batch_;
  const int64_t N = B * (TS_ - 1);  // aux pairs
  aux_mlp_.Build("aux_mlp", H_ + I_, config.aux_mlp, Activation::kSigmoid, 2 * N, registry);
  gru_w_in_ = registry->Add("gru/input_kernel", {I_, 3 * H_}, InitKind::kGlorotUniform);
  gru_w_rec_ = registry->Add("gru/recurrent_kernel", {H_, 3 * H_}, InitKind::kOrthogonal);
  gru_b_in_ = registry->Add("gru/input_bias", {3 * H_}, InitKind::kConstant, 0.0f);
  gru_b_rec_ = registry->Add("gru/recurrent_bias", {3 * H_}, InitKind::kConstant, 0.0f);
  query_w_ = registry->Add("query_dense/kernel", {I_, H_}, InitKind::kGlorotUniform);
  query_b_ = registry->Add("query_dense/bias", {H_}, InitKind::kConstant, 0.0f);
  query_slope_ = registry->Add("query_dense/prelu_slope", {H_}, InitKind::kConstant, 0.1f);
  attention_mlp_.Build("attention_mlp", 4 * H_, config.attention_mlp, Activation::kSigmoid, B * TS_,
                       registry);
  attention_mlp_.SetFeatureInput(TS_, H_);  // its input: the features of qp and every h_t
  augru_gw_ = registry->Add("augru/gate_kernel", {2 * H_, 2 * H_}, InitKind::kGlorotUniform);
  augru_gb_ = registry->Add("augru/gate_bias", {2 * H_}, InitKind::kConstant, 1.0f);
  augru_cw_ = registry->Add("augru/candidate_kernel", {2 * H_, H_}, InitKind::kGlorotUniform);
  augru_cb_ = registry->Add("augru/candidate_bias", {H_}, InitKind::kConstant, 0.0f);

  const RnnDims gru{B, TS_, I_, H_}, augru{B, TS_, H_, H_};
  plan->Add(&h_, B * TS_ * H_);
  plan->Add(&gru_cache_, kernels::GruCacheFloats(gru));
  plan->Add(&qp_pre_, B * H_);
  plan->Add(&qp_, B * H_);
  plan->Add(&beta_, B * TS_);
  plan->Add(&hs_, B * TS_ * H_);
  plan->Add(&augru_cache_, kernels::AugruCacheFloats(augru));
  plan->Add(&aux_in_, 2 * N * (H_ + I_));
  plan->Add(&aux_mask_, N);
  plan->Add(&dh_, B * TS_ * H_);
  plan->Add(&dd_, B * H_);
  plan->Add(&dbeta_, B * TS_);
  plan->Add(&dscores_, B * TS_);
  plan->Add(&dqp_, B * H_);
  plan->Add(&daux_in_, 2 * N * (H_ + I_));
  plan->Add(&daux_logits_, 2 * N);
}

int64_t DienBlock::WorkspaceFloats() const {
  const RnnDims gru{max_batch_, TS_, I_, H_}, augru{max_batch_, TS_, H_, H_};
  return std::max(
      {aux_mlp_.WorkspaceFloats(), attention_mlp_.WorkspaceFloats(),
       kernels::GruWorkspaceFloats(gru), kernels::AugruWorkspaceFloats(augru),
       kernels::DenseWorkspaceFloats(DenseDims{max_batch_, I_, H_, Activation::kPrelu})});
}

Status DienBlock::Allocate(kernels::Backend* be) {
  SIFT_RETURN_IF_ERROR(attention_mlp_.Allocate(be));
  return aux_mlp_.Allocate(be);
}

void DienBlock::Forward(const Pass& p, const float* q, const float* e_short,
                        const float* short_mask, float* dst, int64_t lddst) {
  kernels::Backend* be = p.be;
  const int64_t B = p.batch;
  const float* params = p.params;
  const RnnDims gru{B, TS_, I_, H_}, augru{B, TS_, H_, H_};
  be->GruForward(gru, e_short, params + gru_w_in_, params + gru_w_rec_, params + gru_b_in_,
                 params + gru_b_rec_, h_.data(), gru_cache_.data(), p.workspace);
  be->DenseForward(DenseDims{B, I_, H_, Activation::kPrelu}, q, I_, params + query_w_,
                   params + query_b_, params + query_slope_, qp_pre_.data(), qp_.data());
  const float* scores =
      attention_mlp_.ForwardFeatures(be, B, qp_.data(), h_.data(), params, p.workspace);
  be->MaskedSoftmaxForward(B, TS_, scores, short_mask, beta_.data());
  be->AugruForward(augru, h_.data(), beta_.data(), params + augru_gw_, params + augru_gb_,
                   params + augru_cw_, params + augru_cb_, hs_.data(), augru_cache_.data(),
                   p.workspace);
  // d = the last AUGRU state.
  be->Copy(B, 1, H_, hs_.data() + (TS_ - 1) * H_, TS_ * H_, 0, dst, lddst, 0, false);
}

double DienBlock::AuxForward(const Pass& p, const float* e_short, const float* e_neg,
                             const float* short_mask) {
  kernels::Backend* be = p.be;
  const int64_t B = p.batch, N = B * (TS_ - 1);
  const int W = H_ + I_;
  float* pos = aux_in_.data();
  float* neg = aux_in_.data() + N * W;
  // Pair (b, t), t < T_S - 1, is row b * (T_S - 1) + t: [h_t ; e_{t+1}] and [h_t ; e-_{t+1}].
  for (float* dst : {pos, neg}) {
    be->Copy(B, TS_ - 1, H_, h_.data(), TS_ * H_, H_, dst, (TS_ - 1) * W, W, false);
  }
  be->Copy(B, TS_ - 1, I_, e_short + I_, TS_ * I_, I_, pos + H_, (TS_ - 1) * W, W, false);
  be->Copy(B, TS_ - 1, I_, e_neg + I_, TS_ * I_, I_, neg + H_, (TS_ - 1) * W, W, false);
  // Pair mask = the short mask of slot t + 1.
  be->Copy(B, 1, TS_ - 1, short_mask + 1, TS_, 0, aux_mask_.data(), TS_ - 1, 0, false);
  aux_logits_ = aux_mlp_.Forward(be, 2 * N, aux_in_.data(), W, p.params);
  return be->AuxLoss(N, aux_logits_, aux_logits_ + N, aux_mask_.data(), 1.0f, nullptr, nullptr);
}

void DienBlock::Backward(const Pass& p, const float* q, const float* e_short,
                         const float* short_mask, bool with_aux, float aux_scale, float* dq,
                         float* de_short, float* de_neg) {
  kernels::Backend* be = p.be;
  const int64_t B = p.batch;
  const float* params = p.params;
  float* grads = p.grads;
  float* ws = p.workspace;
  const RnnDims gru{B, TS_, I_, H_}, augru{B, TS_, H_, H_};
  be->Fill(B * TS_ * H_, 0.0f, dh_.data());
  be->Fill(B * TS_, 0.0f, dbeta_.data());
  be->AugruBackward(augru, h_.data(), beta_.data(), params + augru_gw_, params + augru_cw_,
                    hs_.data(), augru_cache_.data(), dd_.data(), dh_.data(), dbeta_.data(),
                    grads + augru_gw_, grads + augru_gb_, grads + augru_cw_, grads + augru_cb_, ws);
  be->Fill(B * TS_, 0.0f, dscores_.data());
  be->MaskedSoftmaxBackward(B, TS_, beta_.data(), short_mask, dbeta_.data(), dscores_.data());
  be->Fill(B * H_, 0.0f, dqp_.data());
  attention_mlp_.BackwardFeatures(be, B, qp_.data(), h_.data(), params, dscores_.data(), grads,
                                  dqp_.data(), dh_.data(), ws);
  be->DenseBackward(DenseDims{B, I_, H_, Activation::kPrelu}, q, I_, params + query_w_,
                    params + query_slope_, qp_pre_.data(), qp_.data(), dqp_.data(), dq, I_,
                    grads + query_w_, grads + query_b_, grads + query_slope_, ws);
  if (with_aux) {
    const int64_t N = B * (TS_ - 1);
    const int W = H_ + I_;
    be->Fill(2 * N, 0.0f, daux_logits_.data());
    be->AuxLoss(N, aux_logits_, aux_logits_ + N, aux_mask_.data(), aux_scale, daux_logits_.data(),
                daux_logits_.data() + N);
    be->Fill(2 * N * W, 0.0f, daux_in_.data());
    aux_mlp_.Backward(be, 2 * N, aux_in_.data(), W, params, daux_logits_.data(), grads,
                      daux_in_.data(), W, ws);
    const float* dpos = daux_in_.data();
    const float* dneg = daux_in_.data() + N * W;
    for (const float* src : {dpos, dneg}) {
      be->Copy(B, TS_ - 1, H_, src, (TS_ - 1) * W, W, dh_.data(), TS_ * H_, H_, true);
    }
    be->Copy(B, TS_ - 1, I_, dpos + H_, (TS_ - 1) * W, W, de_short + I_, TS_ * I_, I_, true);
    be->Fill(B * TS_ * I_, 0.0f, de_neg);
    be->Copy(B, TS_ - 1, I_, dneg + H_, (TS_ - 1) * W, W, de_neg + I_, TS_ * I_, I_, false);
  }
  be->GruBackward(gru, e_short, params + gru_w_in_, params + gru_w_rec_, h_.data(),
                  gru_cache_.data(), dh_.data(), de_short, grads + gru_w_in_, grads + gru_w_rec_,
                  grads + gru_b_in_, grads + gru_b_rec_, ws);
}

}  // namespace sift::worker::models
