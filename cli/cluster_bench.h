// The distributed overhead benchmark of docs/benchmarks.md (`sift bench cluster`): the same SIM /
// DIEN / DIN training run two ways in one invocation — in this process with in-process tables,
// and as a job of a real local cluster (coordinator, `servers` embedding servers, `workers` workers
// as child processes on loopback, cli/local_cluster.h; 1 and 1 by default) — alternating the two
// for `repeats` rounds. With compare_sparse_update every round also runs the cluster job with
// training.sparse_update: per_rank next to the default `step` (samples/s ratio, push bytes per
// step from the servers' Stats.push_request_bytes). Both
// ways run the one step engine in kTrain mode from one JobSpec (the worker's own mapping,
// worker::TrainerOptionsForAssignment): 1 epoch of kClusterBenchWarmupSteps + steps steps, the
// staleness k's
// pipeline, and the trainer's per-epoch calculator (warm-up excluded) for samples/s. Where the
// time goes: RunResult.phases in process, the worker's sift_worker_phase_seconds_total deltas
// over the job for the cluster. Not thread-safe; run it on the main thread (the children's death
// signal follows the thread that started them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "nlohmann/json.hpp"
#include "worker/trainer.h"

namespace sift::cli {

struct ClusterBenchOptions {
  std::string binary;   // the sift binary the cluster's children run
  std::string dataset;  // REQUIRES: a sift dataset directory (absolute or relative to the cwd)
  std::string model = "sim";
  int64_t batch_size = 4096;
  int64_t steps = 30;      // measured steps after the warm-up
  int threads = 0;         // worker / in-process threads; 0 = every available CPU
  int server_threads = 1;  // the embedding server's --threads
  int repeats = 2;         // rounds; each runs both ways once per staleness
  std::vector<int64_t> staleness = {1};
  uint64_t seed = 1;
  // The cluster with security on (mutual TLS with certificates of a CA made for the run, an admin
  // token for the benchmark's client), as `sift local --secure` runs it.
  bool tls = false;
  // Also a second, secured cluster in every round (after the plaintext one in odd rounds, before
  // it in even ones): its samples/s against the plaintext cluster's, in the same run.
  bool compare_tls = false;
  int servers = 1, workers = 1;  // the cluster's; batch_size is the global batch (W divides it)
  // Also a per_rank cluster job in every round next to the step one (needs workers >= 2).
  bool compare_sparse_update = false;
  // Called with a line per finished run (progress); may be empty.
  std::function<void(const std::string&)> progress;
};

// One run of one way.
struct ClusterBenchRun {
  double samples_per_s = 0;        // the epoch's throughput (warm-up excluded)
  double train_time_s = 0;         // wall time of the epoch's training steps (warm-up included)
  int64_t steps = 0;               // steps trained (warm-up included)
  double test_auc = 0;             // after the epoch (a sanity check that both trained alike)
  worker::PhaseTimes phases;       // per-phase seconds over all the steps
  double push_bytes_per_step = 0;  // cluster: Push request bytes the servers received / steps
};

struct ClusterBenchRound {
  int round = 0;
  bool cluster_first = false;  // odd rounds run the cluster first (ABBA order)
  ClusterBenchRun in_process, cluster;
  double ratio = 0;                  // cluster / in-process samples/s
  ClusterBenchRun cluster_tls;       // compare_tls: the secured cluster
  double tls_ratio = 0;              // compare_tls: cluster_tls / cluster samples/s
  ClusterBenchRun cluster_per_rank;  // compare_sparse_update: the per_rank job
  double sparse_ratio = 0;           // compare_sparse_update: step / per_rank samples/s
};

struct ClusterBenchSeries {
  int64_t staleness = 0;
  std::vector<ClusterBenchRound> rounds;
  double median_in_process = 0, median_cluster = 0;             // samples/s
  double median_ratio = 0;                                      // median of the rounds' ratios
  double median_cluster_tls = 0, median_tls_ratio = 0;          // compare_tls
  double median_cluster_per_rank = 0, median_sparse_ratio = 0;  // compare_sparse_update
};

struct ClusterBenchResult {
  std::vector<ClusterBenchSeries> series;  // one per staleness, in the options' order
  int threads = 0;                         // resolved worker / in-process threads
  double load_average_before = -1, load_average_after = -1;  // 1-minute, /proc/loadavg
};

inline constexpr double kClusterOverheadTarget = 0.8;  // docs/benchmarks.md
inline constexpr double kClusterTlsTarget = 0.95;      // issue 17: secured / plaintext cluster
inline constexpr double kSparseStepTarget = 0.95;      // sparse_update step / per_rank
// The trainer's warm-up (TrainerOptions::warmup_steps; a job spec cannot change it): steps run
// before the measured ones, excluded from samples/s.
inline const int64_t kClusterBenchWarmupSteps = worker::TrainerOptions{}.warmup_steps;

// Validates the options (INVALID_ARGUMENT naming the flag; NOT_FOUND for a missing dataset),
// runs the rounds and stops every child before returning. The cluster's state and logs go to a
// fresh temporary directory, removed on success and kept (named in the error) on failure.
// FAILED_PRECONDITION when an epoch of the dataset holds fewer than kClusterBenchWarmupSteps +
// steps batches; a failed or vanished cluster job, or a child that exited, is an error naming the
// work dir's logs.
StatusOr<ClusterBenchResult> RunClusterBenchmark(const ClusterBenchOptions& options);

// The result as text (rounds, medians, ratio vs the target, phase split) and as JSON.
std::string FormatClusterBench(const ClusterBenchOptions& options, const ClusterBenchResult& r);
nlohmann::json ClusterBenchToJson(const ClusterBenchOptions& options, const ClusterBenchResult& r);

// Sums of sift_worker_phase_seconds_total{phase="..."} in a Prometheus text exposition.
// INVALID_ARGUMENT when a phase is missing or a value does not parse.
StatusOr<worker::PhaseTimes> ParseWorkerPhaseSeconds(const std::string& exposition);

}  // namespace sift::cli
