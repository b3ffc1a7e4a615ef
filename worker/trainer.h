// Trainer: single-process training, evaluation and benchmarking of SIM / DIEN / DIN on a sift
// dataset — the step data path of architecture.md: load -> dedup -> pull -> forward/backward ->
// dense Adam -> push. The embedding tables are in-process (server/embedding) or, with
// `embedding_servers`, on running embedding servers (worker/embedding_client.h); both give the
// same results bit for bit (same rows, same optimizer arithmetic, fp32 on the wire). Logs the
// reference's DLLL records (model-spec 5.8) to <results_dir>/<log_filename> and readable lines to
// stdout; evaluates exact AUC and sample-weighted loss (model-spec 13, 4) after every epoch;
// saves/loads checkpoints (worker/checkpoint.h) at epoch boundaries. Deterministic: the same
// options (seed, threads, backend) give the same loss curve, bit for bit. One call runs one job on
// the calling thread (the backend and loader own their threads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/loader.h"
#include "common/perf_stats.h"
#include "common/status.h"
#include "worker/model.h"

namespace sift::worker {

enum class RunMode {
  kTrain = 0,           // sift train: epochs with evaluation after each
  kBenchTrain = 1,      // sift bench train: training steps only, reference benchmark semantics
  kBenchInference = 2,  // sift bench inference: forward only, no aux, on the training split
};

struct TrainerOptions {
  std::string dataset;  // a sift dataset directory
  ModelConfig model;    // type and dims; feature counts and lengths must match the dataset
  std::string backend = "cpu";
  int threads = 0;  // backend and loader threads; <= 0: every available CPU
  int epochs = 3;
  int64_t batch_size = 4096;
  int64_t eval_batch_size = 0;            // 0: batch_size
  float lr = 0.01f;                       // dense Adam and the sparse optimizer
  std::string sparse_optimizer = "adam";  // adam | adagrad | sgd (server/embedding/optimizer.h)
  uint64_t seed = 1;                      // dense init, embedding init, shuffling
  data::SampleOrder order = data::SampleOrder::kShuffled;
  // Train AUC/loss after each epoch on a fixed sample of this many training samples (rounded up
  // to whole eval batches), the same every epoch; 0 = the full training split.
  int64_t train_eval_samples = 262144;
  int64_t max_steps_per_epoch = 0;  // 0: the whole split; > 0: stop each epoch after this many
  std::string results_dir;          // "" = no log file
  std::string log_filename = "log.json";
  int log_every = 0;      // per-step DLLL lines on stdout every N steps; 0 = none
  bool progress = false;  // a progress bar on stderr (a terminal)
  // host:port of embedding servers, shard order; empty = in-process tables. A fresh run replaces
  // the servers' tables; --load-checkpoint restores the checkpoint's snapshot on them.
  std::vector<std::string> embedding_servers;
  std::string wire_encoding = "fp32";  // fp32 | fp16 | bf16: rows and gradients on the wire
  std::string save_checkpoint;         // "" = none; saved after every epoch
  std::string load_checkpoint;         // "" = fresh start
  // Benchmarks: the reference's performance calculator (warm-up 20, then benchmark_steps; 0 =
  // every step of every epoch).
  int64_t benchmark_steps = 0;
  int64_t warmup_steps = 20;
};

// Wall time spent per phase of a training step, summed over the run (seconds).
struct PhaseTimes {
  double load = 0;       // waiting for the loader
  double dedup = 0;      // BuildBatchKeys
  double pull = 0;       // embedding pulls
  double forward = 0;    // forward + loss
  double backward = 0;   // backward
  double dense_opt = 0;  // dense Adam
  double push = 0;       // embedding pushes (sparse optimizer)
  double Total() const { return load + dedup + pull + forward + backward + dense_opt + push; }
};

struct EpochMetrics {
  int64_t epoch = 0;
  int64_t steps = 0;
  double train_time_s = 0;
  PerfResults perf;
  double train_auc = 0, train_loss = 0, test_auc = 0, test_loss = 0;
};

struct RunResult {
  std::vector<EpochMetrics> epochs;  // kTrain
  std::vector<double> step_losses;   // total loss of every training step, in order
  PerfResults perf;                  // benchmarks: the calculator's results
  int64_t steps = 0;                 // steps run (all epochs)
  int64_t samples_per_step = 0;
  double time_to_train_s = 0;   // sum of per-epoch training times (kTrain)
  double oracle_test_auc = -1;  // from the dataset metadata; -1 when absent
  PhaseTimes phases;
  int64_t dense_params = 0;
  int threads = 0;
  std::string backend;
};

// Checks the options (names the bad flag/field) and runs. Errors: INVALID_ARGUMENT for bad
// options or a dataset/model mismatch, the dataset's and checkpoint's errors, and INTERNAL for a
// non-finite loss (naming epoch and step).
StatusOr<RunResult> RunTrainer(const TrainerOptions& options, RunMode mode);

// A one-line summary of the model config, stored in checkpoints and compared on load.
std::string ModelSummary(const ModelConfig& config);

}  // namespace sift::worker
