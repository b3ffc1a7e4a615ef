// sift embedding-server: serves one shard of the job's sparse tables over gRPC until SIGINT or
// SIGTERM, then drains (health NOT_SERVING, in-flight requests finish) and exits 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cli/commands.h"
#include "cli/exit_code.h"
#include "cli/grpc_server_flags.h"
#include "cli/security_flags.h"
#include "cli/stop_signals.h"
#include "common/file_util.h"
#include "common/shard_index.h"
#include "common/sysinfo.h"
#include "common/thread_pool.h"
#include "server/coordinator/member_session.h"
#include "server/embedding/service.h"

namespace sift::cli {
namespace {

struct ServerFlags {
  embedding::EmbeddingServerOptions options;
  std::string shard;  // a number or "ordinal" (common/shard_index.h)
  std::string port_file;
  std::string coordinator;  // "" = standalone (no registration)
  std::string advertise_host = "127.0.0.1";
  double register_timeout_s = 120;
};

// Joins the cluster of the coordinator at flags.coordinator as the server of its shard.
// Each assignment (the job and generation this shard serves) becomes the server's job grant.
StatusOr<std::unique_ptr<coordinator::MemberSession>> JoinCluster(
    const ServerFlags& flags, embedding::EmbeddingServer& server,
    std::unique_ptr<coordinator::CoordinatorClient>* client) {
  coordinator::CoordinatorClientOptions co;
  co.address = flags.coordinator;
  co.connect_timeout = absl::ZeroDuration();  // MemberSession::Start retries until its timeout
  co.security = flags.options.security;       // this server's certificate is its member identity
  SIFT_ASSIGN_OR_RETURN(*client, coordinator::CoordinatorClient::Connect(co));
  coordinator::pb::RegisterRequest req;
  req.set_role(coordinator::pb::EMBEDDING_SERVER);
  req.set_address(absl::StrCat(flags.advertise_host, ":", server.port()));
  req.set_shard(flags.options.shard.shard);
  req.set_num_shards(flags.options.shard.num_shards);
  if (server.metrics_port() >= 0) {
    req.set_metrics_address(absl::StrCat(flags.advertise_host, ":", server.metrics_port()));
  }
  req.set_pid(::getpid());
  auto serve = [&server](const std::optional<coordinator::pb::Assignment>& a) {
    if (!a.has_value()) {
      server.SetJobGrant(std::nullopt);
      return;
    }
    server.SetJobGrant(embedding::JobGrant{a->job_id(), a->generation(), a->job_credential(),
                                           a->restorable_snapshot()});
    std::printf("sift embedding-server: serving %s generation %lld\n", a->job_id().c_str(),
                static_cast<long long>(a->generation()));
    std::fflush(stdout);
  };
  return coordinator::MemberSession::Start(client->get(), req,
                                           absl::Seconds(flags.register_timeout_s), serve);
}

Status RunEmbeddingServer(ServerFlags flags) {
  if (flags.options.shard.snapshot_dir.empty()) {
    return absl::InvalidArgumentError("--snapshot-dir is required");
  }
  StatusOr<uint32_t> shard =
      ResolveShardIndex(flags.shard, LocalHostName(), flags.options.shard.num_shards);
  if (!shard.ok()) return WithExitCode(shard.status(), kExitUsage);  // a bad flag or environment
  flags.options.shard.shard = *shard;
  // "{shard}" in --tls-dir: this shard's directory among all the servers' (a StatefulSet mounts
  // every server-<i> Secret, each pod takes its own).
  absl::StrReplaceAll({{"{shard}", absl::StrCat(*shard)}}, &flags.options.security.tls_dir);
  SIFT_RETURN_IF_ERROR(MakeDirs(flags.options.shard.snapshot_dir));
  if (flags.options.shard.threads <= 0) flags.options.shard.threads = AvailableCpus();
  flags.options.shard.version = SIFT_VERSION;
  if (flags.options.shard.memory_budget_bytes < 0) {
    // auto: 80% of what this process may use (the rest: gRPC buffers, snapshots in flight).
    flags.options.shard.memory_budget_bytes = AvailableMemoryBytes() / 10 * 8;
  }
  StopSignals stop;  // before any thread starts
  // With a coordinator, the tables serve only the job it assigns (its generation's credential).
  flags.options.managed = !flags.coordinator.empty();

  ResolveBindAddress("embedding-server", flags.options.security.tls(), &flags.options.bind_address);
  SIFT_ASSIGN_OR_RETURN(auto server, embedding::EmbeddingServer::Start(flags.options));
  const auto& o = flags.options;
  std::printf(
      "sift embedding-server: shard %u of %u serving on %s:%d, metrics %s, snapshots in %s, "
      "%d threads, table memory budget %s, |gradient| <= %g, TLS %s\n",
      o.shard.shard, o.shard.num_shards, o.bind_address.c_str(), server->port(),
      server->metrics_port() >= 0
          ? absl::StrCat(o.bind_address, ":", server->metrics_port(), "/metrics").c_str()
          : "off",
      o.shard.snapshot_dir.c_str(), o.shard.threads,
      o.shard.memory_budget_bytes > 0
          ? absl::StrCat(o.shard.memory_budget_bytes >> 20, " MiB").c_str()
          : "unlimited",
      static_cast<double>(o.shard.max_abs_gradient),
      o.security.tls() ? absl::StrCat("on (", o.security.tls_dir, ")").c_str() : "off");
  std::fflush(stdout);
  if (!flags.port_file.empty()) {
    // Written after the ports are bound: a launcher waiting for this file can connect at once.
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(
        flags.port_file, absl::StrCat(server->port(), " ", server->metrics_port(), "\n")));
  }
  // Registered only once serving: the coordinator may hand our address to workers at once.
  std::unique_ptr<coordinator::CoordinatorClient> client;
  std::unique_ptr<coordinator::MemberSession> session;
  if (!flags.coordinator.empty()) {
    SIFT_ASSIGN_OR_RETURN(session, JoinCluster(flags, *server, &client));
    std::printf("sift embedding-server: registered with the coordinator at %s as %s\n",
                flags.coordinator.c_str(), session->member_id().c_str());
    std::fflush(stdout);
  }
  const char* sig = stop.Wait();
  session.reset();  // stop heartbeating: the coordinator sees the lease end
  std::printf("sift embedding-server: %s, draining\n", sig);
  std::fflush(stdout);
  server->Shutdown();
  return absl::OkStatus();
}

}  // namespace

void AddEmbeddingServer(CLI::App* app, Action* action) {
  auto flags = std::make_shared<ServerFlags>();
  embedding::EmbeddingServerOptions& o = flags->options;
  CLI::App* cmd = app->add_subcommand("embedding-server",
                                      "Serve one shard of the sparse embedding tables over gRPC");
  cmd->add_option("--port", o.port, "gRPC port (0: any free port, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  AddBindFlag(cmd, &o.bind_address);
  cmd->add_option("--shard", flags->shard,
                  "This server's shard index I in [0, S), or 'ordinal': the trailing -N of the "
                  "host name (a StatefulSet pod's)")
      ->envname("SIFT_SHARD")
      ->required();
  cmd->add_option("--num-shards", o.shard.num_shards, "Number of shards S")
      ->envname("SIFT_NUM_SHARDS")
      ->required()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--snapshot-dir", o.shard.snapshot_dir,
                  "Directory of snapshots (shared by all shards to restore into another S)")
      ->envname("SIFT_SNAPSHOT_DIR")
      ->required();
  o.shard.threads = 0;
  cmd->add_option("--threads", o.shard.threads, "Request and store threads (0: all CPUs)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--metrics-port", o.metrics_port,
                  "Prometheus /metrics port (0: any free port; -1: off)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  cmd->add_option("--max-keys-per-request", o.shard.max_keys_per_request,
                  "Most keys in one Pull/Push (over all tables)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  cmd->add_option("--max-message-bytes", o.shard.max_message_bytes,
                  "gRPC message size limit, both directions")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{2047} << 20));
  o.shard.memory_budget_bytes = -1;
  cmd->add_option("--table-memory-budget", o.shard.memory_budget_bytes,
                  "Bytes all tables' rows may take; a pull that needs a new row beyond it is "
                  "refused with RESOURCE_EXHAUSTED naming the table (-1: 80% of the memory this "
                  "process may use, cgroup limit or MemTotal; 0: unlimited)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--keep-snapshots", o.shard.keep_snapshots,
                  "Checkpoint snapshots of a job kept on disk (older ones are deleted after a "
                  "new one is written; 0: keep all)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--max-abs-gradient", o.shard.max_abs_gradient,
                  "Pushes with a gradient component beyond +-this are refused whole")
      ->capture_default_str()
      ->check(CLI::Range(1e-30f, 3e38f));
  cmd->add_option("--stripes", o.shard.num_stripes, "Lock stripes per table")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--port-file", flags->port_file,
                  "Write '<port> <metrics-port>' here once listening (for launchers and tests)");
  cmd->add_option("--coordinator", flags->coordinator,
                  "Register with the coordinator at host:port as this shard's server "
                  "(default: standalone)")
      ->envname("SIFT_COORDINATOR");
  cmd->add_option("--advertise-host", flags->advertise_host,
                  "Host name or IP the workers reach this server at (with --coordinator)")
      ->envname("SIFT_ADVERTISE_HOST")
      ->capture_default_str();
  cmd->add_option("--register-timeout", flags->register_timeout_s,
                  "Seconds to keep trying to reach the coordinator at start")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  AddGrpcServerLimitFlags(cmd, &o.limits, /*threads_flag=*/false);
  AddSecurityFlags(cmd, &o.security, SecurityFlagsFor::kMember);
  cmd->callback([flags, action] { *action = [flags] { return RunEmbeddingServer(*flags); }; });
}

}  // namespace sift::cli
