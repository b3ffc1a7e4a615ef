// sift coordinator: runs the job queue and cluster membership (server/coordinator/service.h) until
// SIGINT or SIGTERM, then shuts down gracefully and exits 0. Its state lives in --state-dir; a
// restarted coordinator resumes from there.
#include <signal.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/grpc_server_flags.h"
#include "cli/security_flags.h"
#include "cli/stop_signals.h"
#include "common/file_util.h"
#include "common/grpc_security.h"
#include "common/job_spec.h"
#include "server/coordinator/client.h"
#include "server/coordinator/service.h"

namespace sift::cli {
namespace {

struct CoordinatorFlags {
  coordinator::CoordinatorServerOptions options;
  std::string port_file;
};

Status RunCoordinator(CoordinatorFlags flags) {
  if (flags.options.coordinator.state_dir.empty()) {
    return absl::InvalidArgumentError("--state-dir is required");
  }
  flags.options.version = SIFT_VERSION;
  StopSignals stop;            // before any thread starts
  InstallTokenReloadSignal();  // SIGHUP re-reads --tokens-file

  ResolveBindAddress("coordinator", flags.options.security.tls(), &flags.options.bind_address);
  SIFT_ASSIGN_OR_RETURN(auto server, coordinator::CoordinatorServer::Start(flags.options));
  const auto& o = flags.options;
  std::printf(
      "sift coordinator: serving on %s:%d, metrics %s, state in %s, results under %s, "
      "checkpoints under %s, lease %lld ms, heartbeat %lld ms, TLS %s, tokens %s\n",
      o.bind_address.c_str(), server->port(),
      server->metrics_port() >= 0
          ? absl::StrCat(o.bind_address, ":", server->metrics_port(), "/metrics").c_str()
          : "off",
      o.coordinator.state_dir.c_str(), server->coordinator().options().results_root.c_str(),
      server->coordinator().options().checkpoint_root.c_str(),
      static_cast<long long>(o.coordinator.lease_ms),
      static_cast<long long>(o.coordinator.heartbeat_ms),
      o.security.tls() ? absl::StrCat("on (", o.security.tls_dir, ")").c_str() : "off",
      o.security.tokens_file.empty() ? "none" : o.security.tokens_file.c_str());
  std::fflush(stdout);
  if (!flags.port_file.empty()) {
    // Written after the ports are bound: a launcher waiting for this file can connect at once.
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(
        flags.port_file, absl::StrCat(server->port(), " ", server->metrics_port(), "\n")));
  }
  const char* sig = stop.Wait();
  std::printf("sift coordinator: %s, shutting down\n", sig);
  std::fflush(stdout);
  server->Shutdown();
  return absl::OkStatus();
}

}  // namespace

void AddCoordinator(CLI::App* app, Action* action) {
  auto flags = std::make_shared<CoordinatorFlags>();
  coordinator::CoordinatorServerOptions& o = flags->options;
  o.port = coordinator::kDefaultCoordinatorPort;
  CLI::App* cmd = app->add_subcommand(
      "coordinator", "Run the coordinator: job queue, cluster membership, checkpoints, evaluation");
  cmd->add_option("--port", o.port, "gRPC port (0: any free port, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  AddBindFlag(cmd, &o.bind_address);
  cmd->add_option("--state-dir", o.coordinator.state_dir,
                  "Directory of job records and logs (a restarted coordinator resumes from it)")
      ->required()
      ->envname("SIFT_STATE_DIR");
  cmd->add_option("--results-root", o.coordinator.results_root,
                  "Jobs write their results only under this directory; a spec's results_dir "
                  "outside it is refused (default: <state-dir>/results)")
      ->envname("SIFT_RESULTS_ROOT");
  cmd->add_option("--checkpoint-root", o.coordinator.checkpoint_root,
                  "Jobs write and resume checkpoints only under this directory; a spec's "
                  "checkpoint.dir or resume_from outside it is refused (default: "
                  "<state-dir>/checkpoints)")
      ->envname("SIFT_CHECKPOINT_ROOT");
  cmd->add_option("--metrics-port", o.metrics_port,
                  "Prometheus /metrics port (0: any free port; -1: off)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  cmd->add_option("--port-file", flags->port_file,
                  "Write '<port> <metrics-port>' here once listening (for launchers and tests)");
  cmd->add_option("--lease-ms", o.coordinator.lease_ms,
                  "A member not heard from for this long is dead (its job recovers)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  cmd->add_option("--heartbeat-ms", o.coordinator.heartbeat_ms,
                  "Heartbeat interval members are told to use")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  cmd->add_option("--max-recoveries", o.coordinator.max_recoveries,
                  "A job that recovers more often than this fails")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--max-servers", o.coordinator.max_servers,
                  "Refuse jobs asking for more embedding servers than this")
      ->capture_default_str()
      ->check(CLI::Range(1, static_cast<int>(JobSpecLimits::kMaxClusterSize)));
  cmd->add_option("--max-workers", o.coordinator.max_workers,
                  "Refuse jobs asking for more workers than this")
      ->capture_default_str()
      ->check(CLI::Range(1, static_cast<int>(JobSpecLimits::kMaxClusterSize)));
  cmd->add_option("--pending-timeout-ms", o.coordinator.pending_timeout_ms,
                  "A job at the head of the queue that waits this long for its members fails "
                  "(0: wait forever)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{30} * 86400000));
  AddGrpcServerLimitFlags(cmd, &o.limits, /*threads_flag=*/true);
  AddSecurityFlags(cmd, &o.security, SecurityFlagsFor::kServer);
  cmd->callback([flags, action] { *action = [flags] { return RunCoordinator(*flags); }; });
}

}  // namespace sift::cli
