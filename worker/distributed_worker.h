// DistributedWorker: `sift worker --coordinator host:port` — a cluster member that trains one job
// generation at a time (proto/coordinator.proto). It registers (role WORKER, its host and
// /metrics address), heartbeats (server/coordinator/member_session.h), and for every new
// assignment (job, generation, rank r of world W):
//   1. maps the job spec onto TrainerOptions (TrainerOptionsForAssignment),
//   2. joins the generation's Gloo collectives through the coordinator's KV (kv_prefix),
//   3. runs the one step engine (worker/trainer.h RunTrainerWithEnv) with a ClusterEnv: rank 0
//      reports step records (batched, at most every 0.25 s), epoch perf, and the checkpoint
//      protocol; every rank reports its evaluation predictions,
//   4. ends the run: completed; abandoned quietly (the coordinator dropped the assignment, a call
//      to the coordinator failed, or Stop); or failed — UNAVAILABLE / DEADLINE_EXCEEDED / ABORTED
//      (peers, embedding servers) are reported recoverable (ReportFailure fatal=false), anything
//      else fatal — then reports itself idle and waits for the next assignment.
// The worker survives every job failure. Serve() runs on one thread; Stop() may come from any.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "common/security.h"
#include "common/status.h"
#include "server/coordinator/client.h"
#include "server/coordinator/member_session.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace sift::worker {

struct DistributedWorkerOptions {
  std::string coordinator = "127.0.0.1:7070";  // host:port
  // The address peers reach this worker at: Gloo binds and advertises it, /metrics listens on
  // it, and it is the address registered with the coordinator.
  std::string advertise_host = "127.0.0.1";
  int threads = -1;              // backend and loader threads; -1 = the job's threads_per_worker
  std::string cpu_isa = "auto";  // the cpu backend's kernel variant (TrainerOptions::cpu_isa)
  int metrics_port = -1;         // /metrics port: -1 off, 0 any free port
  absl::Duration register_timeout = absl::Seconds(60);
  double collective_timeout_s = 120;  // Gloo rendezvous and every collective
  std::string version = "dev";        // sift_build_info
  // Serve() returns once this many jobs this worker trained in have finished (COMPLETED, FAILED
  // or CANCELLED at the coordinator); 0 = serve until Stop(). For launchers whose worker
  // processes should end with the job (a Kubernetes Job, a Slurm step).
  int exit_after_jobs = 0;
  // TLS to the coordinator and the embedding servers: the cluster CA and this worker's
  // certificate, worker-<i> or worker (common/security.h); off: plaintext.
  SecurityOptions security;
  // Fault injection for tests (TrainerOptions::fault_exit_before_push_step): -1 = none.
  int64_t fault_exit_before_push_step = -1;
};

// The job spec and assignment as the trainer options of rank a.rank() of a.world_size(): the
// per-rank batch is training.batch_size / W (eval batch likewise), the tables on a.servers(),
// checkpoints as the spec says (resumed inside their epoch), no local log. `threads` >= 0
// overrides cluster.threads_per_worker. INVALID_ARGUMENT naming the field for an unknown model
// type / order, a backend this build lacks ("cuda" without CUDA), a batch smaller than W, a bad
// rank/world, or no embedding servers.
StatusOr<TrainerOptions> TrainerOptionsForAssignment(const JobSpec& spec,
                                                     const coordinator::pb::Assignment& a,
                                                     int threads);

// Splits one rank's predictions into ReportEval chunks of at most `max_scores` scores, at batch
// boundaries where possible (a batch larger than that is split, its loss sum going with its last
// part). Every chunk's loss_sum is the sum of its batches'; the last chunk has last = true; an
// empty share gives one empty last chunk. Job, generation, rank, epoch and split are left unset.
std::vector<coordinator::pb::ReportEvalRequest> EvalChunks(const EvalPredictions& p,
                                                           int64_t max_scores);

class DistributedWorker {
 public:
  // Connects to the coordinator, starts /metrics (when metrics_port >= 0) and registers.
  static StatusOr<std::unique_ptr<DistributedWorker>> Start(
      const DistributedWorkerOptions& options);
  ~DistributedWorker();
  DistributedWorker(const DistributedWorker&) = delete;
  DistributedWorker& operator=(const DistributedWorker&) = delete;

  int metrics_port() const { return exposer_ ? exposer_->port() : -1; }
  const std::string& member_id() const { return member_id_; }

  // Runs assignments until Stop(), or until options.exit_after_jobs jobs it ran in have finished.
  // Returns OK then.
  Status Serve();
  // Thread-safe: the current run is abandoned at its next step boundary, Serve returns.
  void Stop() { stop_.store(true); }
  bool stopping() const { return stop_.load(); }
  // With options.exit_after_jobs: how many of the jobs it ran in have finished, and how many of
  // those FAILED or were CANCELLED (thread-safe).
  int finished_jobs() const { return finished_jobs_.load(); }
  int failed_jobs() const { return failed_jobs_.load(); }

 private:
  explicit DistributedWorker(DistributedWorkerOptions options) : options_(std::move(options)) {}
  void RunAssignment(const coordinator::pb::Assignment& a);

  const DistributedWorkerOptions options_;
  std::unique_ptr<coordinator::CoordinatorClient> client_;
  std::unique_ptr<WorkerMetrics> metrics_;
  std::unique_ptr<MetricsExposer> exposer_;
  std::unique_ptr<coordinator::MemberSession> session_;
  std::string member_id_;
  std::atomic<bool> stop_{false};
  std::atomic<int> finished_jobs_{0};
  std::atomic<int> failed_jobs_{0};
};

}  // namespace sift::worker
