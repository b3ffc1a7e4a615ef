// StepPipeline: the load -> dedup -> pull stages of a run's training steps (architecture.md steps
// 1-3), handed out in step order. Two modes, one prepare function:
//   - staleness k = 0 (synchronous): Next() prepares step t on the caller's thread, after the
//     caller's push of step t-1 — every pull sees every earlier push;
//   - k >= 1: a prefetch thread prepares step t+1 while the caller computes step t. The pull of
//     step s starts only after the caller reported the push of step s-1-k (Done), and at most one
//     step is prepared ahead of the caller, so a pulled row misses at most min(k, 1) pushes.
// The prefetch thread starts preparing step t+1 only once the caller took step t (Next), so after
// Drain() (which waits for the prepare in flight) nothing runs until the next Next(): evaluation,
// checkpoints and aborts call Drain first. Thread-compatible: one caller thread calls
// Start/Next/Done/Drain; the prepare function runs on the prefetch thread (k >= 1) or the
// caller's (k = 0). The destructor drains and joins.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "common/data/batch.h"
#include "common/status.h"
#include "worker/batch_keys.h"

namespace sift::worker {

// One prepared step: its batch, its keys with the pulled rows, and the time each stage took.
struct PreparedStep {
  int64_t step = -1;
  const data::Batch* batch = nullptr;  // &copy, or a batch the prepare function keeps valid
  data::Batch copy;                    // the batch's own storage when prefetching
  BatchKeys keys;
  int input_slot = 0;  // the model input slot its inputs were uploaded into (Model::UploadBatch)
  double load_s = 0, dedup_s = 0, pull_s = 0;
  KeyCounts key_counts;  // of keys (CountKeys)
};

class StepPipeline {
 public:
  // prepare(step, slot) fills slot->batch and slot->keys for `step`. When prefetching, what
  // slot->batch points to must stay valid while the next step is prepared (copy into
  // slot->copy). REQUIRES: staleness >= 0.
  using PrepareFn = std::function<Status(int64_t step, PreparedStep* slot)>;
  StepPipeline(int64_t staleness, PrepareFn prepare);
  ~StepPipeline();
  StepPipeline(const StepPipeline&) = delete;
  StepPipeline& operator=(const StepPipeline&) = delete;

  bool prefetching() const { return staleness_ > 0; }

  // Steps [first, end) follow; the pushes of every step before `first` have returned.
  // REQUIRES: drained (Drain, or every step of the previous range taken).
  void Start(int64_t first, int64_t end);
  // The next step, or nullptr after `end`; a failed prepare returns its error (and the pipeline
  // stays failed until Start). The slot is valid until the next call of Next().
  StatusOr<PreparedStep*> Next();
  // The push of `step` has returned (k >= 1 lets later pulls start).
  void Done(int64_t step);
  // Waits until no prepare is in flight or due (the step after the one taken last may be left
  // prepared). Nothing starts again before the next Next().
  void Drain();

 private:
  void PrefetchLoop();
  bool CanPrepare() const;  // REQUIRES: mu_ held

  const int64_t staleness_;
  const PrepareFn prepare_;
  PreparedStep slots_[2];  // step s lives in slots_[s % 2]

  std::mutex mu_;
  std::condition_variable cv_;
  int64_t end_ = 0;
  int64_t next_prepare_ = 0;  // the step the prefetch thread prepares next
  int64_t taken_ = 0;         // the step Next() hands out next
  int64_t pushed_ = -1;       // every push up to this step has returned
  int64_t ready_[2] = {-1, -1};
  Status error_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sift::worker
