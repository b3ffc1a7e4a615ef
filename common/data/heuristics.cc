#include "common/data/heuristics.h"

#include <algorithm>

#include "common/auc.h"

namespace sift::data {
namespace {

constexpr double kRecencyBeta = 2.0;
constexpr double kSmoothAlpha = 1.0;

// p̂ = (n + α·g) / (d + α), score = p̂ / (p̂ + g); 0 when both vanish (an unseen category with
// no matching slot).
double Smoothed(double n, double d, double g) {
  const double p = (n + kSmoothAlpha * g) / (d + kSmoothAlpha);
  return p + g > 0.0 ? p / (p + g) : 0.0;
}

Status CountIds(const int32_t* ids, absl::string_view what, std::vector<int64_t>* counts) {
  const int32_t id = *ids;
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("negative ", what, " id ", id));
  if (static_cast<size_t>(id) >= counts->size()) counts->resize(static_cast<size_t>(id) + 1, 0);
  ++(*counts)[static_cast<size_t>(id)];
  return absl::OkStatus();
}

}  // namespace

const char* HeuristicName(Heuristic h) {
  switch (h) {
    case kPopItem:
      return "pop_item";
    case kPopCat:
      return "pop_cat";
    case kFracShort10:
      return "frac_short10";
    case kFracAll100:
      return "frac_all100";
    case kFracLong90:
      return "frac_long90";
    case kSmoothRecency:
      return "smooth_recency";
    case kSmoothAll100:
      return "smooth_all100";
    case kSmoothShort10:
      return "smooth_short10";
    case kNumHeuristics:
      break;
  }
  return "?";
}

StatusOr<Popularity> ComputePopularity(const Dataset& dataset) {
  const int F = dataset.samples().num_item_features();
  if (F < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        dataset.dir(), ": heuristics need a category (item feature 1); the dataset has ", F,
        " item feature(s)"));
  }
  Popularity pop;
  if (const Timeline* tl = dataset.timeline()) {
    for (int64_t e = 0; e < tl->num_events(); ++e) {
      const int32_t* ev = tl->event(e);
      SIFT_RETURN_IF_ERROR(Annotate(CountIds(ev, "item", &pop.item_count),
                                    absl::StrCat(dataset.dir(), ": ", kEventsFile, " event ", e)));
      SIFT_RETURN_IF_ERROR(Annotate(CountIds(ev + 1, "category", &pop.category_count),
                                    absl::StrCat(dataset.dir(), ": ", kEventsFile, " event ", e)));
    }
    pop.total = tl->num_events();
    return pop;
  }
  const SamplesFile* train = dataset.samples_file(Split::kTrain);
  if (train == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(dataset.dir(), ": no timeline and no train samples to count popularity"));
  }
  const int UF = train->shape().user_features;
  for (int64_t i = 0; i < train->size(); ++i) {
    const int32_t* r = train->record(i);
    if (r[0] == 0) continue;
    const int32_t* target = r + 2 + UF;
    const std::string where = absl::StrCat(dataset.dir(), ": ", kTrainSamplesFile, " record ", i);
    SIFT_RETURN_IF_ERROR(Annotate(CountIds(target, "item", &pop.item_count), where));
    SIFT_RETURN_IF_ERROR(Annotate(CountIds(target + 1, "category", &pop.category_count), where));
    ++pop.total;
  }
  return pop;
}

std::array<double, kNumHeuristics> ScoreHeuristics(const Batch& b, int64_t row,
                                                   const Popularity& pop) {
  const int32_t item = b.Target(0)[row];
  const int32_t cat = b.Target(1)[row];
  const double g = pop.CategoryFreq(cat);
  int64_t s = 0, ms = 0, l = 0, ml = 0;
  const int32_t* sc = b.ShortHist(1, row);
  const float* smask = b.ShortMask(row);
  for (int j = 0; j < b.short_len; ++j) {
    if (smask[j] > 0.0f) {
      ++s;
      ms += sc[j] == cat;
    }
  }
  const int32_t* lc = b.LongHist(1, row);
  const float* lmask = b.LongMask(row);
  for (int j = 0; j < b.long_len; ++j) {
    if (lmask[j] > 0.0f) {
      ++l;
      ml += lc[j] == cat;
    }
  }
  auto frac = [](int64_t m, int64_t n) {
    return n > 0 ? static_cast<double>(m) / static_cast<double>(n) : 0.0;
  };
  auto smooth = [&](double beta) {
    return Smoothed((1.0 + beta) * static_cast<double>(ms) + static_cast<double>(ml),
                    (1.0 + beta) * static_cast<double>(s) + static_cast<double>(l), g);
  };
  std::array<double, kNumHeuristics> out{};
  out[kPopItem] = static_cast<double>(pop.Item(item));
  out[kPopCat] = g;
  out[kFracShort10] = frac(ms, s);
  out[kFracAll100] = frac(ms + ml, s + l);
  out[kFracLong90] = frac(ml, l);
  out[kSmoothRecency] = smooth(kRecencyBeta);
  out[kSmoothAll100] = smooth(0.0);
  out[kSmoothShort10] = Smoothed(static_cast<double>(ms), static_cast<double>(s), g);
  return out;
}

void ForEachSampleBatch(const Dataset& dataset, Split split, const HistoryOptions& history,
                        ThreadPool* pool, const std::function<void(const Batch&)>& fn,
                        int64_t chunk) {
  const SampleSource& src = dataset.samples();
  const int64_t n = src.NumSamples(split);
  chunk = std::max<int64_t>(1, chunk);
  const int64_t chunks = (n + chunk - 1) / chunk;
  auto run = [&](int64_t c0, int64_t c1) {
    Batch batch;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t first = c * chunk, count = std::min(chunk, n - first);
      batch.Allocate(count, src.num_user_features(), src.num_item_features(), history);
      for (int64_t r = 0; r < count; ++r) src.Materialize(split, first + r, r, &batch);
      batch.size = count;
      fn(batch);
    }
  };
  if (pool == nullptr) {
    run(0, chunks);
  } else {
    pool->ParallelFor(chunks, 1, run);
  }
}

StatusOr<HeuristicAucs> ComputeHeuristicAucs(const Dataset& dataset, ThreadPool* pool,
                                             Split split) {
  SIFT_ASSIGN_OR_RETURN(Popularity pop, ComputePopularity(dataset));
  const int64_t n = dataset.samples().NumSamples(split);
  std::vector<std::vector<double>> scores(kNumHeuristics, std::vector<double>(n));
  std::vector<float> labels(n);
  HistoryOptions history;
  history.max_history = 100;
  history.short_history = 10;
  ForEachSampleBatch(dataset, split, history, pool, [&](const Batch& b) {
    for (int64_t r = 0; r < b.size; ++r) {
      const int64_t i = b.index[r];
      labels[i] = b.label[r];
      const auto s = ScoreHeuristics(b, r, pop);
      for (int h = 0; h < kNumHeuristics; ++h) scores[h][i] = s[h];
    }
  });
  HeuristicAucs out;
  out.samples = n;
  for (int h = 0; h < kNumHeuristics; ++h) out.auc[h] = ExactAuc(scores[h], labels);
  return out;
}

StatusOr<FullHistoryAucs> ComputeFullHistoryAucs(const Dataset& dataset, ThreadPool* pool,
                                                 Split split) {
  const auto* src = dynamic_cast<const TimelineSamples*>(&dataset.samples());
  if (src == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(dataset.dir(),
                     ": full-history heuristics need a timeline dataset (users.bin + events.bin)"));
  }
  SIFT_ASSIGN_OR_RETURN(Popularity pop, ComputePopularity(dataset));
  SIFT_RETURN_IF_ERROR(Annotate(src->PrepareHardSearch(), dataset.dir()));
  const CategoryIndex& index = *src->category_index();
  const int64_t n = src->NumSamples(split);
  std::vector<double> frac(n), mix(n);
  std::vector<float> labels(n);
  HistoryOptions history;
  history.max_history = 100;
  history.short_history = 10;
  ForEachSampleBatch(dataset, split, history, pool, [&](const Batch& b) {
    for (int64_t r = 0; r < b.size; ++r) {
      const int64_t i = b.index[r];
      int64_t u, t0;
      src->Locate(split, i, &u, &t0);
      const int32_t cat = b.Target(1)[r];
      const double g = pop.CategoryFreq(cat);
      const double m = static_cast<double>(index.Count(u, cat, 0, t0));
      labels[i] = b.label[r];
      frac[i] = Smoothed(m, static_cast<double>(t0), g);
      mix[i] = 0.5 * (ScoreHeuristics(b, r, pop)[kSmoothRecency] + frac[i]);
    }
  });
  FullHistoryAucs out;
  out.samples = n;
  out.frac_full_history = ExactAuc(frac, labels);
  out.mix_full_history = ExactAuc(mix, labels);
  return out;
}

}  // namespace sift::data
