#include "worker/distributed_worker.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/hash.h"
#include "common/perf_stats.h"
#include "common/text.h"
#include "kernels/backend.h"
#include "server/coordinator/coordinator_kv_store.h"
#include "worker/gloo_collectives.h"
#if SIFT_HAVE_NCCL_COLLECTIVES
#include "worker/nccl_collectives.h"
#endif

namespace sift::worker {

namespace cpb = ::sift::coordinator::v1;

namespace {

// ReportEval chunks: 2^18 scores and labels are 2 MiB, well inside gRPC's default 4 MiB limit.
constexpr int64_t kEvalChunkScores = int64_t{1} << 18;
// Step records go to the coordinator at most this often (and at epoch ends, checkpoints, the end).
constexpr double kProgressFlushSeconds = 0.25;

// cluster.collectives: nccl, or auto for a cuda job in a build with NCCL.
bool UsesNccl(const JobSpec::Cluster& c) {
  if (c.collectives == "nccl") return true;
#if SIFT_HAVE_NCCL_COLLECTIVES
  return c.collectives == "auto" && c.backend == "cuda";
#else
  return false;
#endif
}

void Log(const cpb::Assignment& a, const std::string& what) {
  std::printf("sift worker: %s generation %lld rank %d/%d: %s\n", a.job_id().c_str(),
              static_cast<long long>(a.generation()), a.rank(), a.world_size(), what.c_str());
  std::fflush(stdout);
}

// The env of one rank of a cluster job: Gloo collectives through the coordinator's KV, progress
// and evaluation to the coordinator, the checkpoint protocol's Begin/Commit calls, and the abort
// check against the latest heartbeat. Remembers why a run must end quietly.
class ClusterEnv : public TrainerEnv {
 public:
  ClusterEnv(coordinator::CoordinatorClient* client, coordinator::MemberSession* session,
             WorkerMetrics* metrics, const std::atomic<bool>* stop, cpb::Assignment a)
      : client_(client),
        session_(session),
        metrics_(metrics),
        stop_(stop),
        a_(std::move(a)),
        kv_(client) {}

  // Joins the generation's collectives (blocks until every rank joined, or the timeout): NCCL
  // when `nccl` (a cuda job in a build with NCCL), Gloo otherwise.
  Status Connect(const std::string& host, double timeout_s, bool nccl) {
    if (nccl) {
#if SIFT_HAVE_NCCL_COLLECTIVES
      NcclOptions no;
      no.timeout_s = timeout_s;
      SIFT_ASSIGN_OR_RETURN(collectives_, CreateNcclCollectives(&kv_, a_.kv_prefix(), a_.rank(),
                                                                a_.world_size(), no));
      return absl::OkStatus();
#else
      return absl::FailedPreconditionError(
          "cluster.collectives: nccl, but this sift was built without NCCL");
#endif
    }
    GlooOptions go;
    go.hostname = host;
    go.timeout_s = timeout_s;
    SIFT_ASSIGN_OR_RETURN(
        collectives_, CreateGlooCollectives(&kv_, a_.kv_prefix(), a_.rank(), a_.world_size(), go));
    return absl::OkStatus();
  }

  bool abandoned() const { return abandoned_; }
  bool coordinator_failed() const { return coordinator_failed_; }
  const std::string& abandon_reason() const { return abandon_reason_; }

  Collectives* collectives() override { return collectives_.get(); }

  Status CheckAbort() override {
    if (stop_->load()) return Abandon("the worker is stopping");
    if (!session_->StillAssigned(a_.job_id(), a_.generation())) {
      return Abandon("the coordinator no longer assigns this generation");
    }
    return absl::OkStatus();
  }

  Status OnSetup(double oracle_test_auc) override {
    oracle_test_auc_ = oracle_test_auc > 0 ? oracle_test_auc : -1;
    return absl::OkStatus();
  }

  Status OnStep(const StepReport& r) override {
    steps_per_epoch_ = r.steps_per_epoch;
    if (metrics_ != nullptr) {
      metrics_->RecordStep(a_.job_id(), a_.rank(), r.samples / std::max(1, a_.world_size()), r);
    }
    if (a_.rank() != 0) return absl::OkStatus();
    cpb::StepRecord* s = pending_.add_steps();
    s->set_epoch(r.epoch);
    s->set_step(r.step);
    s->set_global_step(r.global_step);
    s->set_total_loss(r.losses.total);
    s->set_classification_loss(r.losses.classification);
    s->set_aux_loss(r.losses.aux);
    s->set_samples_per_second(r.samples_per_second);
    s->set_samples(r.samples);
    if (SteadyClockSeconds() - last_flush_ >= kProgressFlushSeconds) return Flush();
    return absl::OkStatus();
  }

  Status OnEpochTrained(int64_t epoch, const DllMetrics& perf, double train_time_s) override {
    if (a_.rank() != 0) return absl::OkStatus();
    pending_.set_epoch_end(true);
    pending_.set_epoch(epoch);
    for (const auto& [name, value] : perf) {
      cpb::Metric* m = pending_.add_epoch_perf();
      m->set_name(name);
      m->set_value(value);
    }
    pending_.set_epoch_train_time_s(train_time_s);
    return Flush();
  }

  StatusOr<EvalResult> OnEvaluation(int64_t epoch, data::Split split,
                                    const EvalPredictions& p) override {
    for (cpb::ReportEvalRequest& req : EvalChunks(p, kEvalChunkScores)) {
      req.set_job_id(a_.job_id());
      req.set_generation(a_.generation());
      req.set_rank(a_.rank());
      req.set_epoch(epoch);
      req.set_split(data::SplitName(split));
      SIFT_RETURN_IF_ERROR(Coordinator(client_->ReportEval(req)));
    }
    // The coordinator computes AUC and loss over every rank's predictions.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return EvalResult{nan, nan};
  }

  std::string SnapshotName(int64_t global_step) override {
    return absl::StrCat("ckpt-", a_.job_id(), "-g", a_.generation(), "-step-", global_step);
  }

  Status CheckpointBegin(int64_t global_step) override {
    SIFT_RETURN_IF_ERROR(Flush());
    cpb::CheckpointBeginRequest req;
    req.set_job_id(a_.job_id());
    req.set_generation(a_.generation());
    req.set_global_step(global_step);
    return Coordinator(client_->CheckpointBegin(req));
  }

  Status CheckpointFailed(int64_t global_step, const Status& error) override {
    cpb::CheckpointCommitRequest req;
    req.set_job_id(a_.job_id());
    req.set_generation(a_.generation());
    req.set_global_step(global_step);
    req.set_failed(SanitizeUtf8(error.ToString(), 4096));
    Log(a_, absl::StrCat("checkpoint at step ", global_step, " failed: ", error.message()));
    return Coordinator(client_->CheckpointCommit(req));
  }

  Status CheckpointCommit(const std::string& dir, int64_t epochs_done,
                          int64_t global_step) override {
    cpb::CheckpointCommitRequest req;
    req.set_job_id(a_.job_id());
    req.set_generation(a_.generation());
    req.set_dir(dir);
    req.set_epochs_done(epochs_done);
    req.set_global_step(global_step);
    SIFT_RETURN_IF_ERROR(Coordinator(client_->CheckpointCommit(req)));
    Log(a_, absl::StrCat("checkpoint committed: ", dir, " (", epochs_done, " epochs, step ",
                         global_step, ")"));
    return absl::OkStatus();
  }

  Status OnEpochEnd(const EpochMetrics& em, const DllMetrics&) override {
    Log(a_, absl::StrCat("epoch ", em.epoch + 1, " done (", em.steps, " steps, ",
                         absl::StrFormat("%.1f", em.train_time_s), " s)"));
    return absl::OkStatus();
  }

  Status OnFinish(RunMode, const RunResult&, const DllMetrics&) override { return Flush(); }

 private:
  Status Abandon(const std::string& why) {
    abandoned_ = true;
    abandon_reason_ = why;
    return absl::CancelledError(absl::StrCat("run abandoned: ", why));
  }
  // A failed call to the coordinator ends the run without a failure report (the coordinator
  // either moved on — stale generation — or cannot be reached).
  Status Coordinator(Status s) {
    if (!s.ok()) coordinator_failed_ = true;
    return s;
  }
  // Sends the pending step records (rank 0), with the epoch-end fields when set.
  Status Flush() {
    last_flush_ = SteadyClockSeconds();
    if (a_.rank() != 0 || (pending_.steps_size() == 0 && !pending_.epoch_end())) {
      return absl::OkStatus();
    }
    pending_.set_job_id(a_.job_id());
    pending_.set_generation(a_.generation());
    pending_.set_rank(a_.rank());
    pending_.set_steps_per_epoch(steps_per_epoch_);
    pending_.set_oracle_test_auc(oracle_test_auc_);
    Status s = Coordinator(client_->ReportProgress(pending_));
    pending_.Clear();
    return s;
  }

  coordinator::CoordinatorClient* const client_;
  coordinator::MemberSession* const session_;
  WorkerMetrics* const metrics_;
  const std::atomic<bool>* const stop_;
  const cpb::Assignment a_;
  coordinator::CoordinatorKvStore kv_;
  std::unique_ptr<Collectives> collectives_;
  cpb::ReportProgressRequest pending_;
  double last_flush_ = -1e300;
  int64_t steps_per_epoch_ = 0;
  double oracle_test_auc_ = -1;
  bool abandoned_ = false;
  bool coordinator_failed_ = false;
  std::string abandon_reason_;
};

// The job's identity on the embedding servers' step pushes: a nonzero hash of its id.
uint64_t JobStepGroup(const std::string& job_id) {
  uint64_t h = 0x5e9b0u;
  for (const char c : job_id) h = HashCombine(h, static_cast<unsigned char>(c));
  return h | 1;
}

// Errors a new generation may cure: a lost peer or embedding server, a timeout.
bool Recoverable(const Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded || s.code() == absl::StatusCode::kAborted;
}

}  // namespace

StatusOr<TrainerOptions> TrainerOptionsForAssignment(const JobSpec& spec, const cpb::Assignment& a,
                                                     int threads) {
  SIFT_RETURN_IF_ERROR(ValidateRankAndWorld(a.rank(), a.world_size()));
  if (a.servers().empty()) {
    return absl::InvalidArgumentError("the assignment names no embedding servers");
  }
  TrainerOptions o;
  o.dataset = spec.dataset;
  ModelConfig& m = o.model;
  SIFT_ASSIGN_OR_RETURN(m.type, ParseModelType(spec.model.type));
  m.embedding_dim = spec.model.embedding_dim;
  m.long_len = spec.model.long_seq_length;
  m.short_len = spec.model.short_seq_length;
  m.top_k = spec.model.top_k;
  SIFT_ASSIGN_OR_RETURN(m.gsu, ParseGsu(spec.model.gsu));
  m.time_embedding = spec.model.time_embedding;
  m.gsu_time = spec.model.gsu_time;
  m.gru_hidden = spec.model.gru_hidden;
  m.stage_one_mlp = spec.model.stage_one_mlp_dims;
  m.stage_two_mlp = spec.model.stage_two_mlp_dims;
  m.aux_mlp = spec.model.aux_mlp_dims;
  m.attention_mlp = spec.model.attention_mlp_dims;
  m.dropout = static_cast<float>(spec.model.dropout);

  const std::vector<std::string> backends = kernels::AvailableBackendNames();
  if (std::find(backends.begin(), backends.end(), spec.cluster.backend) == backends.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster.backend: '", spec.cluster.backend,
        "' is not available in this sift build (available: ", absl::StrJoin(backends, ", "), ")"));
  }
  o.backend = spec.cluster.backend;
  o.precision = spec.cluster.precision;
  o.deterministic = spec.cluster.deterministic;
  o.threads = threads >= 0 ? threads : spec.cluster.threads_per_worker;

  const int world = a.world_size();
  const JobSpec::Training& t = spec.training;
  if (t.optimizer != "adam") {
    return absl::InvalidArgumentError(
        absl::StrCat("training.optimizer: '", t.optimizer, "' (the dense optimizer is adam)"));
  }
  o.epochs = t.epochs;
  o.batch_size = t.batch_size / world;
  if (o.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("training.batch_size: ", t.batch_size,
                                                   " is smaller than the ", world, " workers"));
  }
  o.eval_batch_size = t.eval_batch_size > 0 ? std::max<int64_t>(1, t.eval_batch_size / world) : 0;
  o.lr = static_cast<float>(t.lr);
  SIFT_ASSIGN_OR_RETURN(o.lr_schedule.kind, ParseLrScheduleKind(t.lr_schedule));
  o.lr_schedule.warmup_steps = t.lr_warmup_steps;
  o.lr_schedule.final_fraction = t.lr_final_fraction;
  o.weight_decay = static_cast<float>(t.weight_decay);
  o.sparse_l2 = static_cast<float>(t.sparse_l2);
  o.validation_fraction = t.validation_fraction;
  o.keep_best = t.keep_best == "validation_auc";
  o.patience = t.patience;
  o.sparse_optimizer = t.sparse_optimizer;
  o.seed = t.seed;
  SIFT_ASSIGN_OR_RETURN(o.order, data::ParseSampleOrder(t.order));
  o.train_eval_samples = t.train_eval_samples;
  o.max_steps_per_epoch = t.max_steps_per_epoch;
  o.staleness = t.staleness;
  o.step_sparse_update = t.sparse_update == "step";
  o.step_group = JobStepGroup(a.job_id());
  o.generation = static_cast<uint64_t>(a.generation());
  o.embedding_servers.assign(a.servers().begin(), a.servers().end());
  // One directory per job: a new job (one resumed from another's checkpoint too) never
  // overwrites another job's checkpoint.
  if (!spec.checkpoint.dir.empty()) {
    o.save_checkpoint = JoinPath(spec.checkpoint.dir, a.job_id());
    // No link below the coordinator's root (an older coordinator sends none: the spec's dir).
    o.checkpoint_root = a.checkpoint_root().empty() ? spec.checkpoint.dir : a.checkpoint_root();
  }
  o.checkpoint_job = a.job_id();
  o.checkpoint_owner = a.owner();
  o.checkpoint_keep = spec.checkpoint.keep;
  for (const auto& [name, table] : spec.tables) {
    o.table_capacity[name] = static_cast<uint64_t>(table.capacity);
  }
  o.capacity_field = "tables.";
  o.load_checkpoint = a.resume_checkpoint();
  o.checkpoint_every_steps = spec.checkpoint.every_steps;
  o.checkpoint_every_epoch = spec.checkpoint.every_epoch;
  // A job's checkpoints, its final model included, are written before each epoch's test
  // evaluation (Trainer::JobEpochCheckpoint), not by sift train's rule.
  o.checkpoint_final_epoch = false;
  o.resume_within_epoch = true;
  o.progress = false;
  o.log_every = 0;
  return o;
}

std::vector<cpb::ReportEvalRequest> EvalChunks(const EvalPredictions& p, int64_t max_scores) {
  std::vector<cpb::ReportEvalRequest> out;
  cpb::ReportEvalRequest cur;
  int64_t pos = 0;
  auto flush = [&] {
    out.push_back(std::move(cur));
    cur = cpb::ReportEvalRequest();
  };
  for (size_t b = 0; b < p.batch_rows.size(); ++b) {
    int64_t rows = p.batch_rows[b];
    if (cur.scores_size() > 0 && cur.scores_size() + rows > max_scores) flush();
    while (rows > 0) {
      const int64_t take = std::min<int64_t>(rows, max_scores - cur.scores_size());
      cur.mutable_scores()->Add(p.scores.begin() + pos, p.scores.begin() + pos + take);
      cur.mutable_labels()->Add(p.labels.begin() + pos, p.labels.begin() + pos + take);
      pos += take;
      rows -= take;
      if (rows == 0) cur.set_loss_sum(cur.loss_sum() + p.batch_loss_sums[b]);
      if (cur.scores_size() >= max_scores && (rows > 0 || b + 1 < p.batch_rows.size())) flush();
    }
  }
  cur.set_last(true);
  out.push_back(std::move(cur));
  return out;
}

StatusOr<std::unique_ptr<DistributedWorker>> DistributedWorker::Start(
    const DistributedWorkerOptions& options) {
  std::unique_ptr<DistributedWorker> w(new DistributedWorker(options));
  coordinator::CoordinatorClientOptions co;
  co.address = options.coordinator;
  co.connect_timeout = absl::ZeroDuration();  // MemberSession retries the registration
  co.security = options.security;
  SIFT_ASSIGN_OR_RETURN(w->client_, coordinator::CoordinatorClient::Connect(co));
  w->metrics_ = std::make_unique<WorkerMetrics>(options.version);
  cpb::RegisterRequest req;
  req.set_role(cpb::WORKER);
  req.set_address(options.advertise_host);
  req.set_pid(static_cast<int64_t>(::getpid()));
  if (options.metrics_port >= 0) {
    SIFT_ASSIGN_OR_RETURN(
        w->exposer_,
        MetricsExposer::Start(absl::StrCat(options.advertise_host, ":", options.metrics_port),
                              w->metrics_->registry()));
    req.set_metrics_address(absl::StrCat(options.advertise_host, ":", w->exposer_->port()));
  }
  SIFT_ASSIGN_OR_RETURN(w->session_, coordinator::MemberSession::Start(w->client_.get(), req,
                                                                       options.register_timeout));
  w->member_id_ = w->session_->member_id();
  return w;
}

DistributedWorker::~DistributedWorker() = default;

Status DistributedWorker::Serve() {
  std::string job;
  int64_t generation = 0;
  bool counted = true;  // `job` was counted as finished (or there is none yet)
  // --exit-after-jobs: counts `job` if the coordinator says it finished; true when that was the
  // last one to wait for.
  auto count_if_finished = [&]() -> bool {
    if (options_.exit_after_jobs <= 0 || counted) return false;
    StatusOr<cpb::JobInfo> info = client_->GetJob(job);
    if (!info.ok() || !coordinator::IsFinished(info->state())) return false;
    counted = true;
    finished_jobs_.fetch_add(1);
    if (info->state() != cpb::COMPLETED) failed_jobs_.fetch_add(1);
    std::printf("sift worker: %s %s; %d of %d job(s) finished\n", job.c_str(),
                coordinator::JobStateName(info->state()).c_str(), finished_jobs_.load(),
                options_.exit_after_jobs);
    std::fflush(stdout);
    return finished_jobs_.load() >= options_.exit_after_jobs;
  };
  while (!stop_.load()) {
    std::optional<cpb::Assignment> a =
        session_->WaitForNewAssignment(job, generation, absl::Milliseconds(200));
    if (a.has_value() && !a->job_id().empty() && !stop_.load()) {
      if (a->job_id() != job) {
        // The coordinator may hand out the next queued job before this worker noticed the end
        // of its previous one: count that one first.
        if (count_if_finished()) break;
        counted = false;
      }
      job = a->job_id();
      generation = a->generation();
      RunAssignment(*a);
      continue;
    }
    if (count_if_finished()) break;
  }
  return absl::OkStatus();
}

void DistributedWorker::RunAssignment(const cpb::Assignment& a) {
  session_->SetRunning(a.job_id(), a.generation());
  client_->SetJobCredential(a.job_credential());  // KV, fenced calls, GetJob of this job
  (void)session_->BeatNow();
  Log(a, absl::StrCat("started", a.resume_checkpoint().empty()
                                     ? std::string()
                                     : absl::StrCat(" from checkpoint ", a.resume_checkpoint())));
  auto env = std::make_unique<ClusterEnv>(client_.get(), session_.get(), metrics_.get(), &stop_, a);
  Status s = [&]() -> Status {
    SIFT_ASSIGN_OR_RETURN(JobSpec spec,
                          ParseJobSpec(a.spec_yaml(), absl::StrCat("job ", a.job_id())));
    SIFT_ASSIGN_OR_RETURN(TrainerOptions o, TrainerOptionsForAssignment(spec, a, options_.threads));
    o.embedding_security = options_.security;
    o.embedding_security.job_credential = a.job_credential();  // the servers' calls
    o.fault_exit_before_push_step = options_.fault_exit_before_push_step;
    o.cpu_isa = options_.cpu_isa;
    SIFT_RETURN_IF_ERROR(env->Connect(options_.advertise_host, options_.collective_timeout_s,
                                      UsesNccl(spec.cluster)));
    return RunTrainerWithEnv(o, RunMode::kTrain, env.get()).status();
  }();
  if (s.ok()) {
    Log(a, "completed");
  } else if (env->abandoned()) {
    Log(a, absl::StrCat("abandoned: ", env->abandon_reason()));
  } else if (env->coordinator_failed()) {
    Log(a, absl::StrCat("abandoned (a call to the coordinator failed): ", s.message()));
  } else {
    bool report = true;
    const bool fatal = !Recoverable(s);
    if (!fatal) {
      // A peer's error is often the echo of another rank's failure or of the coordinator ending
      // the generation: give the coordinator a moment, and only report while still assigned.
      for (int i = 0; i < 3 && report; ++i) {
        if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        (void)session_->BeatNow();
        report = session_->StillAssigned(a.job_id(), a.generation());
      }
    }
    if (report) {
      cpb::ReportFailureRequest req;
      req.set_job_id(a.job_id());
      req.set_generation(a.generation());
      req.set_rank(a.rank());
      // Valid UTF-8 and bounded: a report of raw bytes (a file's content in a parse error)
      // would make the RPC itself fail.
      req.set_message(SanitizeUtf8(s.message(), 16384));
      req.set_fatal(fatal);
      const Status r = client_->ReportFailure(req);
      Log(a, absl::StrCat(fatal ? "failed (fatal): " : "failed (recoverable): ", s.message(),
                          r.ok() ? "" : absl::StrCat(" [report: ", r.message(), "]")));
    } else {
      Log(a, absl::StrCat("abandoned after: ", s.message()));
    }
  }
  env.reset();  // closes the collectives: peers still inside one see the end at once
  session_->SetRunning("", 0);
  (void)session_->BeatNow();
}

}  // namespace sift::worker
