// CoordinatorServer: the gRPC front of the Coordinator (`sift coordinator`). It serves
// proto/coordinator.proto's CoordinatorService and grpc.health.v1, runs the scheduler thread
// (Coordinator::Tick every `tick`: lease expiry and scheduling), and exposes Prometheus metrics on
// /metrics. Owns the coordinator, the gRPC server, the thread and the metrics exposer.
//
// Metrics (names pass `promtool check metrics`):
//   sift_job_samples_total{job_id}     counter: samples trained (sum(rate(..[1m])) = cluster
//                                      samples/s)
//   sift_job_steps_total{job_id}       counter: step records received
//   sift_job_recoveries_total{job_id}  counter
//   sift_job_epoch, sift_job_test_auc (latest evaluated epoch), sift_job_train_loss (last step's
//   total loss), sift_job_generation {job_id}; sift_job_state{job_id,state} (1 for the current
//   state, 0 for the others); sift_coordinator_members{member_role} (alive members);
//   grpc_server_started_total / grpc_server_handled_total / grpc_server_handling_seconds per
//   grpc_method; sift_auth_refusals_total{grpc_method, grpc_code} (calls refused for their
//   credentials, common/grpc_security.h); sift_build_info{version}.
//
// The gRPC server runs under the listener watchdog of common/grpc_listener_watchdog.h: when it
// stops accepting (file descriptors ran out) it is rebuilt on the same port, jobs intact.
//
// Thread-safe: Shutdown may be called from any thread, once or more.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/grpc_server_limits.h"
#include "common/security.h"
#include "common/status.h"
#include "server/coordinator/coordinator.h"

namespace sift::coordinator {

struct CoordinatorServerOptions {
  CoordinatorOptions coordinator;
  std::string bind_address = "0.0.0.0";  // interface of the gRPC and metrics ports
  int port = 0;                          // 0: any free port (see port())
  int metrics_port = 0;                  // 0: any free port; < 0: no /metrics endpoint
  std::string version = "dev";           // sift_build_info
  absl::Duration tick = absl::Milliseconds(100);
  // Streams per connection, idle and handshake timeouts, and gRPC's request threads (a sync
  // server: one thread per call in progress; a call finding none free is RESOURCE_EXHAUSTED).
  GrpcServerLimits limits = DefaultLimits();
  // TLS, member certificates and users' tokens (common/security.h says who may call what; the
  // README lists every RPC with the identity it needs). tokens_file is re-read when it changes
  // (checked every tick) and after RequestTokenReload (SIGHUP).
  SecurityOptions security;

  // kDefaultMaxThreads: every worker of the largest cluster a spec allows (4096) can wait in
  // KvGet at once, with 256 threads to spare for heartbeats and the CLI.
  static constexpr int kDefaultMaxThreads = 4096 + 256;
  static GrpcServerLimits DefaultLimits() {
    GrpcServerLimits l;
    l.max_threads = kDefaultMaxThreads;
    return l;
  }
};

class CoordinatorServer {
 public:
  // Loads the state directory and starts serving. Errors of Coordinator::Open; UNAVAILABLE naming
  // the address when a port cannot be bound; INVALID_ARGUMENT for bad options.
  static StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const CoordinatorServerOptions& options);
  ~CoordinatorServer();  // Shutdown()
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  int port() const;          // the bound gRPC port
  int metrics_port() const;  // the bound metrics port, -1 when disabled
  Coordinator& coordinator();

  // Health goes NOT_SERVING, the scheduler stops, KvGet waiters are released (UNAVAILABLE),
  // in-flight requests finish (up to `grace_s` seconds, then they are cancelled), ports close.
  void Shutdown(double grace_s = 5.0);

  class Impl;

 private:
  explicit CoordinatorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sift::coordinator
