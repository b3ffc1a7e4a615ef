// Each block of worker/models/ on its own, on the reference backend: its backward against central
// differences of a scalar of its outputs — for every input it differentiates and its parameters —
// along random directions: the DIEN block with its aux loss, the ESU with and without the time
// embedding, over the whole batch and chunk by chunk (the streamed soft search's indexing, with
// each chunk over every slot or over its rows' window only), the soft-search GSU (head and
// attention, whole, chunked and windowed; its top-k mask's size), and DIN's
// attention. Padding slots are zero vectors, as the model's masked gather makes them; the
// attention's gradient may reach them (an all-masked row attends uniformly), and the model's
// masked segment sum drops it. The whole models are checked the same way in model_gradient_test.cc.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "common/data/batch.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/unit/worker/fd_check.h"
#include "tests/unit/worker/model_test_util.h"
#include "worker/models/block.h"
#include "worker/models/dien_block.h"
#include "worker/models/din_block.h"
#include "worker/models/esu_block.h"
#include "worker/models/layers.h"
#include "worker/models/soft_gsu_block.h"

namespace sift::worker::models {
namespace {

using fd_check::BestFdError;
using fd_check::kAbsTol;
using fd_check::kRelTol;

std::vector<float> Uniform(size_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * static_cast<float>(2.0 * rng.Uniform() - 1.0);
  return v;
}

// Row b's slots [T - lens[b], T) valid (1), the others padding (0).
std::vector<float> SuffixMask(const std::vector<int>& lens, int T) {
  std::vector<float> m;
  for (int len : lens) {
    for (int t = 0; t < T; ++t) m.push_back(t >= T - len ? 1.0f : 0.0f);
  }
  return m;
}

// Zeroes the `width`-float vectors of the masked slots (what a masked gather gives).
void ZeroMasked(const std::vector<float>& mask, int width, std::vector<float>* x) {
  for (size_t s = 0; s < mask.size(); ++s) {
    if (mask[s] == 0) std::fill(x->begin() + s * width, x->begin() + (s + 1) * width, 0.0f);
  }
}

// The chunks of `resident` samples the blocks see for rows of `lens` valid slots (a suffix of T):
// each over its rows' window — from the first slot any of them fills to T, or the last slot
// alone if none — when `windowed` (the streamed soft search's), else over every slot; their
// offsets ragged as the model lays them out.
std::vector<SlotChunk> Chunks(const std::vector<int>& lens, int T, int64_t resident,
                              bool windowed) {
  std::vector<SlotChunk> chunks;
  int64_t offset = 0;
  const int64_t B = static_cast<int64_t>(lens.size());
  for (int64_t b0 = 0; b0 < B; b0 += resident) {
    SlotChunk k;
    k.b0 = b0;
    k.c = std::min(resident, B - b0);
    int longest = 1;
    for (int64_t b = b0; b < b0 + k.c; ++b) longest = std::max(longest, lens[b]);
    k.width = windowed ? longest : T;
    k.start = T - k.width;
    k.offset = offset;
    offset += k.slots();
    chunks.push_back(k);
  }
  return chunks;
}

// Chunk k's window of the [B, T, width] array `full` -> out [c, k.width, width], and back.
template <typename V>
void CopyWindow(const V& full, const SlotChunk& k, int T, int width, V* out) {
  out->resize(static_cast<size_t>(k.slots() * width));
  for (int64_t r = 0; r < k.c; ++r) {
    const auto from = full.begin() + ((k.b0 + r) * T + k.start) * width;
    std::copy(from, from + int64_t{k.width} * width, out->begin() + r * k.width * width);
  }
}
template <typename V>
void ScatterWindow(const V& window, const SlotChunk& k, int T, int width, V* full) {
  for (int64_t r = 0; r < k.c; ++r) {
    const auto from = window.begin() + r * k.width * width;
    std::copy(from, from + int64_t{k.width} * width,
              full->begin() + ((k.b0 + r) * T + k.start) * width);
  }
}

double Dot(const float* a, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += static_cast<double>(a[i]) * w[i];
  return s;
}

// A block's surroundings: the reference backend (host memory, so the block reads the test's
// arrays), its parameters, gradients and workspace.
class Harness {
 public:
  Harness() : be_(kernels::CreateReferenceBackend()) {}
  ParamRegistry* registry() { return &registry_; }
  BufferPlan* plan() { return &plan_; }
  kernels::Backend* be() { return be_.get(); }
  // After the block's Build: allocates its buffers; parameters from their initialisers plus
  // U(-0.1, 0.1) noise (non-zero biases, spread PReLU/sigmoid inputs).
  void Finish(int64_t workspace_floats, uint64_t seed) {
    ASSERT_TRUE(plan_.Allocate(be_.get()).ok());
    params_.resize(static_cast<size_t>(registry_.total()));
    registry_.Initialise(seed, params_.data());
    const std::vector<float> noise = Uniform(params_.size(), seed + 1, 0.1f);
    for (size_t i = 0; i < params_.size(); ++i) params_[i] += noise[i];
    grads_.assign(params_.size(), 0.0f);
    workspace_.assign(static_cast<size_t>(std::max<int64_t>(workspace_floats, 1)), 0.0f);
  }
  Pass MakePass(int64_t batch, bool backward) {
    return Pass{be_.get(), params_.data(), backward ? grads_.data() : nullptr, workspace_.data(),
                batch};
  }
  std::vector<float>& params() { return params_; }
  std::vector<float>& grads() { return grads_; }

 private:
  std::unique_ptr<kernels::Backend> be_;
  ParamRegistry registry_;
  BufferPlan plan_;
  std::vector<float> params_, grads_, workspace_;
};

// `analytic` = d loss / d x (x: the floats the loss reads), along 3 random directions.
void ExpectGradient(const std::function<double()>& loss, std::vector<float>* x,
                    const std::vector<float>& analytic, uint64_t seed, const std::string& what) {
  ASSERT_EQ(x->size(), analytic.size()) << what;
  bool any = false;
  for (float g : analytic) any |= g != 0.0f;
  EXPECT_TRUE(any) << what << ": no gradient at all";
  Rng rng(seed);
  for (int dir = 0; dir < 3; ++dir) {
    std::vector<float> v(x->size());
    for (float& e : v) e = static_cast<float>(2.0 * rng.Uniform() - 1.0);
    double a = 0;
    for (size_t i = 0; i < v.size(); ++i) a += static_cast<double>(analytic[i]) * v[i];
    double fd = 0;
    const double err = BestFdError(loss, x->data(), v, a, &fd);
    EXPECT_LE(err, kRelTol * std::abs(a) + kAbsTol)
        << what << " direction " << dir << ": fd " << fd << " analytic " << a;
  }
}

// The parameter gradient tensor by tensor (each along its own random directions, and each
// receiving some gradient), so that a wrong term in a small tensor is not lost in the whole.
// `shift_invariant`: a tensor whose gradient is zero in exact arithmetic (a softmax's common bias).
void ExpectParameterGradients(const std::function<double()>& loss, Harness* h,
                              const std::vector<float>& dparams, uint64_t seed,
                              const std::string& shift_invariant = "") {
  ASSERT_FALSE(h->registry()->layout().empty());
  for (const ParamTensor& t : h->registry()->layout()) {
    const size_t n = static_cast<size_t>(t.size()), o = static_cast<size_t>(t.offset);
    const std::vector<float> g(dparams.begin() + o, dparams.begin() + o + n);
    if (t.name == shift_invariant) continue;
    std::vector<float> x(h->params().begin() + o, h->params().begin() + o + n);
    // The loss reads h->params(): check on a view of the tensor's slice.
    const auto slice_loss = [&] {
      std::copy(x.begin(), x.end(), h->params().begin() + o);
      return loss();
    };
    ExpectGradient(slice_loss, &x, g, seed++, t.name);
    std::copy(x.begin(), x.end(), h->params().begin() + o);
  }
}

// ---- DienBlock ----------------------------------------------------------------------------

TEST(DienBlockTest, BackwardMatchesFiniteDifferencesWithTheAuxLoss) {
  const ModelConfig c = model_testing::SmallConfig(ModelType::kDien);
  const int I = c.embedding_dim * c.item_features, H = 6, TS = c.short_len;
  const std::vector<int> lens = {4, 2, 3};
  const int64_t B = static_cast<int64_t>(lens.size());
  Harness h;
  DienBlock block(B, I, H, TS);
  block.Build(c, h.registry(), h.plan());
  h.Finish(block.WorkspaceFloats(), 31);
  ASSERT_TRUE(block.Allocate(h.be()).ok());
  std::vector<float> q = Uniform(B * I, 1, 0.5f), e = Uniform(B * TS * I, 2, 0.5f);
  std::vector<float> neg = Uniform(B * TS * I, 3, 0.5f);
  const std::vector<float> mask = SuffixMask(lens, TS), w = Uniform(B * H, 4, 1.0f);
  ZeroMasked(mask, I, &e);
  ZeroMasked(mask, I, &neg);
  std::vector<float> d(B * H);
  auto loss = [&] {
    block.Forward(h.MakePass(B, false), q.data(), e.data(), mask.data(), d.data(), H);
    return Dot(d.data(), w) +
           block.AuxForward(h.MakePass(B, false), e.data(), neg.data(), mask.data());
  };
  loss();
  std::copy(w.begin(), w.end(), block.output_grad());
  std::vector<float> dq(q.size(), 0.0f), de(e.size(), 0.0f), dneg(neg.size(), 7.0f);
  block.Backward(h.MakePass(B, true), q.data(), e.data(), mask.data(), /*with_aux=*/true, 1.0f,
                 dq.data(), de.data(), dneg.data());
  const std::vector<float> dparams = h.grads();
  ExpectGradient(loss, &q, dq, 10, "dq");
  ExpectGradient(loss, &e, de, 11, "de_short");
  ExpectGradient(loss, &neg, dneg, 12, "de_neg (written, not added)");
  ExpectParameterGradients(
      loss, &h, dparams, 13,
      "attention_mlp/dense_" + std::to_string(c.attention_mlp.size()) + "/bias");
}

// ---- EsuBlock -----------------------------------------------------------------------------

struct EsuCase {
  bool time;
  int64_t resident;  // samples per chunk (5 = the whole batch)
  bool windowed;     // each chunk over its rows' window only (Chunks)
  const char* name;
};
void PrintTo(const EsuCase& c, std::ostream* os) { *os << c.name; }

class EsuBlockTest : public ::testing::TestWithParam<EsuCase> {};

TEST_P(EsuBlockTest, BackwardMatchesFiniteDifferences) {
  const EsuCase& ec = GetParam();
  const int TL = 6, D = 4, I = 8;
  // Rows: full, empty (no slot retrieved), partly masked ones; rho below drops more.
  const std::vector<int> lens = {6, 0, 3, 5, 1};
  const int64_t B = static_cast<int64_t>(lens.size());
  Harness h;
  EsuBlock block(B, ec.resident, TL, I, D, ec.time);
  block.Build(h.registry(), h.plan());
  h.Finish(0, 41);
  ASSERT_TRUE(block.Init(h.be()).ok());
  const int W = block.width();
  ASSERT_EQ(W, ec.time ? I + D : I);
  const int64_t ldz = 2 * W + 3;  // z has other columns too
  std::vector<float> q = Uniform(B * I, 1, 0.5f), x = Uniform(B * TL * I, 2, 0.5f);
  // The history's mask, and the ESU's selection within it (as a top-k mask: some valid slots
  // left out; they keep their vectors and buckets).
  const std::vector<float> valid = SuffixMask(lens, TL);
  ZeroMasked(valid, I, &x);
  std::vector<float> rho = valid;
  for (size_t s = 0; s < rho.size(); s += 3) rho[s] = 0;
  std::vector<int32_t> buckets(B * TL);
  Rng rng(5);
  for (size_t s = 0; s < buckets.size(); ++s) {
    buckets[s] = valid[s] != 0 ? static_cast<int32_t>(rng.Below(data::kTimeBuckets)) : -1;
  }
  std::vector<float> w = Uniform(B * ldz, 6, 1.0f);
  for (int64_t b = 0; b < B; ++b)
    std::fill(w.begin() + b * ldz + 2 * W, w.begin() + (b + 1) * ldz, 0.0f);
  std::vector<float> z(B * ldz), chunk, chunk_rho, dchunk;
  std::vector<int32_t> chunk_time;
  std::vector<SlotChunk> chunks = Chunks(lens, TL, ec.resident, ec.windowed);
  // Chunk k's slots, selection and buckets made resident, as the model stages them.
  const auto stage = [&](SlotChunk* k) {
    CopyWindow(x, *k, TL, I, &chunk);
    CopyWindow(rho, *k, TL, 1, &chunk_rho);
    CopyWindow(buckets, *k, TL, 1, &chunk_time);
    k->time = chunk_time.data();
  };
  auto loss = [&] {
    const Pass p = h.MakePass(B, false);
    std::fill(z.begin(), z.end(), 0.0f);
    block.PrepareQuery(p, q.data());
    for (SlotChunk& k : chunks) {
      stage(&k);
      block.PrepareSlots(p, chunk.data(), k);
      block.Forward(p, q.data(), chunk.data(), chunk_rho.data(), k, z.data(), ldz);
    }
    return Dot(z.data(), w);
  };
  loss();
  std::vector<float> dq(q.size(), 0.0f), dx(x.size(), 0.0f);
  const Pass p = h.MakePass(B, true);
  block.BeginBackward(p);
  for (SlotChunk& k : chunks) {
    stage(&k);
    block.PrepareSlots(p, chunk.data(), k);
    dchunk.assign(chunk.size(), 0.0f);
    block.Backward(p, q.data(), chunk.data(), chunk_rho.data(), k, w.data(), ldz, dq.data(),
                   dchunk.data());
    block.ScatterSlotGrads(p, k, dchunk.data());
    ScatterWindow(dchunk, k, TL, I, &dx);
  }
  block.FinishBackward(p, dq.data());
  ExpectGradient(loss, &q, dq, 10, "dq");
  ExpectGradient(loss, &x, dx, 11, "dx_long");
  if (ec.time) {
    const std::vector<float> dparams = h.grads();
    ExpectParameterGradients(loss, &h, dparams, 12);  // the time embedding's table and query
  } else {
    EXPECT_EQ(h.params().size(), 0u);  // no parameters without the time embedding
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, EsuBlockTest,
    ::testing::Values(EsuCase{false, 5, false, "dense"}, EsuCase{true, 5, false, "time"},
                      EsuCase{false, 2, false, "chunked"}, EsuCase{true, 2, false, "chunked_time"},
                      EsuCase{false, 2, true, "windowed"}, EsuCase{true, 2, true, "windowed_time"}),
    [](const ::testing::TestParamInfo<EsuCase>& p) { return std::string(p.param.name); });

// ---- SoftGsuBlock -------------------------------------------------------------------------

// Samples per chunk, whether each chunk covers only its rows' window (Chunks), and the time
// term's width D (0: none; else the slots are the ESU's [x; tau], I + D wide, and the query
// [q; u_g] carries the registered gsu_time/query, checked with the head's parameters).
class SoftGsuBlockTest : public ::testing::TestWithParam<std::tuple<int64_t, bool, int>> {};

TEST_P(SoftGsuBlockTest, BackwardMatchesFiniteDifferencesAndTopKSelectsK) {
  const auto [chunk, windowed, D] = GetParam();
  const ModelConfig c = model_testing::SmallConfig(ModelType::kSim);
  const int TL = 6, I = 8, P = 4, K = 3;
  const std::vector<int> lens = {6, 0, 3, 5, 2};
  const int64_t B = static_cast<int64_t>(lens.size());
  Harness h;
  SoftGsuBlock block(B, TL, I, P, K, D);
  block.Build(c, h.registry(), h.plan());
  block.BuildTimeTerm(h.registry(), h.plan());
  h.Finish(block.WorkspaceFloats(), 51);
  ASSERT_TRUE(block.Allocate(h.be()).ok());
  ASSERT_TRUE(block.Init(h.be()).ok());
  const int Iw = block.slot_width();
  ASSERT_EQ(Iw, I + D);
  std::vector<float> q = Uniform(B * I, 1, 0.5f), user = Uniform(B * P, 2, 0.5f);
  std::vector<float> x = Uniform(B * TL * Iw, 3, 0.5f);
  const std::vector<float> mask = SuffixMask(lens, TL);
  ZeroMasked(mask, Iw, &x);
  const std::vector<float> labels = {1, 0, 1, 1, 0};
  std::vector<float> slots, dslots, slot_mask;
  std::vector<SlotChunk> chunks = Chunks(lens, TL, chunk, windowed);
  const auto stage = [&](SlotChunk* k) {
    CopyWindow(x, *k, TL, Iw, &slots);
    CopyWindow(mask, *k, TL, 1, &slot_mask);
    k->mask = slot_mask.data();
  };
  auto loss = [&] {
    const Pass p = h.MakePass(B, false);
    block.PrepareQuery(p, q.data());
    for (SlotChunk& k : chunks) {
      stage(&k);
      block.Attend(p, slots.data(), k);
    }
    block.Finish(p, q.data(), user.data(), std::nullopt, chunks);
    return h.be()->BceWithLogits(B, block.logit(), labels.data(), 0.0f, nullptr);
  };
  loss();
  for (const SlotChunk& k : chunks) {
    for (int64_t r = 0; r < k.c; ++r) {
      const int64_t b = k.b0 + r;
      float selected = 0;
      for (int t = 0; t < k.width; ++t) selected += block.rho(k)[r * k.width + t];
      // An all-masked row has uniform weights (DotAttentionForward), so its chunk's first K
      // slots (zero vectors) are selected; otherwise the K largest of the valid ones.
      EXPECT_EQ(selected, std::min(K, lens[b] > 0 ? lens[b] : k.width)) << "row " << b;
    }
  }
  const Pass p = h.MakePass(B, true);
  std::vector<float> dq(q.size(), 0.0f), duser(user.size(), 0.0f), dx(x.size(), 0.0f);
  block.HeadBackward(p, labels.data(), 1.0f, dq.data(), duser.data());
  for (SlotChunk& k : chunks) {
    stage(&k);
    dslots.assign(slots.size(), 0.0f);
    block.AttendBackward(p, slots.data(), k, dq.data(), dslots.data());
    ScatterWindow(dslots, k, TL, Iw, &dx);
  }
  block.FinishBackward(p, dq.data());
  const std::vector<float> dparams = h.grads();
  ExpectGradient(loss, &q, dq, 10, "dq");
  ExpectGradient(loss, &user, duser, 11, "duser");
  ExpectGradient(loss, &x, dx, 12, "dx_long");
  ExpectParameterGradients(loss, &h, dparams, 13);  // the GSU head's (and u_g's)
}

INSTANTIATE_TEST_SUITE_P(Chunks, SoftGsuBlockTest,
                         ::testing::Values(std::tuple<int64_t, bool, int>{5, false, 0},
                                           std::tuple<int64_t, bool, int>{2, false, 0},
                                           std::tuple<int64_t, bool, int>{2, true, 0},
                                           std::tuple<int64_t, bool, int>{1, true, 0},
                                           std::tuple<int64_t, bool, int>{5, false, 4},
                                           std::tuple<int64_t, bool, int>{2, true, 4}));

// ---- DinBlock -----------------------------------------------------------------------------

TEST(DinBlockTest, BackwardMatchesFiniteDifferences) {
  const int TL = 6, TS = 4, I = 8;
  const std::vector<int> lens = {10, 3, 7, 1};  // over the T_L + T_S history
  const int64_t B = static_cast<int64_t>(lens.size());
  Harness h;
  DinBlock block(B, TL, TS, I);
  block.Build(h.plan());
  h.Finish(0, 61);
  const std::vector<float> hist_mask = SuffixMask(lens, TL + TS);
  std::vector<float> long_mask, short_mask;
  for (int64_t b = 0; b < B; ++b) {
    long_mask.insert(long_mask.end(), hist_mask.begin() + b * (TL + TS),
                     hist_mask.begin() + b * (TL + TS) + TL);
    short_mask.insert(short_mask.end(), hist_mask.begin() + b * (TL + TS) + TL,
                      hist_mask.begin() + (b + 1) * (TL + TS));
  }
  std::vector<float> q = Uniform(B * I, 1, 0.5f), x = Uniform(B * TL * I, 2, 0.5f);
  std::vector<float> e = Uniform(B * TS * I, 3, 0.5f);
  ZeroMasked(long_mask, I, &x);
  ZeroMasked(short_mask, I, &e);
  const std::vector<float> w = Uniform(B * I, 4, 1.0f);
  std::vector<float> g(B * I);
  auto loss = [&] {
    block.Forward(h.MakePass(B, false), q.data(), x.data(), e.data(), long_mask.data(),
                  short_mask.data(), g.data(), I);
    return Dot(g.data(), w);
  };
  loss();
  std::vector<float> dq(q.size(), 0.0f), dx(x.size(), 9.0f), de(e.size(), 9.0f);
  block.Backward(h.MakePass(B, true), q.data(), w.data(), I, dq.data(), dx.data(), de.data());
  ExpectGradient(loss, &q, dq, 10, "dq");
  ExpectGradient(loss, &x, dx, 11, "dx_long (written, not added)");
  ExpectGradient(loss, &e, de, 12, "de_short (written, not added)");
}

}  // namespace
}  // namespace sift::worker::models
