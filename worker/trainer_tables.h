// TrainerTables: the trainer's one seam to its embedding tables — where a step's rows come from
// and its sparse gradients go, and what a checkpoint holds of them. Two implementations:
//   - in-process (trainer_tables.cc): an embedding::EmbeddingStore in this process (sift train,
//     sift bench on one worker); its rows are written into the checkpoint itself;
//   - remote (remote_tables.cc): the embedding servers of a job through EmbeddingClient; a
//     checkpoint names the servers' snapshot.
// The choice is made at link time for what a build can do: the full build links
// remote_tables.cc, the SIFT_MINIMAL build (no gRPC) links remote_tables_unavailable.cc, whose
// ConnectRemoteTables refuses. The trainer holds a TrainerTables and never branches on which.
//
// Thread-compatible: Fetch may run on the step pipeline's prefetch thread while Push runs on the
// training thread (the remote tables then use two clients); nothing else runs concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/security.h"
#include "common/status.h"
#include "server/embedding/table.h"
#include "worker/batch_keys.h"
#include "worker/checkpoint.h"
#include "worker/collectives.h"

namespace sift::worker {

class TrainerTables {
 public:
  virtual ~TrainerTables() = default;

  // Fills every table's rows (keys->tables[t].rows, keys x dim) for its keys. train: pull,
  // creating unseen rows; otherwise look up without creating any. `arrived(t)` runs once per
  // table, in table order, after table t's rows are in (as each arrives, or all at the end).
  virtual Status Fetch(bool train, BatchKeys* keys, const std::function<Status(int)>& arrived) = 0;

  // Applies every table's gradients (keys.tables[t].grads) as the sparse optimizer's step
  // `global_step`, at the tables' learning rates x lr_multiplier (the step's schedule factor, in
  // (0, 1]; 1 = the configured rates bit for bit). Every rank of the job calls it each step; with
  // several ranks the remote tables either sum the ranks' pushes into one update per row (step
  // pushes, with keys.tables[t].l2 as the rows' L2 coefficients) or apply each rank's push on
  // arrival (per_rank, ordered by rank at staleness 0): see remote_tables.cc.
  virtual Status Push(const BatchKeys& keys, int64_t global_step, float lr_multiplier) = 0;

  // The in-process store a checkpoint writes and loads the rows of; nullptr when the tables live
  // on embedding servers (the checkpoint then names their snapshot: Snapshot, Restore).
  virtual embedding::EmbeddingStore* in_process() = 0;

  // Before rank 0 writes a checkpoint at `global_step`: the servers write snapshot `name`,
  // keeping only the snapshots of `retain_steps` and this one (null: the servers' own rule), and
  // *out records it. In-process tables: nothing (the rows go into the checkpoint).
  virtual Status Snapshot(const std::string& name, int64_t global_step,
                          const std::vector<int64_t>* retain_steps,
                          CheckpointState::RemoteSnapshot* out) = 0;

  // After LoadCheckpoint(checkpoint_dir) filled `st` (and in_process()): the servers restore the
  // snapshot st names and it is checked against the manifest (DATA_LOSS naming checkpoint_dir
  // on a mismatch). In-process tables: nothing (LoadCheckpoint loaded them).
  virtual Status Restore(const std::string& checkpoint_dir, const CheckpointState& st) = 0;

  // After every rank's setup barrier: the clients that did not set the servers up learn the
  // tables (Configure without replace, which checks they are these). In-process: nothing.
  virtual Status Join() = 0;
};

// Both implementations' checks (trainer_tables.cc): tables numbered 0, 1, ... in order
// (INVALID_ARGUMENT naming the first that is not), and a batch's keys for as many tables as are
// held (`holder`: who holds them, for the message).
Status CheckTableIds(const std::vector<embedding::TableConfig>& tables);
Status CheckBatchTables(size_t batch_tables, size_t held, const char* holder);

// The tables in this process (EmbeddingStore::Create's errors).
StatusOr<std::unique_ptr<TrainerTables>> CreateInProcessTables(
    std::vector<embedding::TableConfig> tables, const embedding::StoreOptions& options);

struct RemoteTablesOptions {
  std::vector<std::string> servers;  // host:port of shard 0, 1, ..., S-1
  SecurityOptions security;          // TLS to the servers (off: plaintext)
  std::string wire_encoding = "fp32";
  uint64_t seed = 0;
  // A fresh run: rank 0 configures the servers with replace (empty tables); a resumed run
  // (false) restores them from its checkpoint's snapshot (Restore).
  bool fresh = true;
  // Pulls on the step pipeline's prefetch thread: a second client for the pushes.
  bool prefetch = false;
  int staleness = 0;
  Collectives* collectives = nullptr;  // the job's workers (rank, world, barriers)
  // World > 1: step pushes (one update per row per global step, summed on the servers) with this
  // identity, or false: each rank's push applied on arrival (per_rank).
  bool step_pushes = true;
  uint64_t step_group = 1;  // != 0
  uint64_t generation = 0;
};

// OK when this build can reach embedding servers; a SIFT_MINIMAL build: INVALID_ARGUMENT saying
// it has in-process tables only (so a run fails before it loads anything).
Status RemoteTablesSupported();

// Connects to the servers (EmbeddingClient::Connect's errors) and, on rank 0 of a fresh run,
// configures them with `tables`, replacing whatever they held.
StatusOr<std::unique_ptr<TrainerTables>> ConnectRemoteTables(
    const RemoteTablesOptions& options, std::vector<embedding::TableConfig> tables);

}  // namespace sift::worker
