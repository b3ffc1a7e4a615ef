// The flags of GrpcServerLimits (common/grpc_server_limits.h), one definition for every sift gRPC
// server (`sift coordinator`, `sift embedding-server`). Defaults are the options' own.
#pragma once

#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>

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

// --bind: the interface a server's gRPC and metrics ports listen on. Unset, it is resolved by
// ResolveBindAddress once the security flags are known.
inline void AddBindFlag(CLI::App* cmd, std::string* bind) {
  bind->clear();
  cmd->add_option("--bind", *bind,
                  "Interface to listen on (default: 127.0.0.1, loopback only; 0.0.0.0, every "
                  "interface, when --tls-dir is set). A plaintext server on 0.0.0.0 takes any "
                  "peer that can reach the port: give --bind 0.0.0.0 only on a private network");
}

inline bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// An unset --bind becomes 127.0.0.1 without TLS and 0.0.0.0 with it. A plaintext server told to
// listen beyond loopback prints one warning line on stderr naming `role`.
inline void ResolveBindAddress(const char* role, bool tls, std::string* bind) {
  if (bind->empty()) *bind = tls ? "0.0.0.0" : "127.0.0.1";
  if (!tls && !IsLoopbackHost(*bind)) {
    std::fprintf(stderr,
                 "sift %s: warning: listening on %s without TLS: anyone who can reach the port "
                 "can join or call it (--tls-dir turns TLS on; docs/security.md)\n",
                 role, bind->c_str());
  }
}

}  // namespace sift::cli
