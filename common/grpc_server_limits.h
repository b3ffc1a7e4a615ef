// GrpcServerLimits: the bounds every sift gRPC server applies to its connections and calls (the
// coordinator's and the embedding server's flags, cli/grpc_server_flags.h). What each one does in
// gRPC 1.51 is in common/grpc_listener_watchdog.h, which applies them. No gRPC here: options
// structs of the servers hold it.
#pragma once

#include <cstdint>

namespace sift {

struct GrpcServerLimits {
  int max_concurrent_streams = 256;         // calls at once per connection; 0: unlimited
  int64_t max_connection_idle_ms = 600000;  // a connection without calls is closed; 0: never
  int64_t handshake_timeout_ms = 10000;     // a connection silent this long after accept is closed
  int max_threads = 0;                      // sync servers: gRPC request threads; 0: unlimited
};

}  // namespace sift
