// Coordinator: the state machine behind proto/coordinator.proto — the job queue and job states,
// cluster membership with leases, generations (fencing), the rendezvous KV, the checkpoint
// protocol, and the aggregation of progress and evaluation into the job's DLLL log. The gRPC
// service (service.h) is a thin shell over it. Every method is one request of the proto and
// returns its answer or an error Status (codes as the proto documents); no request, however
// malformed, crashes it. Time comes from the injected clock, so tests drive lease expiry without
// sleeping (only KvGet's wait uses real time). Durable state goes through JobStore (job_store.h).
// Thread-safe: one mutex guards everything.
//
// Rules (the proto's header has the states; these are the decisions made here):
// - One active job: the oldest job in PENDING/RUNNING/CHECKPOINTING/RECOVERING. When it is
//   PENDING or RECOVERING and the cluster is whole — for each shard i < S an alive embedding
//   server registered with (shard i, num_shards S), and W alive idle workers (last heartbeat with
//   no running job) — it starts generation g+1: ranks 0..W-1 go to the idle workers in
//   registration order; it resumes from the last committed checkpoint, if any.
// - A member not heard from for lease_ms is removed; if the running job used it, the job goes
//   RECOVERING. So does a new registration of a server for a shard the running job uses, and a
//   worker whose heartbeat reported running the generation and then reports that it does not
//   (idle or another run) before it sent its last evaluation of the final epoch: its run ended
//   without a failure report reaching us (a failed call to the coordinator ends a run quietly),
//   and nothing else would end the generation (with one worker, no peer times out).
// - Fenced calls (progress, eval, checkpoint, failure) must name the active job, its current
//   generation, and the job must be RUNNING or CHECKPOINTING: else FAILED_PRECONDITION.
// - Recoverable failures count as recoveries; more than max_recoveries fails the job.
// - Callers (common/security.h; with security off every Principal is Unchecked and nothing
//   below applies). The service checks the kind of credentials a method needs; here: a job's
//   owner is its submitter; an operator reads and cancels only its own jobs (ListJobs shows
//   them only), readers read all, admins do all. A member's certificate CN is recorded at
//   Register: a server's must be server-<shard>, a worker's worker or worker-<i>; a
//   registration whose CN is the slot of a live member (server-<i>, worker-<i>) is ALREADY_EXISTS
//   until that member's lease ends (MemberSession retries). Heartbeat must come from the CN that
//   registered the member id, a fenced call from the CN of the rank's worker. Refusals carry
//   the AuthRefusal mark.
// - Job credentials (common/job_credential.h; security on or off, for every remote call:
//   Principal::remote). Each generation gets a credential, issued under a secret drawn when the
//   coordinator starts; it goes to the generation's ranks and to the job's servers only. KvSet,
//   KvGet and the fenced calls need the credential of the job and generation they act on
//   (PERMISSION_DENIED otherwise: an idle worker, another job's member); KV keys must lie under
//   the credential's generation prefix, at most kMaxKvJobBytes per generation. A member's GetJob
//   needs a credential of that job. A worker's assignment is handed out only once every server of
//   the generation has reported (heartbeat) that it serves it: no rank calls a server that does
//   not know the generation yet.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/dllogger.h"
#include "common/job_credential.h"
#include "common/job_spec.h"
#include "common/security.h"
#include "common/status.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/job_store.h"

namespace sift::coordinator {

// The coordinator's notion of "now". Tests pass a fake one.
using Clock = std::function<absl::Time()>;

// Bounds of the rendezvous key-value store (KvSet): per key, per value, all together.
inline constexpr size_t kMaxKvKeyBytes = 1024;
inline constexpr size_t kMaxKvValueBytes = size_t{1} << 20;
inline constexpr int64_t kMaxKvTotalBytes = int64_t{64} << 20;
inline constexpr int64_t kMaxKvJobBytes = int64_t{32} << 20;  // per generation
// A generation whose servers have not all reported serving it within this many leases recovers.
inline constexpr int kServersReadyTimeoutLeases = 4;
// The job credentials' secret in the state directory (mode 0600): credentials stay valid across
// a restart of the coordinator (a worker that ran a job still reads its state).
inline constexpr char kCredentialKeyFile[] = "job-credential.key";

struct CoordinatorOptions {
  std::string state_dir;       // required: job records and logs (job_store.h)
  int64_t lease_ms = 3000;     // a member unheard of this long is dead (>= 1)
  int64_t heartbeat_ms = 250;  // the interval members are told to heartbeat at (>= 1)
  int max_recoveries = 10;     // a job recovering more often than this FAILS (>= 0)
  // Submitted specs asking for more are refused (INVALID_ARGUMENT naming the field), so a job
  // that can never be scheduled never blocks the queue (<= JobSpecLimits::kMaxClusterSize).
  int max_servers = 256;
  int max_workers = 1024;
  // A job at the head of the queue that has waited this long for its members without starting
  // FAILS with what it was waiting for, and the next job may run (0 = wait forever). A job that
  // has run (RECOVERING) waits forever.
  int64_t pending_timeout_ms = 30 * 60 * 1000;
  Clock clock;                                // null: absl::Now
  std::string dll_log_filename = "log.json";  // in the job's results directory
  // The directories jobs may write under (absolute; "" = <state_dir>/results and
  // <state_dir>/checkpoints). A spec's results_dir, checkpoint.dir and checkpoint.resume_from
  // must lie under them (INVALID_ARGUMENT at submission naming the root); each job writes its
  // results to <results_dir>/<job_id>/ (JobInfo.results_dir) and its checkpoints to
  // <checkpoint.dir>/<job_id>/; no symbolic link below a root is ever followed.
  std::string results_root;
  std::string checkpoint_root;
};

// Scrape-time view of one job for the Prometheus series (coordinator_metrics.h).
struct JobMetricsView {
  std::string job_id;
  pb::JobState state = pb::PENDING;
  int64_t samples_total = 0;
  int64_t steps_total = 0;
  int64_t epoch = 0;
  double test_auc = 0;  // of the latest evaluated epoch
  bool has_test_auc = false;
  double last_loss = 0;
  int64_t generation = 0;
  int64_t recoveries = 0;
};

class Coordinator {
 public:
  // Loads the state directory (a corrupt record is an error naming the file). Jobs that were
  // RUNNING, CHECKPOINTING or RECOVERING become RECOVERING ("coordinator restarted") and resume
  // with a new generation once their members (re-)register. INVALID_ARGUMENT for bad options.
  static StatusOr<std::unique_ptr<Coordinator>> Open(CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // ---- Jobs ----
  StatusOr<pb::SubmitJobResponse> SubmitJob(const pb::SubmitJobRequest& request,
                                            const Principal& who = Principal::Unchecked());
  StatusOr<pb::JobInfo> GetJob(const pb::GetJobRequest& request,
                               const Principal& who = Principal::Unchecked());
  StatusOr<pb::ListJobsResponse> ListJobs(const pb::ListJobsRequest& request,
                                          const Principal& who = Principal::Unchecked());
  StatusOr<pb::JobInfo> CancelJob(const pb::CancelJobRequest& request,
                                  const Principal& who = Principal::Unchecked());
  StatusOr<pb::GetLogsResponse> GetLogs(const pb::GetLogsRequest& request,
                                        const Principal& who = Principal::Unchecked());

  // ---- Members ----
  StatusOr<pb::RegisterResponse> Register(const pb::RegisterRequest& request,
                                          const Principal& who = Principal::Unchecked());
  StatusOr<pb::HeartbeatResponse> Heartbeat(const pb::HeartbeatRequest& request,
                                            const Principal& who = Principal::Unchecked());

  // ---- Rendezvous KV ----
  // Keys are dropped when the generation they belong to ends: a key equal to a generation's
  // kv_prefix ("job-1/g2") or continuing it with a non-digit ("job-1/g2/rank0"). Setting a key
  // under the prefix of a known job's generation that is not running is FAILED_PRECONDITION
  // ("stale generation"), so a late rank of an ended generation leaves no keys behind.
  StatusOr<pb::KvSetResponse> KvSet(const pb::KvSetRequest& request,
                                    const Principal& who = Principal::Unchecked());
  // Blocks (real time) until every key is set, up to min(timeout_ms, 10000) ms:
  // DEADLINE_EXCEEDED naming the missing keys; UNAVAILABLE once Shutdown was called.
  StatusOr<pb::KvGetResponse> KvGet(const pb::KvGetRequest& request,
                                    const Principal& who = Principal::Unchecked());

  // ---- Workers of the running job (fenced) ----
  StatusOr<pb::ReportProgressResponse> ReportProgress(
      const pb::ReportProgressRequest& request, const Principal& who = Principal::Unchecked());
  StatusOr<pb::ReportEvalResponse> ReportEval(const pb::ReportEvalRequest& request,
                                              const Principal& who = Principal::Unchecked());
  StatusOr<pb::CheckpointBeginResponse> CheckpointBegin(
      const pb::CheckpointBeginRequest& request, const Principal& who = Principal::Unchecked());
  StatusOr<pb::CheckpointCommitResponse> CheckpointCommit(
      const pb::CheckpointCommitRequest& request, const Principal& who = Principal::Unchecked());
  StatusOr<pb::ReportFailureResponse> ReportFailure(const pb::ReportFailureRequest& request,
                                                    const Principal& who = Principal::Unchecked());

  // Expires leases and schedules; the service calls it every ~100 ms. Every member call also
  // schedules, so a cluster that becomes whole starts the job without waiting for a tick.
  void Tick();

  // Wakes KvGet waiters (UNAVAILABLE); later KvGets fail at once. Idempotent.
  void Shutdown();

  // ---- Views for metrics ----
  std::vector<JobMetricsView> JobMetrics() const;
  // Alive members per role ("worker", "embedding_server"), both present.
  std::map<std::string, int64_t> AliveMembers() const;

  const CoordinatorOptions& options() const { return options_; }

 private:
  struct Member {
    std::string id;
    pb::Role role = pb::ROLE_UNSPECIFIED;
    std::string address;
    uint32_t shard = 0, num_shards = 0;
    int64_t seq = 0;  // registration order
    absl::Time last_seen;
    // From its last heartbeat: WORKER the (job, generation) it runs ("" = idle); EMBEDDING_SERVER
    // the one it serves.
    std::string running_job;
    int64_t running_generation = 0;
    std::string identity;  // the CN of its certificate ("" with security off)
  };
  // Predictions of one (epoch, split, rank) of the current generation.
  struct EvalPart {
    std::vector<float> scores, labels;
    double loss_sum = 0;
    bool last = false;
  };
  struct Job {
    JobRecord rec;
    JobSpec spec;
    std::vector<std::string> log;
    // The current generation (not persisted: a restarted coordinator starts a new one).
    std::vector<std::string> worker_ids;  // member ids by rank
    std::vector<std::string> server_ids;  // member ids by shard
    // By rank: a heartbeat reported running this generation (a later one that does not, before
    // the rank's work is done, means the worker left the run; see WorkerHeartbeat).
    std::vector<bool> worker_started;
    std::map<std::tuple<int64_t, int, int>, EvalPart> eval;  // (epoch, split, rank)
    int64_t stop_epoch = -1;        // patience ended the job after this epoch (-1: not early)
    std::unique_ptr<DLLogger> dll;  // results_dir/log.json
    std::string recover_reason;     // why it is RECOVERING (kept in front of "waiting for ...")
    // The snapshot the current generation's servers may restore besides the job's own (the one
    // the checkpoint it resumes from names; "" = none or unreadable).
    std::string restorable_snapshot;
    std::string credential;  // the current generation's (issued when it starts)
    // When it became the head of the queue, PENDING (not persisted; absl::InfinitePast = not).
    absl::Time head_since = absl::InfinitePast();
    // When the current generation started (its servers must report serving it in time).
    absl::Time generation_since = absl::InfinitePast();
  };

  explicit Coordinator(CoordinatorOptions options);

  absl::Time Now() const { return options_.clock(); }
  Job* FindJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StatusOr<Job*> FindJobOrError(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Job* ActiveJob() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job named by a fenced call, or FAILED_PRECONDITION ("stale generation"); for a remote
  // caller, first CheckJobCredential.
  StatusOr<Job*> Fence(const std::string& job_id, int64_t generation, const Principal& who,
                       absl::string_view method) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK for in-process callers, and for a remote one presenting the credential of (job_id,
  // generation); else PERMISSION_DENIED (AuthRefusal) naming what was presented.
  Status CheckJobCredential(const Principal& who, const std::string& job_id, int64_t generation,
                            absl::string_view method) const;
  // The running job and generation whose credential `who` presents, for the KV calls: the
  // active job (PERMISSION_DENIED without a valid credential, or for a key outside the
  // generation's prefix; FAILED_PRECONDITION for a stale credential). In-process callers: the
  // active job, no checks.
  StatusOr<Job*> KvCaller(const Principal& who, absl::string_view method,
                          const std::vector<std::string>& keys) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every server of the job's current generation reported (heartbeat) that it serves it.
  bool ServersReady(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What every assignment of the job's current generation carries (job, generation, world,
  // credential, owner); AssignmentFor and ServerAssignmentFor add the rest.
  pb::Assignment GenerationAssignment(const Job& job, int rank) const;
  // The assignment of the job's server of shard `shard`.
  pb::Assignment ServerAssignmentFor(const Job& job, int shard) const;
  Status CheckRank(const Job& job, int rank) const;
  // A submitted spec's paths against the roots (normalized in place), and its resume_from against
  // the owner rule: with security on, a checkpoint of a job `who` owns (admins: any under the
  // checkpoint root). INVALID_ARGUMENT / PERMISSION_DENIED naming the field and the rule.
  Status CheckSpecPaths(JobSpec* spec, const std::string& source, const Principal& who)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job of this coordinator whose checkpoint directory (<checkpoint.dir>/<job id>) holds
  // `checkpoint` (the deepest one); nullptr when none.
  const Job* CheckpointOwnerJob(const std::string& checkpoint) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The resume checkpoint's checks when a generation starts: no symbolic link below the
  // checkpoint root, and the snapshot its manifest names must be its job's (the job whose
  // directory holds it; any name for a checkpoint of no job here, which only an admin could
  // submit). Sets job->restorable_snapshot. An error fails the job.
  Status CheckResumeCheckpoint(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PERMISSION_DENIED when `who` may not see (or, `cancel`, cancel) `job` (the owner rules).
  static Status CheckOwner(const Job& job, const Principal& who, absl::string_view method,
                           bool cancel);
  // PERMISSION_DENIED when `who` is not the certificate that registered `member`.
  static Status CheckIdentity(const Member& member, const Principal& who, absl::string_view method);
  // CheckIdentity of rank `rank`'s worker (after CheckRank).
  Status CheckRankCaller(const Job& job, int rank, const Principal& who, absl::string_view method)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Register's checks of the certificate against the request and the live members.
  Status CheckRegistration(const pb::RegisterRequest& request, const Principal& who)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Appends a timestamped line to the job's log (memory and disk).
  Status Log(Job* job, absl::string_view text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Persist(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void ExpireLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recovers the running job when a server of its generation has not reported serving it within
  // kServersReadyTimeoutLeases leases (a server of an older sift never does).
  void CheckServersReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Schedule() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status StartGeneration(Job* job, const std::vector<const Member*>& workers,
                         const std::vector<const Member*>& servers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the current generation: its KV keys and evaluation parts are dropped.
  void EndGeneration(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Recover(Job* job, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Finish(Job* job, pb::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lost member's effect on the running job (RECOVERING when it used it). `why` is the whole
  // reason when the member was replaced by a new registration, else what happened to it.
  void MemberLost(const Member& member, const std::string& why, bool replaced = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker's heartbeat against the running generation: notes that its rank started, or
  // recovers the job when a started rank reports that it no longer runs it before its work is
  // done (its run ended without a failure report reaching us).
  void WorkerHeartbeat(const Member& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank `rank` sent its last evaluation chunks of the final epoch (its part of the job is done).
  bool RankDone(const Job& job, int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION when `key` lies under the KV prefix of a known job's generation that is
  // not running ("job-1/g2" or "job-1/g2/..."): a stale rank must not leave keys behind.
  Status FenceKvKey(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status DllLog(Job* job, const DllStep& step, const DllMetrics& metrics)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status OpenDll(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status MaybeFinishEpoch(Job* job, int64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  pb::Assignment AssignmentFor(const Job& job, int rank) const;
  std::string KvPrefix(const Job& job) const;
  void DropKvPrefix(const std::string& prefix) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  std::unique_ptr<JobStore> store_;
  const std::string member_id_prefix_;  // differs per coordinator start (stale ids stay unknown)

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);  // submission order
  int64_t next_job_number_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  int64_t next_member_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  int64_t kv_bytes_ ABSL_GUARDED_BY(mu_) = 0;                            // keys and values of kv_
  std::map<std::string, int64_t> kv_prefix_bytes_ ABSL_GUARDED_BY(mu_);  // by generation prefix
  std::unique_ptr<JobCredentialIssuer> credentials_;                     // set by Open
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sift::coordinator
