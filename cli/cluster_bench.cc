#include "cli/cluster_bench.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cli/exit_code.h"
#include "cli/job_client.h"
#include "cli/local_cluster.h"
#include "cli/run_security.h"
#include "common/auc.h"
#include "common/file_util.h"
#include "common/http_client.h"
#include "common/job_spec.h"
#include "common/thread_pool.h"
#include "server/coordinator/client.h"
#include "worker/collectives.h"
#include "worker/distributed_worker.h"
#include "worker/embedding_client.h"

namespace sift::cli {
namespace {

namespace pb = ::sift::coordinator::pb;
using worker::PhaseTimes;

Status UsageError(const std::string& message) {
  return WithExitCode(absl::InvalidArgumentError(message), kExitUsage);
}

Status ValidateOptions(const ClusterBenchOptions& o) {
  if (o.dataset.empty()) return UsageError("--dataset is required");
  if (!PathExists(o.dataset)) {
    return WithExitCode(
        absl::NotFoundError(absl::StrCat("--dataset ", o.dataset, " does not exist")), kExitUsage);
  }
  if (o.batch_size < 1)
    return UsageError(absl::StrCat("--batch-size must be >= 1, got ", o.batch_size));
  if (o.steps < 1) return UsageError(absl::StrCat("--steps must be >= 1, got ", o.steps));
  if (o.threads < 0) return UsageError(absl::StrCat("--threads must be >= 0, got ", o.threads));
  if (o.server_threads < 1) {
    return UsageError(absl::StrCat("--server-threads must be >= 1, got ", o.server_threads));
  }
  if (o.repeats < 1) return UsageError(absl::StrCat("--repeats must be >= 1, got ", o.repeats));
  if (o.staleness.empty()) return UsageError("--staleness needs at least one value");
  if (o.servers < 1 || o.workers < 1) {
    return UsageError(
        absl::StrCat("--servers and --workers must be >= 1, got ", o.servers, " and ", o.workers));
  }
  if (o.batch_size % o.workers != 0) {
    return UsageError(absl::StrCat("--batch-size ", o.batch_size,
                                   " is the global batch: it must "
                                   "be a multiple of --workers ",
                                   o.workers));
  }
  if (o.compare_sparse_update && o.workers < 2) {
    return UsageError("--compare-sparse-update needs --workers >= 2 (one worker has one push)");
  }
  for (int64_t k : o.staleness) {
    if (k < 0) return UsageError(absl::StrCat("--staleness values must be >= 0, got ", k));
  }
  return absl::OkStatus();
}

// The job both ways run: 1 epoch of warm-up + measured steps on the cluster's servers and workers,
// evaluation kept to one train batch (the test split is evaluated in full), no periodic
// checkpoints (a cluster job still writes its final model, after the measured epoch).
JobSpec BenchJob(const ClusterBenchOptions& o, int threads, int64_t staleness,
                 const std::string& sparse_update = "step") {
  JobSpec spec;
  spec.name = absl::StrCat("bench-cluster-k", staleness, "-", sparse_update);
  spec.dataset = o.dataset;
  spec.model.type = o.model;
  spec.training.epochs = 1;
  spec.training.batch_size = o.batch_size;
  spec.training.staleness = staleness;
  spec.training.seed = o.seed;
  spec.training.train_eval_samples = o.batch_size;
  spec.training.max_steps_per_epoch = kClusterBenchWarmupSteps + o.steps;
  spec.training.sparse_update = sparse_update;
  spec.cluster.servers = o.servers;
  spec.cluster.workers = o.workers;
  spec.cluster.threads_per_worker = threads;
  return spec;
}

// The in-process env: world 1, no logs, AUC computed here, no checkpoints.
class QuietLocalEnv : public worker::TrainerEnv {
 public:
  QuietLocalEnv() : collectives_(worker::CreateLocalCollectives()) {}
  worker::Collectives* collectives() override { return collectives_.get(); }
  Status CheckAbort() override { return absl::OkStatus(); }
  Status OnSetup(double) override { return absl::OkStatus(); }
  Status OnStep(const worker::StepReport&) override { return absl::OkStatus(); }
  Status OnEpochTrained(int64_t, const DllMetrics&, double) override { return absl::OkStatus(); }
  StatusOr<worker::EvalResult> OnEvaluation(int64_t, data::Split,
                                            const worker::EvalPredictions& p) override {
    worker::EvalResult r;
    r.auc = ExactAuc(absl::MakeConstSpan(p.scores), absl::MakeConstSpan(p.labels));
    r.loss = p.scores.empty() ? 0 : p.loss_sum / static_cast<double>(p.scores.size());
    return r;
  }
  std::string SnapshotName(int64_t) override { return ""; }
  Status CheckpointBegin(int64_t) override { return absl::OkStatus(); }
  Status CheckpointFailed(int64_t, const Status&) override { return absl::OkStatus(); }
  Status CheckpointCommit(const std::string&, int64_t, int64_t) override {
    return absl::OkStatus();
  }
  Status OnEpochEnd(const worker::EpochMetrics&, const DllMetrics&) override {
    return absl::OkStatus();
  }
  Status OnFinish(worker::RunMode, const worker::RunResult&, const DllMetrics&) override {
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<worker::Collectives> collectives_;
};

StatusOr<ClusterBenchRun> RunInProcess(const JobSpec& spec, int threads) {
  // The worker's own mapping of the spec (rank 0 of 1), then the tables in-process.
  pb::Assignment a;
  a.set_rank(0);
  a.set_world_size(1);
  a.add_servers("in-process");
  SIFT_ASSIGN_OR_RETURN(worker::TrainerOptions o,
                        worker::TrainerOptionsForAssignment(spec, a, threads));
  o.embedding_servers.clear();
  QuietLocalEnv env;
  SIFT_ASSIGN_OR_RETURN(worker::RunResult r,
                        worker::RunTrainerWithEnv(o, worker::RunMode::kTrain, &env));
  if (r.epochs.size() != 1) {
    return absl::InternalError(
        absl::StrCat("in-process run: ", r.epochs.size(), " epochs, want 1"));
  }
  const worker::EpochMetrics& e = r.epochs[0];
  ClusterBenchRun run;
  run.samples_per_s = e.perf.throughput;
  run.train_time_s = e.train_time_s;
  run.steps = e.steps;
  run.test_auc = e.test_auc;
  run.phases = r.phases;
  return run;
}

// The worker's /metrics port, from the cluster file LocalCluster writes.
StatusOr<int> WorkerMetricsPort(const std::string& cluster_file) {
  SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(cluster_file));
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object() && doc.contains("children") && doc["children"].is_array()) {
    for (const nlohmann::json& c : doc["children"]) {
      if (c.value("role", "") == "worker" && c.value("metrics_port", -1) > 0) {
        return c["metrics_port"].get<int>();
      }
    }
  }
  return absl::InternalError(absl::StrCat(cluster_file, ": no worker with a metrics_port"));
}

PhaseTimes Subtract(const PhaseTimes& a, const PhaseTimes& b) {
  PhaseTimes d = a;
  d.load -= b.load, d.dedup -= b.dedup, d.pull -= b.pull, d.forward -= b.forward;
  d.backward -= b.backward, d.allreduce -= b.allreduce, d.dense_opt -= b.dense_opt;
  d.push -= b.push;
  return d;
}

// A running local cluster of 1 coordinator, 1 server and 1 worker, and a client of it.
class BenchCluster {
 public:
  static StatusOr<std::unique_ptr<BenchCluster>> Start(const ClusterBenchOptions& o, int threads,
                                                       const std::string& work_dir) {
    auto bc = std::unique_ptr<BenchCluster>(new BenchCluster());
    bc->work_dir_ = work_dir;
    LocalClusterOptions lo;
    lo.binary = o.binary;
    lo.work_dir = work_dir;
    lo.servers = o.servers;
    lo.workers = o.workers;
    lo.server_threads = o.server_threads;
    lo.worker_threads = threads;
    lo.max_restarts = 0;  // a child that exits ends the benchmark
    lo.cluster_file = JoinPath(work_dir, "cluster.json");
    coordinator::CoordinatorClientOptions co;
    if (o.tls) {
      SIFT_ASSIGN_OR_RETURN(RunSecurity sec,
                            MakeRunSecurity(JoinPath(work_dir, "security"), o.servers, o.workers));
      lo.security_dir = sec.dir;
      lo.tokens_file = sec.tokens_file;
      co.security = sec.client;
      // The servers' Stats (push bytes) with a worker's certificate.
      bc->servers_security_.tls_dir = JoinPath(sec.dir, "worker-0");
    }
    SIFT_ASSIGN_OR_RETURN(bc->cluster_, LocalCluster::Start(lo));
    SIFT_ASSIGN_OR_RETURN(bc->metrics_port_, WorkerMetricsPort(lo.cluster_file));
    co.address = bc->cluster_->coordinator_address();
    co.rpc_timeout = absl::Seconds(10);
    SIFT_ASSIGN_OR_RETURN(bc->client_, coordinator::CoordinatorClient::Connect(co));
    return bc;
  }

  ~BenchCluster() {
    if (cluster_) cluster_->Stop(absl::Seconds(5));
  }

  // Submits `spec`, waits for it to finish, and reads its epoch's throughput from the
  // coordinator and the worker's phase seconds over the job from /metrics.
  StatusOr<ClusterBenchRun> Run(const JobSpec& spec) {
    SIFT_ASSIGN_OR_RETURN(PhaseTimes before, ScrapePhases());
    SIFT_ASSIGN_OR_RETURN(std::string job_id, client_->SubmitJob(JobSpecToYaml(spec), spec.name));
    pb::JobInfo job;
    while (true) {
      std::vector<std::string> events;
      Status s = cluster_->Supervise(&events);
      if (!s.ok()) return Annotate(s, LogsHint());
      SIFT_ASSIGN_OR_RETURN(job, client_->GetJob(job_id));
      if (coordinator::IsFinished(job.state())) break;
      absl::SleepFor(absl::Milliseconds(200));
    }
    if (job.state() != pb::COMPLETED || job.epochs_done_size() != 1) {
      return absl::AbortedError(
          absl::StrCat("cluster job ", job_id, " ", coordinator::JobStateName(job.state()),
                       " with ", job.epochs_done_size(), " epoch(s) done",
                       job.message().empty() ? "" : ": ", job.message(), "; ", LogsHint()));
    }
    SIFT_ASSIGN_OR_RETURN(PhaseTimes after, ScrapePhases());
    const pb::EpochResult& e = job.epochs_done(0);
    ClusterBenchRun run;
    run.samples_per_s = e.samples_per_second();
    run.train_time_s = e.train_time_s();
    run.steps = job.global_step();
    run.test_auc = e.test_auc();
    run.phases = Subtract(after, before);
    SIFT_ASSIGN_OR_RETURN(const uint64_t pushed, PushRequestBytes(job));
    run.push_bytes_per_step =
        run.steps > 0 ? static_cast<double>(pushed - push_bytes_) / static_cast<double>(run.steps)
                      : 0;
    push_bytes_ = pushed;
    return run;
  }

  void Stop() { cluster_->Stop(absl::Seconds(5)); }

 private:
  BenchCluster() = default;
  std::string LogsHint() const { return absl::StrCat("logs in ", work_dir_, "/logs"); }
  // Push request bytes the cluster's servers received since they started (Stats).
  StatusOr<uint64_t> PushRequestBytes(const pb::JobInfo& job) {
    if (servers_ == nullptr) {
      worker::EmbeddingClientOptions eo;
      eo.servers.assign(job.servers().begin(), job.servers().end());
      eo.security = servers_security_;
      eo.connect_timeout_s = 10;
      StatusOr<std::unique_ptr<worker::EmbeddingClient>> c = worker::EmbeddingClient::Connect(eo);
      if (!c.ok()) return Annotate(c.status(), "the servers' Stats (push bytes)");
      servers_ = std::move(*c);
    }
    SIFT_ASSIGN_OR_RETURN(std::vector<worker::pb::StatsResponse> stats, servers_->Stats());
    uint64_t total = 0;
    for (const worker::pb::StatsResponse& s : stats) total += s.push_request_bytes();
    return total;
  }
  StatusOr<PhaseTimes> ScrapePhases() {
    SIFT_ASSIGN_OR_RETURN(std::string text, HttpGet("127.0.0.1", metrics_port_, "/metrics"));
    StatusOr<PhaseTimes> p = ParseWorkerPhaseSeconds(text);
    if (!p.ok()) return Annotate(p.status(), absl::StrCat("worker /metrics :", metrics_port_));
    return p;
  }

  std::string work_dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<coordinator::CoordinatorClient> client_;
  int metrics_port_ = -1;
  SecurityOptions servers_security_;                  // plaintext, or a worker's certificate
  std::unique_ptr<worker::EmbeddingClient> servers_;  // Stats of the servers (made at first use)
  uint64_t push_bytes_ = 0;                           // Push request bytes after the last run
};

double Median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double LoadAverage1() {
  StatusOr<std::string> text = ReadFileToString("/proc/loadavg");
  double v = -1;
  if (text.ok() && !absl::SimpleAtod(text->substr(0, text->find(' ')), &v)) v = -1;
  return v;
}

StatusOr<std::string> MakeTempWorkDir() {
  std::string tmpl =
      JoinPath(std::filesystem::temp_directory_path().string(), "sift-bench-cluster-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  return tmpl;
}

void RemoveWorkDir(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

std::string Describe(const char* way, const ClusterBenchRun& r) {
  return absl::StrFormat("%s %.0f samples/s (%lld steps in %.2f s, test AUC %.4f)", way,
                         r.samples_per_s, static_cast<long long>(r.steps), r.train_time_s,
                         r.test_auc);
}

// Phase names and members, in the trainer's order.
const std::vector<std::pair<const char*, double PhaseTimes::*>>& PhaseFields() {
  static const auto* fields = new std::vector<std::pair<const char*, double PhaseTimes::*>>{
      {"load", &PhaseTimes::load},           {"dedup", &PhaseTimes::dedup},
      {"pull", &PhaseTimes::pull},           {"forward", &PhaseTimes::forward},
      {"backward", &PhaseTimes::backward},   {"allreduce", &PhaseTimes::allreduce},
      {"dense_opt", &PhaseTimes::dense_opt}, {"push", &PhaseTimes::push}};
  return *fields;
}

nlohmann::json RunJson(const ClusterBenchRun& r) {
  nlohmann::json phases = nlohmann::json::object();
  for (const auto& [name, field] : PhaseFields()) phases[name] = r.phases.*field;
  return {{"samples_per_s", r.samples_per_s}, {"push_bytes_per_step", r.push_bytes_per_step},
          {"train_time_s", r.train_time_s},   {"steps", r.steps},
          {"test_auc", r.test_auc},           {"phases_s", phases}};
}

}  // namespace

StatusOr<worker::PhaseTimes> ParseWorkerPhaseSeconds(const std::string& exposition) {
  constexpr absl::string_view kPrefix = "sift_worker_phase_seconds_total{";
  PhaseTimes p;
  std::vector<bool> seen(PhaseFields().size(), false);
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::ConsumePrefix(&line, kPrefix)) continue;
    const size_t close = line.find('}');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unterminated labels: ", line));
    }
    const absl::string_view labels = line.substr(0, close);
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(close + 1));
    for (size_t i = 0; i < PhaseFields().size(); ++i) {
      const auto& [name, field] = PhaseFields()[i];
      if (labels != absl::StrCat("phase=\"", name, "\"")) continue;
      double v = 0;
      if (!absl::SimpleAtod(value, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("sift_worker_phase_seconds_total{phase=\"",
                                                       name, "\"}: value '", value,
                                                       "' is not a number"));
      }
      p.*field += v;
      seen[i] = true;
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) {
      return absl::InvalidArgumentError(absl::StrCat("no sift_worker_phase_seconds_total{phase=\"",
                                                     PhaseFields()[i].first, "\"}"));
    }
  }
  return p;
}

StatusOr<ClusterBenchResult> RunClusterBenchmark(const ClusterBenchOptions& options) {
  ClusterBenchOptions o = options;
  SIFT_RETURN_IF_ERROR(ValidateOptions(o));
  o.dataset = AbsolutePath(o.dataset, CurrentDirectory());  // the children's cwd may differ
  ClusterBenchResult result;
  result.threads = o.threads > 0 ? o.threads : std::max(1, AvailableCpus());
  result.load_average_before = LoadAverage1();
  // The spec is checked once up front (the coordinator would reject it per job).
  SIFT_RETURN_IF_ERROR(
      ParseJobSpec(JobSpecToYaml(BenchJob(o, result.threads, o.staleness[0])), "bench job")
          .status());

  std::string work_dir;  // made with the cluster
  auto say = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };

  std::unique_ptr<BenchCluster> cluster;  // started before the first cluster run
  std::string tls_work_dir;
  std::unique_ptr<BenchCluster> tls_cluster;  // compare_tls: the secured one
  auto start = [&](bool tls, std::string* dir, std::unique_ptr<BenchCluster>* c) -> Status {
    if (*c != nullptr) return absl::OkStatus();
    SIFT_ASSIGN_OR_RETURN(*dir, MakeTempWorkDir());
    say(absl::StrCat("starting the cluster (", tls ? "mutual TLS; " : "plaintext; ",
                     "coordinator, ", o.servers, " embedding server(s) with ", o.server_threads,
                     " thread(s), ", o.workers, " worker(s) with ", result.threads,
                     " thread(s)) in ", *dir));
    ClusterBenchOptions co = o;
    co.tls = tls;
    StatusOr<std::unique_ptr<BenchCluster>> started = BenchCluster::Start(co, result.threads, *dir);
    if (!started.ok()) return Annotate(started.status(), absl::StrCat("logs in ", *dir, "/logs"));
    *c = std::move(*started);
    return absl::OkStatus();
  };
  auto run_cluster = [&](const JobSpec& spec) -> StatusOr<ClusterBenchRun> {
    SIFT_RETURN_IF_ERROR(start(o.tls, &work_dir, &cluster));
    return cluster->Run(spec);
  };
  auto run_tls_cluster = [&](const JobSpec& spec) -> StatusOr<ClusterBenchRun> {
    SIFT_RETURN_IF_ERROR(start(true, &tls_work_dir, &tls_cluster));
    return tls_cluster->Run(spec);
  };

  for (int64_t k : o.staleness) {
    ClusterBenchSeries s;
    s.staleness = k;
    result.series.push_back(s);
  }
  for (int round = 0; round < o.repeats; ++round) {
    for (ClusterBenchSeries& series : result.series) {
      const JobSpec spec = BenchJob(o, result.threads, series.staleness);
      ClusterBenchRound r;
      r.round = round;
      r.cluster_first = round % 2 == 1;
      const std::string label = absl::StrFormat("round %d/%d, k=%d:", round + 1, o.repeats,
                                                static_cast<int>(series.staleness));
      // compare_tls: the secured cluster right before the plaintext one (cluster first) or right
      // after it, so the two share their neighbourhood in time.
      auto tls_run = [&]() -> Status {
        if (!o.compare_tls) return absl::OkStatus();
        SIFT_ASSIGN_OR_RETURN(r.cluster_tls, run_tls_cluster(spec));
        say(absl::StrCat(label, " ", Describe("cluster+tls", r.cluster_tls)));
        return absl::OkStatus();
      };
      // compare_sparse_update: the per_rank job right after the step one (odd rounds) or right
      // before it (even rounds), on the same cluster.
      auto per_rank_run = [&]() -> Status {
        if (!o.compare_sparse_update) return absl::OkStatus();
        SIFT_ASSIGN_OR_RETURN(
            r.cluster_per_rank,
            run_cluster(BenchJob(o, result.threads, series.staleness, "per_rank")));
        say(absl::StrCat(label, " ", Describe("per_rank  ", r.cluster_per_rank)));
        return absl::OkStatus();
      };
      for (int i = 0; i < 2; ++i) {
        const bool cluster_now = (i == 0) == r.cluster_first;
        if (cluster_now && r.cluster_first) SIFT_RETURN_IF_ERROR(tls_run());
        if (cluster_now) {
          if (!r.cluster_first) SIFT_RETURN_IF_ERROR(per_rank_run());
          SIFT_ASSIGN_OR_RETURN(r.cluster, run_cluster(spec));
          say(absl::StrCat(label, " ", Describe("cluster   ", r.cluster)));
          if (r.cluster_first) SIFT_RETURN_IF_ERROR(per_rank_run());
          if (!r.cluster_first) SIFT_RETURN_IF_ERROR(tls_run());
        } else {
          StatusOr<ClusterBenchRun> in = RunInProcess(spec, result.threads);
          if (!in.ok()) {
            cluster.reset();  // its logs say nothing about this failure
            RemoveWorkDir(work_dir);
            return in.status();
          }
          r.in_process = *in;
          say(absl::StrCat(label, " ", Describe("in-process", r.in_process)));
          if (r.in_process.steps != kClusterBenchWarmupSteps + o.steps) {
            return absl::FailedPreconditionError(absl::StrCat(
                "an epoch of ", o.dataset, " holds ", r.in_process.steps, " batches of ",
                o.batch_size, ", fewer than the ", kClusterBenchWarmupSteps, " warm-up + ", o.steps,
                " measured steps; lower --steps or --batch-size"));
          }
        }
      }
      r.ratio = r.cluster.samples_per_s / r.in_process.samples_per_s;
      if (o.compare_tls) r.tls_ratio = r.cluster_tls.samples_per_s / r.cluster.samples_per_s;
      if (o.compare_sparse_update) {
        r.sparse_ratio = r.cluster.samples_per_s / r.cluster_per_rank.samples_per_s;
      }
      series.rounds.push_back(r);
    }
  }
  if (cluster != nullptr) cluster->Stop();
  cluster.reset();
  if (tls_cluster != nullptr) tls_cluster->Stop();
  tls_cluster.reset();
  RemoveWorkDir(tls_work_dir);

  for (ClusterBenchSeries& s : result.series) {
    std::vector<double> in, cl, ratio, tls, tls_ratio, per_rank, sparse_ratio;
    for (const ClusterBenchRound& r : s.rounds) {
      per_rank.push_back(r.cluster_per_rank.samples_per_s);
      sparse_ratio.push_back(r.sparse_ratio);
      in.push_back(r.in_process.samples_per_s);
      cl.push_back(r.cluster.samples_per_s);
      ratio.push_back(r.ratio);
      tls.push_back(r.cluster_tls.samples_per_s);
      tls_ratio.push_back(r.tls_ratio);
    }
    s.median_in_process = Median(in);
    s.median_cluster = Median(cl);
    s.median_ratio = Median(ratio);
    if (o.compare_tls) {
      s.median_cluster_tls = Median(tls);
      s.median_tls_ratio = Median(tls_ratio);
    }
    if (o.compare_sparse_update) {
      s.median_cluster_per_rank = Median(per_rank);
      s.median_sparse_ratio = Median(sparse_ratio);
    }
  }
  result.load_average_after = LoadAverage1();
  RemoveWorkDir(work_dir);
  return result;
}

std::string FormatClusterBench(const ClusterBenchOptions& o, const ClusterBenchResult& r) {
  std::string out;
  absl::StrAppendFormat(&out,
                        "  setup:      %s, batch %lld, 1 epoch of %lld warm-up + %lld measured "
                        "steps, %d thread(s) (each worker and in-process), %d server(s) of %d "
                        "thread(s), %d worker(s), cluster %s\n",
                        o.model, static_cast<long long>(o.batch_size),
                        static_cast<long long>(kClusterBenchWarmupSteps),
                        static_cast<long long>(o.steps), r.threads, o.servers, o.server_threads,
                        o.workers, o.tls ? "with mutual TLS" : "plaintext");
  absl::StrAppendFormat(&out, "  load avg:   %.2f before, %.2f after (1 min)\n",
                        r.load_average_before, r.load_average_after);
  for (const ClusterBenchSeries& s : r.series) {
    absl::StrAppendFormat(&out, "\n  staleness k=%d\n", static_cast<int>(s.staleness));
    absl::StrAppendFormat(&out, "  %-6s %-11s %15s %15s %8s\n", "round", "order", "in-process/s",
                          "cluster/s", "ratio");
    for (const ClusterBenchRound& rd : s.rounds) {
      absl::StrAppendFormat(&out, "  %-6d %-11s %15.0f %15.0f %8.3f\n", rd.round + 1,
                            rd.cluster_first ? "cluster 1st" : "in-proc 1st",
                            rd.in_process.samples_per_s, rd.cluster.samples_per_s, rd.ratio);
    }
    absl::StrAppendFormat(&out, "  %-18s %15.0f %15.0f %8.3f  (target >= %.1f: %s)\n", "median",
                          s.median_in_process, s.median_cluster, s.median_ratio,
                          kClusterOverheadTarget,
                          s.median_ratio >= kClusterOverheadTarget ? "met" : "NOT met");
    if (o.compare_tls) {
      absl::StrAppendFormat(&out, "  %-6s %15s %15s %8s\n", "round", "cluster/s", "cluster+tls/s",
                            "tls/plain");
      for (const ClusterBenchRound& rd : s.rounds) {
        absl::StrAppendFormat(&out, "  %-6d %15.0f %15.0f %8.3f\n", rd.round + 1,
                              rd.cluster.samples_per_s, rd.cluster_tls.samples_per_s, rd.tls_ratio);
      }
      absl::StrAppendFormat(&out, "  %-6s %15.0f %15.0f %8.3f  (target >= %.2f: %s)\n", "median",
                            s.median_cluster, s.median_cluster_tls, s.median_tls_ratio,
                            kClusterTlsTarget,
                            s.median_tls_ratio >= kClusterTlsTarget ? "met" : "NOT met");
    }
    if (o.compare_sparse_update) {
      absl::StrAppendFormat(&out, "  %-6s %15s %15s %10s %14s %14s\n", "round", "step/s",
                            "per_rank/s", "step/pr", "push B/step", "pr push B/step");
      for (const ClusterBenchRound& rd : s.rounds) {
        absl::StrAppendFormat(&out, "  %-6d %15.0f %15.0f %10.3f %14.0f %14.0f\n", rd.round + 1,
                              rd.cluster.samples_per_s, rd.cluster_per_rank.samples_per_s,
                              rd.sparse_ratio, rd.cluster.push_bytes_per_step,
                              rd.cluster_per_rank.push_bytes_per_step);
      }
      absl::StrAppendFormat(&out, "  %-6s %15.0f %15.0f %10.3f  (target >= %.2f: %s)\n", "median",
                            s.median_cluster, s.median_cluster_per_rank, s.median_sparse_ratio,
                            kSparseStepTarget,
                            s.median_sparse_ratio >= kSparseStepTarget ? "met" : "NOT met");
    }
    // Where the time goes: ms per step of each phase, summed over the rounds.
    PhaseTimes in, cl;
    int64_t in_steps = 0, cl_steps = 0;
    double in_wall = 0, cl_wall = 0;
    for (const ClusterBenchRound& rd : s.rounds) {
      in.Add(rd.in_process.phases), cl.Add(rd.cluster.phases);
      in_steps += rd.in_process.steps, cl_steps += rd.cluster.steps;
      in_wall += rd.in_process.train_time_s, cl_wall += rd.cluster.train_time_s;
    }
    absl::StrAppendFormat(&out, "  ms/step    %10s %10s %10s\n", "in-process", "cluster", "delta");
    auto row = [&](const char* name, double a, double b) {
      const double ma = in_steps > 0 ? 1e3 * a / static_cast<double>(in_steps) : 0;
      const double mb = cl_steps > 0 ? 1e3 * b / static_cast<double>(cl_steps) : 0;
      absl::StrAppendFormat(&out, "  %-10s %10.1f %10.1f %+10.1f\n", name, ma, mb, mb - ma);
    };
    for (const auto& [name, field] : PhaseFields()) row(name, in.*field, cl.*field);
    row("sum", in.Total(), cl.Total());
    row("step wall", in_wall, cl_wall);
    if (s.staleness > 0) {
      out +=
          "  (k >= 1: load, dedup and pull run on the prefetch thread, overlapped with the\n"
          "   step's compute, so the phases can add up to more than the step wall time)\n";
    }
  }
  return out;
}

nlohmann::json ClusterBenchToJson(const ClusterBenchOptions& o, const ClusterBenchResult& r) {
  nlohmann::json series = nlohmann::json::array();
  for (const ClusterBenchSeries& s : r.series) {
    nlohmann::json rounds = nlohmann::json::array();
    for (const ClusterBenchRound& rd : s.rounds) {
      rounds.push_back({{"round", rd.round},
                        {"order", rd.cluster_first ? "cluster_first" : "in_process_first"},
                        {"in_process", RunJson(rd.in_process)},
                        {"cluster", RunJson(rd.cluster)},
                        {"ratio", rd.ratio}});
      if (o.compare_tls) {
        rounds.back()["cluster_tls"] = RunJson(rd.cluster_tls);
        rounds.back()["tls_ratio"] = rd.tls_ratio;
      }
      if (o.compare_sparse_update) {
        rounds.back()["cluster_per_rank"] = RunJson(rd.cluster_per_rank);
        rounds.back()["sparse_ratio"] = rd.sparse_ratio;
      }
    }
    series.push_back({{"staleness", s.staleness},
                      {"rounds", rounds},
                      {"median_in_process_samples_per_s", s.median_in_process},
                      {"median_cluster_samples_per_s", s.median_cluster},
                      {"median_ratio", s.median_ratio},
                      {"target_ratio", kClusterOverheadTarget},
                      {"target_met", s.median_ratio >= kClusterOverheadTarget}});
    if (o.compare_tls) {
      series.back()["median_cluster_tls_samples_per_s"] = s.median_cluster_tls;
      series.back()["median_tls_ratio"] = s.median_tls_ratio;
      series.back()["tls_target_ratio"] = kClusterTlsTarget;
    }
    if (o.compare_sparse_update) {
      series.back()["median_cluster_per_rank_samples_per_s"] = s.median_cluster_per_rank;
      series.back()["median_sparse_ratio"] = s.median_sparse_ratio;
      series.back()["sparse_target_ratio"] = kSparseStepTarget;
    }
  }
  return {{"benchmark", "cluster"},
          {"dataset", o.dataset},
          {"model", o.model},
          {"batch_size", o.batch_size},
          {"warmup_steps", kClusterBenchWarmupSteps},
          {"steps", o.steps},
          {"threads", r.threads},
          {"server_threads", o.server_threads},
          {"tls", o.tls},
          {"compare_tls", o.compare_tls},
          {"servers", o.servers},
          {"workers", o.workers},
          {"compare_sparse_update", o.compare_sparse_update},
          {"repeats", o.repeats},
          {"load_average_before", r.load_average_before},
          {"load_average_after", r.load_average_after},
          {"series", series}};
}

}  // namespace sift::cli
