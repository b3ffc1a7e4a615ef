// PerfStats: numpy-linear percentiles against hand-computed values, warm-up exclusion with and
// without steps remaining, throughput with a fake clock, completed(), epochs; the GFLOP/s helper
// and the peak-estimate pieces. Fake clocks only, no sleeps.
#include "common/perf_stats.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

TEST(PercentileLinearTest, MatchesNumpyFormula) {
  // numpy.percentile(x, q) (linear): h = (n-1)*q/100, x[floor h] + frac(h)*(x[floor h+1]-x[floor
  // h]) x = 1..10 (given unsorted), n = 10:
  //   q=90: h=8.1  -> 9 + 0.1*1  = 9.1      q=95: h=8.55 -> 9.55     q=99: h=8.91 -> 9.91
  //   q=50: h=4.5  -> 5 + 0.5*1  = 5.5      q=0 -> 1                 q=100 -> 10
  const std::vector<double> x = {7, 1, 10, 3, 5, 2, 9, 4, 8, 6};
  EXPECT_NEAR(PercentileLinear(x, 90), 9.1, 1e-12);
  EXPECT_NEAR(PercentileLinear(x, 95), 9.55, 1e-12);
  EXPECT_NEAR(PercentileLinear(x, 99), 9.91, 1e-12);
  EXPECT_NEAR(PercentileLinear(x, 50), 5.5, 1e-12);
  EXPECT_EQ(PercentileLinear(x, 0), 1.0);
  EXPECT_EQ(PercentileLinear(x, 100), 10.0);
  EXPECT_EQ(PercentileLinear(std::vector<double>{4.25}, 99), 4.25);
  EXPECT_TRUE(std::isnan(PercentileLinear(std::vector<double>{}, 50)));
}

struct FakeClock {
  double now = 100.0;
  PerfClock fn() {
    return [this] { return now; };
  }
};

TEST(PerfStatsTest, LatencyStatsInMilliseconds) {
  FakeClock clock;
  PerfStats stats(PerfStatsOptions{.warmup_steps = 0}, clock.fn());
  // Latencies 0.030, 0.100, 0.010, 0.040, 0.020 s; sorted 10,20,30,40,100 ms, n = 5:
  //   mean = 200/5 = 40 ms; p90: h=3.6 -> 40 + 0.6*60 = 76 ms; p95: h=3.8 -> 40 + 0.8*60 = 88 ms;
  //   p99: h=3.96 -> 40 + 0.96*60 = 97.6 ms.
  for (double l : {0.030, 0.100, 0.010, 0.040, 0.020}) {
    clock.now += l;
    stats.Step(8);
  }
  const PerfResults r = stats.Results();
  EXPECT_EQ(r.steps, 5);
  EXPECT_EQ(r.samples, 40);
  EXPECT_FALSE(r.warmup_excluded);
  EXPECT_NEAR(r.latency_mean_ms, 40.0, 1e-9);
  EXPECT_NEAR(r.latency_p90_ms, 76.0, 1e-9);
  EXPECT_NEAR(r.latency_p95_ms, 88.0, 1e-9);
  EXPECT_NEAR(r.latency_p99_ms, 97.6, 1e-9);
  EXPECT_NEAR(r.window_s, 0.2, 1e-12);
  EXPECT_NEAR(r.throughput, 40 / 0.2, 1e-6);
  EXPECT_NEAR(r.time_s, 0.2, 1e-12);
}

TEST(PerfStatsTest, WarmupExcludedWhenStepsRemain) {
  FakeClock clock;
  PerfStats stats(PerfStatsOptions{.warmup_steps = 3}, clock.fn());
  // Warm-up: 3 slow steps of 1 s with 10 samples each.
  for (int i = 0; i < 3; ++i) {
    clock.now += 1.0;
    EXPECT_DOUBLE_EQ(stats.Step(10), 10.0);  // per-step throughput = samples / latency
  }
  // Measured: 4 steps of 0.5 s with 100 samples each, then 1 s of idle time before Results().
  for (int i = 0; i < 4; ++i) {
    clock.now += 0.5;
    EXPECT_DOUBLE_EQ(stats.Step(100), 200.0);
  }
  clock.now += 1.0;
  const PerfResults r = stats.Results();
  EXPECT_TRUE(r.warmup_excluded);
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.samples, 400);
  EXPECT_NEAR(r.window_s, 3.0, 1e-12);         // post-warm-up clock: 2 s of steps + 1 s idle
  EXPECT_NEAR(r.throughput, 400 / 3.0, 1e-9);  // samples / seconds since post-warm-up start
  EXPECT_NEAR(r.latency_mean_ms, 500.0, 1e-9);
  EXPECT_NEAR(r.latency_p99_ms, 500.0, 1e-9);
  EXPECT_NEAR(r.time_s, 3 + 2 + 1, 1e-12);  // since construction
}

TEST(PerfStatsTest, PlannedRunNoLongerThanWarmupKeepsEverything) {
  for (int64_t planned : {2, 3}) {
    FakeClock clock;
    PerfStats stats(PerfStatsOptions{.warmup_steps = 3, .planned_steps = planned}, clock.fn());
    for (int i = 0; i < planned; ++i) {
      clock.now += 0.25;
      stats.Step(5);
    }
    const PerfResults r = stats.Results();
    EXPECT_FALSE(r.warmup_excluded) << planned;
    EXPECT_EQ(r.steps, planned);
    EXPECT_EQ(r.samples, 5 * planned);
    EXPECT_NEAR(r.throughput, 20.0, 1e-9) << planned;  // 5 samples per 0.25 s
    EXPECT_NEAR(r.latency_mean_ms, 250.0, 1e-9);
  }
}

TEST(PerfStatsTest, UnknownLengthRunEndingAtWarmupFallsBackToWarmupNumbers) {
  // The reference divides by zero here (quirk 18); sift reports the warm-up window instead.
  FakeClock clock;
  PerfStats stats(PerfStatsOptions{.warmup_steps = 2}, clock.fn());
  clock.now += 1.0;
  stats.Step(10);
  clock.now += 3.0;
  stats.Step(30);
  clock.now += 5.0;  // time passes after the last step; the warm-up window ended at its last step
  const PerfResults r = stats.Results();
  EXPECT_FALSE(r.warmup_excluded);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.samples, 40);
  EXPECT_NEAR(r.window_s, 4.0, 1e-12);
  EXPECT_NEAR(r.throughput, 10.0, 1e-9);
  EXPECT_NEAR(r.latency_mean_ms, 2000.0, 1e-9);
  EXPECT_NEAR(r.time_s, 9.0, 1e-12);
}

TEST(PerfStatsTest, EmptyRunReportsNaNNotCrash) {
  FakeClock clock;
  PerfStats stats({}, clock.fn());
  const PerfResults r = stats.Results();
  EXPECT_EQ(r.steps, 0);
  EXPECT_TRUE(std::isnan(r.throughput));
  EXPECT_TRUE(std::isnan(r.latency_p90_ms));
  EXPECT_TRUE(std::isnan(stats.RecordStep(5, 0.0)));  // zero latency: undefined step rate
}

TEST(PerfStatsTest, CompletedFreezesResults) {
  FakeClock clock;
  PerfStats stats(PerfStatsOptions{.warmup_steps = 2, .total_steps = 5}, clock.fn());
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(stats.completed()) << i;
    clock.now += 0.1;
    stats.Step(1);
  }
  EXPECT_TRUE(stats.completed());
  EXPECT_EQ(stats.step_count(), 5);
  const PerfResults before = stats.Results();
  clock.now += 10.0;
  stats.Step(1000);  // ignored: results are frozen
  const PerfResults after = stats.Results();
  EXPECT_EQ(stats.step_count(), 5);
  EXPECT_EQ(after.steps, 3);
  EXPECT_EQ(after.samples, 3);
  EXPECT_TRUE(after.warmup_excluded);
  EXPECT_DOUBLE_EQ(after.throughput, before.throughput);
  EXPECT_NEAR(after.throughput, 3 / 0.3, 1e-9);
  EXPECT_NEAR(after.time_s, 0.5, 1e-12);
}

TEST(PerfStatsTest, TotalStepsNotAboveWarmupNeverDiscards) {
  // The reference's default (benchmark_steps = 0 -> total_steps = warmup): no steps left after
  // warm-up, so sift keeps them all.
  FakeClock clock;
  PerfStats stats(PerfStatsOptions{.warmup_steps = 3, .total_steps = 3}, clock.fn());
  for (int i = 0; i < 3; ++i) {
    clock.now += 1.0;
    stats.RecordStep(4, 1.0);
  }
  EXPECT_TRUE(stats.completed());
  const PerfResults r = stats.Results();
  EXPECT_FALSE(r.warmup_excluded);
  EXPECT_EQ(r.steps, 3);
  EXPECT_NEAR(r.throughput, 4.0, 1e-9);
}

TEST(PerfStatsTest, EpochsResetWindowButWarmupAppliesOnce) {
  FakeClock clock;
  PerfStats stats(PerfStatsOptions{.warmup_steps = 2}, clock.fn());
  for (int i = 0; i < 4; ++i) {
    clock.now += 1.0;
    stats.Step(1);
  }
  EXPECT_EQ(stats.Results().steps, 2);
  clock.now += 50.0;  // evaluation between epochs is not timed
  stats.StartEpoch();
  for (int i = 0; i < 3; ++i) {
    clock.now += 2.0;
    stats.Step(8);
  }
  const PerfResults r = stats.Results();
  EXPECT_EQ(r.steps, 3);  // the epoch's first steps are not warm-up again
  EXPECT_EQ(r.samples, 24);
  EXPECT_NEAR(r.throughput, 4.0, 1e-9);
  EXPECT_NEAR(r.latency_mean_ms, 2000.0, 1e-9);
  EXPECT_NEAR(r.time_s, 6.0, 1e-12);
  EXPECT_EQ(stats.step_count(), 7);
}

TEST(PerfStatsTest, SummaryMetricNames) {
  FakeClock clock;
  PerfStats stats(PerfStatsOptions{.warmup_steps = 0}, clock.fn());
  clock.now += 0.5;
  stats.Step(2);
  const auto m = stats.SummaryMetrics();
  ASSERT_EQ(m.size(), 6u);
  const char* names[] = {"throughput",  "time",        "latency_mean",
                         "latency_p90", "latency_p95", "latency_p99"};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(m[i].first, names[i]);
  EXPECT_NEAR(m[0].second, 4.0, 1e-9);
  EXPECT_NEAR(m[3].second, 500.0, 1e-9);
}

TEST(ComputeRateTest, GflopsAndPeakEstimate) {
  // 100k samples/s x 10 MFLOP = 1e12 FLOP/s = 1000 GFLOP/s; inference 2.7 MFLOP -> 270.
  EXPECT_DOUBLE_EQ(GflopsPerSecond(100000, kTrainMflopPerSample), 1000.0);
  EXPECT_DOUBLE_EQ(GflopsPerSecond(100000, kInferenceMflopPerSample), 270.0);
  EXPECT_DOUBLE_EQ(MaxCpuinfoGhz("processor\t: 0\ncpu MHz\t\t: 2400.000\nprocessor\t: 1\n"
                                 "cpu MHz\t\t: 3100.5\nflags\t\t: fpu\n"),
                   3.1005);
  EXPECT_EQ(MaxCpuinfoGhz("processor : 0\nBogoMIPS : 50.00\n"), 0.0);
  const auto [fpc, isa] = DetectFp32FlopsPerCycle();
  EXPECT_TRUE(fpc == 64 || fpc == 32 || fpc == 8) << fpc;
  const FmaPeakEstimate e = EstimateFp32FmaPeak(/*cores=*/2, /*ghz=*/2.5);
  EXPECT_EQ(e.cores, 2);
  EXPECT_EQ(e.ghz_source, "given");
  EXPECT_EQ(e.flops_per_cycle, fpc);
  EXPECT_EQ(e.isa, isa);
  EXPECT_DOUBLE_EQ(e.gflops, 2 * 2.5 * fpc);
  EXPECT_THAT(e.Describe(), HasSubstr("ESTIMATE"));
}

}  // namespace
}  // namespace sift
