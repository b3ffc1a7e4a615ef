// Shared fixtures of the worker model tests: small configs, hand-shaped random batches and pulled
// embedding rows, all from fixed seeds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/data/batch.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "worker/batch_keys.h"
#include "worker/models/model.h"

namespace sift::worker::model_testing {

// Small dims (D=4, F=2, UF=1, T_L=6, T_S=4, top_k=3, H=6) for `type`.
inline ModelConfig SmallConfig(ModelType type) {
  ModelConfig c;
  c.type = type;
  c.embedding_dim = 4;
  c.user_features = 1;
  c.item_features = 2;
  c.long_len = 6;
  c.short_len = 4;
  c.top_k = 3;
  c.gru_hidden = 6;
  c.stage_one_mlp = {5};
  c.stage_two_mlp = {5, 3};
  c.aux_mlp = {4, 3};
  c.attention_mlp = {4, 2};
  return c;
}

// A batch of hist_lens.size() rows: row b has hist_lens[b] valid history slots (a suffix of the
// T_L + T_S slots), ids drawn from small vocabularies (so ids repeat within the batch), masks from
// feature 0, random labels.
inline data::Batch MakeBatch(const ModelConfig& c, const std::vector<int>& hist_lens, uint64_t seed,
                             int item_vocab = 9, int cat_vocab = 4, int user_vocab = 3) {
  data::Batch batch;
  data::HistoryOptions h;
  // Hard search: the batch's long slots are the top_k retrieved; the window is long_len.
  const bool hard = c.type == ModelType::kSim && c.gsu == Gsu::kHard;
  h.max_history = (hard ? c.top_k : c.long_len) + c.short_len;
  h.short_history = c.short_len;
  h.hard_search_window = hard ? c.long_len : 0;
  h.time_buckets = c.type == ModelType::kSim && c.time_embedding;
  const int64_t B = static_cast<int64_t>(hist_lens.size());
  batch.Allocate(B + 1, c.user_features, c.item_features, h);  // capacity > size on purpose
  batch.size = B;
  Rng rng(seed);
  Rng time_rng(seed ^ 0x7153);
  auto vocab = [&](int f) { return f == 0 ? item_vocab : cat_vocab; };
  const int T = h.max_history, TL = batch.long_len;
  for (int64_t b = 0; b < B; ++b) {
    batch.index[b] = b;
    batch.label[b] = static_cast<float>(rng.Below(2));
    batch.hist_len[b] = hist_lens[b];
    for (int k = 0; k < c.user_features; ++k) {
      batch.User(k)[b] = 1 + static_cast<int32_t>(rng.Below(user_vocab));
    }
    for (int f = 0; f < c.item_features; ++f) {
      batch.Target(f)[b] = 1 + static_cast<int32_t>(rng.Below(vocab(f)));
    }
    for (int j = 0; j < T; ++j) {
      const bool valid = j >= T - hist_lens[b];
      for (int f = 0; f < c.item_features; ++f) {
        const int32_t pos = valid ? 1 + static_cast<int32_t>(rng.Below(vocab(f))) : 0;
        const int32_t neg = valid ? 1 + static_cast<int32_t>(rng.Below(vocab(f))) : 0;
        if (j < TL) {
          batch.LongHist(f, b)[j] = pos;
        } else {
          batch.ShortHist(f, b)[j - TL] = pos;
          batch.ShortNeg(f, b)[j - TL] = neg;
        }
      }
      if (j < TL) {
        batch.LongMask(b)[j] = valid ? 1.0f : 0.0f;
        // Time buckets from their own stream (the other arrays stay those of a batch without).
        if (h.time_buckets) {
          batch.LongTime(b)[j] =
              valid ? static_cast<int32_t>(time_rng.Below(6)) : -1;  // few buckets: they repeat
        }
      } else {
        batch.ShortMask(b)[j - TL] = valid ? 1.0f : 0.0f;
      }
    }
  }
  return batch;
}

// Pulled rows: U(-scale, scale) per element, from `seed`.
inline void FillRows(BatchKeys* keys, uint64_t seed, float scale) {
  Rng rng(seed);
  for (TableKeys& t : keys->tables) {
    for (float& x : t.rows) x = static_cast<float>((2.0 * rng.Uniform() - 1.0) * scale);
  }
}

// Initialises the model, then adds U(-noise, noise) to every parameter (so biases are non-zero
// and every PReLU/sigmoid sees a spread of inputs).
// Works for every backend (the parameters go through host copies).
inline void InitNoisy(Model* model, uint64_t seed, float noise) {
  ASSERT_TRUE(model->InitParameters(seed).ok());
  std::vector<float> params(model->parameters().size());
  ASSERT_TRUE(model->CopyParametersToHost(absl::MakeSpan(params)).ok());
  Rng rng(seed ^ 0xabcdefULL);
  for (float& p : params) p += static_cast<float>((2.0 * rng.Uniform() - 1.0) * noise);
  ASSERT_TRUE(model->CopyParametersFromHost(params).ok());
}

// One kTrain Forward + Backward: losses, logits, dense gradients (host copies) and the
// per-table embedding gradients.
struct Outcome {
  Losses losses;
  std::vector<float> logits, dense;
  std::vector<std::vector<float>> emb;
};

inline Outcome ForwardBackward(Model* m, const data::Batch& batch, BatchKeys* keys) {
  Outcome r;
  auto losses = m->Forward(batch, *keys, ForwardMode::kTrain);
  EXPECT_TRUE(losses.ok()) << losses.status();
  if (!losses.ok()) return r;
  r.losses = *losses;
  r.logits.assign(m->logits().begin(), m->logits().end());
  EXPECT_TRUE(m->Backward(keys).ok());
  r.dense.resize(m->gradients().size());
  EXPECT_TRUE(m->CopyGradientsToHost(absl::MakeSpan(r.dense)).ok());
  for (const TableKeys& t : keys->tables) r.emb.push_back(t.grads);
  return r;
}

// max |a - b| / max(max |b|, floor): the error relative to the array's scale.
inline double ScaledError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 1e-6, err = 0;
  for (size_t i = 0; i < b.size(); ++i) scale = std::max(scale, double{std::abs(b[i])});
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    err = std::max(err, std::abs(double{a[i]} - b[i]));
  }
  return err / scale;
}

// Tolerances of one backend against another (relative: losses; ScaledError: logits, gradients).
struct OutcomeTolerances {
  double loss = 1e-5;
  double logits = 1e-5;
  double gradients = 1e-4;
};

// Expects `got` close to `want`: each loss, the logits, every dense tensor of `layout` and every
// table's embedding gradients; prints the errors under `what`.
inline void ExpectOutcomesClose(const Outcome& got, const Outcome& want,
                                const std::vector<ParamTensor>& layout,
                                const OutcomeTolerances& tol, const std::string& what) {
  EXPECT_NEAR(got.losses.total, want.losses.total, tol.loss * std::abs(want.losses.total));
  EXPECT_NEAR(got.losses.classification, want.losses.classification,
              tol.loss * want.losses.classification);
  EXPECT_NEAR(got.losses.aux, want.losses.aux, tol.loss * want.losses.aux);
  const double logits_err = ScaledError(got.logits, want.logits);
  EXPECT_LT(logits_err, tol.logits);
  double worst = 0;
  for (const ParamTensor& t : layout) {
    std::vector<float> g(got.dense.begin() + t.offset, got.dense.begin() + t.offset + t.size());
    std::vector<float> w(want.dense.begin() + t.offset, want.dense.begin() + t.offset + t.size());
    if (t.name == "attention_mlp/dense_2/bias") {
      // The softmax over the scores is shift-invariant, so this gradient is exactly 0 in real
      // arithmetic: both backends hold rounding noise only (1e-6 at the fp32 tolerance 1e-4).
      EXPECT_LT(std::abs(g[0]), 1e-2 * tol.gradients);
      EXPECT_LT(std::abs(w[0]), 1e-2 * tol.gradients);
      continue;
    }
    const double e = ScaledError(g, w);
    worst = std::max(worst, e);
    EXPECT_LT(e, tol.gradients) << t.name;
  }
  for (size_t t = 0; t < want.emb.size(); ++t) {
    const double e = ScaledError(got.emb[t], want.emb[t]);
    worst = std::max(worst, e);
    EXPECT_LT(e, tol.gradients) << "table " << t;
  }
  std::printf("%s: loss %.3g rel, logits %.3g, gradients max %.3g (scaled)\n", what.c_str(),
              std::abs(got.losses.total - want.losses.total) / want.losses.total, logits_err,
              worst);
}

}  // namespace sift::worker::model_testing
