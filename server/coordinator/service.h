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
//   grpc_method; sift_build_info{version}.
//
// Thread-safe: Shutdown may be called from any thread, once or more.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
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
