// DienBlock: DIEN's interest extractor and evolver (model-spec 3.6) with its auxiliary loss (3.7),
// the part SIM and DIEN share: a GRU over the short history e_short [B, T_S, I], a PReLU projection
// of the target q [B, I] to the GRU width H, the attention unit (an MLP over the features of the
// projected query and every GRU state) softmaxed over the short mask, and an AUGRU whose final
// state d [B, H] is the block's output; the aux net scores [h_t; e_{t+1}] against
// [h_t; e-_{t+1}] (negatives e_neg). Over the op API; parameters in the model's flat layout.
#pragma once

#include <cstdint>

#include "worker/models/block.h"
#include "worker/models/layers.h"
#include "worker/models/model.h"

namespace sift::worker::models {

class DienBlock {
 public:
  // For up to max_batch rows of item width I = item_width, GRU width `hidden`, T_S = short_len.
  DienBlock(int64_t max_batch, int item_width, int hidden, int short_len);

  // Registers "aux_mlp/", "gru/{input_kernel,recurrent_kernel,input_bias,recurrent_bias}",
  // "query_dense/{kernel,bias,prelu_slope}", "attention_mlp/", "augru/{gate_kernel,gate_bias,
  // candidate_kernel,candidate_bias}" in this order (worker/README.md) and plans its activations.
  void Build(const ModelConfig& config, ParamRegistry* registry, BufferPlan* plan);
  int64_t WorkspaceFloats() const;
  Status Allocate(kernels::Backend* be);  // its MLPs' activations (after the plan's Allocate)

  // The final AUGRU state of every row -> dst [B, H] (row stride lddst).
  void Forward(const Pass& p, const float* q, const float* e_short, const float* short_mask,
               float* dst, int64_t lddst);
  // The aux pairs of the last Forward; returns the masked sum of their losses (unnormalised: the
  // model divides by B * (T_S - 1)).
  double AuxForward(const Pass& p, const float* e_short, const float* e_neg,
                    const float* short_mask);

  // The gradient of the output d, [B, H]: the caller writes it before Backward.
  float* output_grad() { return dd_.data(); }
  // Backward of the last Forward (and, with_aux, of its AuxForward at loss scale aux_scale):
  // parameter gradients += into p.grads, dq += [B, I], de_short += [B, T_S, I]; with_aux also
  // de_neg = [B, T_S, I] (written, slot 0 zero).
  void Backward(const Pass& p, const float* q, const float* e_short, const float* short_mask,
                bool with_aux, float aux_scale, float* dq, float* de_short, float* de_neg);

 private:
  const int64_t max_batch_;
  const int I_, H_, TS_;
  int64_t gru_w_in_ = 0, gru_w_rec_ = 0, gru_b_in_ = 0, gru_b_rec_ = 0;
  int64_t query_w_ = 0, query_b_ = 0, query_slope_ = 0;
  int64_t augru_gw_ = 0, augru_gb_ = 0, augru_cw_ = 0, augru_cb_ = 0;
  Mlp attention_mlp_, aux_mlp_;
  Buf h_, gru_cache_, qp_pre_, qp_, beta_, hs_, augru_cache_, aux_in_, aux_mask_;
  Buf dh_, dd_, dbeta_, dscores_, dqp_, daux_in_, daux_logits_;
  const float* aux_logits_ = nullptr;  // [2N]: positives then negatives
};

}  // namespace sift::worker::models
