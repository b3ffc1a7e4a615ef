// The reference's performance calculator (docs/model-spec.md 5.7) with sift's fix (13 item 6):
// warm-up steps are excluded only when steps remain to be measured, so a run of any size reports
// its numbers. Also the GFLOP/s helper and a labelled *estimate* of this CPU's FP32 FMA peak
// (docs/benchmarks.md). PerfStats is not thread-safe (one trainer thread owns it); the clock is
// injectable for deterministic tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace sift {

// Monotonic clock in seconds (any origin). Injectable for tests.
using PerfClock = std::function<double()>;
double SteadyClockSeconds();
// CPU time of this process so far, every thread (CLOCK_PROCESS_CPUTIME_ID), seconds.
double ProcessCpuSeconds();

// numpy.percentile's default ("linear"): sorted x, h = (n − 1)·q/100, lo = floor(h),
// x[lo] + (h − lo)·(x[lo+1] − x[lo]). NaN for an empty input. REQUIRES: 0 <= q <= 100.
double PercentileLinear(absl::Span<const double> values, double q);

struct PerfStatsOptions {
  int64_t warmup_steps = 20;
  // Steps after which completed() becomes true and results freeze (benchmark mode); 0 = unbounded.
  int64_t total_steps = 0;
  // Total steps the run is known to record (counting warm-up), or -1 if unknown. When known and
  // <= warmup_steps, nothing is ever discarded. When unknown, warm-up data is discarded at
  // warmup_steps but kept aside: if no step follows, results fall back to it.
  int64_t planned_steps = -1;
};

struct PerfResults {
  double throughput = 0;  // samples/s over the measured window (NaN if its wall time is 0)
  double time_s = 0;      // seconds since construction (or since completion froze results)
  double window_s = 0;    // wall seconds of the measured window
  double latency_mean_ms = 0, latency_p90_ms = 0, latency_p95_ms = 0, latency_p99_ms = 0;
  int64_t steps = 0;             // steps in the measured window
  int64_t samples = 0;           // samples in the measured window
  bool warmup_excluded = false;  // true when the first warmup_steps steps are not in the window
};

class PerfStats {
 public:
  explicit PerfStats(PerfStatsOptions options = {}, PerfClock clock = nullptr);

  // Records one step: `samples` = local batch × world size, `latency_s` its wall latency. Returns
  // the step's throughput samples / latency_s (NaN if latency_s <= 0). After completed() this only
  // returns the step throughput (results are frozen).
  double RecordStep(int64_t samples, double latency_s);
  // Same, with the latency measured by the clock since the previous Step()/construction/
  // StartEpoch() (the reference's definition: it includes data fetch and bookkeeping).
  double Step(int64_t samples);

  // Starts a new epoch: resets the window (samples, latencies, clock) but not the step counter, so
  // warm-up exclusion only ever applies once (as the reference).
  void StartEpoch();

  // True once total_steps > 0 steps have been recorded.
  bool completed() const { return options_.total_steps > 0 && step_count_ >= options_.total_steps; }
  int64_t step_count() const { return step_count_; }

  PerfResults Results() const;
  // The reference's summary metric names: throughput, time, latency_mean, latency_p90,
  // latency_p95, latency_p99 (latencies in ms), ready for DLLogger::Log.
  std::vector<std::pair<std::string, double>> SummaryMetrics() const;

 private:
  struct Window {
    double start_s = 0;
    double end_s = 0;  // set when the window is closed (the warm-up window)
    int64_t samples = 0;
    std::vector<double> latencies_s;
  };
  bool WillDiscardWarmup() const;

  PerfStatsOptions options_;
  PerfClock clock_;
  double init_s_;
  double last_step_end_s_;
  double frozen_end_s_ = -1;  // clock value when completed() first became true
  int64_t step_count_ = 0;
  Window window_;
  Window warmup_;  // the discarded warm-up window (fallback when nothing follows it)
  bool discarded_ = false;
};

// ---- Compute rate ----

inline constexpr double kTrainMflopPerSample = 10.0;     // model-spec 10.2, fwd+bwd with aux
inline constexpr double kInferenceMflopPerSample = 2.7;  // forward without aux

// samples/s × MFLOP per sample / 1e3.
inline double GflopsPerSecond(double samples_per_s, double mflop_per_sample) {
  return samples_per_s * mflop_per_sample / 1e3;
}

// AN ESTIMATE, not a measurement: cores × GHz × FP32 FLOPs per cycle per core, with FLOPs/cycle
// from the instruction set (__builtin_cpu_supports): avx512f → 64 (2 FMA × 16 lanes × 2), avx2+fma
// → 32 (2 × 8 × 2), otherwise 8. Ignores turbo/AVX frequency offsets and SMT (a hyperthread counts
// as a core if the process may run on it).
struct FmaPeakEstimate {
  int cores = 0;
  double ghz = 0;
  std::string ghz_source;  // "given" or "/proc/cpuinfo (max cpu MHz)" or "unknown"
  int flops_per_cycle = 0;
  std::string isa;               // "avx512f", "avx2+fma" or "scalar/sse"
  double gflops = 0;             // cores × ghz × flops_per_cycle (0 when ghz is unknown)
  std::string Describe() const;  // one line, labelled "estimate"
};

// cores <= 0: AvailableCpus(); ghz <= 0: the largest "cpu MHz" in /proc/cpuinfo.
FmaPeakEstimate EstimateFp32FmaPeak(int cores = 0, double ghz = 0);
// The largest "cpu MHz" value in /proc/cpuinfo text, in GHz; 0 when there is none.
double MaxCpuinfoGhz(absl::string_view cpuinfo_text);
// FP32 FLOPs per cycle per core of this CPU's best vector FMA and its name (see above).
std::pair<int, std::string> DetectFp32FlopsPerCycle();

}  // namespace sift
