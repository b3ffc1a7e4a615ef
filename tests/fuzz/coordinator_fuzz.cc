// Fuzz target: the coordinator's request handling (server/coordinator/coordinator.h Coordinator;
// the gRPC service in service.cc is a thin shell that hands each parsed request to one of its
// methods), in-process, without a network, on a fake clock.
//
// Per input a fresh coordinator gets a fresh state directory in the scratch directory. Input: one
// mode byte, then requests separated by kPartSeparator, each one byte choosing the method (the 14
// rpcs, or a Tick that first advances the clock by the next two bytes in ms) and the bytes of its
// message; bytes that do not parse are INVALID_ARGUMENT in the service and skipped here. Mode bit
// 0 first brings a 1-server, 1-worker job to RUNNING (job-1, generation 1, rank 0), so the fenced
// calls are reachable. Member ids are per coordinator start; a member_id "$N" in a request stands
// for the id of the N-th member registered in this input. Two changes keep the fuzzer harmless
// and fast, not the coordinator's behaviour: a spec's results_dir is moved into the scratch
// directory (the coordinator creates it and writes log.json there), and KvGet waits at most 1 ms.
// Invariants: every error carries a message and a code other than UNKNOWN; every job's stored
// spec_yaml parses.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/job_spec.h"
#include "server/coordinator/coordinator.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace pb = ::sift::coordinator::v1;
using sift::coordinator::Coordinator;

enum Method : uint8_t {
  kSubmitJob,
  kGetJob,
  kListJobs,
  kCancelJob,
  kGetLogs,
  kRegister,
  kHeartbeat,
  kKvSet,
  kKvGet,
  kReportProgress,
  kReportEval,
  kCheckpointBegin,
  kCheckpointCommit,
  kReportFailure,
  kTick,
  kMethods
};

constexpr char kSpec[] =
    "dataset: /data/tiny\n"
    "training: {epochs: 2, batch_size: 8, max_steps_per_epoch: 3}\n"
    "cluster: {servers: 1, workers: 1}\n";

struct Harness {
  absl::Time now = absl::FromUnixSeconds(1700000000);
  std::unique_ptr<Coordinator> c;
  std::vector<std::string> members;  // ids, registration order

  void Check(const sift::Status& s) {
    sift::fuzz::Note("request", s);
    if (s.ok()) return;
    FUZZ_CHECK(!s.message().empty(), "an error says something: " + s.ToString());
    FUZZ_CHECK(s.code() != absl::StatusCode::kUnknown, s.ToString());
  }
  template <typename T>
  void Check(const sift::StatusOr<T>& r) {
    Check(r.status());
  }
  std::string Member(const std::string& id) const {
    if (id.size() < 2 || id[0] != '$') return id;
    const size_t n = static_cast<size_t>(id[1] - '0');
    return n < members.size() ? members[n] : id;
  }
  void Register(const pb::RegisterRequest& q) {
    auto r = c->Register(q);
    Check(r);
    if (r.ok()) members.push_back(r->member_id());
  }
  // The spec as submitted, with any results_dir moved into the scratch directory.
  std::string Contain(const std::string& yaml) const {
    auto spec = sift::ParseJobSpec(yaml, "job.yaml");
    if (!spec.ok() || spec->results_dir.empty()) return yaml;
    spec->results_dir = sift::fuzz::ScratchDir::Get().File("results");
    return sift::JobSpecToYaml(*spec);
  }

  void StartJob() {
    pb::SubmitJobRequest submit;
    submit.set_spec_yaml(kSpec);
    submit.set_source_name("job.yaml");
    auto job = c->SubmitJob(submit);
    FUZZ_CHECK(job.ok(), job.status().ToString());
    pb::RegisterRequest server;
    server.set_role(pb::EMBEDDING_SERVER);
    server.set_address("127.0.0.1:7001");
    server.set_shard(0);
    server.set_num_shards(1);
    Register(server);
    pb::RegisterRequest worker;
    worker.set_role(pb::WORKER);
    worker.set_address("127.0.0.1");
    Register(worker);
    FUZZ_CHECK(members.size() == 2, "both members registered");
    pb::HeartbeatRequest hb;
    hb.set_member_id(members[1]);
    auto r = c->Heartbeat(hb);
    FUZZ_CHECK(r.ok(), r.status().ToString());
  }

  template <typename Request>
  static bool Parse(absl::string_view bytes, Request* q) {
    return q->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  }

  void Run(uint8_t method, absl::string_view bytes) {
    switch (method) {
      case kSubmitJob: {
        pb::SubmitJobRequest q;
        if (!Parse(bytes, &q)) return;
        q.set_spec_yaml(Contain(q.spec_yaml()));
        return Check(c->SubmitJob(q));
      }
      case kGetJob: {
        pb::GetJobRequest q;
        if (Parse(bytes, &q)) Check(c->GetJob(q));
        return;
      }
      case kListJobs:
        return Check(c->ListJobs(pb::ListJobsRequest()));
      case kCancelJob: {
        pb::CancelJobRequest q;
        if (Parse(bytes, &q)) Check(c->CancelJob(q));
        return;
      }
      case kGetLogs: {
        pb::GetLogsRequest q;
        if (Parse(bytes, &q)) Check(c->GetLogs(q));
        return;
      }
      case kRegister: {
        pb::RegisterRequest q;
        if (Parse(bytes, &q)) Register(q);
        return;
      }
      case kHeartbeat: {
        pb::HeartbeatRequest q;
        if (!Parse(bytes, &q)) return;
        q.set_member_id(Member(q.member_id()));
        return Check(c->Heartbeat(q));
      }
      case kKvSet: {
        pb::KvSetRequest q;
        if (Parse(bytes, &q)) Check(c->KvSet(q));
        return;
      }
      case kKvGet: {
        pb::KvGetRequest q;
        if (!Parse(bytes, &q)) return;
        q.set_timeout_ms(std::min<int64_t>(q.timeout_ms(), 1));
        return Check(c->KvGet(q));
      }
      case kReportProgress: {
        pb::ReportProgressRequest q;
        if (Parse(bytes, &q)) Check(c->ReportProgress(q));
        return;
      }
      case kReportEval: {
        pb::ReportEvalRequest q;
        if (Parse(bytes, &q)) Check(c->ReportEval(q));
        return;
      }
      case kCheckpointBegin: {
        pb::CheckpointBeginRequest q;
        if (Parse(bytes, &q)) Check(c->CheckpointBegin(q));
        return;
      }
      case kCheckpointCommit: {
        pb::CheckpointCommitRequest q;
        if (Parse(bytes, &q)) Check(c->CheckpointCommit(q));
        return;
      }
      case kReportFailure: {
        pb::ReportFailureRequest q;
        if (Parse(bytes, &q)) Check(c->ReportFailure(q));
        return;
      }
      case kTick: {
        sift::fuzz::Input in(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        now += absl::Milliseconds(in.Byte() | (in.Byte() << 8));
        c->Tick();
        return;
      }
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sift::fuzz::QuietProtobuf();
  const auto& scratch = sift::fuzz::ScratchDir::Get();
  scratch.Reset();
  sift::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  Harness h;
  sift::coordinator::CoordinatorOptions options;
  options.state_dir = scratch.File("state");
  options.clock = [&h] { return h.now; };
  auto c = Coordinator::Open(options);
  FUZZ_CHECK(c.ok(), c.status().ToString());
  h.c = *std::move(c);
  if (mode & 1) h.StartJob();
  for (absl::string_view part : sift::fuzz::SplitParts(in.Rest())) {
    if (part.empty()) continue;
    h.Run(static_cast<uint8_t>(part[0]) % kMethods, part.substr(1));
  }
  auto jobs = h.c->ListJobs(pb::ListJobsRequest());
  FUZZ_CHECK(jobs.ok(), jobs.status().ToString());
  for (const pb::JobInfo& job : jobs->jobs()) {
    auto spec = sift::ParseJobSpec(job.spec_yaml(), job.job_id());
    FUZZ_CHECK(spec.ok(), "a stored spec parses: " + spec.status().ToString());
  }
  return 0;
}

// Seeds for the standalone driver's --write-seeds: what a worker of the running job sends over
// a generation (heartbeats, rendezvous, progress, evaluation, a checkpoint, a failure), and a
// submit / list / logs / cancel session.
extern "C" void SiftFuzzWriteSeeds(const char* out_dir) {
  auto part = [](Method m, const google::protobuf::Message& q) {
    std::string out(1, static_cast<char>(m));
    out += q.SerializeAsString();
    return out;
  };
  pb::HeartbeatRequest hb;
  hb.set_member_id("$1");
  hb.set_running_job_id("job-1");
  hb.set_running_generation(1);
  pb::KvSetRequest set;
  set.set_key("job-1/g1/rank0");
  set.set_value("127.0.0.1:5000");
  pb::KvGetRequest get;
  get.add_keys("job-1/g1/rank0");
  pb::ReportProgressRequest progress;
  progress.set_job_id("job-1");
  progress.set_generation(1);
  progress.set_steps_per_epoch(3);
  progress.set_oracle_test_auc(0.9);
  pb::StepRecord* step = progress.add_steps();
  step->set_epoch(0);
  step->set_step(2);
  step->set_global_step(2);
  step->set_total_loss(0.7);
  step->set_samples(8);
  pb::ReportProgressRequest epoch_end = progress;
  epoch_end.clear_steps();
  epoch_end.set_epoch_end(true);
  epoch_end.set_epoch(0);
  pb::Metric* m = epoch_end.add_epoch_perf();
  m->set_name("samples/s");
  m->set_value(1000);
  pb::ReportEvalRequest eval;
  eval.set_job_id("job-1");
  eval.set_generation(1);
  eval.set_epoch(0);
  eval.set_split("test");
  for (float s : {0.1f, -2.0f, 3.0f}) eval.add_scores(s);
  for (float l : {1.0f, 0.0f, 1.0f}) eval.add_labels(l);
  eval.set_loss_sum(1.5);
  eval.set_last(true);
  pb::ReportEvalRequest eval_train = eval;
  eval_train.set_split("train");
  pb::CheckpointBeginRequest begin;
  begin.set_job_id("job-1");
  begin.set_generation(1);
  begin.set_global_step(3);
  pb::CheckpointCommitRequest commit;
  commit.set_job_id("job-1");
  commit.set_generation(1);
  commit.set_dir("/ckpt/job-1");
  commit.set_epochs_done(1);
  commit.set_global_step(3);
  pb::ReportFailureRequest failure;
  failure.set_job_id("job-1");
  failure.set_generation(1);
  failure.set_message("worker: out of memory");
  pb::SubmitJobRequest submit;
  submit.set_spec_yaml(std::string(kSpec) + "name: second\n");
  submit.set_source_name("second.yaml");
  pb::GetJobRequest get_job;
  get_job.set_job_id("job-1");
  pb::GetLogsRequest logs;
  logs.set_job_id("job-1");
  pb::CancelJobRequest cancel;
  cancel.set_job_id("job-1");
  pb::RegisterRequest worker;
  worker.set_role(pb::WORKER);
  worker.set_address("127.0.0.2");
  const std::string tick = std::string(1, static_cast<char>(kTick)) + "\x10\x27";  // 10 s
  const std::vector<std::vector<std::string>> seeds = {
      {"\x01" + part(kHeartbeat, hb), part(kKvSet, set), part(kKvGet, get),
       part(kReportProgress, progress), part(kReportProgress, epoch_end), part(kReportEval, eval),
       part(kReportEval, eval_train), part(kCheckpointBegin, begin),
       part(kCheckpointCommit, commit), part(kGetJob, get_job)},
      {"\x01" + part(kReportFailure, failure), part(kGetLogs, logs), tick, part(kRegister, worker),
       part(kHeartbeat, hb)},
      {std::string(1, '\0') + part(kSubmitJob, submit), part(kListJobs, pb::ListJobsRequest()),
       part(kCancelJob, cancel), part(kGetLogs, logs)},
      {"\x01" + tick, tick, part(kListJobs, pb::ListJobsRequest())},
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    sift::fuzz::WriteFile(std::string(out_dir) + "/requests-" + std::to_string(i),
                          sift::fuzz::JoinParts(seeds[i]));
  }
}
