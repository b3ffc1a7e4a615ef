// sift local: the all-in-one launcher (architecture.md, "all-in-one") — a coordinator, S embedding
// servers and W workers as child processes on loopback (cli/local_cluster.h), one job submitted
// to them, progress while it runs, the final table, and no process left behind (also on Ctrl-C,
// SIGTERM, or a crash of a child, which is restarted up to --max-restarts times).
// Exit codes: 0 the job COMPLETED; 1 it failed, was cancelled, or the cluster could not be kept
// up; 2 usage error or bad job spec; 130 / 143 interrupted by SIGINT / SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/exit_code.h"
#include "cli/job_client.h"
#include "cli/job_view.h"
#include "cli/local_cluster.h"
#include "cli/run_security.h"
#include "common/data/dataset.h"
#include "common/data/synthetic.h"
#include "common/dir_lock.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/subprocess.h"
#include "common/thread_pool.h"

namespace sift::cli {
namespace {

constexpr char kDefaultDataset[] = "out/local/tiny";
constexpr char kWorkDirMarker[] = ".sift-local";
constexpr char kWorkDirLock[] = ".sift-local.lock";

struct LocalFlags {
  std::string spec_path;  // "" = the embedded default job
  std::string dataset;
  std::string preset;  // generate a missing dataset with this `sift data gen` preset
  int servers = 0;     // 0 = the default's 2, or the spec's
  int workers = 0;     // 0 = the default's 1, or the spec's
  std::string work_dir;
  int max_restarts = 3;
  int server_threads = 0;  // 0 = automatic
  int worker_threads = 0;  // 0 = the spec's threads_per_worker, else automatic
  std::string cluster_file;
  std::string prometheus_targets;
  std::string progress = "auto";
  bool secure = false;
};

// The signal that asked us to stop (0 = none). Set by the handler, read by the main loop.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void OnStopSignal(int sig) { g_stop_signal.store(sig); }

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a sleeping wait wakes up
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

bool Interrupted() { return g_stop_signal.load() != 0; }

Status InterruptedStatus(const std::string& what) {
  const int sig = g_stop_signal.load();
  return WithExitCode(absl::CancelledError(absl::StrCat(
                          "interrupted by ", sig == SIGINT ? "SIGINT" : "SIGTERM", "; ", what)),
                      128 + sig);
}

std::string SelfBinary() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/proc/self/exe") : p.string();
}

// The embedded default: SIM on the tiny preset, 3 epochs of batch 2048, synchronous (staleness
// 0, so the result equals single-process training), seed 1, a checkpoint every epoch.
JobSpec DefaultJob(const std::string& dataset, const std::string& work_dir) {
  JobSpec spec;
  spec.name = "local";
  spec.dataset = dataset;
  spec.model.type = "sim";
  spec.training.epochs = 3;
  spec.training.batch_size = 2048;
  spec.training.staleness = 0;
  spec.training.seed = 1;
  spec.cluster.servers = 2;
  spec.cluster.workers = 1;
  spec.checkpoint.dir = JoinPath(work_dir, "checkpoints");
  return spec;
}

// OK when `dir` may be a work directory: absent, empty (but for the lock file), or one a
// previous `sift local` used (marked). Refuses anything else, before anything is written there.
Status CheckWorkDir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return absl::OkStatus();
  if (PathExists(JoinPath(dir, kWorkDirMarker))) return absl::OkStatus();
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename() != kWorkDirLock) {
      return WithExitCode(absl::InvalidArgumentError(
                              absl::StrCat("--work-dir ", dir,
                                           " exists, is not empty and was not made by sift local; "
                                           "choose another directory")),
                          kExitUsage);
    }
  }
  return absl::OkStatus();
}

// Makes `dir` a fresh work directory (CheckWorkDir first): a previous run's subdirectories are
// cleared. REQUIRES: this process holds the directory's lock.
Status PrepareWorkDir(const std::string& dir) {
  SIFT_RETURN_IF_ERROR(CheckWorkDir(dir));
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) {
    for (const char* sub :
         {"state", "snapshots", "checkpoints", "logs", "ports", "results", "security"}) {
      std::filesystem::remove_all(JoinPath(dir, sub), ec);
      if (ec) return absl::InternalError(absl::StrCat(JoinPath(dir, sub), ": ", ec.message()));
    }
  }
  SIFT_RETURN_IF_ERROR(MakeDirs(JoinPath(dir, "logs")));
  return WriteFileAtomic(JoinPath(dir, kWorkDirMarker), "sift local work directory\n");
}

// `sift data gen --preset PRESET --seed 1 --out DIR` as a child, unless DIR already is a dataset.
Status EnsureDataset(const std::string& binary, const std::string& dir, const std::string& preset,
                     const std::string& log_dir) {
  if (PathExists(JoinPath(dir, data::kFeatureSpecFile))) return absl::OkStatus();
  std::printf("sift local: generating the %s dataset in %s (sift data gen --preset %s --seed 1)\n",
              preset.c_str(), dir.c_str(), preset.c_str());
  std::fflush(stdout);
  SubprocessOptions o;
  o.argv = {binary, "data", "gen", "--preset", preset, "--seed", "1", "--out", dir};
  o.log_path = JoinPath(log_dir, "data-gen.log");
  SIFT_ASSIGN_OR_RETURN(Subprocess gen, Subprocess::Start(o));
  ExitInfo exit;
  while (!gen.Poll(&exit)) {
    if (Interrupted()) {
      gen.Stop(absl::Seconds(5));
      return InterruptedStatus("dataset generation stopped");
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (exit.ShellCode() != 0) {
    return absl::InternalError(
        absl::StrCat("sift data gen ", exit.Describe(), "; see ", o.log_path));
  }
  return absl::OkStatus();
}

// Threads: servers mostly wait while a synchronous worker computes, so they get a small share
// (1 each on a 2-core machine) and every worker gets the machine's CPUs split among workers.
void SplitThreads(const LocalFlags& f, JobSpec* spec, int* server_threads) {
  const int cpus = std::max(1, AvailableCpus());
  *server_threads =
      f.server_threads > 0 ? f.server_threads : std::max(1, cpus / (4 * spec->cluster.servers));
  if (f.worker_threads > 0) {
    spec->cluster.threads_per_worker = f.worker_threads;
  } else if (spec->cluster.threads_per_worker == 0) {
    spec->cluster.threads_per_worker = std::max(1, cpus / spec->cluster.workers);
  }
}

// Cancels the job (best effort, short deadline) so a restarted coordinator does not resume it.
void CancelQuietly(coordinator::CoordinatorClient* client, const std::string& job_id) {
  if (client == nullptr || job_id.empty()) return;
  (void)client->CancelJob(job_id);
}

Status RunLocal(const LocalFlags& f) {
  InstallStopHandlers();
  const std::string cwd = CurrentDirectory();
  const std::string work_dir = AbsolutePath(
      !f.work_dir.empty()
          ? f.work_dir
          : absl::StrCat("out/local/run-",
                         absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone())),
      cwd);

  // The job: a spec file (validated like `sift submit`) or the embedded default.
  JobSpec spec;
  const bool embedded = f.spec_path.empty();
  if (embedded) {
    spec = DefaultJob(AbsolutePath(f.dataset.empty() ? kDefaultDataset : f.dataset, cwd), work_dir);
  } else {
    SIFT_ASSIGN_OR_RETURN(spec, LoadJobSpecForSubmit(f.spec_path));
    if (!f.dataset.empty()) spec.dataset = AbsolutePath(f.dataset, cwd);
  }
  if (f.servers > 0) spec.cluster.servers = f.servers;
  if (f.workers > 0) spec.cluster.workers = f.workers;
  const std::string spec_source = absl::StrCat(embedded ? "the default job" : f.spec_path,
                                               f.workers > 0 ? " with --workers" : "");
  if (Status s = CheckClusterJob(spec, spec_source); !s.ok()) {
    return WithExitCode(s, kExitUsage);  // before any process starts
  }
  if (spec.results_dir.empty()) spec.results_dir = JoinPath(work_dir, "results");
  // The coordinator follows no symbolic link below its roots: name the real directories.
  for (std::string* path :
       {&spec.results_dir, &spec.checkpoint.dir, &spec.checkpoint.resume_from}) {
    std::error_code ec;
    if (path->empty()) continue;
    const std::filesystem::path real = std::filesystem::weakly_canonical(*path, ec);
    if (!ec) *path = real.string();
  }
  int server_threads = 1;
  SplitThreads(f, &spec, &server_threads);
  // A dataset is generated only when asked (--preset), or for the default job's own path;
  // anything else missing (a typo) is an error before anything starts.
  const std::string preset = !f.preset.empty()               ? f.preset
                             : embedded && f.dataset.empty() ? std::string("tiny")
                                                             : std::string();
  if (!f.preset.empty()) {
    if (StatusOr<data::SyntheticOptions> p = data::PresetOptions(f.preset); !p.ok()) {
      return WithExitCode(Annotate(p.status(), "--preset"), kExitUsage);
    }
  }
  if (preset.empty() && !PathExists(spec.dataset)) {
    return WithExitCode(
        absl::NotFoundError(
            absl::StrCat(f.dataset.empty() ? absl::StrCat(f.spec_path, ": dataset ") : "--dataset ",
                         spec.dataset,
                         " does not exist (pass --preset tiny to generate a synthetic one there)")),
        kExitUsage);
  }
  // One `sift local` per work directory: a second one would delete the first one's logs and
  // write the same checkpoint and snapshot names. Held until this run ends (or dies).
  SIFT_RETURN_IF_ERROR(CheckWorkDir(work_dir));
  StatusOr<DirLock> work_lock = DirLock::Acquire(work_dir, "sift local", kWorkDirLock);
  if (!work_lock.ok()) {
    return WithExitCode(Status(work_lock.status().code(),
                               absl::StrCat("--work-dir ", work_lock.status().message())),
                        kExitUsage);
  }
  SIFT_RETURN_IF_ERROR(PrepareWorkDir(work_dir));
  const std::string binary = SelfBinary();
  if (!preset.empty()) {
    SIFT_RETURN_IF_ERROR(EnsureDataset(binary, spec.dataset, preset, JoinPath(work_dir, "logs")));
  }

  LocalClusterOptions o;
  o.binary = binary;
  o.work_dir = work_dir;
  o.servers = spec.cluster.servers;
  o.workers = spec.cluster.workers;
  o.server_threads = server_threads;
  o.worker_threads = -1;  // the job's cluster.threads_per_worker, set above
  o.max_restarts = f.max_restarts;
  o.cluster_file = AbsolutePath(f.cluster_file, cwd);
  o.prometheus_targets = AbsolutePath(f.prometheus_targets, cwd);
  o.interrupted = Interrupted;
  SecurityOptions client_security;
  if (f.secure) {
    SIFT_ASSIGN_OR_RETURN(RunSecurity sec,
                          MakeRunSecurity(JoinPath(work_dir, "security"), o.servers, o.workers));
    o.security_dir = sec.dir;
    o.tokens_file = sec.tokens_file;
    client_security = sec.client;
    std::printf(
        "sift local: security on: TLS and member certificates of a CA made for this run, an "
        "admin token for this command (%s)\n",
        sec.dir.c_str());
  }
  std::printf(
      "sift local: starting a coordinator, %d embedding server(s) (%d thread(s) each) and %d "
      "worker(s) (%d thread(s) each); logs in %s/logs\n",
      o.servers, server_threads, o.workers, spec.cluster.threads_per_worker, work_dir.c_str());
  std::fflush(stdout);
  StatusOr<std::unique_ptr<LocalCluster>> started = LocalCluster::Start(o);
  if (!started.ok()) {
    if (Interrupted()) return InterruptedStatus("cluster stopped");
    return started.status();
  }
  std::unique_ptr<LocalCluster> cluster = std::move(*started);

  coordinator::CoordinatorClientOptions co;
  co.address = cluster->coordinator_address();
  co.rpc_timeout = absl::Seconds(10);
  co.security = client_security;
  SIFT_ASSIGN_OR_RETURN(auto client, coordinator::CoordinatorClient::Connect(co));
  const std::string source = embedded ? "the embedded default job" : f.spec_path;
  StatusOr<std::string> job_id = client->SubmitJob(JobSpecToYaml(spec), source);
  if (!job_id.ok()) return CoordinatorCallError(job_id.status());
  std::printf("sift local: coordinator %s, job %s (%s on %s)\n", co.address.c_str(),
              job_id->c_str(), spec.model.type.c_str(), spec.dataset.c_str());
  std::fflush(stdout);

  const bool live = f.progress == "on" || (f.progress == "auto" && ::isatty(STDOUT_FILENO) != 0);
  JobProgress progress(stdout, live);
  absl::Time failing_since = absl::InfiniteFuture();
  pb::JobInfo job;
  while (true) {
    if (Interrupted()) {
      progress.Finish();
      CancelQuietly(client.get(), *job_id);
      cluster->Stop(absl::Seconds(5));
      return InterruptedStatus(absl::StrCat("job ", *job_id, " cancelled, cluster stopped"));
    }
    std::vector<std::string> events;
    Status supervised = cluster->Supervise(&events);
    for (const std::string& e : events) progress.Note(absl::StrCat("sift local: ", e));
    if (!supervised.ok()) {
      progress.Finish();
      if (Interrupted()) continue;  // handled at the top
      CancelQuietly(client.get(), *job_id);
      cluster->Stop(absl::Seconds(5));
      return Annotate(supervised, absl::StrCat("job ", *job_id, " cancelled, cluster stopped"));
    }
    StatusOr<pb::JobInfo> got = client->GetJob(*job_id);
    if (got.ok()) {
      failing_since = absl::InfiniteFuture();
      job = *std::move(got);
      progress.Update(job);
      if (coordinator::IsFinished(job.state())) break;
    } else {
      // The coordinator may be restarting (Supervise brings it back); give up after a minute.
      if (failing_since == absl::InfiniteFuture()) failing_since = absl::Now();
      if (absl::Now() - failing_since > absl::Minutes(1)) {
        progress.Finish();
        cluster->Stop(absl::Seconds(5));
        return Annotate(got.status(), "the coordinator stopped answering; cluster stopped");
      }
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
  progress.Finish();
  cluster->Stop(absl::Seconds(5));
  std::printf("\n%s", FormatFinalReport(job).c_str());
  std::printf("  work dir   %s (logs in %s/logs)\n", work_dir.c_str(), work_dir.c_str());
  std::fflush(stdout);
  return JobOutcome(job);
}

}  // namespace

void AddLocal(CLI::App* app, Action* action) {
  auto f = std::make_shared<LocalFlags>();
  CLI::App* cmd = app->add_subcommand(
      "local",
      "All-in-one: a coordinator, embedding servers and workers on this machine run one job; "
      "progress, results, then every process stops");
  cmd->add_option("JOB.yaml", f->spec_path,
                  "Job spec (default: the embedded job: SIM, tiny preset, 3 epochs, batch 2048, "
                  "staleness 0, seed 1)");
  cmd->add_option("--dataset", f->dataset,
                  "Dataset directory (overrides the spec's); it must exist, unless --preset is "
                  "given (the default job's own, out/local/tiny, is generated when missing)");
  cmd->add_option("--preset", f->preset,
                  "Generate the dataset when it is missing: sift data gen --preset NAME --seed 1 "
                  "(tiny, small, ...)");
  cmd->add_option("--servers", f->servers,
                  "Embedding servers (default: 2, or the spec's cluster.servers)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--workers", f->workers, "Workers (default: 1, or the spec's cluster.workers)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--work-dir", f->work_dir,
                  "State, snapshots, checkpoints, results and logs of this run (default: "
                  "out/local/run-<timestamp>); a previous sift local directory is reused");
  cmd->add_option("--max-restarts", f->max_restarts,
                  "Restarts of each child that exits unexpectedly, before giving up")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--server-threads", f->server_threads,
                  "Threads per embedding server (0: CPUs / (4 x servers), at least 1)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--worker-threads", f->worker_threads,
                  "Threads per worker (0: the spec's cluster.threads_per_worker, else CPUs / "
                  "workers)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--cluster-file", f->cluster_file,
                  "Write the coordinator address and every child's role, index, pid, ports and "
                  "metrics address here (JSON, rewritten on every restart)");
  cmd->add_option("--prometheus-targets", f->prometheus_targets,
                  "Write a Prometheus file_sd JSON of every child's /metrics here");
  cmd->add_option("--progress", f->progress,
                  "Live progress line: auto (stdout is a terminal), on, off (one line per epoch "
                  "and state change)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--secure", f->secure,
                "Security on: TLS with member certificates of a CA made for this run and an admin "
                "token for this command (in <work-dir>/security); off by default (every process "
                "listens on 127.0.0.1 only)");
  cmd->footer(
      "Exit codes: 0 the job COMPLETED; 1 it FAILED or was CANCELLED, or a child kept crashing "
      "(beyond --max-restarts); 2 usage error or bad job spec; 130/143 interrupted by "
      "SIGINT/SIGTERM (the job is cancelled and every child stopped).");
  cmd->callback([f, action] { *action = [f] { return RunLocal(*f); }; });
}

}  // namespace sift::cli
