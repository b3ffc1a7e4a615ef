#include "common/data/loader.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "common/hash.h"
#include "common/perf_stats.h"
#include "common/rng.h"

namespace sift::data {
namespace {

constexpr int kMaxHistory = 1 << 20;
constexpr int kMaxPrefetch = 64;
constexpr int kMaxThreads = 4096;
// Rows a worker materialises between two cancellation checks.
constexpr int64_t kRowsPerCheck = 64;

// Order-sensitive checksum of n 32-bit values: a Fletcher-style pair of running sums over 64-bit
// words (two values per word), about one cycle per word.
template <typename T>
uint64_t SpanChecksum(const T* p, int64_t n) {
  static_assert(sizeof(T) == 4);
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  uint64_t s1 = 0, s2 = 0;
  const int64_t words = n / 2;
  for (int64_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes + 8 * i, 8);
    s1 += w;
    s2 += s1;
  }
  if (n % 2 != 0) {
    uint32_t last;
    std::memcpy(&last, bytes + 8 * words, 4);
    s1 += last;
    s2 += s1;
  }
  return HashCombine(HashCombine(s1, s2), static_cast<uint64_t>(n));
}

// Zeroes rows [from, capacity) of every array of `b` (index -1), so a partial batch does not
// carry rows of an earlier batch.
void ZeroTailRows(int64_t from, Batch* b) {
  const int64_t cap = b->capacity, n = cap - from;
  if (n <= 0) return;
  std::fill(b->index.begin() + from, b->index.end(), -1);
  std::iota(b->epoch_row.begin() + from, b->epoch_row.begin() + cap, static_cast<int32_t>(from));
  std::fill(b->label.begin() + from, b->label.begin() + cap, 0.0f);
  std::fill(b->hist_len.begin() + from, b->hist_len.begin() + cap, 0);
  for (int k = 0; k < b->num_user_features; ++k) std::fill_n(b->User(k) + from, n, 0);
  for (int f = 0; f < b->num_item_features; ++f) {
    std::fill_n(b->Target(f) + from, n, 0);
    std::fill_n(b->LongHist(f, from), n * b->long_len, 0);
    std::fill_n(b->ShortHist(f, from), n * b->short_len, 0);
    std::fill_n(b->ShortNeg(f, from), n * b->short_len, 0);
    if (b->has_long_negatives) std::fill_n(b->LongNeg(f, from), n * b->long_len, 0);
  }
  std::fill_n(b->LongMask(from), n * b->long_len, 0.0f);
  std::fill_n(b->ShortMask(from), n * b->short_len, 0.0f);
  if (b->has_long_time) std::fill_n(b->LongTime(from), n * b->long_len, -1);
}

}  // namespace

const char* SampleOrderName(SampleOrder order) {
  return order == SampleOrder::kShuffled ? "shuffled" : "reference";
}

StatusOr<SampleOrder> ParseSampleOrder(absl::string_view name) {
  if (name == "shuffled") return SampleOrder::kShuffled;
  if (name == "reference") return SampleOrder::kReference;
  return absl::InvalidArgumentError(
      absl::StrCat("order: expected 'shuffled' or 'reference', got '", name, "'"));
}

StatusOr<Split> ParseSplit(absl::string_view name) {
  if (name == "train") return Split::kTrain;
  if (name == "test") return Split::kTest;
  if (name == "validation") return Split::kValidation;
  return absl::InvalidArgumentError(
      absl::StrCat("split: expected 'train', 'test' or 'validation', got '", name, "'"));
}

int ReferenceParts(Split split) { return split == Split::kTrain ? 8 : 4; }

int64_t ReferenceStreamIndex(int64_t n, int parts, int64_t position) {
  // Part k holds [start(k), start(k + 1)) with start(k) = k * m + min(k, r), m = n / parts,
  // r = n % parts. Full rounds come first (parts records each); the last, partial round holds
  // record m of the first r parts.
  const int64_t m = n / parts, r = n % parts;
  int64_t k, round;
  if (position < m * parts) {
    k = position % parts;
    round = position / parts;
  } else {
    k = position - m * parts;
    round = m;
  }
  return k * m + std::min<int64_t>(k, r) + round;
}

int64_t ReferenceRankSamples(int64_t n, int64_t prebatch, int rank, int world,
                             bool drop_remainder) {
  const int64_t P = std::max<int64_t>(1, prebatch), G = n / P;
  if (drop_remainder) return G / world * P;
  const int64_t records = G > rank ? (G - rank + world - 1) / world : 0;
  return records * P + (rank == 0 ? n % P : 0);
}

int64_t ReferenceRankIndex(int64_t n, int64_t prebatch, int parts, int rank, int world, int64_t k) {
  const int64_t P = std::max<int64_t>(1, prebatch), G = n / P;
  const int64_t pos = rank + (k / P) * world;  // position of k's record in the record stream
  if (pos < G) return ReferenceStreamIndex(G, parts, pos) * P + k % P;
  return G * P + k % P;  // rank 0's remainder record, after its full records
}

void ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch, std::vector<int64_t>* order) {
  order->resize(static_cast<size_t>(n));
  int64_t* a = order->data();
  for (int64_t i = 0; i < n; ++i) a[i] = i;
  Rng rng(HashCombine(seed, static_cast<uint64_t>(epoch)));
  // Forward Fisher–Yates: position i takes a uniform pick of the not-yet-placed a[i..n).
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(n - i)));
    std::swap(a[i], a[j]);
  }
}

RankShare ComputeRankShare(int64_t n, SampleOrder order, int rank, int world, bool drop_remainder,
                           bool interleave) {
  const int64_t q = n / world, rem = n % world;
  RankShare s;
  s.count = drop_remainder ? q : q + (rank < rem ? 1 : 0);
  if (order == SampleOrder::kReference || interleave) {
    s.first = rank;  // round-robin over the record stream
    s.stride = world;
  } else {
    s.first = drop_remainder ? rank * q : rank * q + std::min<int64_t>(rank, rem);
    s.stride = 1;
  }
  return s;
}

uint64_t BatchChecksum(const Batch& b) {
  const int64_t n = b.size;
  uint64_t h = HashCombine(static_cast<uint64_t>(n), static_cast<uint64_t>(b.long_len) << 32 |
                                                         static_cast<uint64_t>(b.short_len));
  for (int64_t i = 0; i < n; ++i) h = HashCombine(h, static_cast<uint64_t>(b.index[i]));
  h = HashCombine(h, SpanChecksum(b.label.data(), n));
  h = HashCombine(h, SpanChecksum(b.hist_len.data(), n));
  for (int k = 0; k < b.num_user_features; ++k) h = HashCombine(h, SpanChecksum(b.User(k), n));
  for (int f = 0; f < b.num_item_features; ++f) {
    h = HashCombine(h, SpanChecksum(b.Target(f), n));
    h = HashCombine(h, SpanChecksum(b.LongHist(f, 0), n * b.long_len));
    h = HashCombine(h, SpanChecksum(b.ShortHist(f, 0), n * b.short_len));
    h = HashCombine(h, SpanChecksum(b.ShortNeg(f, 0), n * b.short_len));
    if (b.has_long_negatives) h = HashCombine(h, SpanChecksum(b.LongNeg(f, 0), n * b.long_len));
  }
  h = HashCombine(h, SpanChecksum(b.LongMask(0), n * b.long_len));
  if (b.has_long_time) h = HashCombine(h, SpanChecksum(b.LongTime(0), n * b.long_len));
  h = HashCombine(h, SpanChecksum(b.ShortMask(0), n * b.short_len));
  return h;
}

Status ValidateBatchLoaderOptions(const SampleSource& source, const BatchLoaderOptions& o) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("batch loader: ", parts...));
  };
  if (o.batch_size < 1) return bad("batch_size must be >= 1, got ", o.batch_size);
  if (o.world < 1) return bad("world must be >= 1, got ", o.world);
  if (o.rank < 0 || o.rank >= o.world) {
    return bad("rank must be in [0, world = ", o.world, "), got ", o.rank);
  }
  if (o.history.max_history < 1 || o.history.max_history > kMaxHistory) {
    return bad("max_history must be in [1, ", kMaxHistory, "], got ", o.history.max_history);
  }
  if (o.history.short_history < 0 || o.history.short_history > o.history.max_history) {
    return bad("short_history must be in [0, max_history = ", o.history.max_history, "], got ",
               o.history.short_history);
  }
  if (o.history.hard_search_window < 0) {
    return bad("hard_search_window must be >= 0 (0 = no hard search), got ",
               o.history.hard_search_window);
  }
  if (o.history.hard_search_window > 0) {
    if (o.history.long_negatives) return bad("hard search draws no long negatives");
    if (o.history.max_history == o.history.short_history) {
      return bad("hard search needs long slots (max_history > short_history)");
    }
    if (o.history.max_history - o.history.short_history > o.history.hard_search_window) {
      return bad("hard search retrieves at most the window: K = max_history - short_history = ",
                 o.history.max_history - o.history.short_history,
                 " > hard_search_window = ", o.history.hard_search_window);
    }
    SIFT_RETURN_IF_ERROR(source.PrepareHardSearch());
    // A window past every history searches nothing more: a misconfiguration, said so.
    const int64_t most = source.max_history_events() - o.history.short_history;
    if (source.max_history_events() >= 0 &&
        o.history.hard_search_window > std::max<int64_t>(most, 1)) {
      return bad("hard_search_window = ", o.history.hard_search_window,
                 " reaches past every history of this dataset: its longest user has ",
                 source.max_history_events(), " events before its last target, ",
                 std::max<int64_t>(most, 0), " before the short part (use at most that)");
    }
  }
  if (o.history.time_buckets && !source.has_timestamps()) {
    return bad(
        "time intervals (model.time_embedding) need event timestamps; this dataset has "
        "none (a timeline written without timestamps, or stored samples)");
  }
  if (o.threads < 0 || o.threads > kMaxThreads) {
    return bad("threads must be in [0, ", kMaxThreads, "] (0 = every CPU), got ", o.threads);
  }
  if (o.prefetch < 1 || o.prefetch > kMaxPrefetch) {
    return bad("prefetch must be in [1, ", kMaxPrefetch, "], got ", o.prefetch);
  }
  if (o.order != SampleOrder::kShuffled && o.order != SampleOrder::kReference) {
    return bad("unknown order ", static_cast<int>(o.order));
  }
  if (o.split != Split::kTrain && o.split != Split::kTest && o.split != Split::kValidation) {
    return bad("unknown split ", static_cast<int>(o.split));
  }
  if (o.reference_prebatch < 0) {
    return bad("reference_prebatch must be >= 0, got ", o.reference_prebatch);
  }
  const int64_t n = source.NumSamples(o.split);
  const int64_t per_rank =
      o.order == SampleOrder::kReference
          ? ReferenceRankSamples(n, o.reference_prebatch, o.world - 1, o.world, true)
          : n / o.world;
  if (o.drop_remainder && per_rank < o.batch_size) {
    return bad("the ", SplitName(o.split), " split has ", n, " samples: ", o.world, " rank(s) get ",
               per_rank, " each, fewer than one batch of ", o.batch_size,
               " (drop_remainder would leave no batch)");
  }
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::Create(const SampleSource* source,
                                                           const BatchLoaderOptions& options) {
  if (source == nullptr) return absl::InvalidArgumentError("batch loader: no sample source");
  SIFT_RETURN_IF_ERROR(ValidateBatchLoaderOptions(*source, options));
  return std::unique_ptr<BatchLoader>(new BatchLoader(source, options));
}

// A producer thread builds batch t of the epoch into slot t % prefetch (ParallelFor over its rows
// on the pool) as soon as the consumer has released batch t - prefetch; Next() hands out slots in
// order. StartEpoch and the destructor bump the generation, which makes an in-flight build stop
// early and be discarded.
BatchLoader::BatchLoader(const SampleSource* source, const BatchLoaderOptions& options)
    : source_(source),
      options_(options),
      n_(source->NumSamples(options.split)),
      share_(ComputeRankShare(n_, options.order, options.rank, options.world,
                              options.drop_remainder, options.interleave)),
      pool_(options.threads) {
  const int64_t B = options_.batch_size;
  if (options_.order == SampleOrder::kReference) {
    share_.count = ReferenceRankSamples(n_, options_.reference_prebatch, options_.rank,
                                        options_.world, options_.drop_remainder);
  }
  if (options_.drop_remainder) {
    steps_ = share_.count / B;
    samples_ = steps_ * B;
  } else {
    steps_ = (share_.count + B - 1) / B;
    samples_ = share_.count;
  }
  slots_.resize(static_cast<size_t>(options_.prefetch));
  for (Batch& b : slots_) {
    b.Allocate(B, source_->num_user_features(), source_->num_item_features(), options_.history);
  }
  producer_ = std::thread([this] { ProducerLoop(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    ++generation_;
    live_generation_.store(generation_, std::memory_order_relaxed);
  }
  producer_cv_.notify_all();
  producer_.join();
}

int64_t BatchLoader::IndexAt(int64_t k) const {
  if (options_.order == SampleOrder::kReference) {
    return ReferenceRankIndex(n_, options_.reference_prebatch, ReferenceParts(options_.split),
                              options_.rank, options_.world, k);
  }
  return order_[static_cast<size_t>(share_.first + k * share_.stride)];
}

void BatchLoader::StartEpoch(int64_t epoch, int64_t first_step) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    ++generation_;
    live_generation_.store(generation_, std::memory_order_relaxed);
    started_ = false;
    consumer_cv_.wait(lock, [this] { return !producer_busy_; });
  }
  // The producer is idle and cannot start before started_ is set: order_ is ours to write.
  if (options_.order == SampleOrder::kShuffled) ShuffledOrder(n_, options_.seed, epoch, &order_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    built_ = consumed_ = released_ = std::clamp<int64_t>(first_step, 0, steps_);
    started_ = true;
  }
  producer_cv_.notify_all();
}

const Batch* BatchLoader::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!started_) return nullptr;
  if (released_ != consumed_) {
    released_ = consumed_;  // the batch handed out last is free again
    producer_cv_.notify_all();
  }
  if (consumed_ >= steps_) return nullptr;
  consumer_cv_.wait(lock, [this] { return HasBatch(); });
  const int64_t t = consumed_++;
  return &slots_[static_cast<size_t>(t % options_.prefetch)];
}

bool BatchLoader::CanBuild() const {
  return stop_ || (started_ && built_ < steps_ && built_ < released_ + options_.prefetch);
}

bool BatchLoader::Cancelled(uint64_t generation) const {
  return live_generation_.load(std::memory_order_relaxed) != generation;
}

void BatchLoader::ProducerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    producer_cv_.wait(lock, [this] { return CanBuild(); });
    if (stop_) return;
    const int64_t t = built_;
    const uint64_t generation = generation_;
    producer_busy_ = true;
    lock.unlock();
    const bool complete = Build(t, generation, &slots_[static_cast<size_t>(t % options_.prefetch)]);
    lock.lock();
    producer_busy_ = false;
    if (complete && generation == generation_) built_ = t + 1;
    consumer_cv_.notify_all();
  }
}

void BatchLoader::GroupByHistory(int64_t begin, int64_t rows,
                                 std::vector<int64_t>* positions) const {
  std::vector<std::pair<int64_t, int64_t>> keyed(static_cast<size_t>(rows));  // (-length, position)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t events = source_->HistoryEvents(options_.split, IndexAt(begin + r));
    if (events < 0) return;  // lengths not known: the epoch order
    const int64_t length = std::min<int64_t>(events, options_.history.max_history);
    keyed[static_cast<size_t>(r)] = {-length, begin + r};
  }
  std::sort(keyed.begin(), keyed.end());
  positions->resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    (*positions)[static_cast<size_t>(r)] = keyed[static_cast<size_t>(r)].second;
  }
}

bool BatchLoader::Build(int64_t t, uint64_t generation, Batch* batch) {
  const int64_t B = options_.batch_size;
  const int64_t begin = t * B;
  const int64_t rows = std::min(samples_ - begin, B);
  const Split split = options_.split;
  batch->size = rows;
  // Enough chunks to balance the threads, few enough that scheduling stays negligible.
  const int64_t threads = pool_.num_threads();
  const int64_t grain = std::clamp<int64_t>(rows / (threads * 8), 16, 512);
  std::vector<int64_t> positions;
  if (options_.group_by_history) GroupByHistory(begin, rows, &positions);
  pool_.ParallelFor(rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r0 = lo; r0 < hi; r0 += kRowsPerCheck) {
      if (Cancelled(generation)) return;
      const int64_t r1 = std::min(hi, r0 + kRowsPerCheck);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t k = positions.empty() ? begin + r : positions[static_cast<size_t>(r)];
        source_->Materialize(split, IndexAt(k), r, batch);
        batch->epoch_row[static_cast<size_t>(r)] = static_cast<int32_t>(k - begin);
      }
    }
  });
  ZeroTailRows(rows, batch);
  return !Cancelled(generation);
}

StatusOr<LoaderBenchmarkResult> RunLoaderBenchmark(const SampleSource* source,
                                                   const BatchLoaderOptions& options, int64_t steps,
                                                   int64_t warmup) {
  if (steps < 1) return absl::InvalidArgumentError("loader benchmark: steps must be >= 1");
  if (warmup < 0) return absl::InvalidArgumentError("loader benchmark: warmup must be >= 0");
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<BatchLoader> loader, BatchLoader::Create(source, options));
  if (loader->steps_per_epoch() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("loader benchmark: the ",
                                                   SplitName(options.split),
                                                   " split yields no batch for this rank"));
  }
  LoaderBenchmarkResult res;
  res.threads = loader->num_threads();
  res.warmup_steps = warmup;
  int64_t epoch = 0;
  loader->StartEpoch(epoch);
  res.epochs = 1;
  auto next = [&]() {
    const Batch* b = loader->Next();
    if (b == nullptr) {
      loader->StartEpoch(++epoch);
      ++res.epochs;
      b = loader->Next();
    }
    res.checksum = HashCombine(res.checksum, BatchChecksum(*b));
    return b;
  };
  for (int64_t i = 0; i < warmup; ++i) next();
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ProcessCpuSeconds();
  for (int64_t i = 0; i < steps; ++i) res.samples += next()->size;
  res.cpu_seconds = ProcessCpuSeconds() - cpu0;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.steps = steps;
  return res;
}

}  // namespace sift::data
