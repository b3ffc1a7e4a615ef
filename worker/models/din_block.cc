#include "worker/models/din_block.h"

namespace sift::worker::models {

DinBlock::DinBlock(int64_t max_batch, int long_len, int short_len, int item_width)
    : max_batch_(max_batch), TL_(long_len), TS_(short_len), I_(item_width) {}

void DinBlock::Build(BufferPlan* plan) {
  const int64_t B = max_batch_, T = TL_ + TS_;
  plan->Add(&hist_, B * T * I_);
  plan->Add(&dhist_, B * T * I_);
  plan->Add(&hist_mask_, B * T);
  plan->Add(&alpha_, B * T);
}

void DinBlock::Forward(const Pass& p, const float* q, const float* x_long, const float* e_short,
                       const float* long_mask, const float* short_mask, float* dst, int64_t lddst) {
  kernels::Backend* be = p.be;
  const int64_t B = p.batch;
  const int T = TL_ + TS_;
  be->Copy(B, TL_, I_, x_long, TL_ * I_, I_, hist_.data(), T * I_, I_, false);
  be->Copy(B, TS_, I_, e_short, TS_ * I_, I_, hist_.data() + TL_ * I_, T * I_, I_, false);
  be->Copy(1, B, TL_, long_mask, 0, TL_, hist_mask_.data(), 0, T, false);
  be->Copy(1, B, TS_, short_mask, 0, TS_, hist_mask_.data() + TL_, 0, T, false);
  be->DotAttentionForward(B, T, I_, q, I_, hist_.data(), hist_mask_.data(), alpha_.data(), dst,
                          lddst);
}

void DinBlock::Backward(const Pass& p, const float* q, const float* dg, int64_t lddg, float* dq,
                        float* dx_long, float* de_short) {
  kernels::Backend* be = p.be;
  const int64_t B = p.batch;
  const int T = TL_ + TS_;
  be->Fill(B * T * I_, 0.0f, dhist_.data());
  be->DotAttentionBackward(B, T, I_, q, I_, hist_.data(), hist_mask_.data(), alpha_.data(), dg,
                           lddg, dq, I_, dhist_.data());
  be->Copy(B, TL_, I_, dhist_.data(), T * I_, I_, dx_long, TL_ * I_, I_, false);
  be->Copy(B, TS_, I_, dhist_.data() + TL_ * I_, T * I_, I_, de_short, TS_ * I_, I_, false);
}

}  // namespace sift::worker::models
