// Fuzz target: the embedding server's shard snapshot files (server/embedding/snapshot.h
// ReadShardSnapshot, LoadSnapshotForShard), the read side of Restore.
//
// Input: one mode byte, then the file. Mode bits 0-2: the header fields FixBinaryHeader repairs
// (payload size, payload CRC, header CRC), so mutations of the JSON and the table sections get
// past the checksums; bit 3: the file is shard-00000-of-00001.snap in a snapshot directory read
// with LoadSnapshotForShard (bit 4: restored into 2 shards, the re-sharding path) instead of
// ReadShardSnapshot alone. Invariants: errors are values with a message; what reads is consistent
// (one dump per table config, ids strictly ascending, rows x row_floats floats, row_floats = dim +
// optimizer state) and restores into a store built from its configs, as Restore does.
#include <cstdint>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "server/embedding/optimizer.h"
#include "server/embedding/snapshot.h"
#include "server/embedding/table.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using sift::embedding::EmbeddingStore;
using sift::embedding::ShardSnapshot;

void CheckSnapshot(const ShardSnapshot& snap) {
  FUZZ_CHECK(snap.tables.size() == snap.meta.tables.size(), "one dump per table");
  auto store = EmbeddingStore::Create(snap.meta.tables, sift::embedding::StoreOptions{});
  FUZZ_CHECK(store.ok(),
             "a snapshot that reads has valid table configs: " + store.status().ToString());
  for (size_t t = 0; t < snap.tables.size(); ++t) {
    const auto& dump = snap.tables[t];
    const auto& config = snap.meta.tables[t];
    FUZZ_CHECK(dump.table_id == config.table_id, "dump order");
    FUZZ_CHECK(
        dump.row_floats == config.dim + sift::embedding::StateFloats(config.optimizer, config.dim),
        "row_floats");
    FUZZ_CHECK(dump.data.size() == dump.ids.size() * static_cast<size_t>(dump.row_floats),
               "rows x row_floats");
    for (size_t i = 1; i < dump.ids.size(); ++i) {
      FUZZ_CHECK(dump.ids[i - 1] < dump.ids[i], "ids strictly ascending");
    }
    const sift::Status s = (*store)->LoadRows(dump.table_id, dump.row_floats, dump.ids, dump.data);
    FUZZ_CHECK(s.ok(), "a snapshot that reads restores: " + s.ToString());
  }
}

// A small genuine snapshot: two tables (adam, adagrad), a few rows each.
std::string GenuineSnapshot() {
  std::vector<sift::embedding::TableConfig> tables(2);
  tables[0] = {1, "users", 2, 10, {}};
  tables[1] = {4, "items", 3, 50, {}};
  tables[1].optimizer.kind = sift::embedding::OptimizerKind::kAdagrad;
  auto store = EmbeddingStore::Create(tables, sift::embedding::StoreOptions{7});
  FUZZ_CHECK(store.ok(), store.status().ToString());
  std::vector<float> out(3 * 3);
  FUZZ_CHECK((*store)->Pull(1, std::vector<uint64_t>{3, 1}, absl::MakeSpan(out.data(), 4)).ok(),
             "pull");
  FUZZ_CHECK((*store)->Pull(4, std::vector<uint64_t>{8, 2, 40}, absl::MakeSpan(out)).ok(), "pull");
  sift::embedding::SnapshotMeta meta;
  meta.step = 12;
  meta.seed = 7;
  meta.tables = tables;
  const std::string path = sift::fuzz::ScratchDir::Get().File("genuine.snap");
  const sift::Status s = sift::embedding::WriteShardSnapshot(path, meta, **store, nullptr);
  FUZZ_CHECK(s.ok(), s.ToString());
  auto bytes = sift::ReadFileToString(path);
  FUZZ_CHECK(bytes.ok(), bytes.status().ToString());
  return *bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sift::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  std::string file(in.Rest());
  sift::fuzz::FixBinaryHeader(&file, mode & sift::fuzz::kFixAll);
  const auto& scratch = sift::fuzz::ScratchDir::Get();
  scratch.Reset();
  sift::StatusOr<ShardSnapshot> snap;
  if (mode & 8) {
    const std::string dir = scratch.File("snap");
    FUZZ_CHECK(sift::MakeDirs(dir).ok(), dir);
    sift::fuzz::WriteFile(dir + "/" + sift::embedding::ShardSnapshotFileName(0, 1), file);
    const uint32_t shards = (mode & 16) ? 2 : 1;
    snap = sift::embedding::LoadSnapshotForShard(dir, 0, shards);
    if (snap.ok()) FUZZ_CHECK(snap->meta.num_shards == shards, "num_shards");
  } else {
    const std::string path = scratch.File("shard.snap");
    sift::fuzz::WriteFile(path, file);
    snap = sift::embedding::ReadShardSnapshot(path);
  }
  sift::fuzz::Note("read", snap.status());
  if (!snap.ok()) {
    FUZZ_CHECK(!snap.status().message().empty(), snap.status().ToString());
    return 0;
  }
  CheckSnapshot(*snap);
  return 0;
}

// Seeds for the standalone driver's --write-seeds: the genuine file under each read path.
extern "C" void SiftFuzzWriteSeeds(const char* out_dir) {
  const std::string genuine = GenuineSnapshot();
  for (int mode : {7, 15, 31}) {
    sift::fuzz::WriteFile(std::string(out_dir) + "/genuine-" + std::to_string(mode),
                          std::string(1, static_cast<char>(mode)) + genuine);
  }
}
