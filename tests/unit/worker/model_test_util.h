// Shared fixtures of the worker model tests: small configs, hand-shaped random batches and pulled
// embedding rows, all from fixed seeds.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/data/batch.h"
#include "common/rng.h"
#include "kernels/backend.h"
#include "worker/batch_keys.h"
#include "worker/model.h"

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
  h.max_history = c.long_len + c.short_len;
  h.short_history = c.short_len;
  const int64_t B = static_cast<int64_t>(hist_lens.size());
  batch.Allocate(B + 1, c.user_features, c.item_features, h);  // capacity > size on purpose
  batch.size = B;
  Rng rng(seed);
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
inline void InitNoisy(Model* model, uint64_t seed, float noise) {
  model->InitParameters(seed);
  Rng rng(seed ^ 0xabcdefULL);
  for (float& p : model->parameters()) {
    p += static_cast<float>((2.0 * rng.Uniform() - 1.0) * noise);
  }
}

}  // namespace sift::worker::model_testing
