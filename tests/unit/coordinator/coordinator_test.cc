// The coordinator's state machine, driven through its request methods with a fake clock (lease
// expiry without sleeping): scheduling and ranks, leases and recovery, fencing, failures, cancel,
// evaluation aggregation and the DLLL log, KV, and a restart from the state directory.
#include "server/coordinator/coordinator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auc.h"
#include "common/dllogger.h"
#include "common/file_util.h"
#include "common/job_credential.h"
#include "common/rng.h"
#include "common/text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string SpecYaml(int workers, int servers, int epochs, const std::string& results_dir = "",
                     const std::string& model = "sim") {
  std::string y = absl::StrCat(
      "dataset: /data/tiny\nmodel: {type: ", model, "}\ntraining: {epochs: ", epochs,
      ", batch_size: 12}\ncluster: {workers: ", workers, ", servers: ", servers, "}\n");
  if (!results_dir.empty()) absl::StrAppend(&y, "results_dir: ", results_dir, "\n");
  return y;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
    c_.reset();
    CoordinatorOptions o;
    o.state_dir = dir_.Sub("state");
    o.lease_ms = 3000;
    o.heartbeat_ms = 250;
    o.max_recoveries = max_recoveries_;
    o.max_servers = 8;
    o.max_workers = 16;
    o.pending_timeout_ms = pending_timeout_ms_;
    o.clock = [this] { return now_; };
    o.results_root = dir_.path();
    o.checkpoint_root = dir_.path();
    auto c = Coordinator::Open(o);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = std::move(*c);
  }

  void Advance(int64_t ms) { now_ += absl::Milliseconds(ms); }

  std::string Submit(const std::string& yaml) {
    pb::SubmitJobRequest q;
    q.set_spec_yaml(yaml);
    auto r = c_->SubmitJob(q);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : "";
  }
  std::string RegisterWorker(const std::string& address) {
    pb::RegisterRequest q;
    q.set_role(pb::WORKER);
    q.set_address(address);
    auto r = c_->Register(q);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->member_id() : "";
  }
  std::string RegisterServer(const std::string& address, uint32_t shard, uint32_t num_shards) {
    pb::RegisterRequest q;
    q.set_role(pb::EMBEDDING_SERVER);
    q.set_address(address);
    q.set_shard(shard);
    q.set_num_shards(num_shards);
    auto r = c_->Register(q);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) servers_.push_back(r->member_id());
    return r.ok() ? r->member_id() : "";
  }
  // Every registered server heartbeats, reporting the assignment it was given as what it serves
  // (what a real server's MemberSession does): a worker's assignment waits for that.
  void ServersServe() {
    for (const std::string& s : servers_) {
      auto r = Beat(s);
      if (r.ok() && r->has_assignment()) {
        (void)Beat(s, r->assignment().job_id(), r->assignment().generation());
      }
    }
  }
  StatusOr<pb::HeartbeatResponse> Beat(const std::string& id, const std::string& job = "",
                                       int64_t generation = 0) {
    pb::HeartbeatRequest q;
    q.set_member_id(id);
    q.set_running_job_id(job);
    q.set_running_generation(generation);
    return c_->Heartbeat(q);
  }
  // The assignment of a heartbeat that must succeed ("" job id: none).
  pb::Assignment Assigned(const std::string& id, const std::string& job = "",
                          int64_t generation = 0) {
    auto r = Beat(id, job, generation);
    if (r.ok() && !r->has_assignment()) {
      ServersServe();
      r = Beat(id, job, generation);
    }
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->assignment() : pb::Assignment();
  }
  pb::JobInfo Job(const std::string& id = "") {
    pb::GetJobRequest q;
    q.set_job_id(id);
    auto r = c_->GetJob(q);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : pb::JobInfo();
  }
  std::vector<std::string> Logs(const std::string& id) {
    pb::GetLogsRequest q;
    q.set_job_id(id);
    auto r = c_->GetLogs(q);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::vector<std::string>(r->lines().begin(), r->lines().end())
                  : std::vector<std::string>();
  }
  bool LogHas(const std::string& id, const std::string& text) {
    for (const std::string& line : Logs(id)) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  Status Fail(const std::string& job, int64_t generation, int rank, const std::string& message,
              bool fatal) {
    pb::ReportFailureRequest q;
    q.set_job_id(job);
    q.set_generation(generation);
    q.set_rank(rank);
    q.set_message(message);
    q.set_fatal(fatal);
    return c_->ReportFailure(q).status();
  }
  Status Commit(const std::string& job, int64_t generation, const std::string& dir,
                int64_t epochs_done, int64_t step) {
    pb::CheckpointBeginRequest b;
    b.set_job_id(job);
    b.set_generation(generation);
    b.set_global_step(step);
    SIFT_RETURN_IF_ERROR(c_->CheckpointBegin(b).status());
    EXPECT_EQ(Job(job).state(), pb::CHECKPOINTING);
    pb::CheckpointCommitRequest q;
    q.set_job_id(job);
    q.set_generation(generation);
    q.set_dir(dir);
    q.set_epochs_done(epochs_done);
    q.set_global_step(step);
    return c_->CheckpointCommit(q).status();
  }

  // A whole 2-server cluster with `workers` workers; returns the worker ids.
  std::vector<std::string> Cluster(int workers) {
    servers_ = {RegisterServer("s0:1", 0, 2), RegisterServer("s1:1", 1, 2)};
    std::vector<std::string> ids;
    for (int i = 0; i < workers; ++i) ids.push_back(RegisterWorker(absl::StrCat("w", i)));
    return ids;
  }
  // A checkpoint directory of job-1 (under its default checkpoint.dir: a job commits only its own).
  std::string Ck(const std::string& leaf) const {
    return dir_.path() + "/state/checkpoints/job-1/" + leaf;
  }
  // Keeps the servers alive.
  void BeatServers() {
    for (const std::string& s : servers_) ASSERT_TRUE(Beat(s).ok());
  }

  testing::TempDir dir_;
  absl::Time now_ = absl::FromUnixSeconds(1'700'000'000);
  int max_recoveries_ = 10;
  int64_t pending_timeout_ms_ = 0;
  std::unique_ptr<Coordinator> c_;
  std::vector<std::string> servers_;
};

TEST_F(CoordinatorTest, SubmitValidatesTheSpecAndNumbersJobs) {
  pb::SubmitJobRequest q;
  q.set_spec_yaml("dataset: d\ntraining: {epochs: 0}\n");
  q.set_source_name("bad.yaml");
  auto r = c_->SubmitJob(q);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("bad.yaml:2: training.epochs"));

  q.set_spec_yaml("dataset: d\ntraining: {batch_size: 10}\ncluster: {workers: 3}\n");
  q.set_source_name("");
  r = c_->SubmitJob(q);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              StartsWith("job.yaml: training.batch_size: 10 is not a multiple of cluster.workers"));

  EXPECT_EQ(Submit(SpecYaml(1, 1, 1)), "job-1");
  EXPECT_EQ(Submit("name: second\n" + SpecYaml(1, 1, 1)), "job-2");
  pb::JobInfo latest = Job();
  EXPECT_EQ(latest.job_id(), "job-2");
  EXPECT_EQ(latest.name(), "second");
  EXPECT_EQ(latest.state(), pb::PENDING);
  EXPECT_EQ(latest.epochs(), 1);
  EXPECT_EQ(latest.oracle_test_auc(), -1);
  EXPECT_EQ(latest.submit_time(), 1'700'000'000);
  EXPECT_THAT(latest.spec_yaml(), HasSubstr("dataset: \"/data/tiny\""));
  EXPECT_EQ(latest.message(), "queued behind job-1");
  EXPECT_TRUE(LogHas("job-1", "submitted"));

  pb::GetJobRequest unknown;
  unknown.set_job_id("job-9");
  EXPECT_EQ(c_->GetJob(unknown).status().code(), absl::StatusCode::kNotFound);
  auto list = c_->ListJobs(pb::ListJobsRequest());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->jobs_size(), 2);
  EXPECT_EQ(list->jobs(0).job_id(), "job-1");
}

TEST_F(CoordinatorTest, StartsWhenTheClusterIsWholeWithRanksInRegistrationOrder) {
  const std::string job = Submit(SpecYaml(2, 2, 1));
  EXPECT_EQ(Job(job).message(),
            "waiting for embedding server shards 0, 1 of 2; waiting for 2 more workers");
  RegisterServer("s0:1", 0, 2);
  RegisterServer("other:1", 1, 3);  // another shard count: not part of this cluster
  const std::string w0 = RegisterWorker("w0");
  EXPECT_EQ(Job(job).message(),
            "waiting for embedding server shard 1 of 2; waiting for 1 more worker");
  const std::string w1 = RegisterWorker("w1");
  const std::string w2 = RegisterWorker("w2");
  EXPECT_EQ(Job(job).state(), pb::PENDING);
  EXPECT_EQ(Assigned(w0).job_id(), "");
  RegisterServer("s1:1", 1, 2);  // replaces other:1 (same shard index)

  pb::JobInfo info = Job(job);
  EXPECT_EQ(info.state(), pb::RUNNING);
  EXPECT_EQ(info.generation(), 1);
  EXPECT_EQ(info.start_time(), 1'700'000'000);
  EXPECT_THAT(info.workers(), ElementsAre("w0", "w1"));
  EXPECT_THAT(info.servers(), ElementsAre("s0:1", "s1:1"));
  const pb::Assignment a0 = Assigned(w0);
  const pb::Assignment a1 = Assigned(w1);
  EXPECT_EQ(a0.job_id(), job);
  EXPECT_EQ(a0.generation(), 1);
  EXPECT_EQ(a0.rank(), 0);
  EXPECT_EQ(a1.rank(), 1);
  EXPECT_EQ(a0.world_size(), 2);
  EXPECT_THAT(a0.servers(), ElementsAre("s0:1", "s1:1"));
  EXPECT_EQ(a0.resume_checkpoint(), "");
  EXPECT_EQ(a0.kv_prefix(), "job-1/g1");
  EXPECT_EQ(a0.spec_yaml(), info.spec_yaml());
  EXPECT_EQ(Assigned(w2).job_id(), "");  // not needed
  EXPECT_TRUE(LogHas(job,
                     "RUNNING: generation 1, workers [w0, w1], servers [s0:1, s1:1], "
                     "fresh start"));
}

TEST_F(CoordinatorTest, MembersAreValidatedAndUnknownIdsAreNotFound) {
  pb::RegisterRequest q;
  q.set_address("x");
  EXPECT_EQ(c_->Register(q).status().code(), absl::StatusCode::kInvalidArgument);
  q.set_role(pb::EMBEDDING_SERVER);
  q.set_shard(2);
  q.set_num_shards(2);
  EXPECT_EQ(c_->Register(q).status().code(), absl::StatusCode::kInvalidArgument);
  q.set_shard(1);
  q.set_address("");
  EXPECT_EQ(c_->Register(q).status().code(), absl::StatusCode::kInvalidArgument);
  q.set_address("s");
  auto r = c_->Register(q);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->lease_ms(), 3000);
  EXPECT_EQ(r->heartbeat_interval_ms(), 250);
  auto beat = Beat(r->member_id());
  ASSERT_TRUE(beat.ok());
  EXPECT_FALSE(beat->has_assignment());
  EXPECT_EQ(Beat("nobody").status().code(), absl::StatusCode::kNotFound);
  // An expired lease makes the id unknown.
  Advance(3001);
  EXPECT_EQ(Beat(r->member_id()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, LostWorkerRecoversFromTheLastCheckpointWithANewGeneration) {
  const std::string job = Submit(SpecYaml(2, 2, 3));
  std::vector<std::string> w = Cluster(2);
  ASSERT_EQ(Assigned(w[0], job, 1).rank(), 0);
  ASSERT_EQ(Assigned(w[1], job, 1).rank(), 1);
  ASSERT_TRUE(Commit(job, 1, Ck("a"), 1, 40).ok());
  EXPECT_EQ(Job(job).state(), pb::RUNNING);
  EXPECT_TRUE(LogHas(job, "checkpoint committed at step 40 (1 epoch(s) done)"));
  pb::KvSetRequest kv;
  for (const char* key : {"job-1/g1/rank0", "job-10/g1/rank0", "other"}) {
    kv.set_key(key);
    kv.set_value("v");
    ASSERT_TRUE(c_->KvSet(kv).ok());
  }
  // Keys of a generation of job-1 that is not running are refused (stale generation).
  kv.set_key("job-1/g10/rank0");
  EXPECT_EQ(c_->KvSet(kv).status().code(), absl::StatusCode::kFailedPrecondition);

  // w1 goes silent; everybody else keeps beating.
  Advance(2000);
  BeatServers();
  Assigned(w[0], job, 1);
  Advance(1500);
  c_->Tick();
  pb::JobInfo info = Job(job);
  EXPECT_EQ(info.state(), pb::RECOVERING);
  EXPECT_EQ(info.recoveries(), 1);
  EXPECT_THAT(info.message(), StartsWith("lost worker rank 1 (w1): lease expired"));
  EXPECT_TRUE(LogHas(job, "RECOVERING (recovery 1): lost worker rank 1 (w1): lease expired"));
  // The generation's KV keys are gone, others stay.
  pb::KvGetRequest get;
  get.add_keys("job-1/g1/rank0");
  get.set_timeout_ms(0);
  EXPECT_EQ(c_->KvGet(get).status().code(), absl::StatusCode::kDeadlineExceeded);
  get.clear_keys();
  get.add_keys("job-10/g1/rank0");
  get.add_keys("other");
  EXPECT_TRUE(c_->KvGet(get).ok());

  // Calls of the old generation are fenced off.
  pb::ReportProgressRequest progress;
  progress.set_job_id(job);
  progress.set_generation(1);
  auto stale = c_->ReportProgress(progress);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stale.status().message()), StartsWith("stale generation"));
  EXPECT_EQ(Fail(job, 1, 0, "x", false).code(), absl::StatusCode::kFailedPrecondition);

  // A replacement registers; w0 still runs generation 1, so the job waits for it to go idle.
  const std::string w2 = RegisterWorker("w2");
  EXPECT_EQ(Assigned(w[0], job, 1).job_id(), "");
  EXPECT_EQ(Job(job).state(), pb::RECOVERING);
  EXPECT_THAT(Job(job).message(), HasSubstr("waiting for 1 more worker"));
  const pb::Assignment a0 = Assigned(w[0]);  // idle now
  info = Job(job);
  EXPECT_EQ(info.state(), pb::RUNNING);
  EXPECT_EQ(info.generation(), 2);
  EXPECT_EQ(info.global_step(), 40);
  EXPECT_EQ(info.epoch(), 1);
  EXPECT_EQ(a0.rank(), 0);
  EXPECT_EQ(a0.generation(), 2);
  EXPECT_EQ(a0.resume_checkpoint(), Ck("a"));
  EXPECT_EQ(a0.kv_prefix(), "job-1/g2");
  EXPECT_EQ(Assigned(w2).rank(), 1);
  EXPECT_THAT(info.workers(), ElementsAre("w0", "w2"));
  EXPECT_TRUE(LogHas(job, "resuming from checkpoint at step 40 (1 epoch(s) done)"));
}

TEST_F(CoordinatorTest, ARestartedOrLostServerRecoversTheJob) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  ASSERT_EQ(Assigned(w[0], job, 1).generation(), 1);
  const std::string s0 = RegisterServer("s0:2", 0, 2);  // shard 0 restarted: its tables are gone
  EXPECT_EQ(Job(job).state(), pb::RECOVERING);
  EXPECT_THAT(Job(job).message(),
              StartsWith("embedding server shard 0 restarted (s0:1 -> s0:2): its tables are gone"));
  // w0 abandons generation 1 and goes idle: generation 2 uses the new server.
  Assigned(w[0]);
  ASSERT_EQ(Job(job).state(), pb::RUNNING);
  EXPECT_EQ(Job(job).generation(), 2);
  EXPECT_THAT(Job(job).servers(), ElementsAre("s0:2", "s1:1"));

  // Now shard 1 goes silent.
  Advance(2000);
  Assigned(w[0], job, 2);
  ASSERT_TRUE(Beat(s0).ok());
  Advance(1500);
  c_->Tick();
  EXPECT_EQ(Job(job).state(), pb::RECOVERING);
  EXPECT_THAT(Job(job).message(),
              StartsWith("lost embedding server shard 1 (s1:1): lease expired"));
  EXPECT_THAT(Job(job).message(), HasSubstr("waiting for embedding server shard 1 of 2"));
  EXPECT_EQ(Job(job).recoveries(), 2);
}

// Row 11: a failure report is stored as valid, bounded UTF-8 whatever its bytes.
TEST_F(CoordinatorTest, AFailureReportOfAnyBytesIsKeptAsBoundedUtf8) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  Assigned(w[0], job, 1);
  std::string junk = "feature_spec.yaml:1: bad \xff\xfe\x80 bytes ";
  junk += std::string(100000, 'x');
  ASSERT_TRUE(Fail(job, 1, 0, junk, true).ok());
  const pb::JobInfo info = Job(job);
  EXPECT_EQ(info.state(), pb::FAILED);
  EXPECT_TRUE(IsValidUtf8(info.message()));
  EXPECT_LE(info.message().size(), 16384u + 16);
  EXPECT_THAT(info.message(), HasSubstr("rank 0: feature_spec.yaml:1: bad \xef\xbf\xbd"));
  EXPECT_THAT(info.message(), HasSubstr("bytes cut)"));
}

TEST_F(CoordinatorTest, FatalFailureFailsAndTheNextJobRuns) {
  const std::string first = Submit(SpecYaml(2, 2, 1));
  const std::string second = Submit(SpecYaml(2, 2, 1));
  std::vector<std::string> w = Cluster(2);
  Assigned(w[0], first, 1);
  Assigned(w[1], first, 1);
  pb::ReportFailureRequest bad_rank;
  bad_rank.set_job_id(first);
  bad_rank.set_generation(1);
  bad_rank.set_rank(2);
  EXPECT_EQ(c_->ReportFailure(bad_rank).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Fail(first, 1, 1, "dataset /data/tiny: not found", true).ok());
  pb::JobInfo info = Job(first);
  EXPECT_EQ(info.state(), pb::FAILED);
  EXPECT_EQ(info.message(), "rank 1: dataset /data/tiny: not found");
  EXPECT_GT(info.end_time(), 0);
  EXPECT_EQ(Fail(first, 1, 0, "too", true).code(), absl::StatusCode::kFailedPrecondition);
  // The workers still report the failed job until they go idle; then the second job starts.
  EXPECT_EQ(Job(second).state(), pb::PENDING);
  EXPECT_EQ(Assigned(w[0], first, 1).job_id(), "");
  Assigned(w[0]);
  Assigned(w[1]);
  EXPECT_EQ(Job(second).state(), pb::RUNNING);
  EXPECT_EQ(Assigned(w[1]).job_id(), second);
}

// Issue 16 row 10: a spec asking for more members than the coordinator runs is refused at
// submit; one that waits at the head of the queue past --pending-timeout-ms fails with what it
// waited for (a bounded message) and the job behind it runs.
TEST_F(CoordinatorTest, AnUnschedulableJobNeverBlocksTheQueue) {
  pb::SubmitJobRequest q;
  q.set_spec_yaml(SpecYaml(2, 9, 1));
  StatusOr<pb::SubmitJobResponse> r = c_->SubmitJob(q);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "job.yaml: cluster.servers: 9 is more than this coordinator runs (--max-servers 8)");
  q.set_spec_yaml(SpecYaml(17, 2, 1));
  EXPECT_THAT(std::string(c_->SubmitJob(q).status().message()),
              HasSubstr("cluster.workers: 17 is more than this coordinator runs (--max-workers "
                        "16)"));

  pending_timeout_ms_ = 60'000;
  Reopen();
  const std::string big = Submit(SpecYaml(2, 8, 1));  // 8 shards: none will come
  const std::string next = Submit(SpecYaml(2, 2, 1));
  std::vector<std::string> w = Cluster(2);  // 2 shards and 2 workers: enough for `next`
  Advance(1000);
  c_->Tick();
  EXPECT_EQ(Job(big).state(), pb::PENDING);
  EXPECT_EQ(Job(big).message(), "waiting for embedding server shards 0-7 of 8");
  EXPECT_EQ(Job(next).message(), absl::StrCat("queued behind ", big));
  for (int i = 0; i < 59; ++i) {
    Advance(1000);
    BeatServers();
    for (const std::string& id : w) ASSERT_TRUE(Beat(id).ok());
    c_->Tick();
  }
  pb::JobInfo info = Job(big);
  EXPECT_EQ(info.state(), pb::FAILED);
  EXPECT_EQ(info.message(),
            "not scheduled within 60 s (coordinator --pending-timeout-ms): waiting for embedding "
            "server shards 0-7 of 8");
  EXPECT_EQ(Job(next).state(), pb::RUNNING);
}

// Row 4: 60 x 3 MB KvSet values were stored; values, keys and the whole store are bounded.
TEST_F(CoordinatorTest, TheKvStoreIsBounded) {
  const auto set = [&](const std::string& key, size_t bytes) {
    pb::KvSetRequest q;
    q.set_key(key);
    q.set_value(std::string(bytes, 'v'));
    return c_->KvSet(q).status();
  };
  EXPECT_TRUE(set("a", kMaxKvValueBytes).ok());
  Status big = set("b", kMaxKvValueBytes + 1);
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.message()), HasSubstr("value of 1048577 bytes; at most"));
  EXPECT_EQ(set(std::string(kMaxKvKeyBytes + 1, 'k'), 1).code(),
            absl::StatusCode::kInvalidArgument);
  // Filling the store: refused once the total would pass the limit; overwriting a key frees.
  int stored = 1;
  Status s;
  for (int i = 0; i < 100 && s.ok(); ++i) {
    s = set(absl::StrCat("fill/", i), kMaxKvValueBytes - 16);
    if (s.ok()) ++stored;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("past its limit of 67108864"));
  EXPECT_EQ(stored, 64);
  EXPECT_TRUE(set("a", 10).ok());  // smaller: frees room
  EXPECT_TRUE(set("fill/x", kMaxKvValueBytes - 16).ok());
}

// Row 5: a failed checkpoint is reported, not fatal: the job is RUNNING again with its last good
// checkpoint; a job submitted with checkpoint.resume_from starts from that checkpoint.
TEST_F(CoordinatorTest, AFailedCheckpointKeepsTheJobAndResumeFromStartsFromACheckpoint) {
  const std::string job = Submit(SpecYaml(1, 2, 2));
  std::vector<std::string> w = Cluster(1);
  Assigned(w[0], job, 1);
  ASSERT_TRUE(Commit(job, 1, Ck("s5"), 1, 5).ok());
  pb::CheckpointBeginRequest b;
  b.set_job_id(job);
  b.set_generation(1);
  b.set_global_step(8);
  ASSERT_TRUE(c_->CheckpointBegin(b).ok());
  pb::CheckpointCommitRequest failed;
  failed.set_job_id(job);
  failed.set_generation(1);
  failed.set_global_step(8);
  failed.set_failed("INTERNAL: " + Ck("s5") + "/dense-8.bin: No space left on device");
  ASSERT_TRUE(c_->CheckpointCommit(failed).ok());
  pb::JobInfo info = Job(job);
  EXPECT_EQ(info.state(), pb::RUNNING);
  EXPECT_EQ(info.last_checkpoint().global_step(), 5);
  EXPECT_EQ(info.last_checkpoint().dir(), Ck("s5"));
  EXPECT_TRUE(LogHas(job,
                     "checkpoint at step 8 FAILED, training goes on (the last good "
                     "checkpoint is step 5 in " +
                         Ck("s5") + "): INTERNAL: " + Ck("s5") + "/dense-8.bin"));
  ASSERT_TRUE(c_->CancelJob([&] {
                  pb::CancelJobRequest q;
                  q.set_job_id(job);
                  return q;
                }())
                  .ok());
  Assigned(w[0]);

  const std::string resumed = Submit(SpecYaml(1, 2, 2) + "checkpoint: {dir: " + dir_.Sub("ckpt") +
                                     ", resume_from: " + Ck("s5") + "}\n");
  EXPECT_EQ(Job(resumed).last_checkpoint().dir(), Ck("s5"));
  const pb::Assignment a = Assigned(w[0]);
  EXPECT_EQ(a.job_id(), resumed);
  EXPECT_EQ(a.resume_checkpoint(), Ck("s5"));
}

TEST_F(CoordinatorTest, TooManyRecoveriesFailTheJob) {
  max_recoveries_ = 2;
  Reopen();
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  for (int g = 1; g <= 3; ++g) {
    ASSERT_EQ(Job(job).state(), pb::RUNNING) << g;
    ASSERT_EQ(Assigned(w[0], job, g).generation(), g);
    ASSERT_TRUE(Fail(job, g, 0, absl::StrCat("connection reset ", g), false).ok());
    Assigned(w[0]);  // idle: the next generation starts (unless failed)
  }
  pb::JobInfo info = Job(job);
  EXPECT_EQ(info.state(), pb::FAILED);
  EXPECT_EQ(info.recoveries(), 3);
  EXPECT_EQ(info.message(),
            "rank 0: connection reset 3; giving up after 3 recoveries (--max-recoveries 2)");
}

TEST_F(CoordinatorTest, CancelFromActiveStatesOnly) {
  const std::string running = Submit(SpecYaml(1, 2, 1));
  const std::string pending = Submit(SpecYaml(1, 2, 1));
  pb::CancelJobRequest q;
  q.set_job_id(pending);
  auto r = c_->CancelJob(q);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state(), pb::CANCELLED);
  EXPECT_EQ(r->end_time(), 1'700'000'000);
  r = c_->CancelJob(q);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("is CANCELLED"));
  q.set_job_id("job-77");
  EXPECT_EQ(c_->CancelJob(q).status().code(), absl::StatusCode::kNotFound);

  std::vector<std::string> w = Cluster(1);
  ASSERT_EQ(Assigned(w[0], running, 1).job_id(), running);
  q.set_job_id(running);
  ASSERT_TRUE(c_->CancelJob(q).ok());
  EXPECT_EQ(Assigned(w[0], running, 1).job_id(), "");
  pb::GetLogsRequest logs;
  logs.set_job_id(running);
  logs.set_offset(1);
  auto l = c_->GetLogs(logs);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->finished());
  EXPECT_EQ(l->state(), pb::CANCELLED);
  EXPECT_EQ(l->next_offset(), 3);  // submitted, RUNNING, CANCELLED
  ASSERT_EQ(l->lines_size(), 2);
  EXPECT_THAT(l->lines(1), HasSubstr("CANCELLED: cancelled while RUNNING"));
  EXPECT_THAT(l->lines(1), StartsWith("2023-11-14T22:13:20.000Z "));
  logs.set_offset(-1);
  EXPECT_EQ(c_->GetLogs(logs).status().code(), absl::StatusCode::kInvalidArgument);
}

// Scores and labels of one rank's chunk.
struct Preds {
  std::vector<float> scores, labels;
};
Preds MakePreds(uint64_t seed, int n) {
  Rng rng(seed);
  Preds p;
  for (int i = 0; i < n; ++i) {
    const float label = rng.Uniform() < 0.3 ? 1.0f : 0.0f;
    p.labels.push_back(label);
    p.scores.push_back(static_cast<float>(rng.Uniform() + 0.5 * label));
  }
  return p;
}

TEST_F(CoordinatorTest, EvaluationAggregatesRanksIntoExactAucAndTheDllLog) {
  const std::string results = dir_.Sub("results");
  const std::string job = Submit(SpecYaml(2, 2, 2, results));
  std::vector<std::string> w = Cluster(2);
  ASSERT_EQ(Job(job).state(), pb::RUNNING);

  // Rank 0's step records of epoch 0 and its perf summary.
  pb::ReportProgressRequest p;
  p.set_job_id(job);
  p.set_generation(1);
  p.set_rank(0);
  p.set_steps_per_epoch(2);
  p.set_oracle_test_auc(0.8);
  for (int s = 0; s < 2; ++s) {
    pb::StepRecord* r = p.add_steps();
    r->set_epoch(0);
    r->set_step(s);
    r->set_global_step(s);
    r->set_total_loss(0.7 - 0.1 * s);
    r->set_classification_loss(0.6);
    r->set_aux_loss(0.1);
    r->set_samples_per_second(1000);
    r->set_samples(12);
  }
  p.set_epoch_end(true);
  p.set_epoch(0);
  pb::Metric* m = p.add_epoch_perf();
  m->set_name("throughput");
  m->set_value(1234);
  m = p.add_epoch_perf();
  m->set_name("time");
  m->set_value(2.5);
  p.set_epoch_train_time_s(2.5);
  ASSERT_TRUE(c_->ReportProgress(p).ok());
  pb::JobInfo info = Job(job);
  EXPECT_EQ(info.samples_total(), 24);
  EXPECT_EQ(info.global_step(), 2);
  EXPECT_EQ(info.steps_per_epoch(), 2);
  EXPECT_DOUBLE_EQ(info.last_loss(), 0.6);
  EXPECT_EQ(info.oracle_test_auc(), 0.8);
  // Only rank 0 reports steps.
  p.set_rank(1);
  EXPECT_EQ(c_->ReportProgress(p).status().code(), absl::StatusCode::kInvalidArgument);

  auto eval = [&](int64_t epoch, const std::string& split, int rank, const Preds& preds,
                  size_t from, size_t to, bool last) {
    pb::ReportEvalRequest q;
    q.set_job_id(job);
    q.set_generation(1);
    q.set_rank(rank);
    q.set_epoch(epoch);
    q.set_split(split);
    double loss = 0;
    for (size_t i = from; i < to; ++i) {
      q.add_scores(preds.scores[i]);
      q.add_labels(preds.labels[i]);
      loss += 0.5 + preds.labels[i];
    }
    q.set_loss_sum(loss);
    q.set_last(last);
    return c_->ReportEval(q).status();
  };
  const Preds train0 = MakePreds(1, 50), train1 = MakePreds(2, 30);
  const Preds test0 = MakePreds(3, 40), test1 = MakePreds(4, 41);
  // Bad requests are refused and change nothing.
  EXPECT_EQ(eval(0, "valid", 0, train0, 0, 5, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(eval(0, "train", 2, train0, 0, 5, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(eval(5, "train", 0, train0, 0, 5, false).code(), absl::StatusCode::kInvalidArgument);
  {
    pb::ReportEvalRequest q;
    q.set_job_id(job);
    q.set_generation(1);
    q.set_split("train");
    q.add_scores(1);
    EXPECT_EQ(c_->ReportEval(q).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // Chunks in any order across ranks.
  ASSERT_TRUE(eval(0, "train", 1, train1, 0, 30, true).ok());
  ASSERT_TRUE(eval(0, "train", 0, train0, 0, 20, false).ok());
  ASSERT_TRUE(eval(0, "test", 0, test0, 0, 40, true).ok());
  ASSERT_TRUE(eval(0, "train", 0, train0, 20, 50, true).ok());
  EXPECT_EQ(eval(0, "train", 0, train0, 0, 1, true).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Job(job).epochs_done_size(), 0);
  ASSERT_TRUE(eval(0, "test", 1, test1, 0, 41, true).ok());

  auto concat = [](const Preds& a, const Preds& b) {
    Preds c = a;
    c.scores.insert(c.scores.end(), b.scores.begin(), b.scores.end());
    c.labels.insert(c.labels.end(), b.labels.begin(), b.labels.end());
    return c;
  };
  auto loss_of = [](const Preds& preds) {
    double s = 0;
    for (float l : preds.labels) s += 0.5 + l;
    return s / static_cast<double>(preds.labels.size());
  };
  const Preds train = concat(train0, train1), test = concat(test0, test1);
  const std::vector<double> train_scores(train.scores.begin(), train.scores.end());
  const std::vector<double> test_scores(test.scores.begin(), test.scores.end());
  const double train_auc = ExactAuc(train_scores, train.labels);
  const double test_auc = ExactAuc(test_scores, test.labels);
  ASSERT_GT(test_auc, 0.5);
  info = Job(job);
  ASSERT_EQ(info.epochs_done_size(), 1);
  EXPECT_EQ(info.state(), pb::RUNNING);
  EXPECT_EQ(info.epochs_done(0).train_auc(), train_auc);
  EXPECT_EQ(info.epochs_done(0).test_auc(), test_auc);
  EXPECT_DOUBLE_EQ(info.epochs_done(0).train_loss(), loss_of(train));
  EXPECT_DOUBLE_EQ(info.epochs_done(0).test_loss(), loss_of(test));
  EXPECT_EQ(info.epochs_done(0).samples_per_second(), 1234);
  EXPECT_EQ(info.epochs_done(0).train_time_s(), 2.5);
  EXPECT_TRUE(LogHas(job, "epoch 1: train AUC"));

  // Epoch 1 (no perf summary) is the last: COMPLETED.
  ASSERT_TRUE(eval(1, "train", 0, train0, 0, 50, true).ok());
  ASSERT_TRUE(eval(1, "train", 1, train1, 0, 30, true).ok());
  ASSERT_TRUE(eval(1, "test", 0, test0, 0, 40, true).ok());
  ASSERT_TRUE(eval(1, "test", 1, test1, 0, 41, true).ok());
  info = Job(job);
  EXPECT_EQ(info.state(), pb::COMPLETED);
  EXPECT_EQ(info.epochs_done_size(), 2);
  EXPECT_EQ(info.time_to_train_s(), 2.5);
  EXPECT_GT(info.end_time(), 0);
  EXPECT_EQ(eval(1, "test", 1, test1, 0, 1, true).code(), absl::StatusCode::kFailedPrecondition);

  auto records = ReadDllLogFile(results + "/job-1/log.json");
  ASSERT_TRUE(records.ok()) << records.status();
  std::vector<std::string> metadata;
  std::vector<const DllRecord*> logs;
  for (const DllRecord& r : *records) {
    if (r.type == DllRecord::Type::kMetadata) metadata.push_back(r.metric);
    if (r.type == DllRecord::Type::kLog) logs.push_back(&r);
  }
  EXPECT_THAT(metadata,
              ElementsAre("test_auc", "latency_p90", "train_loss", "time_to_train", "throughput"));
  ASSERT_EQ(logs.size(), 5u);  // 2 steps, 2 epochs, the summary
  auto names = [](const DllRecord& r) {
    std::vector<std::string> n;
    for (const auto& [name, v] : r.data) n.push_back(name);
    return n;
  };
  EXPECT_THAT(logs[0]->step, ElementsAre(0, 0));
  EXPECT_THAT(names(*logs[1]),
              ElementsAre("total_loss", "classification_loss", "dien_aux_loss", "samples/s"));
  EXPECT_THAT(logs[2]->step, ElementsAre(0));
  EXPECT_THAT(names(*logs[2]),
              ElementsAre("throughput", "time", "train_auc", "train_loss", "test_auc", "test_loss",
                          "oracle_test_auc", "test_auc_to_oracle"));
  EXPECT_EQ(logs[2]->data[4].second, test_auc);
  EXPECT_DOUBLE_EQ(logs[2]->data[7].second, test_auc / 0.8);
  EXPECT_THAT(logs[3]->step, ElementsAre(1));
  EXPECT_TRUE(logs[4]->step.empty());
  EXPECT_THAT(names(*logs[4]),
              ElementsAre("time_to_train", "train_auc", "train_loss", "test_auc", "test_loss"));
  EXPECT_EQ(logs[4]->data[0].second, 2.5);
}

TEST_F(CoordinatorTest, DinStepRecordsHaveNoAuxLoss) {
  const std::string results = dir_.Sub("din");
  const std::string job = Submit(SpecYaml(1, 2, 1, results, "din"));
  Cluster(1);
  pb::ReportProgressRequest p;
  p.set_job_id(job);
  p.set_generation(1);
  pb::StepRecord* r = p.add_steps();
  r->set_total_loss(0.5);
  ASSERT_TRUE(c_->ReportProgress(p).ok());
  auto records = ReadDllLogFile(results + "/job-1/log.json");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->back().data.size(), 2u);
  EXPECT_EQ(records->back().data[0].first, "total_loss");
  EXPECT_EQ(records->back().data[1].first, "samples/s");
}

TEST_F(CoordinatorTest, AnUnwritableResultsDirFailsTheJobAtStart) {
  // A path that is not a directory is refused at submission; one that becomes unusable before
  // the job starts (its directory is a file) fails the job then.
  testing::WriteAll(dir_.Sub("file"), "x");
  pb::SubmitJobRequest q;
  q.set_spec_yaml(SpecYaml(1, 2, 1, dir_.Sub("file") + "/sub"));
  EXPECT_EQ(c_->SubmitJob(q).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(MakeDirs(dir_.Sub("res")).ok());
  const std::string job = Submit(SpecYaml(1, 2, 1, dir_.Sub("res")));
  const std::string next = Submit(SpecYaml(1, 2, 1));
  ASSERT_EQ(::rmdir(dir_.Sub("res").c_str()), 0);
  testing::WriteAll(dir_.Sub("res"), "x");
  Cluster(1);
  EXPECT_EQ(Job(job).state(), pb::FAILED);
  EXPECT_THAT(Job(job).message(), StartsWith("results_dir: "));
  EXPECT_EQ(Job(next).state(), pb::RUNNING);
}

TEST_F(CoordinatorTest, KvGetWaitsAndTimesOutNamingMissingKeys) {
  pb::KvSetRequest set;
  set.set_key("a");
  set.set_value(std::string("\0\1", 2));
  ASSERT_TRUE(c_->KvSet(set).ok());
  set.set_key("");
  EXPECT_EQ(c_->KvSet(set).status().code(), absl::StatusCode::kInvalidArgument);
  pb::KvGetRequest get;
  get.add_keys("a");
  get.add_keys("b");
  get.set_timeout_ms(20);
  auto r = c_->KvGet(get);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(": b"));
  set.set_key("b");
  set.set_value("2");
  ASSERT_TRUE(c_->KvSet(set).ok());
  r = c_->KvGet(get);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->values(), ElementsAre(std::string("\0\1", 2), "2"));
  c_->Shutdown();
  EXPECT_EQ(c_->KvGet(get).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(CoordinatorTest, ARestartedCoordinatorResumesTheJob) {
  const std::string results = dir_.Sub("results");
  const std::string job = Submit(SpecYaml(1, 2, 2, results));
  std::vector<std::string> w = Cluster(1);
  ASSERT_EQ(Assigned(w[0], job, 1).rank(), 0);
  pb::ReportProgressRequest p;
  p.set_job_id(job);
  p.set_generation(1);
  pb::StepRecord* r = p.add_steps();
  r->set_samples(12);
  r->set_total_loss(0.5);
  ASSERT_TRUE(c_->ReportProgress(p).ok());
  ASSERT_TRUE(Commit(job, 1, Ck("e1"), 1, 7).ok());

  Advance(10'000);
  Reopen();
  pb::JobInfo info = Job(job);
  EXPECT_EQ(info.state(), pb::RECOVERING);
  EXPECT_EQ(info.message(), "coordinator restarted");
  EXPECT_EQ(info.generation(), 1);
  EXPECT_EQ(info.recoveries(), 0);
  EXPECT_EQ(info.last_checkpoint().dir(), Ck("e1"));
  EXPECT_EQ(info.last_checkpoint().global_step(), 7);
  EXPECT_TRUE(LogHas(job, "RECOVERING: coordinator restarted (RUNNING at generation 1)"));
  EXPECT_TRUE(LogHas(job, "submitted"));
  // Members of the old coordinator are unknown: they register again.
  EXPECT_EQ(Beat(w[0]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Submit(SpecYaml(1, 1, 1)), "job-2");
  w = Cluster(1);
  const pb::Assignment a = Assigned(w[0]);
  EXPECT_EQ(a.job_id(), job);
  EXPECT_EQ(a.generation(), 2);
  EXPECT_EQ(a.resume_checkpoint(), Ck("e1"));

  // The DLLL log goes on without a second METADATA block.
  p.set_generation(2);
  ASSERT_TRUE(c_->ReportProgress(p).ok());
  auto records = ReadDllLogFile(results + "/job-1/log.json");
  ASSERT_TRUE(records.ok()) << records.status();
  int metadata = 0, steps = 0;
  for (const DllRecord& rec : *records) {
    (rec.type == DllRecord::Type::kMetadata ? metadata : steps)++;
  }
  EXPECT_EQ(metadata, 5);
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(Job(job).samples_total(), 24);
}

// An epoch trained partly by generation 1 and finished by generation 2 (which resumed at its
// last step and so measured no throughput): its train time is the sum of both, its throughput
// generation 1's.
TEST_F(CoordinatorTest, AnEpochTrainedOverTwoGenerationsKeepsItsTimeAndThroughput) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  ASSERT_EQ(Assigned(w[0], job, 1).generation(), 1);
  auto epoch_end = [&](int64_t generation, double throughput, double time_s) {
    pb::ReportProgressRequest p;
    p.set_job_id(job);
    p.set_generation(generation);
    p.set_epoch_end(true);
    p.set_epoch(0);
    pb::Metric* m = p.add_epoch_perf();
    m->set_name("throughput");
    m->set_value(throughput);
    p.set_epoch_train_time_s(time_s);
    return c_->ReportProgress(p).status();
  };
  ASSERT_TRUE(epoch_end(1, 1000, 2.0).ok());
  ASSERT_TRUE(Fail(job, 1, 0, "peer lost", /*fatal=*/false).ok());
  Assigned(w[0]);  // idle: generation 2 starts
  ASSERT_EQ(Assigned(w[0], job, 2).generation(), 2);
  ASSERT_TRUE(epoch_end(2, 0, 0.0).ok());
  for (const char* split : {"train", "test"}) {
    pb::ReportEvalRequest q;
    q.set_job_id(job);
    q.set_generation(2);
    q.set_epoch(0);
    q.set_split(split);
    for (float s : {0.1f, 0.9f}) q.add_scores(s);
    for (float l : {0.0f, 1.0f}) q.add_labels(l);
    q.set_last(true);
    ASSERT_TRUE(c_->ReportEval(q).ok());
  }
  const pb::JobInfo info = Job(job);
  ASSERT_EQ(info.state(), pb::COMPLETED);
  ASSERT_EQ(info.epochs_done_size(), 1);
  EXPECT_DOUBLE_EQ(info.epochs_done(0).train_time_s(), 2.0);
  EXPECT_DOUBLE_EQ(info.epochs_done(0).samples_per_second(), 1000);
  EXPECT_DOUBLE_EQ(info.time_to_train_s(), 2.0);
}

// A worker's run can end without a failure report reaching the coordinator (a failed call to
// the coordinator ends a run quietly, or ReportFailure itself fails). With one worker no peer
// times out, so before this rule the job stayed RUNNING / CHECKPOINTING forever.
TEST_F(CoordinatorTest, AWorkerThatStopsRunningItsGenerationUnreportedRecoversTheJob) {
  const std::string job = Submit(SpecYaml(1, 2, 2));
  std::vector<std::string> w = Cluster(1);
  // An idle heartbeat before the worker picked the assignment up changes nothing.
  ASSERT_EQ(Assigned(w[0]).generation(), 1);
  EXPECT_EQ(Job(job).state(), pb::RUNNING);
  ASSERT_EQ(Assigned(w[0], job, 1).generation(), 1);  // it runs generation 1

  // It begins a checkpoint, the commit fails on its side, it abandons the run and goes idle.
  pb::CheckpointBeginRequest b;
  b.set_job_id(job);
  b.set_generation(1);
  b.set_global_step(10);
  ASSERT_TRUE(c_->CheckpointBegin(b).ok());
  ASSERT_EQ(Job(job).state(), pb::CHECKPOINTING);
  const pb::Assignment a = Assigned(w[0]);
  pb::JobInfo info = Job(job);
  EXPECT_EQ(info.recoveries(), 1);
  EXPECT_TRUE(LogHas(job,
                     "RECOVERING (recovery 1): worker rank 0 (w0) stopped running generation 1 "
                     "without a failure report"));
  // The idle worker makes the cluster whole again: generation 2 starts at once.
  EXPECT_EQ(info.state(), pb::RUNNING);
  EXPECT_EQ(info.generation(), 2);
  EXPECT_EQ(a.generation(), 2);
}

TEST_F(CoordinatorTest, ARankThatSentItsFinalEvaluationMayGoIdle) {
  const std::string job = Submit(SpecYaml(2, 2, 1));
  std::vector<std::string> w = Cluster(2);
  ASSERT_EQ(Assigned(w[0], job, 1).rank(), 0);
  ASSERT_EQ(Assigned(w[1], job, 1).rank(), 1);
  auto eval = [&](int rank, const std::string& split) {
    pb::ReportEvalRequest q;
    q.set_job_id(job);
    q.set_generation(1);
    q.set_rank(rank);
    q.set_epoch(0);
    q.set_split(split);
    q.add_scores(rank == 0 ? 0.2f : 0.8f);
    q.add_labels(static_cast<float>(rank));
    q.set_last(true);
    return c_->ReportEval(q).status();
  };
  // Rank 1 sent both splits of the final epoch: its part is done, it may go idle while rank 0
  // still evaluates.
  ASSERT_TRUE(eval(1, "train").ok());
  ASSERT_TRUE(eval(1, "test").ok());
  Assigned(w[1]);
  EXPECT_EQ(Job(job).state(), pb::RUNNING);
  EXPECT_EQ(Job(job).recoveries(), 0);
  ASSERT_TRUE(eval(0, "train").ok());
  ASSERT_TRUE(eval(0, "test").ok());
  EXPECT_EQ(Job(job).state(), pb::COMPLETED);
}

TEST_F(CoordinatorTest, AStaleGenerationCannotSetKvKeys) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  ASSERT_EQ(Assigned(w[0], job, 1).generation(), 1);
  auto set = [&](const std::string& key) {
    pb::KvSetRequest q;
    q.set_key(key);
    q.set_value("v");
    return c_->KvSet(q).status();
  };
  ASSERT_TRUE(set("job-1/g1/rank0").ok());
  ASSERT_TRUE(set("job-1/g1").ok());
  ASSERT_TRUE(Fail(job, 1, 0, "peer lost", /*fatal=*/false).ok());
  ASSERT_EQ(Assigned(w[0]).generation(), 2);
  // Generation 1 ended: a late rank of it cannot leave keys behind.
  const Status stale = set("job-1/g1/rank1");
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stale.message()),
              HasSubstr("KV key \"job-1/g1/rank1\" belongs to job-1 generation 1"));
  EXPECT_EQ(set("job-1/g3/x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(set("job-1/g2/rank0").ok());
  // Keys that name no known job's generation are not fenced.
  for (const char* key : {"job-2/g1/x", "job-1/gx", "job-1/g2x", "job-1", "free"}) {
    EXPECT_TRUE(set(key).ok()) << key;
  }
  pb::CancelJobRequest cancel;
  cancel.set_job_id(job);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  EXPECT_EQ(set("job-1/g2/rank0").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, GetLogsAtAHugeOffsetReturnsNothing) {
  const std::string job = Submit(SpecYaml(1, 1, 1));
  pb::GetLogsRequest q;
  q.set_job_id(job);
  q.set_offset(std::numeric_limits<int64_t>::max());
  auto r = c_->GetLogs(q);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->lines_size(), 0);
  EXPECT_EQ(r->next_offset(), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(r->finished());
}

// ---------------------------------------------------------------------------------------------
// Isolation between jobs and users (docs/security.md): job credentials, the KV's prefixes and
// quota, the roots of the files a job writes, and resume_from's owner rule.

Principal Remote(const std::string& credential = "") {
  Principal p;
  p.remote = true;  // a network call, security off: the job credential rules still apply
  p.job_credential = credential;
  return p;
}

Principal User(const std::string& name, UserRole role) {
  Principal p;
  p.checked = true;
  p.remote = true;
  p.user = name;
  p.role = role;
  return p;
}

TEST_F(CoordinatorTest, WorkersAreAssignedOnlyOnceEveryServerServesTheGeneration) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  ASSERT_EQ(Job(job).state(), pb::RUNNING);
  auto worker = Beat(w[0]);
  ASSERT_TRUE(worker.ok());
  EXPECT_FALSE(worker->has_assignment()) << "no server knows generation 1 yet";
  // Each server is told its job, generation and credential (rank = its shard).
  auto s0 = Beat(servers_[0]);
  ASSERT_TRUE(s0.ok() && s0->has_assignment());
  EXPECT_EQ(s0->assignment().job_id(), job);
  EXPECT_EQ(s0->assignment().generation(), 1);
  EXPECT_EQ(s0->assignment().rank(), 0);
  EXPECT_EQ(s0->assignment().spec_yaml(), "") << "servers get no spec";
  ASSERT_FALSE(s0->assignment().job_credential().empty());
  ASSERT_TRUE(Beat(servers_[0], job, 1).ok());
  EXPECT_FALSE(Beat(w[0])->has_assignment()) << "shard 1 does not serve it yet";
  ASSERT_TRUE(Beat(servers_[1], job, 1).ok());
  const pb::Assignment a = Beat(w[0])->assignment();
  EXPECT_EQ(a.job_id(), job);
  EXPECT_EQ(a.job_credential(), s0->assignment().job_credential());
  // A new generation has a new credential.
  ASSERT_TRUE(Fail(job, 1, 0, "peer lost", /*fatal=*/false).ok());
  const pb::Assignment next = Assigned(w[0]);
  EXPECT_EQ(next.generation(), 2);
  EXPECT_NE(next.job_credential(), a.job_credential());
  // A finished job's servers serve nobody.
  pb::CancelJobRequest cancel;
  cancel.set_job_id(job);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  EXPECT_FALSE(Beat(servers_[0])->has_assignment());
}

TEST_F(CoordinatorTest, TheKvStoreTakesKeysOnlyFromTheRunningGenerationUnderItsPrefix) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  const pb::Assignment a = Assigned(w[0]);
  ASSERT_EQ(a.kv_prefix(), "job-1/g1");
  auto set = [&](const std::string& key, const Principal& who, size_t bytes = 1) {
    pb::KvSetRequest q;
    q.set_key(key);
    q.set_value(std::string(bytes, 'v'));
    return c_->KvSet(q, who).status();
  };
  auto get = [&](const std::string& key, const Principal& who) {
    pb::KvGetRequest q;
    q.add_keys(key);
    q.set_timeout_ms(0);
    return c_->KvGet(q, who).status();
  };
  // No credential (an idle worker, or anyone with security off): refused, pre-planting a later
  // generation's keys and filling the store with keys outside any job alike.
  for (const char* key : {"job-1/g1/0", "job-2/g1/0", "job-1/g2/0", "zz/1"}) {
    const Status s = set(key, Remote());
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << key;
    EXPECT_TRUE(IsAuthRefusal(s)) << key;
    EXPECT_THAT(std::string(s.message()), HasSubstr("KvSet: no job credential")) << key;
    EXPECT_EQ(get(key, Remote()).code(), absl::StatusCode::kPermissionDenied) << key;
  }
  // Another coordinator's credential for this very job and generation.
  const std::string forged = JobCredentialIssuer(std::string(32, 'x')).Issue(job, 1);
  EXPECT_EQ(set("job-1/g1/0", Remote(forged)).code(), absl::StatusCode::kPermissionDenied);
  // The rank's own credential: only under its generation's prefix.
  const Principal rank = Remote(a.job_credential());
  EXPECT_TRUE(set("job-1/g1/0", rank).ok());
  EXPECT_TRUE(set("job-1/g1", rank).ok());
  EXPECT_TRUE(get("job-1/g1/0", rank).ok());
  for (const char* key : {"job-1/g2/0", "job-2/g1/0", "zz/1", "job-1/g10/0", "job-1/g1x"}) {
    const Status s = set(key, rank);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << key;
    EXPECT_THAT(std::string(s.message()), HasSubstr("is outside \"job-1/g1/\"")) << key;
    EXPECT_EQ(get(key, rank).code(), absl::StatusCode::kPermissionDenied) << key;
  }
  // The generation's quota.
  int stored = 0;
  Status s;
  while ((s = set(absl::StrCat("job-1/g1/big", stored), rank, kMaxKvValueBytes)).ok()) ++stored;
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("past its quota of 33554432"));
  EXPECT_LE(int64_t{stored} * static_cast<int64_t>(kMaxKvValueBytes), kMaxKvJobBytes);
  EXPECT_GE(stored, 30);
  // A new generation: the old one's keys and quota are gone, its credential is stale.
  ASSERT_TRUE(Fail(job, 1, 0, "peer lost", /*fatal=*/false).ok());
  const pb::Assignment b = Assigned(w[0]);
  const Status stale = set("job-1/g1/0", rank);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stale.message()), HasSubstr("stale generation"));
  EXPECT_TRUE(set("job-1/g2/big", Remote(b.job_credential()), kMaxKvValueBytes).ok());
}

TEST_F(CoordinatorTest, FencedCallsNeedTheCredentialOfTheirJobAndGeneration) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  const pb::Assignment a = Assigned(w[0]);
  pb::ReportProgressRequest p;
  p.set_job_id(job);
  p.set_generation(1);
  p.set_rank(0);
  p.set_steps_per_epoch(5);
  Status s = c_->ReportProgress(p, Remote()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("ReportProgress: no job credential: only a rank of job-1 generation 1"));
  const JobCredentialIssuer other(std::string(32, 'y'));
  EXPECT_EQ(c_->ReportProgress(p, Remote(other.Issue(job, 1))).status().code(),
            absl::StatusCode::kPermissionDenied);
  pb::CheckpointBeginRequest begin;
  begin.set_job_id(job);
  begin.set_generation(1);
  EXPECT_EQ(c_->CheckpointBegin(begin, Remote()).status().code(),
            absl::StatusCode::kPermissionDenied);
  pb::ReportFailureRequest fatal;
  fatal.set_job_id(job);
  fatal.set_generation(1);
  fatal.set_fatal(true);
  EXPECT_EQ(c_->ReportFailure(fatal, Remote()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Job(job).state(), pb::RUNNING);
  EXPECT_TRUE(c_->ReportProgress(p, Remote(a.job_credential())).ok());
  // A credential of generation 1 for a call naming generation 2: refused, not fenced.
  p.set_generation(2);
  s = c_->ReportProgress(p, Remote(a.job_credential())).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr("presents the credential of job-1 generation 1"));
}

TEST_F(CoordinatorTest, AMemberReadsOnlyTheJobsItRan) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  const pb::Assignment a = Assigned(w[0]);
  Principal member;
  member.checked = true;
  member.remote = true;
  member.member = "worker-2";
  pb::GetJobRequest q;
  q.set_job_id(job);
  const Status s = c_->GetJob(q, member).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr("a member reads only the jobs it has run"));
  member.job_credential = a.job_credential();
  EXPECT_TRUE(c_->GetJob(q, member).ok());
  // The credentials' key is kept in the state directory (mode 0600): a worker that ran the job
  // still reads it after the coordinator restarted.
  Reopen();
  EXPECT_TRUE(c_->GetJob(q, member).ok());
  struct stat st;
  ASSERT_EQ(::stat((dir_.Sub("state") + "/" + kCredentialKeyFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(CoordinatorTest, AGenerationWhoseServersNeverServeItRecovers) {
  const std::string job = Submit(SpecYaml(1, 2, 1));
  std::vector<std::string> w = Cluster(1);
  ASSERT_EQ(Job(job).state(), pb::RUNNING);
  // The servers heartbeat but never report serving generation 1 (as a server of an older sift).
  for (int i = 0; i < 4 * 3; ++i) {
    Advance(1000);
    BeatServers();
    ASSERT_TRUE(Beat(w[0]).ok());
    c_->Tick();
  }
  // Recovered (and, the cluster being whole, started again as generation 2).
  const pb::JobInfo info = Job(job);
  EXPECT_EQ(info.recoveries(), 1);
  EXPECT_EQ(info.generation(), 2);
  EXPECT_TRUE(LogHas(job,
                     "embedding server shards 0, 1 did not report serving generation 1 "
                     "within 12s"))
      << absl::StrJoin(Logs(job), "\n");
}

TEST_F(CoordinatorTest, AResumedJobRestoresOnlyItsCheckpointsOwnSnapshot) {
  const std::string ckpt = dir_.Sub("ckpt");
  const std::string first = Submit(SpecYaml(1, 2, 1) + "checkpoint: {dir: " + ckpt + "}\n");
  std::vector<std::string> w = Cluster(1);
  Assigned(w[0]);
  pb::CancelJobRequest cancel;
  cancel.set_job_id(first);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  const std::string step = ckpt + "/" + first + "/step-000000000010";
  ASSERT_TRUE(MakeDirs(step).ok());
  const auto manifest = [&](const std::string& snapshot) {
    testing::WriteAll(step + "/manifest.json",
                      "{\"embedding_snapshot\": {\"name\": \"" + snapshot + "\"}}\n");
  };
  // Its own snapshot: the servers may restore it.
  manifest("ckpt-job-1-g1-step-10");
  const std::string resumed =
      Submit(SpecYaml(1, 2, 1) + "checkpoint: {dir: " + ckpt + ", resume_from: " + step + "}\n");
  auto served = Beat(servers_[0]);
  ASSERT_TRUE(served.ok() && served->has_assignment());
  EXPECT_EQ(served->assignment().job_id(), resumed);
  EXPECT_EQ(served->assignment().restorable_snapshot(), "ckpt-job-1-g1-step-10");
  cancel.set_job_id(resumed);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  // A manifest edited to name another job's snapshot: the job fails, no server is told it.
  manifest("ckpt-job-9-g1-step-10");
  const std::string forged =
      Submit(SpecYaml(1, 2, 1) + "checkpoint: {dir: " + ckpt + ", resume_from: " + step + "}\n");
  Assigned(w[0]);
  const pb::JobInfo info = Job(forged);
  EXPECT_EQ(info.state(), pb::FAILED);
  EXPECT_THAT(info.message(), HasSubstr("its manifest names the snapshot 'ckpt-job-9-g1-step-10'"));
}

TEST_F(CoordinatorTest, SpecPathsMustLieUnderTheRootsWithoutLinksOrDotDot) {
  const std::string root = dir_.path();
  auto submit = [&](const std::string& yaml, const Principal& who = Principal::Unchecked()) {
    pb::SubmitJobRequest q;
    q.set_spec_yaml(yaml);
    q.set_source_name("job.yaml");
    return c_->SubmitJob(q, who).status();
  };
  Status s = submit(SpecYaml(1, 2, 1, "/etc"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("job.yaml: results_dir: /etc is outside " + root +
                        ", the directory this coordinator lets jobs use (coordinator "
                        "--results-root)"));
  s = submit(SpecYaml(1, 2, 1) + "checkpoint: {dir: /etc}\n");
  EXPECT_THAT(std::string(s.message()), HasSubstr("checkpoint.dir: /etc is outside " + root));
  s = submit(SpecYaml(1, 2, 1, root + "/a/../../etc"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("has a '..' component"));
  s = submit(SpecYaml(1, 2, 1) + "checkpoint: {resume_from: \"../x\"}\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // A symbolic link on the way.
  ASSERT_TRUE(MakeDirs(dir_.Sub("elsewhere")).ok());
  ASSERT_EQ(::symlink(dir_.Sub("elsewhere").c_str(), dir_.Sub("link").c_str()), 0);
  s = submit(SpecYaml(1, 2, 1, dir_.Sub("link") + "/results"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(dir_.Sub("link") + " is a symbolic link"));
  // A relative path lies under the root.
  ASSERT_TRUE(submit(SpecYaml(1, 2, 1, "mine")).ok());
  EXPECT_EQ(Job().results_dir(), root + "/mine/job-1");
}

TEST_F(CoordinatorTest, EachJobWritesItsOwnResultsDirectoryAndNeverThroughALink) {
  const std::string results = dir_.Sub("shared_results");
  // Two jobs (two users) naming the same results_dir: each its own directory.
  const std::string one = Submit(SpecYaml(1, 2, 1, results));
  std::vector<std::string> w = Cluster(1);
  Assigned(w[0]);
  EXPECT_EQ(Job(one).results_dir(), results + "/" + one);
  const std::string first_log = testing::ReadAll(results + "/" + one + "/log.json");
  ASSERT_FALSE(first_log.empty());
  pb::CancelJobRequest cancel;
  cancel.set_job_id(one);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  const std::string two = Submit(SpecYaml(1, 2, 1, results));
  Assigned(w[0]);
  ASSERT_EQ(Job(two).state(), pb::RUNNING);
  EXPECT_TRUE(PathExists(results + "/" + two + "/log.json"));
  EXPECT_EQ(testing::ReadAll(results + "/" + one + "/log.json"), first_log);
  EXPECT_FALSE(PathExists(results + "/log.json"));
  cancel.set_job_id(two);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());

  // A directory already at the job's name (a planted link to another user's directory, or a
  // job of another coordinator with the same id) is never written into: the job gets its own.
  const std::string victim = dir_.Sub("victim");
  ASSERT_TRUE(MakeDirs(victim).ok());
  testing::WriteAll(victim + "/log.json", "bob's\n");
  ASSERT_EQ(::symlink(victim.c_str(), (results + "/job-3").c_str()), 0);
  const std::string three = Submit(SpecYaml(1, 2, 1, results));
  ASSERT_EQ(three, "job-3");
  Assigned(w[0]);
  EXPECT_EQ(Job(three).state(), pb::RUNNING);
  EXPECT_EQ(Job(three).results_dir(), results + "/job-3.2");
  EXPECT_TRUE(PathExists(results + "/job-3.2/log.json"));
  // Queued behind job-3: a job whose results directory's parent becomes a link before it starts.
  const std::string four = Submit(SpecYaml(1, 2, 1, results + "/sub"));
  ASSERT_EQ(::symlink(victim.c_str(), (results + "/sub").c_str()), 0) << std::strerror(errno);
  // A link swapped in for job-3's log.json while it runs: the coordinator, restarted, reopens
  // the log without following it, and the job fails naming it.
  ASSERT_EQ(::unlink((results + "/job-3.2/log.json").c_str()), 0);
  ASSERT_EQ(::symlink((victim + "/log.json").c_str(), (results + "/job-3.2/log.json").c_str()), 0);
  Reopen();
  w = Cluster(1);
  Assigned(w[0]);
  const pb::JobInfo info = Job(three);
  EXPECT_EQ(info.state(), pb::FAILED);
  EXPECT_THAT(info.message(), HasSubstr("log.json: cannot open log file"));
  EXPECT_EQ(Job(four).state(), pb::FAILED);
  EXPECT_THAT(Job(four).message(), HasSubstr(results + "/sub is a symbolic link"));
  EXPECT_EQ(testing::ReadAll(victim + "/log.json"), "bob's\n");
}

TEST_F(CoordinatorTest, AJobsCheckpointDirectoryIsNeverALink) {
  const std::string ckpt = dir_.Sub("ckpt");
  const std::string victim = dir_.Sub("bobs_ckpt");
  ASSERT_TRUE(MakeDirs(ckpt).ok());
  ASSERT_TRUE(MakeDirs(victim + "/step-000000000050").ok());
  testing::WriteAll(victim + "/step-000000000050/manifest.json", "{}\n");
  for (int i = 1; i <= 3; ++i) {
    ASSERT_EQ(::symlink(victim.c_str(), absl::StrCat(ckpt, "/job-", i).c_str()), 0);
  }
  const std::string job = Submit(SpecYaml(1, 2, 1) + "checkpoint: {dir: " + ckpt + ", keep: 1}\n");
  Cluster(1);
  const pb::JobInfo info = Job(job);
  EXPECT_EQ(info.state(), pb::FAILED);
  EXPECT_THAT(info.message(), HasSubstr(ckpt + "/job-1 is a symbolic link"));
  EXPECT_EQ(testing::ReadAll(victim + "/step-000000000050/manifest.json"), "{}\n");
}

TEST_F(CoordinatorTest, AJobCommitsOnlyItsOwnCheckpoints) {
  const std::string ckpt = dir_.Sub("ckpt");
  const std::string job = Submit(SpecYaml(1, 2, 1) + "checkpoint: {dir: " + ckpt + "}\n");
  Assigned(Cluster(1)[0]);
  for (const std::string& dir :
       {dir_.Sub("elsewhere"), ckpt, ckpt + "/job-2/step-1", ckpt + "/job-1/../job-2/step-1"}) {
    const Status s = Commit(job, 1, dir, 1, 10);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << dir;
    EXPECT_THAT(std::string(s.message()), HasSubstr("a job commits only its own checkpoints"));
  }
  EXPECT_TRUE(Commit(job, 1, ckpt + "/job-1/step-000000000010", 1, 10).ok());
}

TEST_F(CoordinatorTest, ResumeFromNeedsACheckpointOfAJobTheUserOwns) {
  const std::string ckpt = dir_.Sub("ckpt");
  const Principal bob = User("bob", UserRole::kOperator);
  const Principal alice = User("alice", UserRole::kOperator);
  const Principal admin = User("root", UserRole::kAdmin);
  pb::SubmitJobRequest q;
  q.set_spec_yaml(SpecYaml(1, 2, 1) + "checkpoint: {dir: " + ckpt + "}\n");
  auto bobs = c_->SubmitJob(q, bob);
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  const std::string from = ckpt + "/" + bobs->job_id() + "/step-000000000010";
  q.set_spec_yaml(SpecYaml(1, 2, 1) + "checkpoint: {resume_from: " + from + "}\n");
  const auto refused = c_->SubmitJob(q, alice);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(IsAuthRefusal(refused.status()));
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("is a checkpoint of job-1, owned by bob; user alice may resume only from "
                        "its own jobs' checkpoints"));
  EXPECT_TRUE(c_->SubmitJob(q, bob).ok());
  EXPECT_TRUE(c_->SubmitJob(q, admin).ok());
  // Not a checkpoint of any job here: admins only.
  q.set_spec_yaml(SpecYaml(1, 2, 1) + "checkpoint: {resume_from: " + dir_.Sub("loose") + "}\n");
  EXPECT_EQ(c_->SubmitJob(q, bob).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(c_->SubmitJob(q, admin).ok());
  // Outside the checkpoint root: nobody.
  q.set_spec_yaml(SpecYaml(1, 2, 1) + "checkpoint: {resume_from: /var/x}\n");
  EXPECT_EQ(c_->SubmitJob(q, admin).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sift::coordinator
