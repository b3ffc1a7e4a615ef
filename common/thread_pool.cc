#include "common/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <memory>

namespace sift {

int AvailableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int num_threads) : ThreadPool(num_threads, nullptr) {}

ThreadPool::ThreadPool(int num_threads, std::function<void()> thread_init)
    : num_threads_(num_threads > 0 ? num_threads : AvailableCpus()) {
  // The caller takes part in ParallelFor, so n threads of work need n - 1 pool threads; keep at
  // least one for Schedule().
  const int workers = std::max(1, num_threads_ - 1);
  threads_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    threads_.emplace_back([this, thread_init] {
      if (thread_init) thread_init();
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t chunks = (n + grain - 1) / grain;
  if (num_threads_ == 1 || chunks == 1) {
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    return;
  }
  // Shared by the caller and the helpers; a helper that starts after every chunk is claimed
  // touches only this state, which it co-owns, never `fn`.
  struct Shared {
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    int64_t done = 0;  // guarded by mu
  };
  auto shared = std::make_shared<Shared>();
  auto run = [shared, chunks, grain, n, &fn] {
    int64_t finished = 0;
    for (int64_t c; (c = shared->next.fetch_add(1)) < chunks;) {
      const int64_t b = c * grain;
      fn(b, std::min(n, b + grain));
      ++finished;
    }
    if (finished == 0) return;
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->done += finished;
    if (shared->done == chunks) shared->cv.notify_all();
  };
  const int helpers = static_cast<int>(std::min<int64_t>(chunks - 1, num_threads_ - 1));
  for (int i = 0; i < helpers; ++i) Schedule(run);
  run();
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->cv.wait(lock, [&] { return shared->done == chunks; });
}

}  // namespace sift
