// The flags of GrpcServerLimits (common/grpc_server_limits.h), one definition for every sift gRPC
// server (`sift coordinator`, `sift embedding-server`). Defaults are the options' own.
#pragma once

#include <climits>
#include <cstdint>

#include "CLI/CLI.hpp"
#include "common/grpc_server_limits.h"

namespace sift::cli {

// `threads_flag`: also --max-threads (sync servers only; the embedding server runs requests on
// its own --threads).
inline void AddGrpcServerLimitFlags(CLI::App* cmd, GrpcServerLimits* limits, bool threads_flag) {
  cmd->add_option("--max-concurrent-streams", limits->max_concurrent_streams,
                  "Calls in progress at once on one client connection; further ones wait in the "
                  "client (0: unlimited)")
      ->capture_default_str()
      ->check(CLI::Range(0, INT_MAX));
  cmd->add_option("--max-connection-idle-ms", limits->max_connection_idle_ms,
                  "A client connection without calls for this long is closed (GOAWAY; the client "
                  "reconnects on its next call; 0: never)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{INT_MAX}));
  cmd->add_option("--handshake-timeout-ms", limits->handshake_timeout_ms,
                  "A connection that has not completed its HTTP/2 handshake this long after it "
                  "was accepted is closed")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{INT_MAX}));
  if (threads_flag) {
    cmd->add_option("--max-threads", limits->max_threads,
                    "gRPC request threads (one per call in progress, pollers included); a call "
                    "that finds none free is refused with RESOURCE_EXHAUSTED (0: unlimited)")
        ->capture_default_str()
        ->check(CLI::Range(0, INT_MAX));
  }
}

}  // namespace sift::cli
