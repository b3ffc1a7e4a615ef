// sift bench kernels: every op on every requested backend and precision at SIM's shapes, GFLOP/s
// or GB/s, with a correctness check against the reference backend in the same run
// (kernels/kernel_bench.h). Exit 1 when a check fails.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "common/file_util.h"
#include "common/perf_stats.h"
#include "common/sysinfo.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/onednn_gemm.h"
#include "kernels/kernel_bench.h"
#include "nlohmann/json.hpp"

namespace sift::cli {
namespace {

struct BenchKernelsFlags {
  std::string backends = "cpu";
  std::string precisions = "fp32,bf16";
  int threads = 0;
  int64_t batch = 2048;
  int64_t check_batch = 64;
  std::string filter;
  double min_time = 0.25;
  bool no_check = false;
  std::string json;
};

Status RunBenchKernels(const BenchKernelsFlags& f) {
  kernels::KernelBenchOptions o;
  o.backends.clear();
  for (absl::string_view b : absl::StrSplit(f.backends, ',', absl::SkipEmpty())) {
    if (b == "all") {
      for (const char* s : {"cpu", "cpu-generic", "cpu-avx2", "cpu-avx512", "reference"}) {
        o.backends.push_back(s);
      }
      for (const std::string& n : kernels::AvailableBackendNames()) {
        if (n != "cpu" && n != "reference") o.backends.push_back(n);
      }
    } else {
      o.backends.emplace_back(b);
    }
  }
  o.precisions.clear();
  for (absl::string_view p : absl::StrSplit(f.precisions, ',', absl::SkipEmpty())) {
    SIFT_ASSIGN_OR_RETURN(const kernels::MathMode m, kernels::ParseMathMode(p));
    o.precisions.push_back(m);
  }
  if (o.backends.empty() || o.precisions.empty()) {
    return absl::InvalidArgumentError("--backend and --precision need at least one value each");
  }
  o.threads = f.threads;
  o.batch = f.batch;
  o.check_batch = f.check_batch;
  o.filter = f.filter;
  o.min_time_s = f.min_time;
  o.check = !f.no_check;

  const MachineInfo machine = GetMachineInfo();
  const FmaPeakEstimate peak = EstimateFp32FmaPeak(f.threads > 0 ? f.threads : 0);
  std::printf("sift bench kernels\n");
  std::printf("  command:    %s\n", CommandLine().c_str());
  std::printf("  machine:    %s, %d CPUs, host %s\n", machine.cpu_model.c_str(), machine.cpus,
              machine.hostname.c_str());
  std::printf("  cpu isa:    %s; kernels variant %s; oneDNN %s on %s\n",
              kernels::CpuVectorFeatures().c_str(), kernels::CpuIsaName(kernels::BestCpuIsa()),
              kernels::OneDnnGemm::Version().c_str(), kernels::OneDnnGemm::EffectiveIsa().c_str());
  std::printf("  build:      %s\n", SIFT_BUILD_TYPE);
  std::printf("  peak:       %s\n", peak.Describe().c_str());
  std::printf(
      "  check:      each op at batch %lld against the reference backend (max |error| / "
      "max |expected|, tolerance from the op's error bound)%s\n",
      static_cast<long long>(o.check_batch), o.check ? "" : " -- off (--no-check)");
  std::printf("\n  %-28s %-44s %-11s %-5s %10s %9s %7s %8s  %s\n", "op", "shape", "backend", "prec",
              "time", "GFLOP/s", "%peak", "GB/s", "check");
  std::fflush(stdout);
  std::string last_describe;
  const auto print = [&](const kernels::KernelBenchResult& r) {
    if (r.describe != last_describe) {
      std::printf("  -- %s\n", r.describe.c_str());
      last_describe = r.describe;
    }
    const std::string time = r.seconds >= 1e-3 ? absl::StrFormat("%.3f ms", r.seconds * 1e3)
                                               : absl::StrFormat("%.1f us", r.seconds * 1e6);
    const std::string gf = r.gflops > 0 ? absl::StrFormat("%.1f", r.gflops) : "-";
    const std::string pct = r.gflops > 0 && peak.gflops > 0 && !absl::StartsWith(r.backend, "cuda")
                                ? absl::StrFormat("%.1f%%", 100 * r.gflops / peak.gflops)
                                : "-";
    const std::string check =
        !r.checked ? "-"
                   : absl::StrFormat("%s %.1e %s %.1e (%s)", r.ok ? "ok" : "FAIL", r.max_error,
                                     r.ok ? "<=" : ">", r.tolerance, r.note);
    std::printf("  %-28s %-44s %-11s %-5s %10s %9s %7s %8.1f  %s\n", r.op.c_str(), r.shape.c_str(),
                r.backend.c_str(), r.precision.c_str(), time.c_str(), gf.c_str(), pct.c_str(),
                r.gbytes_per_s, check.c_str());
    std::fflush(stdout);
  };
  std::vector<std::string> skipped;
  SIFT_ASSIGN_OR_RETURN(std::vector<kernels::KernelBenchResult> results,
                        kernels::RunKernelBenchmarks(o, print, &skipped));
  for (const std::string& s : skipped) std::printf("  note: %s\n", s.c_str());
  // What a user should know about the backends that ran (generic fallbacks, emulation).
  for (const std::string& spec : o.backends) {
    StatusOr<std::unique_ptr<kernels::Backend>> be = kernels::CreateBenchBackend(spec, f.threads);
    if (!be.ok()) continue;
    for (kernels::MathMode m : o.precisions) {
      if (!(*be)->SetMathMode(m).ok()) continue;
      for (const std::string& w : (*be)->Warnings()) {
        std::printf("  warning: %s %s: %s\n", spec.c_str(), kernels::MathModeName(m), w.c_str());
      }
    }
  }
  int failed = 0;
  for (const auto& r : results) failed += r.ok ? 0 : 1;

  if (!f.json.empty()) {
    nlohmann::json j;
    j["benchmark"] = "kernels";
    j["command"] = CommandLine();
    j["machine"] = {{"cpu_model", machine.cpu_model},
                    {"cpus", machine.cpus},
                    {"hostname", machine.hostname},
                    {"cpu_features", kernels::CpuVectorFeatures()},
                    {"onednn", kernels::OneDnnGemm::Version()},
                    {"onednn_isa", kernels::OneDnnGemm::EffectiveIsa()}};
    j["build_type"] = SIFT_BUILD_TYPE;
    j["peak_gflops_estimate"] = peak.gflops;
    j["batch"] = o.batch;
    j["check_batch"] = o.check_batch;
    j["skipped"] = skipped;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) {
      rows.push_back({{"op", r.op},
                      {"shape", r.shape},
                      {"backend", r.backend},
                      {"precision", r.precision},
                      {"describe", r.describe},
                      {"iters", r.iters},
                      {"seconds", r.seconds},
                      {"gflops", r.gflops},
                      {"gbytes_per_s", r.gbytes_per_s},
                      {"checked", r.checked},
                      {"max_error", r.max_error},
                      {"tolerance", r.tolerance},
                      {"ok", r.ok},
                      {"worst_output", r.note}});
    }
    j["results"] = rows;
    j["failed_checks"] = failed;
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(f.json, j.dump(2) + "\n"));
    std::printf("  json:       %s\n", f.json.c_str());
  }
  if (failed > 0) {
    return absl::InternalError(absl::StrFormat(
        "%d kernel result(s) outside their tolerance against the reference backend", failed));
  }
  return absl::OkStatus();
}

}  // namespace

void AddBenchKernels(CLI::App* bench, Action* action) {
  auto f = std::make_shared<BenchKernelsFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "kernels",
      "Every op on each backend and precision at SIM's shapes: GFLOP/s or GB/s, checked against "
      "the reference backend");
  cmd->add_option("--backend", f->backends,
                  "Comma-separated: cpu, cpu-generic, cpu-avx2, cpu-avx512, reference, cuda, or "
                  "all")
      ->capture_default_str();
  cmd->add_option("--precision", f->precisions,
                  "Comma-separated GEMM precisions (fp32, bf16, tf32, fp16); each backend runs "
                  "those it accepts")
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "CPU backend threads (0 = every CPU)")
      ->capture_default_str();
  cmd->add_option("--batch-size", f->batch, "SIM samples per op call")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--check-batch", f->check_batch, "Batch of the check against the reference")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--filter", f->filter, "Only ops whose name contains this");
  cmd->add_option("--min-time", f->min_time, "Seconds of repeated calls per measurement")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--no-check", f->no_check, "Skip the check against the reference backend");
  cmd->add_option("--json", f->json, "Also write the results as JSON to this file");
  cmd->callback([f, action] { *action = [f] { return RunBenchKernels(*f); }; });
}

}  // namespace sift::cli
