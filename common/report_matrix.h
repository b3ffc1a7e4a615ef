// The matrix of `sift report` (docs/report.md): a base job spec, axes whose cross
// product is the configurations, the runs of each configuration, and the benchmarks.
//
//   name: tiny example              # optional: the report's title
//   dataset: /data/tiny             # or preset:tiny (generated into the report's directory)
//   job:                            # the base job spec: `sift submit`'s keys (or a file path)
//     training: {epochs: 3, batch_size: 2048, staleness: 0}
//   matrix:                         # axes; every combination is one configuration
//     model: [sim, dien, din]
//     workers: [1, 2]
//     precision: [fp32, bf16]
//   runs: {seeds: [1, 2, 3]}        # or {seed: 1, repeat: 3}, or a count n (seeds 1..n)
//   benchmarks:                     # optional
//     train: {steps: 100}           # sift bench train per model/precision/batch of the matrix
//     inference: {batch_sizes: [256, 1024], steps: 50}   # sift bench inference per batch size
//
// Axes: model, backend, precision, workers, servers, staleness, deterministic, batch_size, lr,
// sparse_l2, weight_decay (the recipe's knobs: README, Regularisation), dataset. Parsing is strict
// and complete before any run starts: an unknown key, an empty matrix or axis, a value the job spec
// refuses, or a configuration the cluster cannot run is INVALID_ARGUMENT "<source>:<line>: <key>:
// <what>" (a configuration's error names its row). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/status.h"

namespace sift {

// The axes a matrix may vary, in the order configurations are listed.
// recipe comes before the fields it controls, so an axis of one of those overrides the recipe's
// value (common/recipe.h).
inline constexpr const char* kReportAxes[] = {
    "model",      "backend", "precision", "workers",   "servers",      "staleness", "deterministic",
    "batch_size", "recipe",  "lr",        "sparse_l2", "weight_decay", "dropout",   "dataset"};

struct ReportConfig {
  int index = 0;
  // (axis, value) for every axis of the matrix, in kReportAxes order.
  std::vector<std::pair<std::string, std::string>> axes;
  // "model=sim workers=1 precision=fp32".
  std::string label;
  // The base job with this configuration's axes applied; dataset may be "preset:<name>".
  JobSpec spec;
};

struct ReportRun {
  int config = 0;
  uint64_t seed = 1;
  int repeat = 0;  // 0-based repetition of (config, seed)
  JobSpec spec;    // the configuration's spec with training.seed = seed
};

struct ReportMatrix {
  std::string source;  // the file name errors start with
  std::string name;
  std::vector<std::string> axes;  // the axes present, in kReportAxes order
  std::vector<ReportConfig> configs;
  std::vector<uint64_t> seeds;
  int repeat = 1;
  int64_t train_benchmark_steps = 0;           // 0 = no training benchmarks
  std::vector<int64_t> inference_batch_sizes;  // empty = no inference benchmarks
  int64_t inference_steps = 50;
  // Every run: configurations in order, then seeds, then repetitions.
  std::vector<ReportRun> Runs() const;
};

// Parses a matrix; relative paths (dataset, a `job:` file) are taken against `base_dir`.
StatusOr<ReportMatrix> ParseReportMatrix(absl::string_view yaml_text, const std::string& source,
                                         const std::string& base_dir);
StatusOr<ReportMatrix> ReadReportMatrix(const std::string& path);

// "preset:tiny" -> "tiny"; "" for a path.
std::string DatasetPreset(const std::string& dataset);

// The canonical text a run is keyed by: the job spec as `JobSpecToYaml` writes it (name,
// results_dir and checkpoint.dir left out: they are what the run is called and where it writes,
// not what it computes), the repetition and `launcher`. Two runs with the same key compute the
// same thing. Relative paths in a matrix (dataset, a `job:` file, checkpoint.resume_from) are
// relative to the matrix file's directory.
std::string RunCanonicalText(const ReportRun& run, const std::string& launcher);
// 16 hex digits of a 64-bit hash of `text` (FNV-1a, then SplitMix64's mixer).
std::string ShortHash(absl::string_view text);

}  // namespace sift
