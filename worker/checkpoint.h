// Training checkpoints of the single-process trainer: the dense parameters with their Adam state,
// every embedding table's rows with their optimizer state, and where training stands (completed
// epochs, global step). A checkpoint is a directory:
//   dense-<step>.bin        SIFTDENS binary file (common/data/binary_file.h): params, adam m, v
//   table_<id>-<step>.bin   SIFTTABL binary file per table: ids (uint64), rows [n, row_floats]
//   manifest.json           written LAST: format, version, epoch, step, adam_t, seed, model,
//                           the fp16 loss scaler's state when the run has one,
//                           summary, every file with its size and CRC32C — the commit point: a
//                           directory without a manifest is not a checkpoint.
// When the tables live on embedding servers (`sift train --embedding-servers`), there are no
// table files: the servers have written a snapshot (proto/embedding.proto Snapshot) before the
// manifest, and the manifest's "embedding_snapshot" names it with every shard file's path, size,
// payload CRC and rows; loading restores it on the servers (Restore re-verifies the files).
// Every file is written to a temp name, fsynced and renamed (AtomicFileWriter). Saving over an
// existing checkpoint writes new step-named data files first, then replaces the manifest (an atomic
// rename), then deletes the old data files: a crash or error mid-save leaves the old checkpoint
// whole.
// Loading checks the manifest, each file's size and CRC, the counters, that the checkpoint holds
// exactly the store's tables, and the shapes against the caller's model.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/embedding/table.h"

namespace sift::worker {

struct CheckpointState {
  int64_t epochs_done = 0;  // completed epochs; training resumes at this epoch index
  int64_t global_step = 0;  // optimizer steps taken so far
  int64_t adam_t = 0;       // dense Adam step count
  uint64_t seed = 0;
  std::string model;  // a summary string of the model config; must match on load
  // Cluster jobs: the job that wrote it and its owner (manifest "job"; "" = not recorded).
  std::string job_id, owner;
  std::vector<float> params, adam_m, adam_v;
  // fp16 runs: the dynamic loss scaler's state (worker/loss_scaler.h), manifest "loss_scaler".
  struct LossScale {
    bool present = false;
    float scale = 0;
    int64_t good_steps = 0;
  } loss_scale;
  // Runs with a validation split (common/model_selection.h), manifest "selection": the best
  // epoch so far and its step, so a resumed run keeps choosing and stopping alike.
  struct Selection {
    bool present = false;
    int64_t best_epoch = -1;
    int64_t best_global_step = 0;
    double best_validation_auc = 0, best_test_auc = 0, best_test_loss = 0;
  } selection;
  // Set when the tables are an embedding-server snapshot instead of table files.
  struct RemoteSnapshot {
    struct File {
      std::string path;
      uint64_t bytes = 0;
      uint32_t payload_crc32c = 0;
      int64_t rows = 0;
    };
    std::string name;  // the snapshot name on the servers ("" = none)
    uint32_t num_shards = 0;
    std::vector<File> files;  // shard order
  } remote;
};

// Writes `state` and every table of `store` to `dir` (created if missing). With store == nullptr
// the tables are state.remote (REQUIRES: its name is set and the snapshot is written).
Status SaveCheckpoint(const std::string& dir, const CheckpointState& state,
                      const embedding::EmbeddingStore* store);

// Reads the checkpoint in `dir` into `state` and loads its table rows into `store` (whose tables
// must have the same ids and row sizes). FAILED_PRECONDITION / DATA_LOSS / INVALID_ARGUMENT
// naming the file and field on a missing manifest, a size or CRC mismatch, a model mismatch
// (`expect_model` != saved summary) or a parameter count mismatch. With store == nullptr
// (tables on embedding servers) the checkpoint must hold an embedding snapshot, returned in
// state->remote for the caller to restore; a checkpoint of in-process tables then is
// FAILED_PRECONDITION, and so is a snapshot checkpoint loaded into an in-process store.
Status LoadCheckpoint(const std::string& dir, const std::string& expect_model,
                      int64_t expect_params, CheckpointState* state,
                      embedding::EmbeddingStore* store);

// Job directories (cluster jobs, checkpoint.keep): a job writes each checkpoint into its own
// subdirectory <job-dir>/step-<N>/ (N = global step, zero-padded to 12 digits), so that it can
// keep several; sift train writes one checkpoint directory in place.
std::string CheckpointStepDir(const std::string& job_dir, int64_t global_step);

// The step directories of `job_dir` that hold a manifest (complete checkpoints), newest step
// first, as (step, path). Other entries are ignored; a missing job_dir has none.
std::vector<std::pair<int64_t, std::string>> ListStepCheckpoints(const std::string& job_dir);

// `path` itself when it holds a manifest, else the newest complete step directory under it
// (a job directory), else `path` unchanged (loading it then names what is missing).
std::string ResolveCheckpointDir(const std::string& path);

// After the checkpoint of `committed_step` was committed: deletes the step directories of
// `job_dir` older than it, except the newest `keep` complete ones (the committed one counts).
// Directories of later steps (a previous generation's, never committed) are left alone. Returns
// the first deletion error (deleting is best effort: the others are still tried).
// REQUIRES: keep >= 1.
// `protect_step` >= 0 names one more checkpoint that stays (the kept model of keep_best).
Status PruneStepCheckpoints(const std::string& job_dir, int64_t committed_step, int keep,
                            int64_t protect_step = -1);

}  // namespace sift::worker
