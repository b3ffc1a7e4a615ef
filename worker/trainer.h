// Trainer: training, evaluation and benchmarking of SIM / DIEN / DIN on a sift dataset — the step
// data path of architecture.md: load -> dedup -> pull -> forward/backward -> allreduce of the
// dense gradients -> dense Adam -> push. ONE step engine for both modes:
//   - single process (`sift train`, RunTrainer): world 1, the embedding tables in-process
//     (server/embedding) or, with `embedding_servers`, on running embedding servers
//     (worker/embedding_client.h) — both give the same results bit for bit (same rows, same
//     optimizer arithmetic, fp32 on the wire); logs the reference's DLLL records (model-spec 5.8)
//     to <results_dir>/<log_filename> and readable lines to stdout; evaluates exact AUC and
//     sample-weighted loss (model-spec 13, 4) after every epoch; checkpoints (worker/checkpoint.h)
//     at epoch boundaries;
//   - one rank of a cluster job (RunTrainerWithEnv, worker/distributed_worker.h): a TrainerEnv
//     supplies the collectives (Gloo), and takes the step records, evaluation predictions and the
//     checkpoint protocol to the coordinator.
// Deterministic with staleness 0: the same options (seed, threads, backend, world size) give the
// same loss curve, bit for bit. One call runs one job on the calling thread (the backend, loader
// and step pipeline own their threads).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/data/loader.h"
#include "common/dllogger.h"
#include "common/lr_schedule.h"
#include "common/model_selection.h"
#include "common/perf_stats.h"
#include "common/security.h"
#include "common/status.h"
#include "kernels/backend.h"
#include "worker/collectives.h"
#include "worker/models/model.h"

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
  // The GEMM arithmetic (kernels::MathMode): auto | fp32 | tf32 | bf16 | fp16. auto = bf16 on a
  // device backend, fp32 on the host backends; fp16 trains with dynamic loss scaling
  // (worker/loss_scaler.h). Storage and every other op stay fp32.
  std::string precision = "auto";
  // The cpu backend's kernel variant (kernels/cpu/cpu_isa.h): auto (the widest this CPU runs) |
  // generic | avx2 | avx512; a variant the CPU lacks fails the run, naming the missing features.
  std::string cpu_isa = "auto";
  // kernels::Backend::SetDeterministic: true keeps every sum in a fixed order (bit-reproducible
  // runs); false lets the cuda backend sum embedding gradients with float atomics (no sort; last
  // bits vary run to run). A no-op on the host backends (always deterministic).
  bool deterministic = true;
  // Tests: when set, creates the backend instead of kernels::CreateBackend(backend, threads)
  // (e.g. a CPU backend that poses as device memory, to test the staging paths without a GPU).
  std::function<StatusOr<std::unique_ptr<kernels::Backend>>()> backend_factory;
  int threads = 0;  // backend and loader threads; <= 0: every available CPU
  int epochs = 3;
  int64_t batch_size = 4096;
  int64_t eval_batch_size = 0;  // 0: batch_size
  float lr = 0.01f;             // dense Adam and the sparse optimizer
  // The learning-rate schedule of both (common/lr_schedule.h): step s of the run's planned
  // epochs x steps_per_epoch runs at lr x LrFactor(s); the dense Adam step and the embedding push
  // of a step use the same factor. Constant without warm-up (the default) is bit for bit the run
  // without a schedule.
  LrSchedule lr_schedule;
  // Decoupled weight decay of every dense parameter (AdamW, Loshchilov & Hutter): each step
  // θ ← θ·(1 − lr·weight_decay), then the Adam update. 0 = plain Adam, bit for bit the same as
  // before (no extra pass). REQUIRES: 0 <= lr * weight_decay < 1.
  float weight_decay = 0.0f;
  // Mini-batch-aware L2 on the embedding rows a step touches (worker/sparse_l2.h): λ of
  // grad_j += λ·w_j / n_j, n_j = id j's occurrences in the training split (counted in one pass
  // before training). 0 = none (the reference), bit for bit the same and no counting pass.
  float sparse_l2 = 0.0f;
  std::string sparse_optimizer = "adam";  // adam | adagrad | sgd (server/embedding/optimizer.h)
  // Model selection (common/model_selection.h, docs/training.md "Model selection").
  // validation_fraction f in (0, 0.5]: the last training pair of about f of the users is held out
  // as the validation split (common/data/validation_split.h) and evaluated after every epoch; 0 =
  // none (the reference: bit for bit today's run). keep_best: the kept model is the epoch with the
  // best validation AUC — its test AUC is the run's, sift train's checkpoint is saved only when it
  // improves, a job's step checkpoint of it is never pruned. patience P >= 1: stop after P
  // epochs in a row without improvement. Both need validation_fraction > 0.
  double validation_fraction = 0;
  bool keep_best = false;
  int patience = 0;
  uint64_t seed = 1;  // dense init, embedding init, shuffling
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
  // TLS to the embedding servers: the cluster CA and this worker's certificate (off: plaintext).
  SecurityOptions embedding_security;
  std::string save_checkpoint;  // "" = none; saved after every epoch
  std::string load_checkpoint;  // "" = fresh start
  // Cluster jobs: the coordinator's --checkpoint-root, under which save_checkpoint lies. No
  // directory from it down to a checkpoint is a symbolic link: checked (and missing ones created)
  // before every save and pruning, so a checkpoint is never written or pruned through a link
  // ("" = no check: sift train).
  std::string checkpoint_root;
  // Recorded in every checkpoint's manifest ("job": the job id and its owner; "" = not recorded).
  std::string checkpoint_job, checkpoint_owner;
  // 0: save_checkpoint is the checkpoint directory, saved over in place (sift train). K >= 1
  // (cluster jobs, checkpoint.keep): save_checkpoint is the job's directory; each checkpoint
  // goes to its step-<N>/ (worker/checkpoint.h) and after a commit the newest K are kept (the
  // servers' snapshots of the others are deleted at the next snapshot).
  int checkpoint_keep = 0;
  // Row capacity per embedding table name (embedding::TableConfig::capacity: over all servers;
  // in-process tables hold all of it). A name that is not one of the model's tables is
  // INVALID_ARGUMENT naming `<capacity_field><name>` (the job spec's tables.<name>, sift
  // train's --table-capacity <name>=ROWS).
  std::map<std::string, uint64_t> table_capacity;
  std::string capacity_field = "--table-capacity ";
  // Cluster jobs (sift train keeps the defaults): also checkpoint after every step whose
  // global_step (steps done) is a multiple of checkpoint_every_steps (0 = never); checkpoint at
  // the end of every epoch, after its evaluation; and after the final epoch too.
  int64_t checkpoint_every_steps = 0;
  bool checkpoint_every_epoch = true;
  bool checkpoint_final_epoch = true;
  // Resume a checkpoint inside its epoch: global_step - epochs_done * steps_per_epoch of its steps
  // are done (valid when steps_per_epoch is the checkpoint's, as in a cluster job whose spec is
  // fixed). false (sift train): resume at the start of epoch epochs_done.
  bool resume_within_epoch = false;
  // Steps a pulled row may lag behind the pushes (architecture.md): 0 = synchronous; >= 1 = the
  // next step is loaded, deduplicated, pulled and (device backends) uploaded into the model's
  // other input slot on a prefetch thread while the current one computes — one step ahead, so
  // the effective bound is min(k, 1) (worker/step_pipeline.h). Every run mode honours it; an
  // inference benchmark pushes nothing, so there it only overlaps.
  int64_t staleness = 0;
  // World > 1 with embedding servers (job spec training.sparse_update): true (step) = the ranks'
  // pushes of a global step are summed on the servers and applied as one optimizer update per
  // row (the same step as one process on the global batch; the loader interleaves the ranks'
  // shares of one permutation so their step-t batches are its step-t batch); false (per_rank) =
  // each rank's push is its own update and each rank reads a contiguous block (asynchronous-PS
  // semantics, the behaviour before `step` existed).
  bool step_sparse_update = true;
  // The job's identity for step pushes (PushRequest.step_group, generation); 0 = derived from
  // the seed (sift train with servers: world 1 never sends it).
  uint64_t step_group = 0;
  uint64_t generation = 0;
  // Fault injection for tests: the process exits with code 3 just before this rank pushes global
  // step N (its gradients computed, the other ranks' pushes of the step possibly held on the
  // servers): a rank dying in the middle of a step. -1 = never.
  int64_t fault_exit_before_push_step = -1;
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
  double allreduce = 0;  // collectives of the step (world > 1): dense gradients and losses
  double dense_opt = 0;  // dense Adam
  double push = 0;       // embedding pushes (sparse optimizer)
  double Total() const {
    return load + dedup + pull + forward + backward + allreduce + dense_opt + push;
  }
  void Add(const PhaseTimes& o) {
    load += o.load, dedup += o.dedup, pull += o.pull, forward += o.forward;
    backward += o.backward, allreduce += o.allreduce, dense_opt += o.dense_opt, push += o.push;
  }
};

struct EpochMetrics {
  int64_t epoch = 0;
  int64_t steps = 0;
  double train_time_s = 0;
  PerfResults perf;
  double train_auc = 0, train_loss = 0, test_auc = 0, test_loss = 0;
  bool has_validation = false;  // validation_fraction > 0
  double validation_auc = 0, validation_loss = 0;
  // This epoch's model is the one kept so far: the best validation AUC with keep_best, every
  // epoch without it.
  bool kept = false;
};

struct RunResult {
  std::vector<EpochMetrics> epochs;  // kTrain (this run's epochs; a resumed run's first is its)
  // kTrain with a validation split: the best epoch so far over the whole run (resumes included).
  ModelSelection selection;
  int64_t kept_epoch = -1;          // the epoch whose model the run keeps (kTrain)
  bool stopped_early = false;       // patience ended training before `epochs`
  std::vector<double> step_losses;  // total loss of every training step, in order
  PerfResults perf;                 // benchmarks: the calculator's results
  int64_t steps = 0;                // steps run (all epochs)
  int64_t samples_per_step = 0;
  double time_to_train_s = 0;   // sum of per-epoch training times (kTrain)
  double oracle_test_auc = -1;  // from the dataset metadata; -1 when absent
  PhaseTimes phases;
  KeyCounts key_counts;  // summed over the steps: the id slots served and the unique keys pulled
  // Summed over the steps: the batches' long slots (B x T_L) and those SIM's search visited
  // (Model::long_slots_searched: fewer when the streamed soft search skips padding).
  int64_t long_slots = 0, long_slots_searched = 0;
  int64_t dense_params = 0;
  int threads = 0;
  std::string backend;
  std::string precision;  // the resolved MathMode's name
  std::string compute;    // Backend::Describe(): what actually computed (ISA, library, ...)
  std::vector<std::string> warnings;  // Backend::Warnings() after the run (fallbacks, emulation)
  bool deterministic = true;          // the backend's deterministic() (host backends: always true)
  int64_t skipped_steps = 0;          // fp16: steps skipped for a gradient overflow (loss scaling)
};

// One step as the TrainerEnv sees it (every rank reports its own; the losses are the mean over
// ranks, identical on every rank).
struct StepReport {
  int64_t epoch = 0;        // DLLL epoch (0 for the inference benchmark)
  int64_t step = 0;         // step within the epoch
  int64_t global_step = 0;  // optimizer steps before this one
  int64_t steps_per_epoch = 0;
  double lr = 0;            // the step's learning rate (base x schedule factor; 0: inference)
  bool has_losses = false;  // false for the inference benchmark
  Losses losses;
  double samples_per_second = 0;  // global: samples of all ranks / this rank's step latency
  int64_t samples = 0;            // global samples of the step
  double seconds = 0;             // this rank's wall time of the step
  PhaseTimes phases;              // this step's phase times on this rank
};

// One rank's evaluation predictions of one split (its BatchLoader share).
struct EvalPredictions {
  std::vector<float> scores;  // ESU logits
  std::vector<float> labels;
  // Per evaluated batch, in order: rows, and loss.total * rows.
  std::vector<int64_t> batch_rows;
  std::vector<double> batch_loss_sums;
  double loss_sum = 0;  // the batches' loss sums added in order
};

// Exact AUC and mean loss of one split (NaN when the env does not compute them locally).
struct EvalResult {
  double auc = 0;
  double loss = 0;
};

// What differs between `sift train` (the local env inside RunTrainer) and a rank of a cluster job.
// Calls come from the trainer's thread, in this order: OnSetup; per epoch, OnStep for every step
// (CheckAbort before each), OnEpochTrained, OnEvaluation (train, validation when the run has a
// validation split, then test), the checkpoint
// calls, OnEpochEnd; OnFinish. A non-OK status from any of them ends the run with that status.
class TrainerEnv {
 public:
  virtual ~TrainerEnv();
  // The run's collectives (rank, world; world 1 for sift train). Owned by the env.
  virtual Collectives* collectives() = 0;
  // Checked at every step boundary.
  virtual Status CheckAbort() = 0;
  // After the model, tables and checkpoint are set up.
  virtual Status OnSetup(double oracle_test_auc) = 0;
  virtual Status OnStep(const StepReport& step) = 0;
  // The end of an epoch's training: its perf summary (PerfStats::SummaryMetrics, DLLL order).
  virtual Status OnEpochTrained(int64_t epoch, const DllMetrics& perf, double train_time_s) = 0;
  // This rank's predictions of `split` after epoch `epoch`. For the validation split the trainer
  // then sets the returned AUC itself (every rank computes it over every rank's predictions).
  virtual StatusOr<EvalResult> OnEvaluation(int64_t epoch, data::Split split,
                                            const EvalPredictions& predictions) = 0;
  // Checkpoint protocol (worker/checkpoint.h). Every rank has drained its pushes and passed a
  // barrier; then rank 0 alone: CheckpointBegin, snapshot of the servers under
  // SnapshotName(global_step), SaveCheckpoint (the manifest is the commit point),
  // CheckpointCommit; then every rank passes a second barrier.
  virtual std::string SnapshotName(int64_t global_step) = 0;
  virtual Status CheckpointBegin(int64_t global_step) = 0;
  // Rank 0, instead of CheckpointCommit, when the save failed after its retries: training goes
  // on from memory; the last good checkpoint stays the recovery point.
  virtual Status CheckpointFailed(int64_t global_step, const Status& error) = 0;
  virtual Status CheckpointCommit(const std::string& dir, int64_t epochs_done,
                                  int64_t global_step) = 0;
  // After an epoch's evaluation and checkpoint (kTrain); `perf` as in OnEpochTrained.
  virtual Status OnEpochEnd(const EpochMetrics& epoch, const DllMetrics& perf) = 0;
  // The run completed; `bench_summary` is the perf summary of the benchmark modes.
  virtual Status OnFinish(RunMode mode, const RunResult& result,
                          const DllMetrics& bench_summary) = 0;
};

// Checks the options (names the bad flag/field) and runs single-process (world 1) with the local
// env (DLLL logs, local AUC, checkpoints to save_checkpoint). Errors: INVALID_ARGUMENT for bad
// options or a dataset/model mismatch, the dataset's and checkpoint's errors, and INTERNAL for a
// non-finite loss (naming epoch and step).
StatusOr<RunResult> RunTrainer(const TrainerOptions& options, RunMode mode);

// The same engine as one rank of env->collectives()'s world: each rank trains its BatchLoader
// share (rank/world) with options.batch_size samples per step (the per-rank batch); the dense
// state is broadcast from rank 0 before step 1, dense gradients and losses are averaged over the
// ranks, sparse gradients are scaled by 1/world before the push. With world > 1 the tables must
// be on embedding servers; rank 0 alone configures them (or restores the checkpoint's snapshot).
// `env` must outlive the call.
StatusOr<RunResult> RunTrainerWithEnv(const TrainerOptions& options, RunMode mode, TrainerEnv* env);

// A one-line summary of the model config, stored in checkpoints and compared on load.
std::string ModelSummary(const ModelConfig& config);

// One dense optimizer step, AdamW (decoupled weight decay, Loshchilov & Hutter 2019):
//   θ ← θ·(1 − lr·weight_decay), then backend->AdamUpdate (the reference's Adam: m, v moments,
//   lr_t = lr·√(1 − β2^t)/(1 − β1^t), θ ← θ − lr_t·m/(√v + ε)).
// The decay uses θ before the Adam update. weight_decay == 0 is AdamUpdate alone (no extra pass,
// bit for bit the same). All pointers are backend memory of n floats.
void DenseAdamWStep(kernels::Backend* backend, const kernels::AdamHyper& hyper, float weight_decay,
                    int64_t t, int64_t n, const float* grads, float* params, float* m, float* v);

// Scales gradients for a data-parallel push: every value times unscale/world (exactly, for powers
// of two: the fp16 loss scale's inverse is one). world 1 with unscale 1 leaves them as they are.
// REQUIRES: world >= 1.
void ScaleSparseGradients(int world, float unscale, absl::Span<float> grads);

}  // namespace sift::worker
