// WatchedGrpcServer: a sift gRPC server (coordinator or embedding server) that comes back after
// its listener dies, under the limits both servers share (GrpcServerLimits). Owns the
// grpc::Server, the services registered with it, the function that builds them and the probe
// thread. Needs gRPC: link sift_grpc_server.
//
// Why: gRPC 1.51 stops accepting for good once accept4 fails with EMFILE (grpc/grpc#20418: a
// server stayed down after a 20,200-connection flood). Every kProbeInterval a fresh connection
// asks the server's health (deadline kProbeDeadline); after kProbeFailures probes in a row with no
// answer (UNAVAILABLE or DEADLINE_EXCEEDED: any other status came from the server, so its
// listener works — RESOURCE_EXHAUSTED of a server out of request threads included) the gRPC
// server is rebuilt on the same port by calling the build function again. While descriptors are
// still exhausted the rebuild fails and is tried again after the next kProbeFailures probes. The
// caller's state (tables, jobs) lives outside the server and is untouched; clients reconnect.
//
// Limits (GrpcServerLimits; every field a server flag, cli/grpc_server_flags.h), as gRPC 1.51
// offers them (grpc/impl/codegen/grpc_types.h, grpcpp/resource_quota.h):
//   max_concurrent_streams  per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): a client's
//                           further calls wait in its own transport until one finishes.
//   max_connection_idle_ms  a connection without calls this long gets GOAWAY and is closed (a
//                           client reconnects on its next call).
//   handshake_timeout_ms    a connection that has not sent its HTTP/2 preface and SETTINGS in
//                           this time is closed (gRPC's default is 120 s): raw TCP floods are
//                           reclaimed.
//   max_threads             sync servers only (the coordinator): gRPC's request threads, pollers
//                           included, via ResourceQuota::SetMaxThreads; a call that finds none
//                           free is answered RESOURCE_EXHAUSTED at once. Callback servers (the
//                           embedding server) run requests on their own fixed pool: 0 there.
// gRPC 1.51 has no cap on the number of connections (no GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS
// yet): a flood of them is bounded by the handshake and idle timeouts, and the watchdog restores
// a listener that ran out of descriptors.
//
// Thread-safe: Shutdown may be called from any thread, once or more.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/grpc_server_limits.h"
#include "common/security.h"
#include "common/status.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace sift {

// INVALID_ARGUMENT naming the flag of a field out of range.
Status ValidateGrpcServerLimits(const GrpcServerLimits& limits);

struct WatchedGrpcServerOptions {
  std::string name;                 // in log lines: "sift coordinator"
  std::string bind_address;         // interface to listen on ("0.0.0.0": all)
  int port = 0;                     // 0: any free port (the bound one is kept for rebuilds)
  std::string health_service;       // set SERVING in grpc.health.v1, with "" (the whole server)
  int max_message_bytes = 4 << 20;  // receive and send limit
  GrpcServerLimits limits;
  // TLS (common/grpc_security.h): the server's certificate, client certificates asked for and
  // verified against the cluster CA. Off: plaintext. Read at each (re)build.
  SecurityOptions security;
};

class WatchedGrpcServer {
 public:
  static constexpr auto kProbeInterval = std::chrono::seconds(1);
  static constexpr auto kProbeDeadline = std::chrono::seconds(5);
  static constexpr int kProbeFailures = 3;

  // Creates the server's services and registers them with `builder` (called once per build: a
  // rebuild gets fresh services; the old ones are kept until destruction, as gRPC requires a
  // service to outlive its server). The rest of the builder (port, limits, health, the
  // NonEmptyStatusInterceptor) is set here.
  using RegisterServices =
      std::function<std::vector<std::unique_ptr<grpc::Service>>(grpc::ServerBuilder* builder)>;

  // Builds, starts and watches the server. UNAVAILABLE naming the address when it cannot
  // listen; INVALID_ARGUMENT for bad limits; the errors of MakeServerCredentials.
  static StatusOr<std::unique_ptr<WatchedGrpcServer>> Start(const WatchedGrpcServerOptions& options,
                                                            RegisterServices register_services);
  ~WatchedGrpcServer();  // Shutdown(0), then the server, then its services
  WatchedGrpcServer(const WatchedGrpcServer&) = delete;
  WatchedGrpcServer& operator=(const WatchedGrpcServer&) = delete;

  int port() const { return port_; }  // the bound port
  int64_t listener_restarts() const;  // successful rebuilds so far

  // Stops the watchdog; every service goes NOT_SERVING; `after_not_serving` runs (e.g. to release
  // long-polling handlers); in-flight calls finish up to `grace_s` seconds, then are cancelled;
  // the port closes.
  void Shutdown(double grace_s, const std::function<void()>& after_not_serving = {});

 private:
  WatchedGrpcServer(const WatchedGrpcServerOptions& options, RegisterServices register_services);
  // Builds the server on `port` (*bound: the bound port); false when it cannot listen.
  bool Build(int port, int* bound);
  std::shared_ptr<grpc::ServerCredentials> credentials_;  // of the last successful build
  bool Probe() const;
  void WatchdogLoop();
  Status Rebuild();

  const WatchedGrpcServerOptions options_;
  const RegisterServices register_services_;
  int port_ = 0;

  std::mutex shutdown_mu_;                // serialises Shutdown calls
  mutable std::mutex mu_;                 // the server and its services, against a rebuild
  std::unique_ptr<grpc::Server> server_;  // guarded by mu_
  std::vector<std::unique_ptr<grpc::Service>> services_;  // guarded by mu_; outlive server_
  bool shut_down_ = false;                                // guarded by mu_
  int64_t restarts_ = 0;                                  // guarded by mu_

  std::thread watchdog_;
  std::mutex watchdog_mu_;
  std::condition_variable watchdog_cv_;
  bool watchdog_stop_ = false;  // guarded by watchdog_mu_
};

// RegisterServices of the one service `make()` returns (a fresh one per build).
template <typename MakeService>
WatchedGrpcServer::RegisterServices OneService(MakeService make) {
  return [make](grpc::ServerBuilder* builder) {
    std::unique_ptr<grpc::Service> service = make();
    builder->RegisterService(service.get());
    std::vector<std::unique_ptr<grpc::Service>> services;
    services.push_back(std::move(service));
    return services;
  };
}

// The limits every sift server applies to `builder` (also used by WatchedGrpcServer::Start).
void ApplyGrpcServerLimits(const GrpcServerLimits& limits, grpc::ServerBuilder* builder);

}  // namespace sift
