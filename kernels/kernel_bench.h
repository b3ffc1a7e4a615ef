// The kernel benchmark behind `sift bench kernels` (docs/benchmarks.md): every op of backend.h at
// the shapes SIM trains with (model-spec 0, 10: D = 16, item vectors 32, H = 96, T_L = 90,
// T_S = 10, K = 50, the MLP widths), on each requested backend and precision, timed (median of
// repeated runs) and reported as GFLOP/s (ops whose work is arithmetic: GEMMs, dense layers,
// recurrences, attention) or GB/s (ops bound by memory traffic), with a correctness check in the
// same run: the op on a smaller batch against the reference backend, as the largest error
// relative to the largest expected magnitude of each output, against a tolerance from the op's
// error bound (fp32: a few units of 2^-24 per sqrt of the dot length, plus the fast activations'
// 1e-6; bf16: 2 * 2^-8 * sqrt(k); both times T for the recurrences).
// Works on host and device backends (inputs are copied into backend memory). Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/backend.h"

namespace sift::kernels {

struct KernelBenchOptions {
  // Backend specs: "reference", "cpu" (the widest ISA variant), "cpu-generic" / "cpu-avx2" /
  // "cpu-avx512" (one variant; skipped with a note where the CPU lacks it), "cuda".
  std::vector<std::string> backends = {"cpu"};
  // Precisions to run on each backend; one a backend refuses is skipped with a note.
  std::vector<MathMode> precisions = {MathMode::kFp32};
  int threads = 0;           // CPU backend threads (0 = every CPU)
  int64_t batch = 2048;      // SIM samples per op call (B)
  std::string filter;        // run only ops whose name contains this ("" = all)
  double min_time_s = 0.25;  // per measurement: repeat until this much time has passed ...
  int min_iters = 3;         // ... and at least this many runs
  bool check = true;         // compare with the reference backend
  int64_t check_batch = 64;  // B of the correctness check (the reference is naive)
};

struct KernelBenchResult {
  std::string op;         // e.g. "gru_backward"
  std::string shape;      // e.g. "B=2048 T=10 in=32 H=96"
  std::string backend;    // the spec
  std::string precision;  // "fp32", "bf16", ...
  std::string describe;   // Backend::Describe() of the instance that ran it
  int64_t iters = 0;
  double seconds = 0;  // median time of one call
  double gflops = 0;   // 0 for memory-bound ops
  double gbytes_per_s = 0;
  bool checked = false;
  double max_error = 0;  // largest |got - want| / max |want| over the op's outputs
  double tolerance = 0;
  bool ok = true;    // !checked || max_error <= tolerance
  std::string note;  // why a check was skipped, or where the error was largest
};

// Runs every matching op on every backend x precision; `progress` (nullable) gets each result as
// it is measured. Skipped combinations (a backend this build or machine lacks, a precision a
// backend refuses) are reported through `skipped` (nullable) as one line each. Errors: an unknown
// backend spec or filter matching nothing (INVALID_ARGUMENT).
StatusOr<std::vector<KernelBenchResult>> RunKernelBenchmarks(
    const KernelBenchOptions& options,
    const std::function<void(const KernelBenchResult&)>& progress,
    std::vector<std::string>* skipped);

// Creates a backend by bench spec (see KernelBenchOptions::backends).
StatusOr<std::unique_ptr<Backend>> CreateBenchBackend(const std::string& spec, int threads);

// The op names, in the order they run.
std::vector<std::string> KernelBenchOpNames();

}  // namespace sift::kernels
