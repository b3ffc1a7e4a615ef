// ThreadPool: a fixed set of worker threads with a blocking ParallelFor, for data work
// (generation, materialisation, conversion). Thread-safe: many callers may submit at once.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sift {

class ThreadPool {
 public:
  // `num_threads` <= 0 means the hardware concurrency. With 1 thread, work runs on the caller.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over [0, n) split into chunks of at most `grain` items, using the
  // pool and the calling thread; returns when every chunk has run. fn must be thread-safe.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Runs `task` on a pool thread, asynchronously.
  void Schedule(std::function<void()> task);

 private:
  void WorkerLoop();

  const int num_threads_;
  absl::Mutex mu_;
  std::vector<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int AvailableCpus();

}  // namespace sift
