// sift worker: a cluster worker (worker/distributed_worker.h). Registers with the coordinator,
// trains the job generations it is assigned, and runs until SIGINT or SIGTERM, which abandon the
// current run (at its next step boundary) and exit 0.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/exit_code.h"
#include "cli/security_flags.h"
#include "cli/stop_signals.h"
#include "common/file_util.h"
#include "server/coordinator/client.h"
#include "worker/distributed_worker.h"

namespace sift::cli {
namespace {

struct WorkerFlags {
  worker::DistributedWorkerOptions options;
  std::string coordinator;
  std::string port_file;
  double register_timeout_s = 60;
};

Status RunWorker(WorkerFlags flags) {
  worker::DistributedWorkerOptions& o = flags.options;
  o.coordinator = coordinator::ResolveCoordinatorAddress(flags.coordinator);
  o.register_timeout = absl::Seconds(flags.register_timeout_s);
  o.version = SIFT_VERSION;
  StopSignals stop;  // before any thread starts

  SIFT_ASSIGN_OR_RETURN(auto worker, worker::DistributedWorker::Start(o));
  std::printf("sift worker: registered with %s as %s, host %s, metrics %s\n", o.coordinator.c_str(),
              worker->member_id().c_str(), o.advertise_host.c_str(),
              worker->metrics_port() >= 0
                  ? absl::StrCat(o.advertise_host, ":", worker->metrics_port(), "/metrics").c_str()
                  : "off");
  std::fflush(stdout);
  if (!flags.port_file.empty()) {
    SIFT_RETURN_IF_ERROR(
        WriteFileAtomic(flags.port_file, absl::StrCat(worker->metrics_port(), "\n")));
  }
  std::future<Status> serving = std::async(std::launch::async, [w = worker.get(), &stop] {
    Status s = w->Serve();
    if (!w->stopping()) stop.Finish();  // --exit-after-jobs: wake the main thread
    return s;
  });
  const char* sig = stop.Wait();
  std::printf("sift worker: %s, stopping\n", sig);
  std::fflush(stdout);
  worker->Stop();
  // A run ends at its next step boundary; a collective blocked on a silent peer may take until
  // its timeout — do not wait that long to exit.
  if (serving.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::printf("sift worker: the run did not stop within 20 s; exiting\n");
    std::fflush(stdout);
    std::_Exit(0);
  }
  SIFT_RETURN_IF_ERROR(serving.get());
  if (worker->failed_jobs() > 0) {
    return WithExitCode(
        absl::AbortedError(absl::StrCat(worker->failed_jobs(), " of ", worker->finished_jobs(),
                                        " job(s) FAILED or were CANCELLED")),
        kExitWorkerJobFailed);
  }
  return absl::OkStatus();
}

}  // namespace

void AddWorker(CLI::App* app, Action* action) {
  auto flags = std::make_shared<WorkerFlags>();
  worker::DistributedWorkerOptions& o = flags->options;
  CLI::App* cmd = app->add_subcommand(
      "worker", "Cluster worker: register with the coordinator and train the jobs it assigns");
  cmd->add_option("--coordinator", flags->coordinator,
                  "Coordinator host:port (default: $SIFT_COORDINATOR, else 127.0.0.1:7070)");
  cmd->add_option("--advertise-host", o.advertise_host,
                  "Address peers reach this worker at (Gloo, /metrics)")
      ->envname("SIFT_ADVERTISE_HOST")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "Backend and loader threads (-1: the job's cluster.threads_per_worker; 0: all)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1024));
  cmd->add_option("--cpu-isa", o.cpu_isa,
                  "cpu backend kernels: auto (the widest vector ISA this CPU supports), generic, "
                  "avx2 or avx512")
      ->envname("SIFT_CPU_ISA")
      ->check(CLI::IsMember({"auto", "generic", "avx2", "avx512"}))
      ->capture_default_str();
  cmd->add_option("--metrics-port", o.metrics_port,
                  "Prometheus /metrics port (0: any free port; -1: off)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  cmd->add_option("--port-file", flags->port_file,
                  "Write '<metrics-port>' here once registered (for launchers and tests)");
  cmd->add_option("--register-timeout", flags->register_timeout_s,
                  "Seconds to keep trying to register with the coordinator")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--exit-after-jobs", o.exit_after_jobs,
                  "Exit once this many jobs this worker trained in have finished: 0 if they all "
                  "COMPLETED, 3 if one FAILED or was CANCELLED; 0: serve until SIGINT/SIGTERM. "
                  "For a Kubernetes Job or a Slurm step that should end with the training job")
      ->envname("SIFT_EXIT_AFTER_JOBS")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--collective-timeout", o.collective_timeout_s,
                  "Seconds the Gloo rendezvous and each collective may wait for the peers")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  // Tests only (hidden from --help): a rank that dies between its peers' pushes and its own.
  cmd->add_option("--fault-exit-before-push", o.fault_exit_before_push_step,
                  "Exit with code 3 just before pushing this global step (fault injection)")
      ->group("");
  AddSecurityFlags(cmd, &o.security, SecurityFlagsFor::kMember);
  cmd->callback([flags, action] { *action = [flags] { return RunWorker(*flags); }; });
}

}  // namespace sift::cli
