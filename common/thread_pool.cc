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

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : AvailableCpus()) {
  // The caller takes part in ParallelFor, so n threads of work need n - 1 pool threads; keep at
  // least one for Schedule().
  int workers = std::max(1, num_threads_ - 1);
  threads_.reserve(workers);
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stop_ || !p->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.erase(queue_.begin());
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
    fn(0, n);
    return;
  }
  struct Shared {
    std::atomic<int64_t> next{0};
    absl::Mutex mu;
    int64_t done ABSL_GUARDED_BY(mu) = 0;
  };
  auto shared = std::make_shared<Shared>();
  auto run = [shared, chunks, grain, n, &fn] {
    int64_t finished = 0;
    for (int64_t c; (c = shared->next.fetch_add(1)) < chunks;) {
      int64_t b = c * grain;
      fn(b, std::min(n, b + grain));
      ++finished;
    }
    absl::MutexLock lock(&shared->mu);
    shared->done += finished;
  };
  const int helpers = static_cast<int>(std::min<int64_t>(chunks - 1, num_threads_ - 1));
  for (int i = 0; i < helpers; ++i) Schedule(run);
  run();
  std::pair<Shared*, int64_t> wait_arg(shared.get(), chunks);
  absl::MutexLock lock(&shared->mu);
  shared->mu.Await(absl::Condition(
      +[](std::pair<Shared*, int64_t>* a)
           ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->first->done == a->second; },
      &wait_arg));
}

}  // namespace sift
