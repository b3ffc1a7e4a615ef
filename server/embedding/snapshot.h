// Shard snapshot files of the embedding server: one file per shard holding every table of the
// shard (ids + [weights | optimizer state] rows) and the shard's metadata, written atomically and
// checksummed; plus the read side of Restore, including re-sharding (a snapshot taken with S
// shards restored by a server of S' != S shards). Pure functions over files; thread-compatible
// (no shared state). proto/embedding.proto Snapshot/Restore is the RPC contract this implements.
//
// File layout: the sift binary container (common/data/binary_file.h), magic "SIFTSNAP", header
// counts {shard, num_shards, table count}, header and payload CRC32C. Payload sections, each
// 64-byte aligned:
//   [uint64 json_bytes] [json_bytes of JSON metadata]
//   per table, in table_id order:
//     [uint64 table_id, uint64 row_floats, uint64 rows]  [rows x uint64 ids, strictly ascending]
//     [rows x row_floats floats: weights (dim) | optimizer state (optimizer.h layout)]
// The JSON: {"format": "sift-embedding-snapshot", "version": 1, "shard", "num_shards", "step",
// "seed", "tables": [{"table_id", "name", "dim", "cardinality", "optimizer": {"kind": "adam",
// "learning_rate", "beta1", "beta2", "epsilon", "initial_accumulator"}}]} (floats written as
// doubles: they round-trip exactly). The bytes depend only on the store's rows and the meta.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/embedding/table.h"

namespace sift::embedding {

inline constexpr char kSnapshotMagic[] = "SIFTSNAP";
inline constexpr int kSnapshotFormatVersion = 1;

struct SnapshotMeta {
  uint32_t shard = 0;
  uint32_t num_shards = 1;
  int64_t step = 0;                 // the checkpoint's step, >= 0
  uint64_t seed = 0;                // the job seed of the deterministic init
  std::vector<TableConfig> tables;  // in strictly ascending table_id order
};

struct SnapshotFileInfo {
  std::string path;
  uint64_t bytes = 0;        // whole file: header + payload
  uint32_t payload_crc = 0;  // CRC32C of the payload, as stored in the header
  int64_t rows = 0;          // over all tables
};

// "shard-00003-of-00008.snap" (at least 5 digits each). REQUIRES: shard < num_shards.
std::string ShardSnapshotFileName(uint32_t shard, uint32_t num_shards);

// Writes every table of `store` (DumpTable: ids + [weights | optimizer state] rows) and `meta` to
// `path` atomically (temp file, fsync, rename: `path` holds the old file or the whole new one).
// REQUIRES: no concurrent Push (the caller's lock); the store's tables are exactly meta.tables
// (same ids, names, dims, cardinalities, optimizers) else INVALID_ARGUMENT; shard < num_shards;
// step >= 0. I/O errors keep their code (NOT_FOUND, PERMISSION_DENIED, RESOURCE_EXHAUSTED,
// INTERNAL) and name the path. `info` (optional) receives the written file's size, CRC and rows.
Status WriteShardSnapshot(const std::string& path, const SnapshotMeta& meta,
                          const EmbeddingStore& store, SnapshotFileInfo* info);

// A snapshot's content in memory. tables[i] holds the rows of meta.tables[i], ids ascending.
struct ShardSnapshot {
  SnapshotMeta meta;
  std::vector<EmbeddingStore::TableDump> tables;
  uint32_t source_shards = 1;  // S of the snapshot the rows came from
  // LoadSnapshotForShard only: rows dropped because their file was not their shard's under the
  // snapshot's S (keys a misrouted request put on the wrong server; each key has one home file).
  int64_t misrouted_rows = 0;
};

// Reads one shard file with full verification: header and payload CRC, magic, version, every
// structural field (JSON fields and ranges, table count, table ids ascending, row_floats == dim +
// StateFloats, ids strictly ascending, section sizes, no trailing bytes). NOT_FOUND when the file
// is missing; DATA_LOSS naming the path and the field for anything else wrong. Never crashes on a
// corrupt (even CRC-valid) file. source_shards = meta.num_shards.
StatusOr<ShardSnapshot> ReadShardSnapshot(const std::string& path);

// The shard files of the snapshot directory `dir`, in shard order: a complete set 0..S-1 of
// ShardSnapshotFileName files of one S (other names, e.g. temp files, are ignored). NOT_FOUND when
// `dir` is missing or holds no shard file; FAILED_PRECONDITION naming the missing shard or the
// mixed S values (or a name whose shard is not below its S).
StatusOr<std::vector<std::string>> ListShardSnapshotFiles(const std::string& dir);

// The rows shard `shard` of `num_shards` must hold after restoring the snapshot in `dir`: the keys
// (t, id) with ShardOf(t, id, num_shards) == shard, each taken from its home file (the file of
// shard ShardOf(t, id, S) of the snapshot's S). When S == num_shards only this shard's own file is
// read (the others need not exist); otherwise every file of a complete set. All files read must
// agree on seed, step and table configs (FAILED_PRECONDITION naming the field and the file), and
// carry the shard and S of their names (DATA_LOSS otherwise). Result: meta.shard/num_shards = the
// arguments, step/seed/tables from the files, per table ids ascending, source_shards = S. Errors
// of ListShardSnapshotFiles and ReadShardSnapshot pass through; INVALID_ARGUMENT unless
// shard < num_shards. Memory: the result plus the memory-mapped files.
StatusOr<ShardSnapshot> LoadSnapshotForShard(const std::string& dir, uint32_t shard,
                                             uint32_t num_shards);

}  // namespace sift::embedding
