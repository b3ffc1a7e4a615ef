// The embedding-server benchmark behind `sift bench ps` (docs/benchmarks.md, nccl-tests style): for
// request sizes min_keys, min_keys*factor, ..., max_keys it times Pull and Push of that many
// distinct keys of one table against the servers (through EmbeddingClient: dedup, shard slicing,
// one RPC per shard, chunking) and the same operations on an in-process EmbeddingStore, so the
// cost of the network layer is visible. `clients` threads each drive their own client at once
// (load on the servers); latency is per call, keys/s and GB/s over the wall time of a size.
// With several transports (`sift bench ps --tls both`: plaintext and TLS, each with its own
// in-process server and clients), the timed calls of the transports alternate call by call (the
// order rotating), so the machine's drift over a run weighs on them alike and their ratio is one
// measurement; each remote row also reports the process's CPU time per call (clients and the
// in-process server, every thread), the cost a transport adds whatever the cores' load.
// With `check`, every pulled row is compared with the in-process table, which received the same
// pushes in the same order: #wrong counts keys whose row differs (beyond the wire encoding's
// rounding), and must be 0.
// The benchmark table (table_id 0, sgd) is configured on the servers: they must be fresh, or
// already serve exactly that config, unless `replace` (which drops their tables).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/security.h"

#include "common/status.h"
#include "common/wire_float.h"

namespace sift::worker {

// One way of reaching the servers: TLS for the in-process server (its server-0 member directory)
// and for the clients (a worker's directory, or the CA of external servers). Off: plaintext.
struct PsBenchTransport {
  std::string name = "plaintext";
  SecurityOptions server_security;
  SecurityOptions client_security;
};

struct PsBenchOptions {
  std::vector<std::string> servers;  // empty: start one in-process server on 127.0.0.1
  int64_t min_keys = 1024;
  int64_t max_keys = 1 << 20;
  int64_t factor = 4;
  int iters = 20;   // timed calls per size, operation and client
  int warmup = 3;   // untimed calls per size, operation and client
  int clients = 1;  // concurrent client threads, each with its own keys
  int dim = 16;
  WireFloat encoding = WireFloat::kFp32;
  int server_threads = 0;  // the in-process server's and table's threads (0: all CPUs)
  bool check = false;
  bool replace = false;
  uint64_t seed = 1;
  // The transports to compare (at least one; with `servers`, exactly one, whose
  // server_security is unused). Default: one, plaintext.
  std::vector<PsBenchTransport> transports = {PsBenchTransport{}};
};

struct PsBenchRow {
  std::string target;           // "remote" | "in-process"
  std::string transport = "-";  // the remote rows' PsBenchTransport::name
  std::string op;               // "pull" | "push"
  int64_t keys = 0;             // per call
  double p50_ms = 0, p99_ms = 0;
  double keys_per_s = 0;
  double gb_per_s = 0;    // row payload (keys x dim x 4 bytes) per second, 1e9 bytes
  double cpu_ms = 0;      // process CPU time (every thread) per call, ms
  double wire_bytes = 0;  // request + reply payload bytes per call (keys, rows), one direction each
  int64_t wrong = -1;     // -1: not checked
};

struct PsBenchResult {
  std::string servers_label;  // the addresses, or "in-process loopback server"
  int num_shards = 0;
  std::vector<PsBenchRow> rows;
};

StatusOr<PsBenchResult> RunPsBenchmark(const PsBenchOptions& options);

}  // namespace sift::worker
