// ThreadPool: a fixed set of worker threads with a blocking ParallelFor, for data work
// (generation, materialisation, conversion). Thread-safe: many callers may submit at once.
//
// Uses std::mutex / std::condition_variable rather than absl::Mutex on purpose: Debian's Abseil
// shared libraries are not built with ThreadSanitizer annotations, so TSan cannot see absl::Mutex
// synchronisation and reports false races; the standard primitives are intercepted by TSan.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sift {

class ThreadPool {
 public:
  // `num_threads` <= 0 means the available CPUs. With 1 thread, ParallelFor runs on the caller.
  explicit ThreadPool(int num_threads);
  // Same, and every pool thread runs `thread_init` once before any work (per-thread state such
  // as floating-point modes; the caller's own thread is the caller's business).
  ThreadPool(int num_threads, std::function<void()> thread_init);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over [0, n) split into chunks of at most `grain` items, using the
  // pool and the calling thread; returns when every chunk has run. fn must be thread-safe.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Runs `task` on a pool thread, asynchronously. Tasks still queued at destruction still run.
  void Schedule(std::function<void()> task);

 private:
  void WorkerLoop();

  const int num_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;
};

// A one-shot event: Notify() once, WaitForNotification() from any thread (like
// absl::Notification, on std primitives for the reason above).
class Notification {
 public:
  // Notifies under the lock: a waiter may destroy this object as soon as it sees notified_.
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    notified_ = true;
    cv_.notify_all();
  }
  void WaitForNotification() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return notified_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool notified_ = false;  // guarded by mu_
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int AvailableCpus();

}  // namespace sift
