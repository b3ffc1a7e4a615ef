#include "common/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace sift {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 1000, 4097}) {
      for (int64_t grain : {1, 3, 64, 10000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LE(e - b, grain);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n << " i " << i;
        }
      }
    }
  }
}

TEST(ThreadPool, ConcurrentCallersAndQueuedTasksFinish) {
  std::atomic<int64_t> sum{0};
  {
    ThreadPool pool(3);
    std::vector<std::thread> callers;
    for (int c = 0; c < 4; ++c) {
      callers.emplace_back(
          [&] { pool.ParallelFor(1000, 10, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); }); });
    }
    for (auto& t : callers) t.join();
    for (int i = 0; i < 50; ++i) pool.Schedule([&] { sum.fetch_add(1); });
  }  // the destructor drains the queue
  EXPECT_EQ(sum.load(), 4 * 1000 + 50);
}

}  // namespace
}  // namespace sift
