// EmbeddingShard: one shard of every sparse table of a job — the embedding server's behaviour at
// the level of the proto messages of proto/embedding.proto, with no transport (the gRPC adapter in
// service.h parses bytes and calls this). Owns the EmbeddingStore (created by Configure or Restore)
// and the shard's snapshot files.
//
// Thread-safe. Pull, Push and Stats run concurrently (a shared lock, then the store's striped
// locks); Configure, Snapshot and Restore take the lock exclusively, so a snapshot sees every Push
// request entirely or not at all, and a request never sees a half-restored shard.
// Every method validates its whole request before changing anything and returns the error codes
// documented in proto/embedding.proto, with messages that name the table or field: a failed Pull
// or Push changes nothing.
// Rows: Pull (create_missing) creates them within the memory budget and each table's capacity
// share, whole or not at all (EmbeddingStore::Pull). Push, plain or step, never creates one: a
// push naming a row this shard does not hold is INVALID_ARGUMENT, refused whole. A worker pulls
// every row it pushes, and rows leave a shard only with its tables (Restore, Configure with
// replace), which drop the held step parts too; so only a push from before such a replacement,
// of another job, or of a client bug names an absent row.
// REQUIRES: every `response` argument is a fresh (empty) message; methods add to it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/proto_wire.h"
#include "common/status.h"
#include "proto/embedding.pb.h"
#include "server/embedding/step_aggregator.h"
#include "server/embedding/table.h"

namespace sift::embedding {

namespace pb = ::sift::embedding::v1;

struct ShardOptions {
  uint32_t shard = 0;
  uint32_t num_shards = 1;
  std::string snapshot_dir;  // Snapshot/Restore write and read <snapshot_dir>/<name>/
  int threads = 1;           // threads one Pull/Push spreads its lock stripes over
  int num_stripes = 256;     // lock stripes per table
  uint64_t max_keys_per_request = uint64_t{1} << 20;  // over all tables of one Pull/Push
  uint64_t max_message_bytes = uint64_t{64} << 20;    // reported to clients; gRPC enforces it
  std::string version;                                // reported by Stats
  float max_abs_gradient = kDefaultMaxAbsGradient;    // StoreOptions::max_abs_gradient
  int64_t memory_budget_bytes = 0;                    // StoreOptions (0 = unlimited)
  // Snapshots named "<job>-g<G>-step-<N>" (the checkpoint protocol's): after writing one, this
  // shard deletes its files of the same job's snapshots older than the newest keep_snapshots
  // (0 = keep all; other names are never deleted). 4: a job fails at its third failed
  // checkpoint in a row (worker/trainer.cc), each of which may have written a snapshot, so the
  // snapshot of its last committed checkpoint is always among the newest four.
  int keep_snapshots = 4;
};

// How many (client_id, sequence) pairs of applied pushes the shard remembers for retries (all
// clients together; a 64K-key push of one client is about 5 of them).
inline constexpr size_t kPushDedupWindow = 65536;
// Most tables in one config or request.
inline constexpr size_t kMaxTables = 1024;

// Tags of the proto/embedding.proto fields that the hand-encoded hot paths (EmbeddingShard::PullTo,
// worker/embedding_client.cc) write and read; tests check the bytes against protobuf's parser.
namespace tags {
inline constexpr uint8_t kTables =
    wire::Tag(1, wire::kLengthDelimited);                               // *Request/Response.tables
inline constexpr uint8_t kTableId = wire::Tag(1, wire::kVarint);        // Table*.table_id
inline constexpr uint8_t kKeys = wire::Tag(2, wire::kLengthDelimited);  // packed fixed64 keys
inline constexpr uint8_t kDim = wire::Tag(2, wire::kVarint);            // TableRows.dim
inline constexpr uint8_t kValues = wire::Tag(3, wire::kLengthDelimited);  // rows / gradients
inline constexpr uint8_t kCreateMissing = wire::Tag(2, wire::kVarint);    // PullRequest
inline constexpr uint8_t kStep = wire::Tag(2, wire::kVarint);             // PushRequest
inline constexpr uint8_t kEncoding = wire::Tag(3, wire::kVarint);         // Pull/PushRequest
inline constexpr uint8_t kClientId = wire::Tag(4, wire::kFixed64);        // PushRequest
inline constexpr uint8_t kSequence = wire::Tag(5, wire::kVarint);         // PushRequest
inline constexpr uint8_t kLrMultiplier = wire::Tag(6, wire::kFixed32);    // PushRequest
inline constexpr uint8_t kL2Coefficients = wire::Tag(4, wire::kLengthDelimited);  // TableGradients
inline constexpr uint8_t kStepGroup = wire::Tag(7, wire::kFixed64);               // PushRequest
inline constexpr uint8_t kGeneration = wire::Tag(8, wire::kVarint);               // PushRequest
inline constexpr uint8_t kRank = wire::Tag(9, wire::kVarint);                     // PushRequest
inline constexpr uint8_t kWorld = wire::Tag(10, wire::kVarint);                   // PushRequest
inline constexpr uint8_t kPart = wire::Tag(11, wire::kVarint);                    // PushRequest
inline constexpr uint8_t kParts = wire::Tag(12, wire::kVarint);                   // PushRequest
}  // namespace tags

// Converts between the wire's table configs and the store's; INVALID_ARGUMENT naming the table and
// field for values the store cannot take (dim 0 or over 65536, unknown optimizer).
StatusOr<TableConfig> TableConfigFromProto(const pb::TableConfig& proto);
pb::TableConfig TableConfigToProto(const TableConfig& config);

// Checks a snapshot name: [A-Za-z0-9._-]{1,128}, not "." or "..". INVALID_ARGUMENT otherwise.
Status ValidateSnapshotName(const std::string& name);

class EmbeddingShard {
 public:
  // INVALID_ARGUMENT on shard >= num_shards, num_shards == 0, threads/stripes/limits < 1.
  static StatusOr<std::unique_ptr<EmbeddingShard>> Create(const ShardOptions& options);

  Status Configure(const pb::ConfigureRequest& request, pb::ConfigureResponse* response);
  Status Pull(const pb::PullRequest& request, pb::PullResponse* response);
  // Pull with the reply as wire bytes, no message in between (the gRPC service's path): validates
  // as Pull, then for each request table calls piece(framing, n), which must append `framing` to
  // the reply and return memory, aligned for float and not moved until the reply is sent, for
  // the n bytes of rows that follow it (nullptr allowed when n == 0). Together the pieces are the
  // serialized PullResponse that Pull would fill. No piece is asked for when validation fails.
  using PullPiece = std::function<char*(absl::string_view framing, size_t rows_bytes)>;
  Status PullTo(const pb::PullRequest& request, const PullPiece& piece);
  Status Push(const pb::PushRequest& request, pb::PushResponse* response);
  Status Stats(pb::StatsResponse* response) const;
  Status Snapshot(const pb::SnapshotRequest& request, pb::SnapshotResponse* response);
  Status Restore(const pb::RestoreRequest& request, pb::RestoreResponse* response);

  // Per-table figures for metrics, computed now (takes the shared lock): rows, memory bytes and
  // the traffic counters. Empty before Configure.
  struct TableMetrics {
    std::string name;
    int64_t rows = 0;
    int64_t total_bytes = 0;
    uint64_t pulled_keys = 0;
    uint64_t pushed_keys = 0;
    uint64_t refused_pushes = 0;  // TableStats' refusal counters
    uint64_t refused_rows = 0;
    uint64_t refused_pulls = 0;
    uint64_t refused_absent_pushes = 0;
  };
  std::vector<TableMetrics> Metrics() const;

  const ShardOptions& options() const { return options_; }

  // The transport's count of Push request bytes (StatsResponse.push_request_bytes).
  void AddPushRequestBytes(uint64_t bytes) {
    push_request_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }

 private:
  struct Counters {
    std::atomic<uint64_t> pulled{0};
    std::atomic<uint64_t> pushed{0};
  };
  explicit EmbeddingShard(const ShardOptions& options) : options_(options) {}
  // Builds a store and counters for `config` (seed + tables). REQUIRES: mu_ held exclusively.
  Status InstallLocked(const pb::ConfigureRequest& config, std::unique_ptr<EmbeddingStore> store);
  StatusOr<std::unique_ptr<EmbeddingStore>> MakeStore(const pb::ConfigureRequest& config) const;
  Status CheckKeyLimit(uint64_t keys, absl::string_view op) const;
  // Pull's checks of the request alone, and those against the tables. REQUIRES (the latter): mu_
  // held (shared).
  Status CheckPull(const pb::PullRequest& request) const;
  Status CheckPullTablesLocked(const pb::PullRequest& request) const;
  // After `written` was written: deletes this shard's files of the job's snapshots it no longer
  // keeps (SnapshotRequest.retain_only, else keep_snapshots).
  void PruneOlderSnapshots(const pb::SnapshotRequest& written) const;
  // Remembers (client_id, sequence); false when it was already there. REQUIRES: client_id != 0.
  bool MarkPushApplied(uint64_t client_id, uint64_t sequence);
  void ForgetPush(uint64_t client_id, uint64_t sequence);
  // A step push (request.step_group != 0, `pushes` decoded and checked against the tables): holds
  // it, or applies the completed step (StepAggregator). A part is checked whole as it arrives,
  // its rows held included, so a held part always applies: parts are held only while the store
  // that holds their rows is installed (InstallLocked drops them). REQUIRES: mu_ held (shared).
  Status PushStepLocked(const pb::PushRequest& request,
                        absl::Span<const EmbeddingStore::TablePush> pushes, float lr_multiplier,
                        pb::PushResponse* response);

  const ShardOptions options_;
  mutable std::shared_mutex mu_;
  std::unique_ptr<EmbeddingStore> store_;  // guarded by mu_; null before Configure/Restore
  pb::ConfigureRequest config_;            // guarded by mu_; tables sorted by table_id
  absl::flat_hash_map<uint32_t, std::unique_ptr<Counters>> counters_;  // guarded by mu_
  std::atomic<uint64_t> push_request_bytes_{0};
  StepAggregator steps_;  // held step pushes; cleared with the tables (InstallLocked)

  std::mutex dedup_mu_;
  std::deque<std::pair<uint64_t, uint64_t>> dedup_order_;         // guarded by dedup_mu_
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> dedup_set_;  // guarded by dedup_mu_
};

}  // namespace sift::embedding
