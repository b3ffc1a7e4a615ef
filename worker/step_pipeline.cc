#include "worker/step_pipeline.h"

#include <utility>

namespace sift::worker {

StepPipeline::StepPipeline(int64_t staleness, PrepareFn prepare)
    : staleness_(staleness), prepare_(std::move(prepare)) {
  if (prefetching()) thread_ = std::thread([this] { PrefetchLoop(); });
}

StepPipeline::~StepPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StepPipeline::Start(int64_t first, int64_t end) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_; });
    end_ = end;
    next_prepare_ = taken_ = first;
    pushed_ = first - 1;
    ready_[0] = ready_[1] = -1;
    error_ = absl::OkStatus();
  }
  cv_.notify_all();
}

// Step s may be prepared once the caller took s - 1 (at most one step ahead: slot s % 2 held
// s - 2, which the caller is done with) and the push of s - 1 - k has returned.
bool StepPipeline::CanPrepare() const {
  return error_.ok() && next_prepare_ < end_ && next_prepare_ <= taken_ &&
         pushed_ >= next_prepare_ - 1 - staleness_;
}

void StepPipeline::PrefetchLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || CanPrepare(); });
    if (stop_) return;
    const int64_t s = next_prepare_++;
    PreparedStep* slot = &slots_[s % 2];
    busy_ = true;
    lock.unlock();
    slot->step = s;
    Status st = prepare_(s, slot);
    lock.lock();
    busy_ = false;
    if (st.ok()) {
      ready_[s % 2] = s;
    } else {
      error_ = std::move(st);
    }
    cv_.notify_all();
  }
}

StatusOr<PreparedStep*> StepPipeline::Next() {
  if (!prefetching()) {
    if (taken_ >= end_) return nullptr;
    const int64_t s = taken_++;
    PreparedStep* slot = &slots_[0];
    slot->step = s;
    SIFT_RETURN_IF_ERROR(prepare_(s, slot));
    return slot;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!error_.ok()) return error_;
  if (taken_ >= end_) return nullptr;
  const int64_t s = taken_++;
  cv_.notify_all();  // s may now be prepared (if it is not yet), then s + 1 after it
  cv_.wait(lock, [&] { return ready_[s % 2] == s || !error_.ok(); });
  if (ready_[s % 2] != s) return error_;
  return &slots_[s % 2];
}

void StepPipeline::Done(int64_t step) {
  if (!prefetching()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (step > pushed_) pushed_ = step;
  }
  cv_.notify_all();
}

void StepPipeline::Drain() {
  if (!prefetching()) return;
  std::unique_lock<std::mutex> lock(mu_);
  // Also waits for a prepare that may start but has not yet (the thread not yet woken): after
  // this, the step after the one taken last is prepared and nothing else may start.
  cv_.wait(lock, [this] { return !busy_ && !CanPrepare(); });
}

}  // namespace sift::worker
