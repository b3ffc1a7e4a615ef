// EmbeddingServer: the gRPC front of one embedding shard (`sift embedding-server`). It listens on
// a port, serves proto/embedding.proto's EmbeddingService and grpc.health.v1, and exposes
// Prometheus metrics on /metrics. Owns the shard, the gRPC server, the request threads and the
// metrics exposer.
//
// Requests arrive as raw bytes (gRPC's raw callback API) and are parsed here, so a request that is
// not a valid message of its type is INVALID_ARGUMENT like any other bad input (the generated
// protobuf handler would answer INTERNAL). The work runs on the server's own pool of `threads`
// request threads, never on gRPC's callback threads.
//
// Metrics (names pass `promtool check metrics`; labels `shard` and, per table, `table`):
//   grpc_server_started_total / grpc_server_handled_total{grpc_code} /
//   grpc_server_handling_seconds (histogram) per grpc_method;
//   sift_ps_rows, sift_ps_memory_bytes (gauges) and sift_ps_pulled_keys_total,
//   sift_ps_pushed_keys_total, sift_ps_refused_{pushes,rows,pulls,absent_pushes}_total (counters)
//   per table; sift_auth_refusals_total{grpc_method,
//   grpc_code} (common/grpc_security.h: credentials, job credentials, snapshot scope);
//   sift_ps_refused_requests_total{grpc_method, grpc_code} (pulls and pushes refused whole: table
//   bounds, absent rows, bad gradients), each refusal also a log line; sift_build_info{version}.
//
// The gRPC server runs under the listener watchdog of common/grpc_listener_watchdog.h: when it
// stops accepting (file descriptors ran out) it is rebuilt on the same port, tables intact.
//
// Thread-safe: Shutdown may be called from any thread, once or more.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/grpc_server_limits.h"
#include "common/security.h"
#include "common/status.h"
#include "server/embedding/shard.h"

namespace sift::embedding {

struct EmbeddingServerOptions {
  ShardOptions shard;
  std::string bind_address = "0.0.0.0";  // interface of the gRPC and metrics ports
  int port = 0;                          // 0: any free port (see EmbeddingServer::port)
  int metrics_port = 0;                  // 0: any free port; < 0: no /metrics endpoint
  // Streams per connection, idle and handshake timeouts (max_threads must stay 0: requests run
  // on the shard's own `threads`).
  GrpcServerLimits limits;
  // TLS and member certificates (common/security.h): Configure, Pull, Push, Snapshot and Restore
  // need a worker's certificate, Stats any member's. Off: plaintext, no certificate checks (a
  // managed server still checks job credentials).
  SecurityOptions security;
  // Registered with a coordinator (`--coordinator`): Configure, Pull, Push, Snapshot and Restore
  // need the job credential of the generation this server serves (SetJobGrant), security on or
  // off, and Snapshot/Restore names are that job's (JobGrant). Not managed (a standalone server):
  // no job checks.
  bool managed = false;
};

// What a managed server serves: one generation of one job (the coordinator's assignment).
struct JobGrant {
  std::string job_id;
  int64_t generation = 0;
  std::string credential;  // common/job_credential.h
  // Besides the job's own ("ckpt-<job_id>-g..."), the one snapshot it may Restore ("" = none).
  std::string restorable_snapshot;
};

// The snapshot names of `job_id`'s checkpoints start with this ("ckpt-job-3-g").
std::string JobSnapshotPrefix(const std::string& job_id);
// OK when a server serving `grant` may write (Snapshot; restore = false) or read (Restore) the
// snapshot `name`; PERMISSION_DENIED (AuthRefusal) naming the rule otherwise.
Status CheckSnapshotScope(const JobGrant& grant, const std::string& name, bool restore);

class EmbeddingServer {
 public:
  // Binds and starts serving. UNAVAILABLE naming the address when a port cannot be bound;
  // INVALID_ARGUMENT for bad options.
  static StatusOr<std::unique_ptr<EmbeddingServer>> Start(const EmbeddingServerOptions& options);
  ~EmbeddingServer();  // Shutdown()
  EmbeddingServer(const EmbeddingServer&) = delete;
  EmbeddingServer& operator=(const EmbeddingServer&) = delete;

  // A managed server's current job (nullopt: none — it refuses every table call). Thread-safe.
  void SetJobGrant(std::optional<JobGrant> grant);

  int port() const;          // the bound gRPC port
  int metrics_port() const;  // the bound metrics port, -1 when disabled
  EmbeddingShard& shard();

  // Health goes NOT_SERVING, new requests are refused, in-flight ones finish (up to `grace_s`
  // seconds, then they are cancelled), and the ports close.
  void Shutdown(double grace_s = 5.0);

  class Impl;

 private:
  explicit EmbeddingServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sift::embedding
