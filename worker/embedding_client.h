// EmbeddingClient: a worker's connection to the S embedding servers of a job (server i holds shard
// i of S, proto/embedding.proto). Pull and Push take several tables at once and:
//   1. dedup and sort each table's keys (skipped when they already are strictly ascending; Push
//      sums the gradients of repeated keys),
//   2. slice them by shard with SliceByShard (common/sharding.h, the architecture contract),
//   3. send one RPC per shard — all shards in parallel — split into chunks when a shard's part is
//      over the request limits (keys, bytes),
//   4. scatter the replies back into the caller's order.
// Every call has a deadline; UNAVAILABLE is retried a bounded number of times with exponential
// backoff (Pull is idempotent; a retried Push carries the same (client_id, sequence), which the
// server applies once). Errors name the server and the method.
//
// Thread-compatible: one caller at a time per client (a worker's step pipeline). The channels are
// shared by all calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/security.h"
#include "common/status.h"
#include "common/wire_float.h"
#include "proto/embedding.pb.h"
#include "server/embedding/table.h"

namespace sift::worker {

namespace pb = ::sift::embedding::v1;

struct EmbeddingClientOptions {
  std::vector<std::string> servers;  // host:port of shard 0, 1, ..., S-1
  double deadline_s = 60;            // per RPC
  double connect_timeout_s = 60;     // Connect: how long to wait for every server to be ready
  int max_retries = 4;               // extra attempts on UNAVAILABLE
  double retry_backoff_s = 0.05;     // first backoff; doubles per retry
  // Request limits: 0 = the servers' limits (from Configure/Stats). Chunks stay within both.
  uint64_t max_keys_per_request = 0;
  uint64_t max_request_bytes = 0;
  WireFloat encoding = WireFloat::kFp32;  // rows and gradients on the wire
  // TLS: the cluster CA and this worker's certificate (common/security.h); off: plaintext.
  SecurityOptions security;
};

// Parses "host:port,host:port" (the --embedding-servers flag); INVALID_ARGUMENT naming the entry.
StatusOr<std::vector<std::string>> ParseServerList(const std::string& list);

class EmbeddingClient {
 public:
  // Opens a channel per server and waits (up to connect_timeout_s) until each answers Stats with
  // shard == its index and num_shards == S. UNAVAILABLE / FAILED_PRECONDITION naming the server.
  static StatusOr<std::unique_ptr<EmbeddingClient>> Connect(const EmbeddingClientOptions& options);
  ~EmbeddingClient();

  // Configures every shard with the same tables (idempotent on the servers; `replace` starts
  // over) and learns the servers' request limits.
  Status Configure(uint64_t seed, const std::vector<embedding::TableConfig>& tables,
                   bool replace = false);

  struct PullItem {
    uint32_t table_id = 0;
    absl::Span<const uint64_t> keys;  // any order, duplicates allowed
    absl::Span<float> out;            // keys.size() x dim
  };
  // create_missing: training (unseen keys get rows) vs evaluation (read-only, see the proto).
  Status Pull(absl::Span<const PullItem> items, bool create_missing);

  struct PushItem {
    uint32_t table_id = 0;
    absl::Span<const uint64_t> keys;  // any order; gradients of repeated keys are summed
    absl::Span<const float> grads;    // keys.size() x dim
    // Step pushes only: empty, or keys.size() mini-batch-aware L2 coefficients (the server adds
    // c x w once per key when it applies the step; TableGradients.l2_coefficients).
    absl::Span<const float> l2;
  };
  // One rank's push of a synchronous step (training.sparse_update: step): the servers hold it
  // until every rank of `world` has pushed the step, then apply one update per key from the sum
  // (proto/embedding.proto PushRequest.step_group). group != 0.
  struct StepPush {
    uint64_t group = 0;
    uint64_t generation = 0;
    uint32_t rank = 0, world = 0;
  };
  // lr_multiplier: the step's learning-rate schedule factor, in (0, 1] (the request's
  // lr_multiplier; 1 = the tables' configured rates, sent as no field). step_push: null = a
  // push applied on arrival; else a step push (each shard's chunks are its parts).
  Status Push(absl::Span<const PushItem> items, int64_t step, float lr_multiplier = 1.0f,
              const StepPush* step_push = nullptr);

  // One reply per server, in shard order.
  StatusOr<std::vector<pb::StatsResponse>> Stats();
  // retain_steps (non-null): the shards then keep only the job's snapshots of these steps and
  // this one (SnapshotRequest.retain_only); null: the servers' --keep-snapshots rule.
  StatusOr<std::vector<pb::SnapshotResponse>> Snapshot(
      const std::string& name, int64_t step, const std::vector<int64_t>* retain_steps = nullptr);
  StatusOr<std::vector<pb::RestoreResponse>> Restore(const std::string& name);

  int num_shards() const;
  // RPCs retried after UNAVAILABLE since Connect.
  int64_t retries() const;

  class Impl;

 private:
  explicit EmbeddingClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sift::worker
