#include "worker/trainer.h"

#include "kernels/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/auc.h"
#include "common/data/dataset.h"
#include "common/data/validation_split.h"
#include "common/dllogger.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/thread_pool.h"
#include "kernels/backend.h"
#include "server/embedding/table.h"
#include "worker/batch_keys.h"
#include "worker/checkpoint.h"
#include "worker/loss_scaler.h"
#include "worker/sparse_l2.h"
#include "worker/step_pipeline.h"
#include "worker/trainer_tables.h"

namespace sift::worker {
namespace {

// A failed checkpoint save: tried this often (sleeping kCheckpointBackoff, then twice that);
// this many failed checkpoints in a row fail the run.
constexpr int kCheckpointAttempts = 3;
constexpr absl::Duration kCheckpointBackoff = absl::Seconds(1);
constexpr int kMaxFailedCheckpoints = 3;

double Now() { return SteadyClockSeconds(); }

// Adds the wall time of a scope to a counter.
class ScopedTimer {
 public:
  explicit ScopedTimer(double* sink) : sink_(sink), start_(Now()) {}
  ~ScopedTimer() { *sink_ += Now() - start_; }

 private:
  double* sink_;
  double start_;
};

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

// A one-line progress bar on stderr, redrawn at most every 0.25 s.
class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label, int64_t total)
      : enabled_(enabled), label_(std::move(label)), total_(total), start_(Now()) {}
  void Update(int64_t done, int64_t samples) {
    if (!enabled_) return;
    const double now = Now();
    if (done < total_ && now - last_ < 0.25) return;
    last_ = now;
    const double el = now - start_;
    const double rate = el > 0 ? samples / el : 0;
    done = std::min(done, total_);
    const double frac = total_ > 0 ? std::clamp(static_cast<double>(done) / total_, 0.0, 1.0) : 1;
    const int width = 30, fill = static_cast<int>(frac * width);
    const double eta = frac > 0 ? el * (1 - frac) / frac : -1;
    std::fprintf(stderr, "\r%s [%s%s] %3d%% %lld/%lld | %.0f samples/s | ETA %s   ", label_.c_str(),
                 std::string(fill, '#').c_str(), std::string(width - fill, ' ').c_str(),
                 static_cast<int>(frac * 100), static_cast<long long>(done),
                 static_cast<long long>(total_), rate, FormatDuration(eta).c_str());
    std::fflush(stderr);
  }
  void Finish() {
    if (!enabled_) return;
    std::fprintf(stderr, "\r%*s\r", 110, "");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  std::string label_;
  int64_t total_;
  double start_;
  double last_ = -1;
};

// Dense Adam in the Keras form (model-spec 5.1) over the model's flat parameter buffer; its
// moments live in the backend's memory beside the parameters.
struct DenseAdam {
  kernels::AdamHyper hyper;
  int64_t t = 0;
  int64_t n = 0;
  kernels::BackendBuffer m, v;  // zero-initialised

  Status Allocate(kernels::Backend* backend, int64_t size) {
    n = size;
    const int64_t bytes = size * static_cast<int64_t>(sizeof(float));
    SIFT_ASSIGN_OR_RETURN(m, backend->Allocate(bytes));
    SIFT_ASSIGN_OR_RETURN(v, backend->Allocate(bytes));
    return absl::OkStatus();
  }
  absl::Span<float> m_span() const { return absl::MakeSpan(m.floats(), static_cast<size_t>(n)); }
  absl::Span<float> v_span() const { return absl::MakeSpan(v.floats(), static_cast<size_t>(n)); }
  float weight_decay = 0;  // decoupled (AdamW); 0 = plain Adam, no extra pass
  void Step(kernels::Backend* backend, absl::Span<float> params, absl::Span<const float> grads) {
    ++t;
    DenseAdamWStep(backend, hyper, weight_decay, t, static_cast<int64_t>(params.size()),
                   grads.data(), params.data(), m.floats(), v.floats());
  }
  // The moments to / from host vectors (checkpoints).
  Status ToHost(kernels::Backend* backend, std::vector<float>* hm, std::vector<float>* hv) const {
    const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
    hm->resize(static_cast<size_t>(n));
    hv->resize(static_cast<size_t>(n));
    SIFT_RETURN_IF_ERROR(backend->CopyToHost(m.floats(), hm->data(), bytes));
    return backend->CopyToHost(v.floats(), hv->data(), bytes);
  }
  Status FromHost(kernels::Backend* backend, const std::vector<float>& hm,
                  const std::vector<float>& hv) {
    if (hm.size() != static_cast<size_t>(n) || hv.size() != static_cast<size_t>(n)) {
      return absl::DataLossError(absl::StrCat("the dense Adam moments have ", hm.size(), " and ",
                                              hv.size(), " values, the model ", n, " parameters"));
    }
    const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
    SIFT_RETURN_IF_ERROR(backend->CopyToBackend(hm.data(), m.floats(), bytes));
    SIFT_RETURN_IF_ERROR(backend->CopyToBackend(hv.data(), v.floats(), bytes));
    return backend->Synchronize();
  }
};

// The GEMM arithmetic of a run: `precision` (auto | fp32 | tf32 | bf16 | fp16); auto is bf16 on a
// device backend (model-spec 5.3: sm_80+ has bf16 tensor cores) and the backend's own choice on
// the host (cpu: bf16 where the CPU multiplies bf16 natively, else fp32; Backend::AutoMathMode).
StatusOr<kernels::MathMode> ResolvePrecision(const std::string& precision,
                                             const kernels::Backend& backend) {
  if (precision == "auto") {
    return backend.memory_space() == kernels::MemorySpace::kDevice ? kernels::MathMode::kBf16
                                                                   : backend.AutoMathMode();
  }
  return kernels::ParseMathMode(precision);
}

// `sift train`: world 1; step records and epoch records to the DLLL logs (<results_dir>/<file>
// and stdout), AUC computed here, checkpoints written as they come.
class LocalEnv : public TrainerEnv {
 public:
  explicit LocalEnv(const TrainerOptions& o) : o_(o), collectives_(CreateLocalCollectives()) {
    std::random_device rd;
    snapshot_nonce_ =
        Mix64((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid()) ^
              static_cast<uint64_t>(SystemWallClockMicros()));
  }

  Collectives* collectives() override { return collectives_.get(); }
  Status CheckAbort() override { return absl::OkStatus(); }

  Status OnSetup(double oracle_test_auc) override {
    oracle_test_auc_ = oracle_test_auc;
    // Logs: every record to the JSON file; stdout gets epoch and summary records (and every
    // log_every-th step record).
    if (!o_.results_dir.empty()) {
      SIFT_RETURN_IF_ERROR(MakeDirs(o_.results_dir));
      SIFT_ASSIGN_OR_RETURN(auto sink,
                            FileLineSink::Open(JoinPath(o_.results_dir, o_.log_filename)));
      json_log_ = std::make_unique<DLLogger>(std::move(sink), nullptr);
      SIFT_RETURN_IF_ERROR(json_log_->WriteReferenceMetadata());
    }
    stdout_log_ = std::make_unique<DLLogger>(nullptr, std::make_unique<StdoutLineSink>());
    return stdout_log_->WriteReferenceMetadata();
  }

  Status OnStep(const StepReport& r) override {
    DllMetrics m;
    if (r.has_losses) {
      m.emplace_back("total_loss", r.losses.total);
      if (o_.model.type != ModelType::kDin) {
        m.emplace_back("classification_loss", r.losses.classification);
        m.emplace_back("dien_aux_loss", r.losses.aux);
      }
    }
    m.emplace_back("samples/s", r.samples_per_second);
    if (!IsConstantLr(o_.lr_schedule) && r.has_losses) m.emplace_back("lr", r.lr);
    const DllStep s = {r.epoch, r.step};
    if (json_log_) SIFT_RETURN_IF_ERROR(json_log_->Log(s, m));
    if (o_.log_every > 0 && r.step % o_.log_every == 0) {
      SIFT_RETURN_IF_ERROR(stdout_log_->Log(s, m));
    }
    return absl::OkStatus();
  }

  Status OnEpochTrained(int64_t, const DllMetrics&, double) override { return absl::OkStatus(); }

  StatusOr<EvalResult> OnEvaluation(int64_t /*epoch*/, data::Split split,
                                    const EvalPredictions& p) override {
    EvalResult r;
    r.auc = ExactAuc(absl::MakeConstSpan(p.scores), absl::MakeConstSpan(p.labels));
    if (split == data::Split::kTest && !o_.results_dir.empty()) {
      // Saved by OnEpochEnd when this epoch's model is the kept one.
      test_scores_.assign(p.scores.begin(), p.scores.end());
      test_labels_ = p.labels;
    }
    r.loss = p.scores.empty() ? 0 : p.loss_sum / static_cast<double>(p.scores.size());
    return r;
  }

  // A name no other save uses (this run's nonce, the step): a later or concurrent run can never
  // overwrite the files an existing manifest points to.
  std::string SnapshotName(int64_t global_step) override {
    return absl::StrFormat("ckpt-%016x-step-%d", snapshot_nonce_, global_step);
  }
  Status CheckpointBegin(int64_t) override { return absl::OkStatus(); }
  Status CheckpointFailed(int64_t global_step, const Status& error) override {
    std::fprintf(stderr, "warning: checkpoint at step %lld failed, training goes on: %s\n",
                 static_cast<long long>(global_step), error.ToString().c_str());
    return absl::OkStatus();
  }
  Status CheckpointCommit(const std::string&, int64_t, int64_t) override {
    return absl::OkStatus();
  }

  Status OnEpochEnd(const EpochMetrics& em, const DllMetrics& perf) override {
    if (em.kept && !o_.results_dir.empty()) {
      // The kept model's test predictions (the last epoch's, or keep_best's best), for ROC curves
      // (sift report), as a cluster job's. A failed write is a warning: the training is done.
      const Status saved = WritePredictionsCsv(JoinPath(o_.results_dir, kTestPredictionsFile),
                                               test_scores_, test_labels_);
      if (!saved.ok()) {
        std::fprintf(stderr, "warning: the test predictions were not saved: %s\n",
                     saved.ToString().c_str());
      }
    }
    DllMetrics m = perf;
    m.emplace_back("train_auc", em.train_auc);
    m.emplace_back("train_loss", em.train_loss);
    if (em.has_validation) {
      m.emplace_back("validation_auc", em.validation_auc);
      m.emplace_back("validation_loss", em.validation_loss);
    }
    m.emplace_back("test_auc", em.test_auc);
    m.emplace_back("test_loss", em.test_loss);
    if (oracle_test_auc_ > 0) {
      m.emplace_back("oracle_test_auc", oracle_test_auc_);
      m.emplace_back("test_auc_to_oracle", em.test_auc / oracle_test_auc_);
    }
    return LogBoth({em.epoch}, m);
  }

  Status OnFinish(RunMode mode, const RunResult& result, const DllMetrics& bench_summary) override {
    if (mode != RunMode::kTrain) return LogBoth({}, bench_summary);
    const EpochMetrics& last = result.epochs.back();
    DllMetrics m = {{"time_to_train", result.time_to_train_s},
                    {"train_auc", last.train_auc},
                    {"train_loss", last.train_loss},
                    {"test_auc", last.test_auc},
                    {"test_loss", last.test_loss}};
    AppendSelectionMetrics(result.selection, o_.keep_best, result.kept_epoch, last.epoch,
                           last.has_validation, &m);
    return LogBoth({}, m);
  }

 private:
  Status LogBoth(const DllStep& step, const DllMetrics& data) {
    if (json_log_) SIFT_RETURN_IF_ERROR(json_log_->Log(step, data));
    return stdout_log_->Log(step, data);
  }

  const TrainerOptions& o_;
  std::unique_ptr<Collectives> collectives_;
  uint64_t snapshot_nonce_ = 0;  // names this run's server snapshots
  double oracle_test_auc_ = -1;
  std::vector<double> test_scores_;  // the latest test predictions (results_dir only)
  std::vector<float> test_labels_;
  std::unique_ptr<DLLogger> json_log_, stdout_log_;
};

class Trainer {
 public:
  Trainer(const TrainerOptions& o, TrainerEnv* env)
      : o_(o),
        env_(env),
        coll_(env->collectives()),
        rank_(coll_->rank()),
        world_(coll_->world_size()) {}
  ~Trainer() {
    // The collectives outlive this trainer's backend: unbind its stream before it goes.
    if (collectives_on_backend_stream_) (void)coll_->UseStream(nullptr);
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  Status Setup(RunMode mode);
  StatusOr<RunResult> Run(RunMode mode);

 private:
  // Loads, dedups and pulls step `step` of the epoch into `slot` (the step pipeline's stage).
  Status PrepareStep(data::BatchLoader* loader, bool copy, ForwardMode mode, PreparedStep* slot);
  // One training step on a prepared step; returns the losses (the mean over ranks).
  StatusOr<Losses> TrainStep(PreparedStep* ps, int64_t epoch, int64_t step, PhaseTimes* ph);
  // The lr schedule's factor for the step global_step_ (exactly 1 without a schedule, so the
  // configured rates stay bit for bit).
  float LrMultiplier() const {
    return IsConstantLr(o_.lr_schedule)
               ? 1.0f
               : static_cast<float>(LrFactor(o_.lr_schedule, global_step_, planned_steps_));
  }
  // Several ranks whose pushes of a step are summed into one update per row on the servers
  // (TrainerOptions::step_sparse_update): the loader then interleaves the ranks' shares.
  bool step_pushes() const { return world_ > 1 && o_.step_sparse_update; }
  // The host threads of a run: the backend's pool on a host backend; --threads (0: every CPU) for
  // the in-process tables and the loader beside a device backend (whose own count is 1).
  int TableThreads() const {
    if (backend_->memory_space() == kernels::MemorySpace::kHost) return backend_->threads();
    return o_.threads > 0 ? o_.threads : AvailableCpus();
  }
  // Runs the collective `op` over `data` — backend memory when on_backend, else host memory —
  // in place when the collectives take that memory, through a staged copy otherwise (device
  // buffers over Gloo; host values over NCCL).
  Status Collective(absl::Span<float> data, bool on_backend,
                    const std::function<Status(absl::Span<float>)>& op);
  // Dedups `batch`'s ids for `mode` into `keys` and fetches their rows: training pulls (creating
  // unseen rows), evaluation and inference look them up without creating any. Adds the wall time
  // to *dedup_s and *pull_s. With upload_slot >= 0 the inputs also go into that model input slot
  // (Model::UploadBatch): the batch's arrays while the rows are pulled, each table's rows as they
  // arrive (their staging counts as pull time).
  Status FetchRows(const data::Batch& batch, ForwardMode mode, BatchKeys* keys, double* dedup_s,
                   double* pull_s, int upload_slot = -1);
  // This rank's share of a split (at most ceil(max_samples / world) samples, rounded up to whole
  // eval batches; 0 = all), handed to the env.
  StatusOr<EvalResult> Evaluate(data::Split split, int64_t max_samples, int64_t epoch);
  // Exact AUC over every rank's predictions `p` of the loader `lo` (an evaluation: no dropped
  // remainder), identical on every rank and equal to the coordinator's.
  StatusOr<double> GatheredAuc(const EvalPredictions& p, const data::BatchLoaderOptions& lo);
  // One pass over the training split counting every id's occurrences (--sparse-l2's n_j).
  Status CountTrainingIds();
  // The checkpoint protocol of TrainerEnv (REQUIRES: the step pipeline is drained).
  Status Checkpoint(int64_t epochs_done);
  // A cluster job's checkpoint at the end of epoch `epoch`, after its validation and before its
  // test evaluation: every epoch with checkpoint_every_epoch, every improving one with
  // keep_best, and always the final one (the last planned epoch, or a patience stop): the job's
  // model — with keep_best and a final epoch that did not improve, the best epoch's checkpoint
  // committed again (or, when its save had failed, this epoch's). Nothing when a checkpoint was
  // already taken at this step (the one the run resumed from, or an every_steps one).
  Status JobEpochCheckpoint(int64_t epoch, double validation_auc);
  // Writes the checkpoint to `dir` (the servers' snapshot first).
  Status SaveCheckpointNow(const std::string& dir, int64_t epochs_done);
  // Creates `dir` (a checkpoint or job directory), refusing a symbolic link on the way below
  // checkpoint_root.
  Status MakeCheckpointDir(const std::string& dir) const;

  const TrainerOptions& o_;
  TrainerEnv* const env_;
  Collectives* const coll_;
  const int rank_, world_;
  RunMode mode_ = RunMode::kTrain;
  std::unique_ptr<data::Dataset> ds_;
  // The dataset's samples, or (validation_fraction > 0) the view with the validation split carved
  // out of its training split: every loader reads this.
  std::unique_ptr<data::HeldOutSamples> held_out_;
  const data::SampleSource* samples_ = nullptr;
  int64_t best_global_step_ = -1;  // the kept (best) epoch's checkpoint step; -1: none
  // The global step of the last checkpoint taken (or resumed from); -1: none.
  int64_t last_checkpoint_step_ = -1;
  // JobEpochCheckpoint: the selection with the epoch being checkpointed counted (null: result_'s).
  const ModelSelection* selection_to_save_ = nullptr;
  data::HistoryOptions history_;
  ModelConfig config_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<TrainerTables> tables_;  // in-process, or on the embedding servers
  DenseAdam adam_;
  IdCounts id_counts_;  // --sparse-l2 only
  kernels::MathMode math_ = kernels::MathMode::kFp32;
  std::optional<DynamicLossScaler> loss_scaler_;  // fp16 only
  bool collectives_on_backend_stream_ = false;    // NCCL bound to the backend's stream
  std::vector<float> host_stage_;                 // host copies for host collectives
  kernels::BackendBuffer backend_stage_;          // backend copies for device collectives
  RunResult result_;
  int64_t epochs_done_ = 0;
  int64_t global_step_ = 0;
  int64_t planned_steps_ = 1;   // epochs x steps_per_epoch: the lr schedule's T
  int failed_checkpoints_ = 0;  // in a row
};

Status Trainer::Setup(RunMode mode) {
  mode_ = mode;
  if (o_.epochs < 1) return absl::InvalidArgumentError("--epochs must be >= 1");
  if (o_.batch_size < 1) return absl::InvalidArgumentError("--batch-size must be >= 1");
  if (o_.eval_batch_size < 0) return absl::InvalidArgumentError("--eval-batch-size must be >= 0");
  if (!(o_.lr > 0) || !std::isfinite(o_.lr)) {
    return absl::InvalidArgumentError("--lr must be a finite number > 0");
  }
  if (!(o_.weight_decay >= 0) || !(o_.lr * o_.weight_decay < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight-decay must be >= 0 with lr x weight_decay < 1, got ",
                     o_.weight_decay, " at lr ", o_.lr));
  }
  SIFT_RETURN_IF_ERROR(
      ValidateLrSchedule(o_.lr_schedule, "--lr-warmup-steps", "--lr-final-fraction"));
  if (!(o_.sparse_l2 >= 0) || !std::isfinite(o_.sparse_l2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sparse-l2 must be a finite number >= 0, got ", o_.sparse_l2));
  }
  if (o_.benchmark_steps < 0) return absl::InvalidArgumentError("--benchmark-steps must be >= 0");
  if (o_.max_steps_per_epoch < 0) {
    return absl::InvalidArgumentError("--max-steps-per-epoch must be >= 0");
  }
  if (o_.warmup_steps < 0) return absl::InvalidArgumentError("--warmup-steps must be >= 0");
  if (o_.log_every < 0) return absl::InvalidArgumentError("--log-every must be >= 0");
  if (o_.train_eval_samples < 0) {
    return absl::InvalidArgumentError("--train-eval-samples must be >= 0");
  }
  if (o_.staleness < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--staleness (training.staleness) must be >= 0, got ", o_.staleness));
  }
  if (o_.checkpoint_every_steps < 0) {
    return absl::InvalidArgumentError("checkpoint.every_steps must be >= 0");
  }
  if (!o_.embedding_servers.empty()) SIFT_RETURN_IF_ERROR(RemoteTablesSupported());
  if (world_ > 1 && o_.embedding_servers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a world of ", world_, " workers needs the embedding tables on embedding servers"));
  }
  if (!(o_.validation_fraction >= 0 &&
        o_.validation_fraction <= data::HeldOutSamples::kMaxFraction)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--validation-fraction (training.validation_fraction) must be in [0, ",
                     data::HeldOutSamples::kMaxFraction, "], got ", o_.validation_fraction));
  }
  if (o_.patience < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--patience (training.patience) must be >= 0, got ", o_.patience));
  }
  if ((o_.keep_best || o_.patience > 0) && !(o_.validation_fraction > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(o_.keep_best ? "--keep-best validation_auc (training.keep_best)"
                                  : "--patience (training.patience)",
                     " chooses by the validation AUC: it needs --validation-fraction "
                     "(training.validation_fraction) > 0"));
  }
  SIFT_ASSIGN_OR_RETURN(ds_, data::Dataset::Open(o_.dataset));
  samples_ = &ds_->samples();
  if (o_.validation_fraction > 0 && mode == RunMode::kTrain) {
    auto held_out = data::HeldOutSamples::Create(samples_, o_.validation_fraction, o_.seed);
    SIFT_RETURN_IF_ERROR(Annotate(held_out.status(), o_.dataset));
    held_out_ = std::move(held_out).value();
    samples_ = held_out_.get();
  }
  const data::SampleSource& src = *samples_;
  config_ = o_.model;
  config_.user_features = src.num_user_features();
  config_.item_features = src.num_item_features();
  SIFT_RETURN_IF_ERROR(ValidateModelConfig(config_));
  const bool hard_search = config_.type == ModelType::kSim && config_.gsu == Gsu::kHard;
  history_.max_history = (hard_search ? config_.top_k : config_.long_len) + config_.short_len;
  history_.short_history = config_.short_len;
  history_.hard_search_window = hard_search ? config_.long_len : 0;
  history_.time_buckets = config_.type == ModelType::kSim && config_.time_embedding;
  if (hard_search) {
    SIFT_RETURN_IF_ERROR(Annotate(samples_->PrepareHardSearch(), o_.dataset));
  }
  if (history_.time_buckets && !samples_->has_timestamps()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--time-embedding (model.time_embedding) needs event timestamps: ", o_.dataset,
                     " has none (a timeline written without them, or stored samples)"));
  }

  const int64_t n_train = src.NumSamples(data::Split::kTrain);
  if (o_.batch_size > n_train) {
    return absl::InvalidArgumentError(absl::StrCat("--batch-size ", o_.batch_size,
                                                   " is larger than the training split (", n_train,
                                                   " samples): no full batch"));
  }
  if (o_.backend_factory) {
    SIFT_ASSIGN_OR_RETURN(backend_, o_.backend_factory());
  } else if (o_.backend == "cpu") {
    kernels::CpuBackendOptions cpu;
    cpu.threads = o_.threads;
    SIFT_ASSIGN_OR_RETURN(cpu.isa, kernels::ParseCpuIsa(o_.cpu_isa));
    SIFT_ASSIGN_OR_RETURN(backend_, kernels::CreateCpuBackend(cpu));
  } else {
    SIFT_ASSIGN_OR_RETURN(backend_, kernels::CreateBackend(o_.backend, o_.threads));
  }
  SIFT_ASSIGN_OR_RETURN(math_, ResolvePrecision(o_.precision, *backend_));
  SIFT_RETURN_IF_ERROR(backend_->SetMathMode(math_));
  SIFT_RETURN_IF_ERROR(backend_->SetDeterministic(o_.deterministic));
  result_.deterministic = backend_->deterministic();
  if (math_ == kernels::MathMode::kFp16) loss_scaler_.emplace();
  if (coll_->device_memory() && backend_->memory_space() != kernels::MemorySpace::kDevice) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device-memory collectives (NCCL) need a device backend, not '", backend_->name(), "'"));
  }
  if (coll_->device_memory() && backend_->native_stream() != nullptr) {
    // NCCL on the compute stream: an allreduce follows the backward pass without a host wait.
    SIFT_RETURN_IF_ERROR(coll_->UseStream(backend_->native_stream()));
    collectives_on_backend_stream_ = true;
  }
  const int64_t eval_b = o_.eval_batch_size > 0 ? o_.eval_batch_size : o_.batch_size;
  try {
    StatusOr<std::unique_ptr<Model>> model =
        Model::Create(config_, backend_.get(), std::max(o_.batch_size, eval_b));
    if (absl::IsResourceExhausted(model.status())) {
      return Annotate(model.status(), "lower --batch-size / --eval-batch-size");
    }
    SIFT_ASSIGN_OR_RETURN(model_, std::move(model));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of memory allocating the model's activations for ", std::max(o_.batch_size, eval_b),
        " rows: lower --batch-size / --eval-batch-size"));
  }
  SIFT_RETURN_IF_ERROR(model_->InitParameters(o_.seed));

  // The embedding tables: one per user feature, then one per item feature (the feature spec's
  // table order), each with the sparse optimizer.
  SIFT_ASSIGN_OR_RETURN(embedding::OptimizerKind kind,
                        embedding::ParseOptimizerKind(o_.sparse_optimizer));
  const std::vector<int64_t> cards = ds_->spec().TableCardinalities();
  const int num_tables = config_.user_features + config_.item_features;
  if (static_cast<int>(cards.size()) != num_tables) {
    return absl::InvalidArgumentError(absl::StrCat(o_.dataset, ": the feature spec declares ",
                                                   cards.size(), " tables, expected ", num_tables));
  }
  std::vector<embedding::TableConfig> tables;
  for (int t = 0; t < num_tables; ++t) {
    embedding::TableConfig c;
    c.table_id = static_cast<uint32_t>(t);
    c.name = t < config_.user_features ? absl::StrCat("user_feat_", t)
                                       : absl::StrCat("item_feat_", t - config_.user_features);
    c.dim = config_.embedding_dim;
    if (cards[t] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(o_.dataset, ": the feature spec gives no cardinality for table ", c.name,
                       " (needed for the embedding init bound)"));
    }
    c.cardinality = static_cast<uint64_t>(cards[t]);
    if (auto it = o_.table_capacity.find(c.name); it != o_.table_capacity.end()) {
      c.capacity = it->second;
    }
    c.optimizer.kind = kind;
    c.optimizer.learning_rate = o_.lr;
    tables.push_back(std::move(c));
  }
  for (const auto& [name, capacity] : o_.table_capacity) {
    const bool known = std::any_of(tables.begin(), tables.end(),
                                   [&](const embedding::TableConfig& c) { return c.name == name; });
    if (!known) {
      std::vector<std::string> names;
      for (const embedding::TableConfig& c : tables) names.push_back(c.name);
      return absl::InvalidArgumentError(absl::StrCat(
          o_.capacity_field, name, ": the model on ", o_.dataset,
          " has no table of that name (its tables: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  if (o_.embedding_servers.empty()) {
    SIFT_ASSIGN_OR_RETURN(
        tables_, CreateInProcessTables(std::move(tables),
                                       embedding::StoreOptions{o_.seed, 64, TableThreads()}));
  } else {
    RemoteTablesOptions ro;
    ro.servers = o_.embedding_servers;
    ro.security = o_.embedding_security;
    ro.wire_encoding = o_.wire_encoding;
    ro.seed = o_.seed;
    ro.fresh = o_.load_checkpoint.empty();
    ro.prefetch = o_.staleness > 0;
    ro.staleness = o_.staleness;
    ro.collectives = coll_;
    ro.step_pushes = o_.step_sparse_update;
    ro.step_group = o_.step_group != 0 ? o_.step_group : HashCombine(o_.seed, 0x57e9u) | 1;
    ro.generation = o_.generation;
    SIFT_ASSIGN_OR_RETURN(tables_, ConnectRemoteTables(ro, std::move(tables)));
  }

  adam_.hyper.lr = o_.lr;
  adam_.weight_decay = o_.weight_decay;
  const size_t np = model_->parameters().size();
  SIFT_RETURN_IF_ERROR(adam_.Allocate(backend_.get(), static_cast<int64_t>(np)));
  result_.dense_params = static_cast<int64_t>(np);
  result_.threads = TableThreads();
  result_.backend = std::string(backend_->name());
  result_.precision = kernels::MathModeName(math_);
  if (ds_->spec().metadata["oracle_test_auc"]) {
    result_.oracle_test_auc = ds_->spec().metadata["oracle_test_auc"].as<double>(-1);
  }

  // Fail before training, not after the first epoch, when the checkpoint directory is unusable.
  if (!o_.save_checkpoint.empty()) SIFT_RETURN_IF_ERROR(MakeCheckpointDir(o_.save_checkpoint));
  if (!o_.load_checkpoint.empty()) {
    // Every rank reads the dense state (a shared file system, like the dataset); rank 0 restores
    // the tables.
    CheckpointState st;
    SIFT_RETURN_IF_ERROR(LoadCheckpoint(o_.load_checkpoint, ModelSummary(config_),
                                        static_cast<int64_t>(np), &st, tables_->in_process()));
    SIFT_RETURN_IF_ERROR(tables_->Restore(o_.load_checkpoint, st));
    if (st.seed != o_.seed) {
      return absl::InvalidArgumentError(absl::StrCat(
          o_.load_checkpoint, ": field 'seed': the checkpoint was trained with seed ", st.seed,
          ", this run has --seed ", o_.seed, " (shuffling and new rows would differ)"));
    }
    SIFT_RETURN_IF_ERROR(Annotate(model_->CopyParametersFromHost(st.params), o_.load_checkpoint));
    SIFT_RETURN_IF_ERROR(
        Annotate(adam_.FromHost(backend_.get(), st.adam_m, st.adam_v), o_.load_checkpoint));
    adam_.t = st.adam_t;
    // An fp16 run resumes its loss scale (a checkpoint of another precision starts it afresh).
    if (loss_scaler_ && st.loss_scale.present) {
      loss_scaler_->Restore(st.loss_scale.scale, st.loss_scale.good_steps);
    }
    epochs_done_ = st.epochs_done;
    global_step_ = st.global_step;
    if (st.selection.present && st.selection.best_epoch >= 0) {
      ModelSelection& sel = result_.selection;
      sel.best_epoch = st.selection.best_epoch;
      sel.best_validation_auc = st.selection.best_validation_auc;
      sel.best_test_auc = st.selection.best_test_auc;
      sel.best_test_loss = st.selection.best_test_loss;
      best_global_step_ = st.selection.best_global_step;
    }
  }
  if (world_ > 1) {
    // The servers are set up; the dense replicas start identical: rank 0's state everywhere
    // (architecture.md: initialised on rank 0 and broadcast).
    SIFT_RETURN_IF_ERROR(Annotate(coll_->Barrier(), "setup barrier"));
    const auto broadcast = [this](absl::Span<float> d) { return coll_->Broadcast(d, 0); };
    for (absl::Span<float> d : {model_->parameters(), adam_.m_span(), adam_.v_span()}) {
      SIFT_RETURN_IF_ERROR(Annotate(Collective(d, /*on_backend=*/true, broadcast), "broadcast"));
    }
  }
  SIFT_RETURN_IF_ERROR(tables_->Join());
  return env_->OnSetup(result_.oracle_test_auc);
}

Status Trainer::FetchRows(const data::Batch& batch, ForwardMode mode, BatchKeys* keys,
                          double* dedup_s, double* pull_s, int upload_slot) {
  {
    ScopedTimer t(dedup_s);
    SIFT_RETURN_IF_ERROR(
        BuildBatchKeys(batch, model_->key_usage(mode), config_.embedding_dim, keys));
  }
  ScopedTimer t(pull_s);
  const bool upload = upload_slot >= 0 && model_->uploads_inputs();
  if (upload) SIFT_RETURN_IF_ERROR(model_->UploadBatch(upload_slot, batch, *keys, mode));
  SIFT_RETURN_IF_ERROR(tables_->Fetch(mode == ForwardMode::kTrain, keys, [&](int table) {
    return upload ? model_->UploadRows(upload_slot, table, *keys) : absl::OkStatus();
  }));
  if (upload) SIFT_RETURN_IF_ERROR(model_->FinishUpload(upload_slot));
  return absl::OkStatus();
}

Status Trainer::PrepareStep(data::BatchLoader* loader, bool copy, ForwardMode mode,
                            PreparedStep* slot) {
  slot->load_s = slot->dedup_s = slot->pull_s = 0;
  {
    ScopedTimer t(&slot->load_s);
    const data::Batch* b = loader->Next();
    if (b == nullptr) {
      return absl::InternalError(
          absl::StrCat("the batch loader ended before step ", slot->step, " of the epoch"));
    }
    if (copy) {
      slot->copy = *b;  // the loader reuses its buffer once the next batch is taken
      slot->batch = &slot->copy;
    } else {
      slot->batch = b;
    }
  }
  // Step s uses model input slot s % kInputSlots: the prefetch thread fills one while this step
  // computes on the other.
  slot->input_slot = static_cast<int>(slot->step % Model::kInputSlots);
  SIFT_RETURN_IF_ERROR(
      FetchRows(*slot->batch, mode, &slot->keys, &slot->dedup_s, &slot->pull_s, slot->input_slot));
  slot->key_counts = CountKeys(slot->keys);
  return absl::OkStatus();
}

Status Trainer::Collective(absl::Span<float> data, bool on_backend,
                           const std::function<Status(absl::Span<float>)>& op) {
  const bool data_on_device =
      on_backend && backend_->memory_space() == kernels::MemorySpace::kDevice;
  if (data_on_device && coll_->device_memory()) {
    // On the backend's stream the collective follows the work on `data` by itself (but a failed
    // op must not hand its partial results to the other ranks); on another stream that work
    // must be done first.
    SIFT_RETURN_IF_ERROR(collectives_on_backend_stream_ ? backend_->PendingError()
                                                        : backend_->Synchronize());
    return op(data);
  }
  if (data_on_device == coll_->device_memory()) return op(data);
  const int64_t bytes = static_cast<int64_t>(data.size() * sizeof(float));
  if (data_on_device) {  // device buffers, host collectives (Gloo): through a host copy
    host_stage_.resize(data.size());
    SIFT_RETURN_IF_ERROR(backend_->CopyToHost(data.data(), host_stage_.data(), bytes));
    SIFT_RETURN_IF_ERROR(op(absl::MakeSpan(host_stage_)));
    SIFT_RETURN_IF_ERROR(backend_->CopyToBackend(host_stage_.data(), data.data(), bytes));
    return backend_->Synchronize();
  }
  // Host values, device collectives (NCCL): through a device copy.
  if (backend_stage_.bytes() < bytes) {
    SIFT_ASSIGN_OR_RETURN(backend_stage_, backend_->Allocate(bytes));
  }
  const absl::Span<float> staged(backend_stage_.floats(), data.size());
  SIFT_RETURN_IF_ERROR(backend_->CopyToBackend(data.data(), staged.data(), bytes));
  SIFT_RETURN_IF_ERROR(backend_->Synchronize());  // the copy is done before NCCL reads it
  SIFT_RETURN_IF_ERROR(op(staged));
  return backend_->CopyToHost(staged.data(), data.data(), bytes);
}

StatusOr<Losses> Trainer::TrainStep(PreparedStep* ps, int64_t epoch, int64_t step, PhaseTimes* ph) {
  const auto average = [this](absl::Span<float> d) { return coll_->AllreduceAverage(d); };
  Losses losses;
  // Dropout masks: one seed per step and rank, so a run is reproducible for a fixed seed.
  if (config_.dropout > 0) {
    model_->SetDropoutSeed(HashCombine(HashCombine(o_.seed ^ 0xd209d07ull, global_step_), rank_));
  }
  {
    ScopedTimer t(&ph->forward);
    SIFT_ASSIGN_OR_RETURN(
        losses, model_->Forward(*ps->batch, ps->keys, ForwardMode::kTrain, ps->input_slot));
  }
  if (world_ > 1) {
    // The mean over ranks: every rank sees the same value (and fails alike when it is not
    // finite).
    ScopedTimer t(&ph->allreduce);
    float l[3] = {static_cast<float>(losses.total), static_cast<float>(losses.classification),
                  static_cast<float>(losses.aux)};
    SIFT_RETURN_IF_ERROR(
        Annotate(Collective(absl::MakeSpan(l), /*on_backend=*/false, average), "loss allreduce"));
    losses = {l[0], l[1], l[2]};
  }
  // fp16 overflow: no dense step, no push (every rank decides alike); the scaler lowered the
  // scale.
  const auto skip_step = [&]() -> StatusOr<Losses> {
    result_.skipped_steps = loss_scaler_->skipped_steps();
    ++global_step_;
    return losses;
  };
  if (!std::isfinite(losses.total) && loss_scaler_) {
    // A forward overflow (an fp16 GEMM input beyond 65504) is an overflow like a backward one —
    // skip the step, as TF's loss-scale optimizer does. Every rank saw the same (allreduced)
    // loss, so every rank skips.
    loss_scaler_->Update(false);
    return skip_step();
  }
  if (!std::isfinite(losses.total)) {
    return absl::InternalError(absl::StrFormat(
        "non-finite training loss %g at epoch %d step %d (classification %g, aux %g)", losses.total,
        epoch + 1, step + 1, losses.classification, losses.aux));
  }
  const size_t dim = static_cast<size_t>(config_.embedding_dim);
  const float scale = loss_scaler_ ? loss_scaler_->scale() : 1.0f;
  {
    ScopedTimer t(&ph->backward);
    // The embedding gradients come back on the copy channel while the dense allreduce and
    // optimizer are issued; FinishBackward waits for them (and reports a failed op).
    SIFT_RETURN_IF_ERROR(model_->StartBackward(&ps->keys, scale));
  }
  bool backward_finished = false;
  const auto finish_backward = [&]() -> Status {
    if (backward_finished) return absl::OkStatus();
    backward_finished = true;
    ScopedTimer t(&ph->backward);
    return model_->FinishBackward();
  };
  const absl::Span<float> grads = model_->gradients();
  float unscale = 1.0f;  // the loss scale's inverse, once the step is known to apply
  if (loss_scaler_) {
    SIFT_RETURN_IF_ERROR(finish_backward());
    // A non-finite embedding gradient (host memory) poisons the dense gradients, so that after
    // the allreduce every rank sees the overflow and skips the step alike.
    bool sparse_finite = true;
    for (const TableKeys& tk : ps->keys.tables) {
      sparse_finite &= kernels::Backend::AllFiniteOnHost(static_cast<int64_t>(tk.keys.size() * dim),
                                                         tk.grads.data());
    }
    if (!sparse_finite) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      SIFT_RETURN_IF_ERROR(backend_->CopyToBackend(&nan, grads.data(), sizeof(float)));
    }
  }
  if (world_ > 1) {
    ScopedTimer t(&ph->allreduce);
    SIFT_RETURN_IF_ERROR(
        Annotate(Collective(grads, /*on_backend=*/true, average), "dense gradient allreduce"));
  }
  if (loss_scaler_) {
    const bool apply =
        loss_scaler_->Update(backend_->AllFinite(static_cast<int64_t>(grads.size()), grads.data()));
    SIFT_RETURN_IF_ERROR(backend_->Synchronize());
    if (!apply) return skip_step();
    unscale = 1.0f / scale;
    backend_->Scale(static_cast<int64_t>(grads.size()), unscale, grads.data());
    // The embedding gradients are unscaled with the push's 1/world below (one pass).
  }
  const float lr_multiplier = LrMultiplier();  // the dense step's and the push's
  {
    ScopedTimer t(&ph->dense_opt);
    adam_.hyper.lr = o_.lr * lr_multiplier;
    adam_.Step(backend_.get(), model_->parameters(), grads);
  }
  SIFT_RETURN_IF_ERROR(finish_backward());
  {
    ScopedTimer t(&ph->push);
    for (size_t tb = 0; tb < ps->keys.tables.size(); ++tb) {
      TableKeys& tk = ps->keys.tables[tb];
      const absl::Span<float> sparse = absl::MakeSpan(tk.grads.data(), tk.keys.size() * dim);
      // Each rank's gradient is of its own mean loss: 1/W of each makes their sum on the servers
      // the gradient of the global mean loss.
      ScaleSparseGradients(world_, unscale, sparse);
      if (o_.sparse_l2 > 0 && step_pushes()) {
        // Summed with the other ranks' on the servers, which add c * w once per row.
        SIFT_RETURN_IF_ERROR(MiniBatchAwareL2Coefficients(o_.sparse_l2, id_counts_, tb, &tk));
      } else if (o_.sparse_l2 > 0) {
        SIFT_RETURN_IF_ERROR(AddMiniBatchAwareL2(o_.sparse_l2 / static_cast<float>(world_),
                                                 id_counts_, config_.embedding_dim, tb, &tk));
      }
    }
    if (global_step_ == o_.fault_exit_before_push_step) {
      std::fprintf(stderr, "fault injection: exiting before the push of step %lld\n",
                   static_cast<long long>(global_step_));
      std::fflush(nullptr);
      ::_exit(3);
    }
    SIFT_RETURN_IF_ERROR(tables_->Push(ps->keys, global_step_, lr_multiplier));
  }
  ++global_step_;
  return losses;
}

StatusOr<EvalResult> Trainer::Evaluate(data::Split split, int64_t max_samples, int64_t epoch) {
  data::BatchLoaderOptions lo;
  lo.split = split;
  lo.batch_size = o_.eval_batch_size > 0 ? o_.eval_batch_size : o_.batch_size;
  lo.history = history_;
  // A fixed sample of the training split: the first positions of one seeded permutation (of
  // each rank's share).
  lo.order = max_samples > 0 ? data::SampleOrder::kShuffled : data::SampleOrder::kReference;
  lo.seed = HashCombine(o_.seed, 0x5eed0e7a1ull);
  lo.rank = rank_;
  lo.world = world_;
  lo.drop_remainder = false;
  // The train-AUC sample: the ranks' first samples together are one process's first samples.
  lo.interleave = step_pushes();
  lo.threads = o_.threads;
  // The streamed soft search skips the padding of rows grouped by history length; the
  // predictions go back to the epoch order (Batch::epoch_row), as test_predictions.csv lists them.
  lo.group_by_history = model_->soft_search_chunk() > 0;
  SIFT_ASSIGN_OR_RETURN(auto loader, data::BatchLoader::Create(samples_, lo));
  loader->StartEpoch(0);
  EvalPredictions p;
  const int64_t n = loader->samples_per_epoch();
  // Each rank's share, rounded up (without overflow for any max_samples).
  const int64_t share = max_samples / world_ + (max_samples % world_ != 0 ? 1 : 0);
  const int64_t want = max_samples > 0 ? std::min(share, n) : n;
  ProgressBar bar(o_.progress, absl::StrCat("eval ", data::SplitName(split)), want);
  BatchKeys keys;
  double unused_s = 0;
  while (static_cast<int64_t>(p.scores.size()) < want) {
    SIFT_RETURN_IF_ERROR(env_->CheckAbort());
    const data::Batch* b = loader->Next();
    if (b == nullptr) break;
    SIFT_RETURN_IF_ERROR(FetchRows(*b, ForwardMode::kEval, &keys, &unused_s, &unused_s));
    SIFT_ASSIGN_OR_RETURN(Losses l, model_->Forward(*b, keys, ForwardMode::kEval));
    const double batch_loss = l.total * static_cast<double>(b->size);
    p.loss_sum += batch_loss;
    p.batch_rows.push_back(b->size);
    p.batch_loss_sums.push_back(batch_loss);
    absl::Span<const float> logits = model_->logits();
    const size_t at = p.scores.size();
    p.scores.resize(at + static_cast<size_t>(b->size));
    p.labels.resize(p.scores.size());
    for (int64_t i = 0; i < b->size; ++i) {
      const size_t r = at + static_cast<size_t>(b->epoch_row[static_cast<size_t>(i)]);
      p.scores[r] = logits[i];
      p.labels[r] = b->label[i];
    }
    bar.Update(static_cast<int64_t>(p.scores.size()), static_cast<int64_t>(p.scores.size()));
  }
  bar.Finish();
  SIFT_ASSIGN_OR_RETURN(EvalResult r, env_->OnEvaluation(epoch, split, p));
  if (split == data::Split::kValidation) {
    SIFT_ASSIGN_OR_RETURN(r.auc, GatheredAuc(p, lo));
  }
  return r;
}

StatusOr<double> Trainer::GatheredAuc(const EvalPredictions& p,
                                      const data::BatchLoaderOptions& lo) {
  if (world_ == 1) {
    const std::vector<double> scores(p.scores.begin(), p.scores.end());
    return ExactAuc(scores, p.labels);
  }
  // Every rank's share at its offset in rank order (the coordinator's concatenation), zeros
  // elsewhere: the sum over ranks is every prediction, exactly, on every rank.
  const int64_t n = samples_->NumSamples(lo.split);
  int64_t offset = 0;
  for (int r = 0; r < rank_; ++r) {
    offset +=
        data::ComputeRankShare(n, lo.order, r, world_, lo.drop_remainder, lo.interleave).count;
  }
  std::vector<float> all(static_cast<size_t>(2 * n), 0.0f);
  std::copy(p.scores.begin(), p.scores.end(), all.begin() + offset);
  std::copy(p.labels.begin(), p.labels.end(), all.begin() + n + offset);
  const auto sum = [this](absl::Span<float> d) { return coll_->AllreduceSum(d); };
  SIFT_RETURN_IF_ERROR(Annotate(Collective(absl::MakeSpan(all), /*on_backend=*/false, sum),
                                "validation predictions allreduce"));
  const std::vector<double> scores(all.begin(), all.begin() + n);
  const std::vector<float> labels(all.begin() + n, all.end());
  return ExactAuc(scores, labels);
}

Status Trainer::Checkpoint(int64_t epochs_done) {
  last_checkpoint_step_ = global_step_;  // every rank alike, whether the save then succeeds
  if (world_ > 1) SIFT_RETURN_IF_ERROR(Annotate(coll_->Barrier(), "checkpoint barrier"));
  if (rank_ == 0) {
    SIFT_RETURN_IF_ERROR(env_->CheckpointBegin(global_step_));
    // A failed save (a full or unwritable disk, a snapshot that could not be written) is retried
    // with backoff; if it still fails, training goes on and the previous checkpoint (left whole
    // by SaveCheckpoint) stays the recovery point. Only kMaxFailedCheckpoints in a row fail.
    const std::string dir = o_.checkpoint_keep > 0
                                ? CheckpointStepDir(o_.save_checkpoint, global_step_)
                                : o_.save_checkpoint;
    Status saved;
    for (int attempt = 0; attempt < kCheckpointAttempts; ++attempt) {
      if (attempt > 0) absl::SleepFor(kCheckpointBackoff * (1 << (attempt - 1)));
      saved = MakeCheckpointDir(dir);
      if (saved.ok()) saved = SaveCheckpointNow(dir, epochs_done);
      if (saved.ok()) break;
    }
    if (saved.ok()) {
      failed_checkpoints_ = 0;
      SIFT_RETURN_IF_ERROR(env_->CheckpointCommit(dir, epochs_done, global_step_));
      // Older checkpoints go only now that a newer one is the recovery point.
      if (o_.checkpoint_keep > 0) {
        // keep_best: the kept model's checkpoint stays too. Never through a symbolic link.
        Status pruned = MakeCheckpointDir(o_.save_checkpoint);
        if (pruned.ok()) {
          pruned = PruneStepCheckpoints(o_.save_checkpoint, global_step_, o_.checkpoint_keep,
                                        o_.keep_best ? best_global_step_ : -1);
        }
        if (!pruned.ok()) {
          std::fprintf(stderr, "warning: %s\n", std::string(pruned.message()).c_str());
        }
      }
    } else if (++failed_checkpoints_ >= kMaxFailedCheckpoints) {
      return Status(saved.code(),
                    absl::StrCat(kMaxFailedCheckpoints, " checkpoints in a row failed (each tried ",
                                 kCheckpointAttempts, " times); the last: ", saved.message()));
    } else {
      SIFT_RETURN_IF_ERROR(env_->CheckpointFailed(global_step_, saved));
    }
  }
  if (world_ > 1) SIFT_RETURN_IF_ERROR(Annotate(coll_->Barrier(), "checkpoint barrier"));
  return absl::OkStatus();
}

Status Trainer::JobEpochCheckpoint(int64_t epoch, double validation_auc) {
  // The selection rule the test evaluation will apply (it does not depend on the test AUC); the
  // checkpoint records the selection with this epoch counted, so that a run resumed from it
  // chooses and stops as the uninterrupted run does.
  ModelSelection probe = result_.selection;
  const bool validating = held_out_ != nullptr;
  const bool improves = !validating || probe.Update(epoch, validation_auc, 0, 0);
  const bool stops = validating && probe.ShouldStop(epoch, o_.patience) && epoch + 1 < o_.epochs;
  const bool final_epoch = epoch + 1 == o_.epochs || stops;
  if (final_epoch && o_.keep_best && validating && !improves && best_global_step_ >= 0) {
    // The kept model is an earlier epoch's, checkpointed when it improved: it is the job's final
    // model. (Every rank sees the same shared checkpoint directory, so all take the same branch.)
    const std::string kept = CheckpointStepDir(o_.save_checkpoint, best_global_step_);
    if (PathExists(JoinPath(kept, "manifest.json"))) {
      if (rank_ != 0) return absl::OkStatus();
      return env_->CheckpointCommit(kept, result_.selection.best_epoch + 1, best_global_step_);
    }
    // Its save had failed: the last epoch's model is the best left to keep.
  }
  // Already written at this step: the checkpoint this run resumed from, or a checkpoint.every_steps
  // one at the epoch's last step.
  if (global_step_ == last_checkpoint_step_) return absl::OkStatus();
  if (!final_epoch && !o_.checkpoint_every_epoch && !(o_.keep_best && validating && improves)) {
    return absl::OkStatus();
  }
  if (validating && improves) best_global_step_ = global_step_;  // kept from now on (pruning)
  selection_to_save_ = &probe;
  const Status s = Checkpoint(epoch + 1);
  selection_to_save_ = nullptr;
  return s;
}

Status Trainer::MakeCheckpointDir(const std::string& dir) const {
  if (o_.checkpoint_root.empty()) return MakeDirs(dir);
  SIFT_RETURN_IF_ERROR(MakeDirs(o_.checkpoint_root));  // the operator's (its links are theirs)
  return CheckNoSymlinksUnder(o_.checkpoint_root, dir, /*create=*/true);
}

Status Trainer::SaveCheckpointNow(const std::string& dir, int64_t epochs_done) {
  CheckpointState st;
  st.job_id = o_.checkpoint_job;
  st.owner = o_.checkpoint_owner;
  st.epochs_done = epochs_done;
  st.global_step = global_step_;
  st.adam_t = adam_.t;
  st.seed = o_.seed;
  st.model = ModelSummary(config_);
  st.params.resize(model_->parameters().size());
  SIFT_RETURN_IF_ERROR(model_->CopyParametersToHost(absl::MakeSpan(st.params)));
  SIFT_RETURN_IF_ERROR(adam_.ToHost(backend_.get(), &st.adam_m, &st.adam_v));
  if (loss_scaler_) {
    st.loss_scale = {true, loss_scaler_->scale(), loss_scaler_->good_steps()};
  }
  if (held_out_ != nullptr) {
    const ModelSelection& sel =
        selection_to_save_ != nullptr ? *selection_to_save_ : result_.selection;
    st.selection = {true,
                    sel.best_epoch,
                    std::max<int64_t>(best_global_step_, 0),
                    sel.best_validation_auc,
                    sel.best_test_auc,
                    sel.best_test_loss};
  }
  // Tables on servers: they write a snapshot first (a consistent cut: every rank's pushes have
  // returned and no pull is in flight), which the manifest then names; with checkpoint_keep they
  // keep the snapshots of the checkpoints still on disk.
  std::vector<int64_t> retain;
  if (o_.checkpoint_keep > 0) {
    for (const auto& [step, path] : ListStepCheckpoints(o_.save_checkpoint)) retain.push_back(step);
  }
  SIFT_RETURN_IF_ERROR(tables_->Snapshot(env_->SnapshotName(global_step_), global_step_,
                                         o_.checkpoint_keep > 0 ? &retain : nullptr, &st.remote));
  return SaveCheckpoint(dir, st, tables_->in_process());
}

Status Trainer::CountTrainingIds() {
  data::BatchLoaderOptions lo;
  lo.split = data::Split::kTrain;
  lo.batch_size = o_.batch_size;
  lo.history = history_;
  lo.order = data::SampleOrder::kReference;  // the counts do not depend on the order
  lo.seed = o_.seed;
  lo.rank = 0;  // every rank counts the whole split: the same n_j everywhere
  lo.world = 1;
  lo.drop_remainder = false;
  lo.threads = o_.threads;
  SIFT_ASSIGN_OR_RETURN(auto loader, data::BatchLoader::Create(samples_, lo));
  loader->StartEpoch(0);
  ProgressBar bar(o_.progress, "count ids (sparse L2)", loader->samples_per_epoch());
  BatchKeys keys;
  int64_t seen = 0;
  id_counts_ = IdCounts();
  while (const data::Batch* b = loader->Next()) {
    SIFT_RETURN_IF_ERROR(env_->CheckAbort());
    SIFT_RETURN_IF_ERROR(
        BuildBatchKeys(*b, model_->key_usage(ForwardMode::kTrain), config_.embedding_dim, &keys));
    CountOccurrences(keys, &id_counts_);
    seen += b->size;
    bar.Update(seen, seen);
  }
  bar.Finish();
  return absl::OkStatus();
}

StatusOr<RunResult> Trainer::Run(RunMode mode) {
  const bool inference = mode == RunMode::kBenchInference;
  const bool bench = mode != RunMode::kTrain;
  if (!inference && o_.sparse_l2 > 0) SIFT_RETURN_IF_ERROR(CountTrainingIds());
  data::BatchLoaderOptions lo;
  lo.split = data::Split::kTrain;
  lo.batch_size = o_.batch_size;
  lo.history = history_;
  lo.order = o_.order;
  lo.seed = o_.seed;
  lo.rank = rank_;
  lo.world = world_;
  lo.drop_remainder = true;  // as the reference's run scripts (model-spec 0); equal steps per rank
  lo.interleave = step_pushes();  // the ranks' step-t batches are one process's step-t batch
  lo.threads = o_.threads;
  lo.group_by_history = model_->soft_search_chunk() > 0;  // the streamed soft search's chunks
  SIFT_RETURN_IF_ERROR(data::ValidateBatchLoaderOptions(*samples_, lo));
  SIFT_ASSIGN_OR_RETURN(auto loader, data::BatchLoader::Create(samples_, lo));
  int64_t steps_per_epoch = loader->steps_per_epoch();
  if (o_.max_steps_per_epoch > 0)
    steps_per_epoch = std::min(steps_per_epoch, o_.max_steps_per_epoch);
  result_.samples_per_step = o_.batch_size * world_;
  int64_t first_epoch = inference ? 0 : epochs_done_;
  // A cluster job's final checkpoint (every completed job writes one) resumed: nothing is left to
  // train, the last epoch is evaluated again (a recovery during its evaluation, or a new job
  // --resume-from the final model).
  if (!o_.load_checkpoint.empty()) last_checkpoint_step_ = global_step_;
  // A final checkpoint: the last epoch's, or — a recovery of the same job, whose coordinator holds
  // the epochs before it — the epoch a patience stop ended the job at.
  const bool own_checkpoint =
      !o_.save_checkpoint.empty() && absl::StartsWith(o_.load_checkpoint, o_.save_checkpoint + "/");
  const bool stopped = own_checkpoint && held_out_ != nullptr && epochs_done_ > 0 &&
                       result_.selection.ShouldStop(epochs_done_ - 1, o_.patience);
  if (!bench && o_.resume_within_epoch && first_epoch > 0 &&
      (first_epoch == o_.epochs || (stopped && first_epoch < o_.epochs))) {
    first_epoch -= 1;
  }
  if (first_epoch >= o_.epochs) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint already completed ", first_epoch,
                                                   " epoch(s); --epochs ", o_.epochs,
                                                   " leaves nothing to train"));
  }
  int64_t first_step = 0;  // steps of first_epoch already trained (a mid-epoch checkpoint)
  if (!inference && o_.resume_within_epoch && !o_.load_checkpoint.empty()) {
    first_step = global_step_ - first_epoch * steps_per_epoch;
    if (first_step < 0 || first_step > steps_per_epoch) {
      return absl::DataLossError(absl::StrCat(
          o_.load_checkpoint, ": global_step ", global_step_, " is not within epoch ",
          first_epoch + 1, " of ", steps_per_epoch, " steps (was it taken by another job?)"));
    }
  }
  PerfStatsOptions po;
  po.warmup_steps = o_.warmup_steps;
  po.total_steps = bench && o_.benchmark_steps > 0 ? o_.warmup_steps + o_.benchmark_steps : 0;
  po.planned_steps = (o_.epochs - first_epoch) * steps_per_epoch - first_step;
  planned_steps_ = std::max<int64_t>(o_.epochs * steps_per_epoch, 1);
  if (po.total_steps > 0) po.planned_steps = std::min(po.planned_steps, po.total_steps);
  PerfStats perf(po);
  const ForwardMode fmode = inference ? ForwardMode::kInference : ForwardMode::kTrain;
  StepPipeline pipeline(o_.staleness, [&](int64_t, PreparedStep* slot) {
    return PrepareStep(loader.get(), o_.staleness > 0, fmode, slot);
  });

  for (int64_t epoch = first_epoch; epoch < o_.epochs && !perf.completed(); ++epoch) {
    const int64_t start_step = epoch == first_epoch ? first_step : 0;
    loader->StartEpoch(epoch, start_step);
    pipeline.Start(start_step, steps_per_epoch);
    perf.StartEpoch();
    const double epoch_start = Now();
    ProgressBar bar(
        o_.progress,
        absl::StrFormat("%s epoch %d/%d", inference ? "inference" : "train", epoch + 1, o_.epochs),
        steps_per_epoch);
    int64_t step = start_step;
    for (; step < steps_per_epoch && !perf.completed(); ++step) {
      SIFT_RETURN_IF_ERROR(env_->CheckAbort());
      const double step_start = Now();
      SIFT_ASSIGN_OR_RETURN(PreparedStep * ps, pipeline.Next());
      if (ps == nullptr) break;
      StepReport r;
      r.epoch = inference ? 0 : epoch;
      r.step = step;
      r.global_step = global_step_;
      r.steps_per_epoch = steps_per_epoch;
      if (!inference) r.lr = o_.lr * LrMultiplier();
      r.phases.load = ps->load_s;
      r.phases.dedup = ps->dedup_s;
      r.phases.pull = ps->pull_s;
      if (inference) {
        ScopedTimer t(&r.phases.forward);
        SIFT_RETURN_IF_ERROR(
            model_->Forward(*ps->batch, ps->keys, ForwardMode::kInference, ps->input_slot)
                .status());
      } else {
        SIFT_ASSIGN_OR_RETURN(r.losses, TrainStep(ps, epoch, step, &r.phases));
        r.has_losses = true;
        result_.step_losses.push_back(r.losses.total);
      }
      pipeline.Done(step);
      r.samples = ps->batch->size * world_;
      r.samples_per_second = perf.Step(r.samples);
      r.seconds = Now() - step_start;
      result_.phases.Add(r.phases);
      result_.key_counts.slot_ids += ps->key_counts.slot_ids;
      result_.key_counts.unique += ps->key_counts.unique;
      result_.long_slots += ps->batch->size * model_->batch_long_len();
      result_.long_slots_searched += model_->long_slots_searched();
      SIFT_RETURN_IF_ERROR(env_->OnStep(r));
      ++result_.steps;
      bar.Update(step + 1, (step + 1) * o_.batch_size);
      if (!bench && !o_.save_checkpoint.empty() && o_.checkpoint_every_steps > 0 &&
          global_step_ % o_.checkpoint_every_steps == 0) {
        pipeline.Drain();
        SIFT_RETURN_IF_ERROR(Checkpoint(/*epochs_done=*/epoch));
      }
    }
    pipeline.Drain();
    if (step_pushes() && o_.staleness > 0) {
      // Without the per-step barrier another rank's last push may still be held: evaluate (and
      // choose by validation) the model with every step applied.
      SIFT_RETURN_IF_ERROR(Annotate(coll_->Barrier(), "epoch-end barrier"));
    }
    bar.Finish();
    EpochMetrics em;
    em.epoch = epoch;
    em.steps = step - start_step;
    em.train_time_s = Now() - epoch_start;
    em.perf = perf.Results();
    // The epoch's throughput and latencies, taken before evaluation (as the reference does).
    const DllMetrics m = perf.SummaryMetrics();
    result_.time_to_train_s += em.train_time_s;
    SIFT_RETURN_IF_ERROR(env_->OnEpochTrained(epoch, m, em.train_time_s));
    if (bench) continue;
    const int64_t train_eval = o_.train_eval_samples;
    SIFT_ASSIGN_OR_RETURN(EvalResult train, Evaluate(data::Split::kTrain, train_eval, epoch));
    EvalResult validation;
    if (held_out_ != nullptr) {
      SIFT_ASSIGN_OR_RETURN(validation, Evaluate(data::Split::kValidation, 0, epoch));
    }
    // A cluster job's checkpoints come before the test evaluation, whose last report completes
    // the job at the coordinator: the final epoch's can only be written before it.
    if (o_.checkpoint_keep > 0 && !o_.save_checkpoint.empty()) {
      SIFT_RETURN_IF_ERROR(JobEpochCheckpoint(epoch, validation.auc));
    }
    SIFT_ASSIGN_OR_RETURN(EvalResult test, Evaluate(data::Split::kTest, 0, epoch));
    em.train_auc = train.auc;
    em.train_loss = train.loss;
    em.test_auc = test.auc;
    em.test_loss = test.loss;
    em.has_validation = held_out_ != nullptr;
    em.validation_auc = validation.auc;
    em.validation_loss = validation.loss;
    bool stop = false;
    em.kept = true;
    if (held_out_ != nullptr) {
      const bool improved = result_.selection.Update(epoch, validation.auc, test.auc, test.loss);
      if (improved) best_global_step_ = global_step_;
      em.kept = !o_.keep_best || improved;
      stop = result_.selection.ShouldStop(epoch, o_.patience) && epoch + 1 < o_.epochs;
    }
    epochs_done_ = epoch + 1;
    const bool last = epochs_done_ == o_.epochs || stop;
    // sift train's single checkpoint directory holds the kept model (keep_best: the best epoch's,
    // saved only when it improves); a job's step checkpoints are its recovery points.
    const bool save_epoch = !o_.keep_best || em.kept;
    if (o_.checkpoint_keep == 0 && !o_.save_checkpoint.empty() && o_.checkpoint_every_epoch &&
        (!last || o_.checkpoint_final_epoch) && save_epoch) {
      SIFT_RETURN_IF_ERROR(Checkpoint(epochs_done_));
    }
    SIFT_RETURN_IF_ERROR(env_->OnEpochEnd(em, m));
    result_.epochs.push_back(em);
    if (stop) {
      result_.stopped_early = true;
      break;
    }
  }
  if (!bench && !result_.epochs.empty()) {
    result_.kept_epoch = o_.keep_best && result_.selection.best_epoch >= 0
                             ? result_.selection.best_epoch
                             : result_.epochs.back().epoch;
  }
  result_.perf = perf.Results();
  result_.compute = backend_->Describe();
  result_.warnings = backend_->Warnings();
  SIFT_RETURN_IF_ERROR(env_->OnFinish(mode, result_, bench ? perf.SummaryMetrics() : DllMetrics{}));
  return std::move(result_);
}

}  // namespace

std::string ModelSummary(const ModelConfig& c) {
  return absl::StrCat(
      ModelTypeName(c.type), " D=", c.embedding_dim, " UF=", c.user_features,
      " F=", c.item_features, " long=", c.long_len, " short=", c.short_len, " top_k=", c.top_k,
      c.gsu == Gsu::kHard ? " gsu=hard" : "", c.time_embedding ? " time_embedding" : "",
      c.gsu_time ? " gsu_time" : "", " gru=", c.gru_hidden > 0 ? c.gru_hidden : 6 * c.embedding_dim,
      " stage1=", absl::StrJoin(c.stage_one_mlp, ","),
      " stage2=", absl::StrJoin(c.stage_two_mlp, ","), " aux=", absl::StrJoin(c.aux_mlp, ","),
      " att=", absl::StrJoin(c.attention_mlp, ","));
}

TrainerEnv::~TrainerEnv() = default;

void DenseAdamWStep(kernels::Backend* backend, const kernels::AdamHyper& hyper, float weight_decay,
                    int64_t t, int64_t n, const float* grads, float* params, float* m, float* v) {
  if (weight_decay != 0) backend->Scale(n, 1.0f - hyper.lr * weight_decay, params);
  backend->AdamUpdate(n, hyper, t, grads, params, m, v);
}

void ScaleSparseGradients(int world, float unscale, absl::Span<float> grads) {
  if (world == 1 && unscale == 1.0f) return;
  const float scale = unscale / static_cast<float>(world);
  for (float& g : grads) g *= scale;
}

StatusOr<RunResult> RunTrainerWithEnv(const TrainerOptions& options, RunMode mode,
                                      TrainerEnv* env) {
  Trainer trainer(options, env);
  SIFT_RETURN_IF_ERROR(trainer.Setup(mode));
  return trainer.Run(mode);
}

StatusOr<RunResult> RunTrainer(const TrainerOptions& options, RunMode mode) {
  LocalEnv env(options);
  return RunTrainerWithEnv(options, mode, &env);
}

}  // namespace sift::worker
