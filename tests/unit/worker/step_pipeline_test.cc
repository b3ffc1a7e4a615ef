// StepPipeline: steps come out in order; k = 0 prepares on the caller's thread after every earlier
// push; k >= 1 overlaps the next step's pull with the current step (proved by a consumer that
// waits for the overlap before it pushes) and never lets a pull start before the push of step
// s-1-k, nor more than one step ahead; Drain leaves nothing in flight; errors reach Next.
#include "worker/step_pipeline.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sift::worker {
namespace {

// The stand-in for the embedding store: counts pushes; the prepare function records how many
// pushes had returned, and how many steps the consumer had taken, when each pull started.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  int64_t pushes = 0;  // pushes returned (steps 0 .. pushes-1)
  int64_t taken = 0;   // steps the consumer holds or held
  std::vector<int64_t> pushes_at_pull, taken_at_pull, prepared;
  std::vector<std::thread::id> threads;
  int in_flight = 0;

  StepPipeline::PrepareFn Fn() {
    return [this](int64_t step, PreparedStep* slot) {
      {
        std::lock_guard<std::mutex> l(mu);
        ++in_flight;
        pushes_at_pull.resize(std::max<size_t>(pushes_at_pull.size(), step + 1), -1);
        taken_at_pull.resize(pushes_at_pull.size(), -1);
        pushes_at_pull[step] = pushes;
        taken_at_pull[step] = taken;
        prepared.push_back(step);
        threads.push_back(std::this_thread::get_id());
      }
      cv.notify_all();
      slot->keys.batch = step;  // the "rows" of this step
      std::lock_guard<std::mutex> l(mu);
      --in_flight;
      return absl::OkStatus();
    };
  }
  // Waits (bounded, so a broken pipeline fails instead of hanging) until step's pull started.
  bool WaitPullStarted(int64_t step) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(20), [&] {
      return static_cast<int64_t>(pushes_at_pull.size()) > step && pushes_at_pull[step] >= 0;
    });
  }
};

// Runs steps [first, end) as the trainer does: Next, (optionally wait for the overlap), push, Done.
void Consume(StepPipeline* p, Recorder* r, int64_t first, int64_t end, bool expect_overlap) {
  {
    std::lock_guard<std::mutex> l(r->mu);
    r->pushes = first;
    r->taken = first;
  }
  p->Start(first, end);
  for (int64_t s = first; s < end; ++s) {
    auto slot = p->Next();
    ASSERT_TRUE(slot.ok()) << slot.status();
    ASSERT_NE(*slot, nullptr);
    EXPECT_EQ((*slot)->step, s);
    EXPECT_EQ((*slot)->keys.batch, s);
    {
      std::lock_guard<std::mutex> l(r->mu);
      r->taken = s + 1;
    }
    if (expect_overlap && s + 1 < end) {
      ASSERT_TRUE(r->WaitPullStarted(s + 1)) << "step " << s;
    }
    {
      std::lock_guard<std::mutex> l(r->mu);
      r->pushes = s + 1;
    }
    p->Done(s);
  }
  auto past = p->Next();
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(*past, nullptr);
}

TEST(StepPipelineTest, SynchronousPreparesOnTheCallerAfterEveryPush) {
  Recorder r;
  StepPipeline p(0, r.Fn());
  EXPECT_FALSE(p.prefetching());
  Consume(&p, &r, 0, 7, /*expect_overlap=*/false);
  ASSERT_EQ(r.prepared.size(), 7u);
  for (int64_t s = 0; s < 7; ++s) {
    EXPECT_EQ(r.prepared[s], s);
    EXPECT_EQ(r.pushes_at_pull[s], s) << "every earlier push returned before pull " << s;
    EXPECT_EQ(r.threads[s], std::this_thread::get_id());
  }
}

TEST(StepPipelineTest, StalenessOneOverlapsThePullWithTheCurrentStep) {
  Recorder r;
  StepPipeline p(1, r.Fn());
  EXPECT_TRUE(p.prefetching());
  // The consumer pushes step s only after the pull of s + 1 started: this completes only when
  // the pipeline really overlaps them.
  Consume(&p, &r, 0, 9, /*expect_overlap=*/true);
  ASSERT_EQ(r.prepared.size(), 9u);
  for (int64_t s = 0; s < 9; ++s) {
    EXPECT_EQ(r.prepared[s], s);
    EXPECT_GE(r.pushes_at_pull[s], s - 1) << "pull " << s << " is more than 1 step stale";
    EXPECT_LE(r.taken_at_pull[s], s) << "pull " << s << " ran more than one step ahead";
    EXPECT_NE(r.threads[s], std::this_thread::get_id());
  }
  // The overlap did happen (step s + 1 pulled while s had not been pushed).
  EXPECT_EQ(r.pushes_at_pull[5], 4);
}

TEST(StepPipelineTest, LargerStalenessIsBoundedByOneStepAhead) {
  Recorder r;
  StepPipeline p(3, r.Fn());
  Consume(&p, &r, 2, 10, /*expect_overlap=*/true);
  ASSERT_EQ(r.prepared.size(), 8u);
  for (int64_t s = 2; s < 10; ++s) {
    EXPECT_GE(r.pushes_at_pull[s], s - 1) << "effective bound min(k, 1)";
    EXPECT_LE(r.taken_at_pull[s], s);
  }
}

TEST(StepPipelineTest, DrainLeavesNothingInFlightUntilTheNextStep) {
  Recorder r;
  StepPipeline p(1, r.Fn());
  p.Start(0, 5);
  for (int64_t s = 0; s < 3; ++s) {
    auto slot = p.Next();
    ASSERT_TRUE(slot.ok());
    p.Done(s);
    p.Drain();
    std::lock_guard<std::mutex> l(r.mu);
    EXPECT_EQ(r.in_flight, 0);
    // Step s + 1 is prepared (it may be), s + 2 is not: nothing starts before the next Next.
    EXPECT_EQ(static_cast<int64_t>(r.prepared.size()), s + 2);
  }
  // A new range after a drain: the next epoch.
  Consume(&p, &r, 0, 3, /*expect_overlap=*/false);
}

TEST(StepPipelineTest, APrepareErrorReachesNext) {
  for (int64_t k : {0, 1}) {
    StepPipeline p(k, [](int64_t step, PreparedStep*) {
      return step == 2 ? absl::UnavailableError("shard 1 down") : absl::OkStatus();
    });
    p.Start(0, 5);
    ASSERT_TRUE(p.Next().ok());
    p.Done(0);
    ASSERT_TRUE(p.Next().ok());
    p.Done(1);
    auto third = p.Next();
    ASSERT_FALSE(third.ok()) << "k=" << k;
    EXPECT_EQ(third.status().code(), absl::StatusCode::kUnavailable);
    p.Drain();  // returns: a failed pipeline has nothing in flight
  }
}

}  // namespace
}  // namespace sift::worker
