#include "common/perf_stats.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/thread_pool.h"

namespace sift {

double SteadyClockSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double PercentileLinear(absl::Span<const double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x(values.begin(), values.end());
  std::sort(x.begin(), x.end());
  const double h = static_cast<double>(x.size() - 1) * q / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= x.size()) return x.back();
  return x[lo] + (h - static_cast<double>(lo)) * (x[lo + 1] - x[lo]);
}

PerfStats::PerfStats(PerfStatsOptions options, PerfClock clock)
    : options_(options), clock_(clock ? std::move(clock) : PerfClock(SteadyClockSeconds)) {
  init_s_ = clock_();
  last_step_end_s_ = init_s_;
  window_.start_s = init_s_;
}

bool PerfStats::WillDiscardWarmup() const {
  const int64_t w = options_.warmup_steps;
  if (w <= 0) return false;
  if (options_.planned_steps >= 0 && options_.planned_steps <= w) return false;
  if (options_.total_steps > 0 && options_.total_steps <= w) return false;
  return true;
}

double PerfStats::RecordStep(int64_t samples, double latency_s) {
  const double step_throughput = latency_s > 0 ? static_cast<double>(samples) / latency_s
                                               : std::numeric_limits<double>::quiet_NaN();
  if (completed()) return step_throughput;
  ++step_count_;
  window_.samples += samples;
  window_.latencies_s.push_back(latency_s);
  if (step_count_ == options_.warmup_steps && WillDiscardWarmup()) {
    const double now = clock_();
    warmup_ = std::move(window_);
    warmup_.end_s = now;
    window_ = Window{};
    window_.start_s = now;
    discarded_ = true;
  }
  if (completed()) frozen_end_s_ = clock_();
  return step_throughput;
}

double PerfStats::Step(int64_t samples) {
  const double now = clock_();
  const double latency = now - last_step_end_s_;
  last_step_end_s_ = now;
  return RecordStep(samples, latency);
}

void PerfStats::StartEpoch() {
  const double now = clock_();
  init_s_ = now;
  last_step_end_s_ = now;
  window_ = Window{};
  window_.start_s = now;
}

PerfResults PerfStats::Results() const {
  const double end = frozen_end_s_ >= 0 ? frozen_end_s_ : clock_();
  const bool use_warmup = discarded_ && window_.latencies_s.empty();
  const Window& w = use_warmup ? warmup_ : window_;
  const double w_end = use_warmup ? warmup_.end_s : end;
  PerfResults r;
  r.time_s = end - init_s_;
  r.window_s = w_end - w.start_s;
  r.steps = static_cast<int64_t>(w.latencies_s.size());
  r.samples = w.samples;
  r.warmup_excluded = discarded_ && !use_warmup;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.throughput = r.window_s > 0 ? static_cast<double>(w.samples) / r.window_s : nan;
  if (w.latencies_s.empty()) {
    r.latency_mean_ms = r.latency_p90_ms = r.latency_p95_ms = r.latency_p99_ms = nan;
  } else {
    double sum = 0;
    for (double l : w.latencies_s) sum += l;
    r.latency_mean_ms = 1e3 * sum / static_cast<double>(w.latencies_s.size());
    r.latency_p90_ms = 1e3 * PercentileLinear(w.latencies_s, 90);
    r.latency_p95_ms = 1e3 * PercentileLinear(w.latencies_s, 95);
    r.latency_p99_ms = 1e3 * PercentileLinear(w.latencies_s, 99);
  }
  return r;
}

std::vector<std::pair<std::string, double>> PerfStats::SummaryMetrics() const {
  const PerfResults r = Results();
  return {{"throughput", r.throughput},        {"time", r.time_s},
          {"latency_mean", r.latency_mean_ms}, {"latency_p90", r.latency_p90_ms},
          {"latency_p95", r.latency_p95_ms},   {"latency_p99", r.latency_p99_ms}};
}

// ---- Compute rate ----

double MaxCpuinfoGhz(absl::string_view cpuinfo_text) {
  double best_mhz = 0;
  for (absl::string_view line : absl::StrSplit(cpuinfo_text, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::StripAsciiWhitespace(line.substr(0, colon)) != "cpu MHz") continue;
    double mhz = 0;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(colon + 1)), &mhz) &&
        std::isfinite(mhz) && mhz > best_mhz) {
      best_mhz = mhz;
    }
  }
  return best_mhz / 1e3;
}

std::pair<int, std::string> DetectFp32FlopsPerCycle() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {64, "avx512f"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {32, "avx2+fma"};
#endif
  return {8, "scalar/sse"};
}

std::string FmaPeakEstimate::Describe() const {
  return absl::StrFormat(
      "FP32 FMA peak ESTIMATE: %d cores x %.3f GHz (%s) x %d FLOP/cycle (%s) = %.1f GFLOP/s", cores,
      ghz, ghz_source, flops_per_cycle, isa, gflops);
}

FmaPeakEstimate EstimateFp32FmaPeak(int cores, double ghz) {
  FmaPeakEstimate e;
  e.cores = cores > 0 ? cores : AvailableCpus();
  if (ghz > 0) {
    e.ghz = ghz;
    e.ghz_source = "given";
  } else {
    StatusOr<std::string> text = ReadFileToString("/proc/cpuinfo");
    e.ghz = text.ok() ? MaxCpuinfoGhz(*text) : 0;
    e.ghz_source = e.ghz > 0 ? "/proc/cpuinfo (max cpu MHz)" : "unknown";
  }
  const auto [fpc, isa] = DetectFp32FlopsPerCycle();
  e.flops_per_cycle = fpc;
  e.isa = isa;
  e.gflops = static_cast<double>(e.cores) * e.ghz * static_cast<double>(fpc);
  return e;
}

}  // namespace sift
