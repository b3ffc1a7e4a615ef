// BatchLoader: materialises one rank's batches of one split (docs/data.md section 2) in a
// per-epoch order (shuffled, or the reference's TFRecord stream order), with a thread pool,
// `prefetch` batches ahead of the consumer. Batches are identical for any thread count and depth.
// Not thread-safe: one consumer thread calls StartEpoch/Next; the loader owns its threads and joins
// them on destruction (also mid-epoch). The SampleSource must outlive the loader.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/data/batch.h"
#include "common/data/sample_source.h"
#include "common/status.h"
#include "common/thread_pool.h"

namespace sift::data {

enum class SampleOrder { kShuffled = 0, kReference = 1 };
const char* SampleOrderName(SampleOrder order);
// "shuffled" or "reference"; anything else is an InvalidArgument error.
StatusOr<SampleOrder> ParseSampleOrder(absl::string_view name);
// "train" or "test"; anything else is an InvalidArgument error.
StatusOr<Split> ParseSplit(absl::string_view name);

struct BatchLoaderOptions {
  Split split = Split::kTrain;
  int64_t batch_size = 1024;  // B, >= 1
  HistoryOptions history;     // max_history >= 1, 0 <= short_history <= max_history
  SampleOrder order = SampleOrder::kShuffled;
  uint64_t seed = 0;  // shuffle seed (with the epoch number); unused for kReference
  int rank = 0;       // 0 <= rank < world
  int world = 1;
  // true (training): every rank gets floor(N/W) samples and floor(n/B) full batches, equal steps;
  // false (evaluation): the ranks' shares cover all N, the last batch may be partial.
  bool drop_remainder = true;
  // kShuffled with world > 1: rank r reads the epoch order's positions r, r+W, r+2W, ... instead
  // of a contiguous block, so the W ranks' batch t at batch size B/W together are the samples one
  // process reads in its batch t at batch size B (the synchronous sparse step's sample stream).
  // kReference always interleaves (the reference's sharding).
  bool interleave = false;
  int threads = 0;   // materialisation threads; 0 = every available CPU
  int prefetch = 2;  // batch buffers, >= 1: 1 = built on demand, 2 = double-buffered, ...
  // kReference only: the prebatch size P of the reference TFRecords being mirrored (0 or 1 = not
  // prebatched). Records of P consecutive samples are what is split into parts, interleaved and
  // sharded; the remainder record is read last, by rank 0 only, and only without drop_remainder
  // (model-spec 6.3, 6.5). Use a batch size that is a multiple of P for the reference's batches.
  int64_t reference_prebatch = 0;
  // Rows of each batch in decreasing order of their history length (SampleSource::HistoryEvents,
  // capped at max_history; ties keep the epoch order): SIM's streamed soft search then visits
  // chunks of samples of similar length and skips their common padding. The samples of batch t
  // are the same either way, only their rows move. No effect where the source does not know the
  // lengths (stored samples).
  bool group_by_history = false;
};

// Checks every field against `source` (and the split's size). Errors name the option.
Status ValidateBatchLoaderOptions(const SampleSource& source, const BatchLoaderOptions& options);

// ---- The epoch order and the rank shares, as pure functions (also used by the tests). ----------

// The reference order (model-spec 6.5), the same in every epoch.
// Number of TFRecord parts of a split: 8 for train, 4 for test.
int ReferenceParts(Split split);
// Sample index at `position` of the reference stream: indices 0..n-1 cut into `parts` contiguous
// parts (the first n mod parts get one extra), interleaved part0[0], part1[0], ..., part0[1], ...
// REQUIRES: 0 <= position < n, parts >= 1.
int64_t ReferenceStreamIndex(int64_t n, int parts, int64_t position);
// The reference's record stream as one rank reads it, for n samples in records of P >= 1
// consecutive samples (P = 1: not prebatched): G = n / P full records cut into `parts` parts and
// interleaved (ReferenceStreamIndex over records), rank r reads stream records r, r+W, ...; with
// drop_remainder every rank reads floor(G/W) records, without it rank 0 also reads the remainder
// record (n mod P samples) last. Samples this rank reads, and the sample index at its position k.
int64_t ReferenceRankSamples(int64_t n, int64_t prebatch, int rank, int world, bool drop_remainder);
int64_t ReferenceRankIndex(int64_t n, int64_t prebatch, int parts, int rank, int world, int64_t k);

// The shuffled order of epoch `epoch`: a Fisher–Yates permutation of all n samples driven by
// Rng(HashCombine(seed, epoch)), the same on every rank. Reuses `order`'s memory.
void ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch, std::vector<int64_t>* order);

// The positions of the epoch order a rank reads: position(k) = first + k * stride, k < count.
// With drop_remainder every rank gets count = floor(n/W) — shuffled: the block [r*c, (r+1)*c),
// or with `interleave` round-robin r, r+W, ...; reference: always round-robin, as the reference
// shards its record stream. Without it the shares cover all n (sizes differ by at most 1):
// contiguous near-equal blocks / round-robin.
struct RankShare {
  int64_t first = 0;
  int64_t stride = 1;
  int64_t count = 0;
};
RankShare ComputeRankShare(int64_t n, SampleOrder order, int rank, int world, bool drop_remainder,
                           bool interleave = false);

// A cheap, order-sensitive checksum of a batch's rows [0, size) (every array, including index and
// label). Equal batches give equal checksums.
uint64_t BatchChecksum(const Batch& batch);

class BatchLoader {
 public:
  static StatusOr<std::unique_ptr<BatchLoader>> Create(const SampleSource* source,
                                                       const BatchLoaderOptions& options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Starts (or restarts) epoch `epoch` >= 0 at its batch `first_step` (0 <= first_step; at or
  // past steps_per_epoch() the epoch has no batch left), abandoning what the previous epoch had
  // left. Batch t of the epoch is the same whatever first_step was (resuming mid-epoch). The
  // shuffled order is computed here, on the caller's thread (O(N)); batches are built in the
  // background from here on.
  void StartEpoch(int64_t epoch, int64_t first_step = 0);
  // The next batch of the epoch, or nullptr after the last one (or before any StartEpoch). The
  // batch is valid until the next Next() or StartEpoch(). A partial last batch has
  // size < capacity = B; its rows [size, B) are zero (index -1).
  const Batch* Next();

  int64_t steps_per_epoch() const { return steps_; }
  // Samples this rank reads per epoch (steps * B with drop_remainder).
  int64_t samples_per_epoch() const { return samples_; }
  int num_threads() const { return pool_.num_threads(); }
  const BatchLoaderOptions& options() const { return options_; }
  // Sample index at this rank's position `k` (0 <= k < samples_per_epoch()) of the current epoch.
  // REQUIRES: StartEpoch was called.
  int64_t IndexAt(int64_t k) const;

 private:
  BatchLoader(const SampleSource* source, const BatchLoaderOptions& options);
  void ProducerLoop();
  // Conditions, evaluated with mu_ held.
  bool CanBuild() const;
  bool HasBatch() const { return built_ > consumed_; }
  // Builds batch `t` of the current epoch into `batch`; returns false if cancelled meanwhile.
  bool Build(int64_t t, uint64_t generation, Batch* batch);
  bool Cancelled(uint64_t generation) const;
  // group_by_history: the epoch positions of batch t's rows, [begin, begin + rows) reordered.
  void GroupByHistory(int64_t begin, int64_t rows, std::vector<int64_t>* positions) const;

  const SampleSource* const source_;
  const BatchLoaderOptions options_;
  const int64_t n_;  // samples in the split
  RankShare share_;
  int64_t steps_ = 0, samples_ = 0;
  ThreadPool pool_;
  std::vector<Batch> slots_;    // ring of `prefetch` buffers: batch t lives in slot t % prefetch
  std::vector<int64_t> order_;  // the shuffled epoch order (empty for kReference)

  // std::mutex rather than absl::Mutex, like ThreadPool: TSan cannot see Debian's uninstrumented
  // Abseil synchronisation. Everything below up to producer_ is guarded by mu_.
  std::mutex mu_;
  std::condition_variable producer_cv_;       // the producer waits for CanBuild()
  std::condition_variable consumer_cv_;       // the consumer waits for a batch or an idle producer
  uint64_t generation_ = 0;                   // bumped by StartEpoch and the destructor
  std::atomic<uint64_t> live_generation_{0};  // mirror of generation_ for cancellation
  bool stop_ = false;
  bool started_ = false;        // an epoch is running
  bool producer_busy_ = false;  // building into a slot
  int64_t built_ = 0;           // batches of the epoch completed
  int64_t consumed_ = 0;        // batches handed to the consumer
  int64_t released_ = 0;        // batches the consumer is done with
  std::thread producer_;
};

// ---- The benchmark behind `sift bench loader` (docs/benchmarks.md). ---------------------------

struct LoaderBenchmarkResult {
  int threads = 0;           // materialisation threads used
  int64_t warmup_steps = 0;  // batches consumed before the clock started
  int64_t steps = 0;         // batches timed
  int64_t samples = 0;       // rows in the timed batches
  int64_t epochs = 0;        // epochs started (the loader wraps around at an epoch's end)
  double seconds = 0;        // wall time of the timed batches
  double cpu_seconds = 0;    // process CPU time over the same interval (all threads)
  uint64_t checksum = 0;     // BatchChecksum of every consumed batch, chained in order
  double samples_per_second() const { return seconds > 0 ? samples / seconds : 0; }
  double batches_per_second() const { return seconds > 0 ? steps / seconds : 0; }
};

// Creates a loader over `source` with `options`, consumes `warmup` batches, then times `steps`
// more (starting epoch 0, then 1, ... whenever an epoch ends), checksumming every batch on the
// consumer's thread as a trainer would read it. REQUIRES: steps >= 1, warmup >= 0.
StatusOr<LoaderBenchmarkResult> RunLoaderBenchmark(const SampleSource* source,
                                                   const BatchLoaderOptions& options, int64_t steps,
                                                   int64_t warmup);

}  // namespace sift::data
