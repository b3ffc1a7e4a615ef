#include "server/embedding/snapshot.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/data/binary_file.h"
#include "common/file_util.h"
#include "common/rng.h"
#include "common/sharding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"

namespace sift::embedding {
namespace {

using ::sift::testing::ReadAll;
using ::sift::testing::TempDir;
using ::sift::testing::WriteAll;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 20240611;

std::vector<TableConfig> Tables() {
  std::vector<TableConfig> t(3);
  t[0].table_id = 0;
  t[0].name = "user";
  t[0].dim = 4;
  t[0].cardinality = 1000;
  t[0].optimizer.kind = OptimizerKind::kSgd;
  t[0].optimizer.learning_rate = 0.25f;
  t[1].table_id = 2;
  t[1].name = "item";
  t[1].dim = 8;
  t[1].cardinality = 50000;
  t[1].optimizer.kind = OptimizerKind::kAdagrad;
  t[1].optimizer.learning_rate = 0.05f;
  t[1].optimizer.initial_accumulator = 0.125f;
  t[1].optimizer.epsilon = 1e-6f;
  t[2].table_id = 5;
  t[2].name = "category";
  t[2].dim = 16;
  t[2].cardinality = 300;
  t[2].optimizer.kind = OptimizerKind::kAdam;
  t[2].optimizer.learning_rate = 0.0123f;  // not representable in decimal with few digits
  t[2].optimizer.beta1 = 0.85f;
  t[2].optimizer.beta2 = 0.995f;
  t[2].optimizer.epsilon = 3e-7f;
  return t;
}

std::unique_ptr<EmbeddingStore> MakeStore(uint64_t seed = kSeed, int stripes = 16) {
  auto store = EmbeddingStore::Create(Tables(), StoreOptions{seed, stripes});
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// One push of every table: distinct ids (some beyond the cardinality) and gradients, from `rng`.
struct Push {
  uint32_t table_id;
  std::vector<uint64_t> ids;
  std::vector<float> grads;
};

std::vector<Push> MakePushes(Rng& rng) {
  std::vector<Push> pushes;
  for (const TableConfig& t : Tables()) {
    std::set<uint64_t> ids;
    while (ids.size() < 60) {
      ids.insert(rng.Below(10) == 0 ? (uint64_t{1} << 40) + rng.Below(1000) : rng.Below(400));
    }
    Push p{t.table_id, {ids.begin(), ids.end()}, {}};
    for (size_t i = 0; i < p.ids.size() * t.dim; ++i) {
      p.grads.push_back(static_cast<float>(0.1 * rng.Normal()));
    }
    pushes.push_back(std::move(p));
  }
  return pushes;
}

int DimOf(uint32_t table_id) {
  for (const TableConfig& t : Tables()) {
    if (t.table_id == table_id) return t.dim;
  }
  return 0;
}

// Applies `steps` rounds of pushes to shard stores: key (t, id) goes to stores[ShardOf(t, id, S)].
void Train(const std::vector<EmbeddingStore*>& stores, uint64_t seed, int steps) {
  Rng rng(seed);
  const uint32_t s_count = static_cast<uint32_t>(stores.size());
  for (int step = 0; step < steps; ++step) {
    for (const Push& p : MakePushes(rng)) {
      const int dim = DimOf(p.table_id);
      std::vector<std::vector<uint64_t>> ids(s_count);
      std::vector<std::vector<float>> grads(s_count);
      for (size_t i = 0; i < p.ids.size(); ++i) {
        const uint32_t s = ShardOf(p.table_id, p.ids[i], s_count);
        ids[s].push_back(p.ids[i]);
        grads[s].insert(grads[s].end(), p.grads.begin() + i * dim, p.grads.begin() + (i + 1) * dim);
      }
      for (uint32_t s = 0; s < s_count; ++s) {
        std::vector<float> pulled(ids[s].size() * dim);
        ASSERT_TRUE(stores[s]->Pull(p.table_id, ids[s], absl::MakeSpan(pulled)).ok());
        ASSERT_TRUE(stores[s]->Push(p.table_id, ids[s], grads[s], step).ok());
      }
    }
  }
}

SnapshotMeta Meta(uint32_t shard, uint32_t num_shards, int64_t step = 7, uint64_t seed = kSeed) {
  SnapshotMeta m;
  m.shard = shard;
  m.num_shards = num_shards;
  m.step = step;
  m.seed = seed;
  m.tables = Tables();
  return m;
}

void ExpectSameTables(const std::vector<TableConfig>& a, const std::vector<TableConfig>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].table_id, b[i].table_id);
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].dim, b[i].dim);
    EXPECT_EQ(a[i].cardinality, b[i].cardinality);
    EXPECT_EQ(a[i].optimizer.kind, b[i].optimizer.kind);
    EXPECT_EQ(a[i].optimizer.learning_rate, b[i].optimizer.learning_rate);
    EXPECT_EQ(a[i].optimizer.beta1, b[i].optimizer.beta1);
    EXPECT_EQ(a[i].optimizer.beta2, b[i].optimizer.beta2);
    EXPECT_EQ(a[i].optimizer.epsilon, b[i].optimizer.epsilon);
    EXPECT_EQ(a[i].optimizer.initial_accumulator, b[i].optimizer.initial_accumulator);
  }
}

// (table, id) -> [weights | state] of every row of `dumps`; fails the test on a repeated key.
using RowMap = std::map<std::pair<uint32_t, uint64_t>, std::vector<float>>;
void AddRows(const std::vector<EmbeddingStore::TableDump>& dumps, RowMap* rows) {
  for (const EmbeddingStore::TableDump& d : dumps) {
    for (size_t i = 0; i < d.ids.size(); ++i) {
      std::vector<float> row(d.data.begin() + i * d.row_floats,
                             d.data.begin() + (i + 1) * d.row_floats);
      ASSERT_TRUE(rows->emplace(std::make_pair(d.table_id, d.ids[i]), std::move(row)).second)
          << "table " << d.table_id << " id " << d.ids[i] << " twice";
    }
  }
}

std::vector<EmbeddingStore::TableDump> DumpAll(const EmbeddingStore& store) {
  std::vector<EmbeddingStore::TableDump> out;
  for (const TableConfig& t : Tables()) {
    auto d = store.DumpTable(t.table_id);
    EXPECT_TRUE(d.ok()) << d.status();
    out.push_back(std::move(*d));
  }
  return out;
}

void ExpectSameDump(const EmbeddingStore::TableDump& a, const EmbeddingStore::TableDump& b) {
  EXPECT_EQ(a.table_id, b.table_id);
  EXPECT_EQ(a.row_floats, b.row_floats);
  EXPECT_EQ(a.ids, b.ids);
  ASSERT_EQ(a.data.size(), b.data.size());
  // Bitwise: adam's step count is a uint32 bit pattern in a float slot.
  EXPECT_EQ(0, std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)));
}

// Writes snapshots of a job trained with `num_shards` shards into `dir`; returns the reference
// rows of the same training on one unsharded store.
RowMap WriteShardedSnapshot(const std::string& dir, uint32_t num_shards) {
  std::vector<std::unique_ptr<EmbeddingStore>> owned;
  std::vector<EmbeddingStore*> stores;
  for (uint32_t s = 0; s < num_shards; ++s) {
    owned.push_back(MakeStore(kSeed, /*stripes=*/3 + s));
    stores.push_back(owned.back().get());
  }
  Train(stores, /*seed=*/99, /*steps=*/4);
  for (uint32_t s = 0; s < num_shards; ++s) {
    Status st = WriteShardSnapshot(dir + "/" + ShardSnapshotFileName(s, num_shards),
                                   Meta(s, num_shards), *stores[s], nullptr);
    EXPECT_TRUE(st.ok()) << st;
  }
  auto single = MakeStore();
  Train({single.get()}, /*seed=*/99, /*steps=*/4);
  RowMap rows;
  AddRows(DumpAll(*single), &rows);
  return rows;
}

TEST(SnapshotFileName, ZeroPadded) {
  EXPECT_EQ(ShardSnapshotFileName(3, 8), "shard-00003-of-00008.snap");
  EXPECT_EQ(ShardSnapshotFileName(0, 1), "shard-00000-of-00001.snap");
  EXPECT_EQ(ShardSnapshotFileName(123456, 200000), "shard-123456-of-200000.snap");
}

TEST(ShardSnapshot, RoundTripRestoresRowsAndOptimizerState) {
  TempDir tmp;
  auto store = MakeStore();
  Train({store.get()}, /*seed=*/5, /*steps=*/3);
  const std::string path = tmp.Sub(ShardSnapshotFileName(1, 4));
  SnapshotFileInfo info;
  ASSERT_TRUE(WriteShardSnapshot(path, Meta(1, 4, /*step=*/1234567890123), *store, &info).ok());
  EXPECT_EQ(info.path, path);
  EXPECT_EQ(info.bytes, ReadAll(path).size());
  auto header = data::BinaryFile::Open(path, kSnapshotMagic, /*verify=*/true);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(info.payload_crc, header->header().payload_crc);
  EXPECT_EQ(header->header().counts, (std::array<uint64_t, 3>{1, 4, 3}));

  auto snap = ReadShardSnapshot(path);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->meta.shard, 1u);
  EXPECT_EQ(snap->meta.num_shards, 4u);
  EXPECT_EQ(snap->meta.step, 1234567890123);
  EXPECT_EQ(snap->meta.seed, kSeed);
  EXPECT_EQ(snap->source_shards, 4u);
  ExpectSameTables(snap->meta.tables, Tables());
  const auto want = DumpAll(*store);
  ASSERT_EQ(snap->tables.size(), 3u);
  int64_t rows = 0;
  for (size_t t = 0; t < 3; ++t) {
    ExpectSameDump(snap->tables[t], want[t]);
    rows += static_cast<int64_t>(want[t].ids.size());
  }
  EXPECT_EQ(info.rows, rows);
  EXPECT_GT(rows, 300);

  // Restore into a fresh store (another stripe count): same rows, and a further push gives the
  // same result as on the original (the optimizer state came back, adam's step count included).
  auto restored = MakeStore(kSeed, /*stripes=*/5);
  for (const EmbeddingStore::TableDump& d : snap->tables) {
    ASSERT_TRUE(restored->LoadRows(d.table_id, d.row_floats, d.ids, d.data).ok());
  }
  Rng rng(77);
  const std::vector<Push> more = MakePushes(rng);
  for (const Push& p : more) {
    const int dim = DimOf(p.table_id);
    std::vector<float> a(p.ids.size() * dim), b(p.ids.size() * dim);
    ASSERT_TRUE(store->Pull(p.table_id, p.ids, absl::MakeSpan(a)).ok());
    ASSERT_TRUE(restored->Pull(p.table_id, p.ids, absl::MakeSpan(b)).ok());
    EXPECT_EQ(a, b) << "table " << p.table_id;
    ASSERT_TRUE(store->Push(p.table_id, p.ids, p.grads, 9).ok());
    ASSERT_TRUE(restored->Push(p.table_id, p.ids, p.grads, 9).ok());
    ASSERT_TRUE(store->Pull(p.table_id, p.ids, absl::MakeSpan(a)).ok());
    ASSERT_TRUE(restored->Pull(p.table_id, p.ids, absl::MakeSpan(b)).ok());
    EXPECT_EQ(a, b) << "table " << p.table_id;
  }
  const auto after_a = DumpAll(*store), after_b = DumpAll(*restored);
  for (size_t t = 0; t < 3; ++t) ExpectSameDump(after_a[t], after_b[t]);

  // Weights alone are not enough: the same rows with fresh optimizer state diverge on adam and
  // adagrad after the same push.
  auto weights_only = MakeStore();
  for (size_t t = 1; t < 3; ++t) {
    const TableConfig c = Tables()[t];
    std::vector<float> fresh = want[t].data;
    for (size_t i = 0; i < want[t].ids.size(); ++i) {
      InitOptimizerState(c.optimizer, c.dim, fresh.data() + i * want[t].row_floats + c.dim);
    }
    ASSERT_TRUE(weights_only->LoadRows(c.table_id, want[t].row_floats, want[t].ids, fresh).ok());
    const Push& p = more[t];
    std::vector<float> pulled(p.ids.size() * c.dim);
    ASSERT_TRUE(weights_only->Pull(p.table_id, p.ids, absl::MakeSpan(pulled)).ok());
    ASSERT_TRUE(weights_only->Push(p.table_id, p.ids, p.grads, 9).ok());
    auto d = weights_only->DumpTable(p.table_id);
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->ids, after_b[t].ids);
    EXPECT_NE(d->data, after_b[t].data) << "table " << p.table_id;
  }
}

TEST(ShardSnapshot, SameStoreGivesSameBytes) {
  TempDir tmp;
  auto a = MakeStore(kSeed, 4), b = MakeStore(kSeed, 31);
  Train({a.get()}, 3, 2);
  Train({b.get()}, 3, 2);
  SnapshotFileInfo ia, ib;
  ASSERT_TRUE(WriteShardSnapshot(tmp.Sub("a.snap"), Meta(0, 1), *a, &ia).ok());
  ASSERT_TRUE(WriteShardSnapshot(tmp.Sub("b.snap"), Meta(0, 1), *b, &ib).ok());
  EXPECT_EQ(ReadAll(tmp.Sub("a.snap")), ReadAll(tmp.Sub("b.snap")));
  EXPECT_EQ(ia.payload_crc, ib.payload_crc);
  // Overwriting keeps no temp file behind.
  ASSERT_TRUE(WriteShardSnapshot(tmp.Sub("a.snap"), Meta(0, 1, 8), *a, nullptr).ok());
  auto snap = ReadShardSnapshot(tmp.Sub("a.snap"));
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->meta.step, 8);
}

TEST(ShardSnapshot, EmptyTablesRoundTrip) {
  TempDir tmp;
  auto store = MakeStore();
  const std::string path = tmp.Sub("empty.snap");
  SnapshotFileInfo info;
  ASSERT_TRUE(WriteShardSnapshot(path, Meta(0, 1, 0), *store, &info).ok());
  EXPECT_EQ(info.rows, 0);
  auto snap = ReadShardSnapshot(path);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->tables.size(), 3u);
  for (const auto& t : snap->tables) EXPECT_TRUE(t.ids.empty() && t.data.empty());
}

TEST(ShardSnapshot, WriteRejectsMetaThatDoesNotDescribeTheStore) {
  TempDir tmp;
  auto store = MakeStore();
  const std::string path = tmp.Sub("x.snap");
  SnapshotMeta m = Meta(0, 1);
  m.tables[1].optimizer.learning_rate = 0.5f;
  Status s = WriteShardSnapshot(path, m, *store, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("optimizer.learning_rate"));
  EXPECT_THAT(s.message(), HasSubstr(path));
  m = Meta(0, 1);
  m.tables.pop_back();
  EXPECT_EQ(WriteShardSnapshot(path, m, *store, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  m = Meta(0, 1);
  std::swap(m.tables[0], m.tables[1]);
  EXPECT_EQ(WriteShardSnapshot(path, m, *store, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteShardSnapshot(path, Meta(2, 2), *store, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteShardSnapshot(path, Meta(0, 1, -1), *store, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PathExists(path));
  // An unwritable place: an error naming the path, not a crash.
  const std::string missing_dir = tmp.Sub("no/such/dir/x.snap");
  s = WriteShardSnapshot(missing_dir, Meta(0, 1), *store, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(missing_dir));
}

class CorruptSnapshot : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = MakeStore();
    Train({store.get()}, 11, 2);
    path_ = tmp_.Sub(ShardSnapshotFileName(0, 1));
    ASSERT_TRUE(WriteShardSnapshot(path_, Meta(0, 1), *store, nullptr).ok());
    good_ = ReadAll(path_);
    ASSERT_TRUE(ReadShardSnapshot(path_).ok());
  }
  void ExpectDataLoss(const std::string& bytes, const std::string& what) {
    WriteAll(path_, bytes);
    auto r = ReadShardSnapshot(path_);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << what << ": " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(path_)) << what;
  }
  TempDir tmp_;
  std::string path_, good_;
};

TEST_F(CorruptSnapshot, TruncatedFile) {
  ExpectDataLoss(good_.substr(0, good_.size() - 1), "one byte short");
  ExpectDataLoss(good_.substr(0, good_.size() / 2), "half");
  ExpectDataLoss(good_.substr(0, 30), "inside the header");
  ExpectDataLoss("", "empty");
  ExpectDataLoss(good_ + "x", "one byte more");
}

TEST_F(CorruptSnapshot, FlippedPayloadByte) {
  for (size_t pos : {size_t{64}, size_t{100}, good_.size() / 2, good_.size() - 1}) {
    std::string bad = good_;
    bad[pos] ^= 0x10;
    ExpectDataLoss(bad, "payload byte " + std::to_string(pos));
  }
  std::string bad = good_;
  bad[good_.size() - 5] ^= 0x01;
  WriteAll(path_, bad);
  EXPECT_THAT(ReadShardSnapshot(path_).status().message(), HasSubstr("checksum"));
}

TEST_F(CorruptSnapshot, FlippedHeaderByte) {
  for (size_t pos = 0; pos < data::kHeaderSize; ++pos) {
    std::string bad = good_;
    bad[pos] ^= 0x04;
    ExpectDataLoss(bad, "header byte " + std::to_string(pos));
  }
}

TEST_F(CorruptSnapshot, WrongMagic) {
  std::string bad = good_;
  bad.replace(0, 8, "SIFTTABL");
  ExpectDataLoss(bad, "a checkpoint table file");
  EXPECT_THAT(ReadShardSnapshot(path_).status().message(), HasSubstr("magic"));
}

TEST_F(CorruptSnapshot, MissingFileIsNotFound) {
  auto r = ReadShardSnapshot(tmp_.Sub("nope.snap"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(tmp_.Sub("nope.snap")));
}

// Files with valid checksums but bad content, written with the container directly.
struct RawTable {
  std::array<uint64_t, 3> desc;  // table_id, row_floats, rows
  std::vector<uint64_t> ids;
  std::vector<float> data;
};

nlohmann::json GoodJson() {
  nlohmann::json tables = nlohmann::json::array();
  tables.push_back({{"table_id", 3},
                    {"name", "t"},
                    {"dim", 2},
                    {"cardinality", 10},
                    {"optimizer",
                     {{"kind", "adagrad"},
                      {"learning_rate", 0.5},
                      {"beta1", 0.5},
                      {"beta2", 0.75},
                      {"epsilon", 0.25},
                      {"initial_accumulator", 0.125}}}});
  return {{"format", "sift-embedding-snapshot"},
          {"version", 1},
          {"shard", 0},
          {"num_shards", 1},
          {"step", 3},
          {"seed", 1},
          {"tables", tables}};
}

RawTable GoodTable() { return {{3, 4, 2}, {5, 9}, {1, 2, 3, 4, 5, 6, 7, 8}}; }

void WriteRaw(const std::string& path, const std::string& text, const std::vector<RawTable>& tables,
              std::array<uint64_t, 3> counts = {0, 1, 1}, uint64_t json_bytes_override = 0) {
  data::BinaryFileWriter w;
  ASSERT_TRUE(w.Begin(path, kSnapshotMagic, counts).ok());
  const uint64_t n = json_bytes_override ? json_bytes_override : text.size();
  ASSERT_TRUE(w.Section(&n, 8).ok());
  ASSERT_TRUE(w.Section(text.data(), text.size()).ok());
  for (const RawTable& t : tables) {
    ASSERT_TRUE(w.Section(t.desc.data(), 24).ok());
    ASSERT_TRUE(w.Section(t.ids.data(), t.ids.size() * 8).ok());
    ASSERT_TRUE(w.Section(t.data.data(), t.data.size() * 4).ok());
  }
  ASSERT_TRUE(w.Finish().ok());
}

TEST(ShardSnapshotContent, RawGoodFileReads) {
  TempDir tmp;
  const std::string path = tmp.Sub("raw.snap");
  WriteRaw(path, GoodJson().dump(), {GoodTable()});
  auto r = ReadShardSnapshot(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->meta.tables[0].optimizer.kind, OptimizerKind::kAdagrad);
  EXPECT_EQ(r->meta.tables[0].optimizer.initial_accumulator, 0.125f);
  EXPECT_EQ(r->tables[0].ids, (std::vector<uint64_t>{5, 9}));
}

TEST(ShardSnapshotContent, CrcValidButWrongContentIsDataLossNamingTheField) {
  TempDir tmp;
  const std::string path = tmp.Sub("raw.snap");
  struct Case {
    std::string name, want;
    std::function<void()> write;
  };
  auto with_json = [&](std::function<void(nlohmann::json&)> edit) {
    return [&path, edit] {
      nlohmann::json j = GoodJson();
      edit(j);
      WriteRaw(path, j.dump(), {GoodTable()});
    };
  };
  auto with_table = [&](std::function<void(RawTable&)> edit) {
    return [&path, edit] {
      RawTable t = GoodTable();
      edit(t);
      WriteRaw(path, GoodJson().dump(), {t});
    };
  };
  const std::vector<Case> cases = {
      {"not json", "(root)", [&] { WriteRaw(path, "{\"format\": ", {GoodTable()}); }},
      {"json array", "(root)", [&] { WriteRaw(path, "[1, 2]", {GoodTable()}); }},
      {"format", "'format'", with_json([](auto& j) { j["format"] = "sift-checkpoint"; })},
      {"version", "'version'", with_json([](auto& j) { j["version"] = 2; })},
      {"missing seed", "'seed'", with_json([](auto& j) { j.erase("seed"); })},
      {"negative step", "'step'", with_json([](auto& j) { j["step"] = -4; })},
      {"string shard", "'shard'", with_json([](auto& j) { j["shard"] = "0"; })},
      {"shard >= S", "'shard'", with_json([](auto& j) { j["shard"] = 1; })},
      {"zero shards", "'num_shards'", with_json([](auto& j) { j["num_shards"] = 0; })},
      {"tables object", "'tables'", with_json([](auto& j) {
         j["tables"] = {{"a", 1}};
       })},
      {"dim 0", "'tables[0].dim'", with_json([](auto& j) { j["tables"][0]["dim"] = 0; })},
      {"dim huge", "'tables[0].dim'",
       with_json([](auto& j) { j["tables"][0]["dim"] = uint64_t{1} << 40; })},
      {"empty name", "'tables[0].name'", with_json([](auto& j) { j["tables"][0]["name"] = ""; })},
      {"table id", "'tables[0].table_id'",
       with_json([](auto& j) { j["tables"][0]["table_id"] = uint64_t{1} << 33; })},
      {"kind", "'tables[0].optimizer.kind'",
       with_json([](auto& j) { j["tables"][0]["optimizer"]["kind"] = "rmsprop"; })},
      {"not a float", "'tables[0].optimizer.learning_rate'",
       with_json([](auto& j) { j["tables"][0]["optimizer"]["learning_rate"] = 0.1; })},
      {"float overflow", "'tables[0].optimizer.epsilon'",
       with_json([](auto& j) { j["tables"][0]["optimizer"]["epsilon"] = 1e300; })},
      {"bad accumulator", "'tables[0].optimizer'",
       with_json([](auto& j) { j["tables"][0]["optimizer"]["initial_accumulator"] = -1.0; })},
      {"missing optimizer field", "'tables[0].optimizer.beta2'",
       with_json([](auto& j) { j["tables"][0]["optimizer"].erase("beta2"); })},
      {"header table count", "count 'tables'",
       [&] {
         WriteRaw(path, GoodJson().dump(), {GoodTable()}, {0, 1, 2});
       }},
      {"header shard", "'shard'/'num_shards'",
       [&] {
         WriteRaw(path, GoodJson().dump(), {GoodTable()}, {0, 2, 1});
       }},
      {"json length", "too short",
       [&] {
         WriteRaw(path, GoodJson().dump(), {GoodTable()}, {0, 1, 1}, uint64_t{1} << 62);
       }},
      {"section table id", "table_id", with_table([](RawTable& t) { t.desc[0] = 4; })},
      {"row_floats", "row_floats", with_table([](RawTable& t) { t.desc[1] = 2; })},
      {"rows overflow", "overflow", with_table([](RawTable& t) { t.desc[2] = uint64_t{1} << 62; })},
      {"rows too many", "too short", with_table([](RawTable& t) { t.desc[2] = 3; })},
      {"rows too few", "trailing", with_table([](RawTable& t) { t.desc[2] = 1; })},
      {"ids descending", "ids", with_table([](RawTable& t) {
         t.ids = {9, 5};
       })},
      {"ids repeated", "ids", with_table([](RawTable& t) {
         t.ids = {5, 5};
       })},
      {"missing table", "too short", [&] { WriteRaw(path, GoodJson().dump(), {}); }},
      {"extra section", "trailing",
       [&] {
         WriteRaw(path, GoodJson().dump(), {GoodTable(), GoodTable()});
       }},
  };
  for (const Case& c : cases) {
    c.write();
    auto r = ReadShardSnapshot(path);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << c.name << ": " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(path)) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr(c.want)) << c.name << ": " << r.status();
  }
}

TEST(ShardSnapshotContent, TablesOutOfOrderInJson) {
  TempDir tmp;
  const std::string path = tmp.Sub("raw.snap");
  nlohmann::json j = GoodJson();
  nlohmann::json second = j["tables"][0];
  second["table_id"] = 1;
  j["tables"].push_back(second);
  RawTable t2 = GoodTable();
  t2.desc[0] = 1;
  WriteRaw(path, j.dump(), {GoodTable(), t2}, {0, 1, 2});
  auto r = ReadShardSnapshot(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("'tables[1].table_id'"));
}

// --- Listing ------------------------------------------------------------------------------------

void Touch(const std::string& path) { WriteAll(path, "x"); }

TEST(ListShardSnapshotFiles, CompleteSetInShardOrderIgnoringOtherFiles) {
  TempDir tmp;
  for (uint32_t s : {2u, 0u, 1u}) Touch(tmp.Sub(ShardSnapshotFileName(s, 3)));
  Touch(tmp.Sub("shard-00001-of-00003.snap.tmp.4242"));  // an interrupted write
  Touch(tmp.Sub("shard-00007-of-00009.snap.tmp.1"));
  Touch(tmp.Sub("manifest.json"));
  Touch(tmp.Sub("shard-1-of-3.snap"));  // not our spelling
  auto r = ListShardSnapshotFiles(tmp.path());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (std::vector<std::string>{tmp.Sub("shard-00000-of-00003.snap"),
                                          tmp.Sub("shard-00001-of-00003.snap"),
                                          tmp.Sub("shard-00002-of-00003.snap")}));
}

TEST(ListShardSnapshotFiles, MissingShard) {
  TempDir tmp;
  Touch(tmp.Sub(ShardSnapshotFileName(0, 3)));
  Touch(tmp.Sub(ShardSnapshotFileName(2, 3)));
  Touch(tmp.Sub("shard-00001-of-00003.snap.tmp.99"));
  auto r = ListShardSnapshotFiles(tmp.path());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("missing shard 1 of 3"));
  EXPECT_THAT(r.status().message(), HasSubstr(tmp.path()));
}

TEST(ListShardSnapshotFiles, MixedShardCounts) {
  TempDir tmp;
  Touch(tmp.Sub(ShardSnapshotFileName(0, 2)));
  Touch(tmp.Sub(ShardSnapshotFileName(1, 2)));
  Touch(tmp.Sub(ShardSnapshotFileName(0, 3)));
  auto r = ListShardSnapshotFiles(tmp.path());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("mixed"));
  EXPECT_THAT(r.status().message(), HasSubstr("of 2 shards"));
  EXPECT_THAT(r.status().message(), HasSubstr("of 3 shards"));
}

TEST(ListShardSnapshotFiles, ShardNotBelowCount) {
  TempDir tmp;
  Touch(tmp.Sub("shard-00003-of-00003.snap"));
  auto r = ListShardSnapshotFiles(tmp.path());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("shard-00003-of-00003.snap"));
}

TEST(ListShardSnapshotFiles, MissingDirOrNoFilesIsNotFound) {
  TempDir tmp;
  EXPECT_EQ(ListShardSnapshotFiles(tmp.Sub("none")).status().code(), absl::StatusCode::kNotFound);
  Touch(tmp.Sub("shard-00000-of-00001.snap.tmp.5"));
  auto r = ListShardSnapshotFiles(tmp.path());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(tmp.path()));
  EXPECT_EQ(LoadSnapshotForShard(tmp.path(), 0, 1).status().code(), absl::StatusCode::kNotFound);
}

// --- Restore ------------------------------------------------------------------------------------

void CheckResharding(uint32_t from, uint32_t to) {
  TempDir tmp;
  const RowMap want = WriteShardedSnapshot(tmp.path(), from);
  ASSERT_GT(want.size(), 500u);
  RowMap got;
  for (uint32_t s = 0; s < to; ++s) {
    auto r = LoadSnapshotForShard(tmp.path(), s, to);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->meta.shard, s);
    EXPECT_EQ(r->meta.num_shards, to);
    EXPECT_EQ(r->meta.step, 7);
    EXPECT_EQ(r->meta.seed, kSeed);
    EXPECT_EQ(r->source_shards, from);
    EXPECT_EQ(r->misrouted_rows, 0);
    ExpectSameTables(r->meta.tables, Tables());
    ASSERT_EQ(r->tables.size(), 3u);
    size_t rows = 0;
    for (size_t t = 0; t < 3; ++t) {
      const EmbeddingStore::TableDump& d = r->tables[t];
      EXPECT_EQ(d.table_id, Tables()[t].table_id);
      EXPECT_EQ(d.data.size(), d.ids.size() * d.row_floats);
      for (size_t i = 0; i < d.ids.size(); ++i) {
        ASSERT_EQ(ShardOf(d.table_id, d.ids[i], to), s) << "id " << d.ids[i];
        if (i > 0) {
          ASSERT_LT(d.ids[i - 1], d.ids[i]);
        }
      }
      rows += d.ids.size();
    }
    EXPECT_GT(rows, 0u) << "shard " << s;
    AddRows(r->tables, &got);  // fails on a key twice, across shards too
  }
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "the union over new shards differs from the trained rows";
}

TEST(LoadSnapshotForShard, Reshard3To2) { CheckResharding(3, 2); }
TEST(LoadSnapshotForShard, Reshard2To5) { CheckResharding(2, 5); }
TEST(LoadSnapshotForShard, Reshard2To1) { CheckResharding(2, 1); }

TEST(LoadSnapshotForShard, SameShardCountReadsOnlyItsOwnFile) {
  TempDir tmp;
  const RowMap all = WriteShardedSnapshot(tmp.path(), 3);
  auto own = ReadShardSnapshot(tmp.Sub(ShardSnapshotFileName(1, 3)));
  ASSERT_TRUE(own.ok());
  std::remove(tmp.Sub(ShardSnapshotFileName(0, 3)).c_str());
  std::remove(tmp.Sub(ShardSnapshotFileName(2, 3)).c_str());
  auto r = LoadSnapshotForShard(tmp.path(), 1, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source_shards, 3u);
  EXPECT_EQ(r->meta.shard, 1u);
  ASSERT_EQ(r->tables.size(), 3u);
  for (size_t t = 0; t < 3; ++t) ExpectSameDump(r->tables[t], own->tables[t]);
  RowMap got;
  AddRows(r->tables, &got);
  for (const auto& [key, row] : got) EXPECT_EQ(all.at(key), row);
  // The other shards' files are gone: their restores fail, naming the file.
  auto other = LoadSnapshotForShard(tmp.path(), 0, 3);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(other.status().message(), HasSubstr(ShardSnapshotFileName(0, 3)));
  // A different S needs the complete set.
  auto reshard = LoadSnapshotForShard(tmp.path(), 0, 2);
  EXPECT_EQ(reshard.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reshard.status().message(), HasSubstr("missing shard 0 of 3"));
}

TEST(LoadSnapshotForShard, MetaMismatchAcrossFiles) {
  TempDir tmp;
  auto a = MakeStore(kSeed), b = MakeStore(kSeed + 1);
  Train({a.get(), b.get()}, 4, 1);
  const std::string p0 = tmp.Sub(ShardSnapshotFileName(0, 2));
  const std::string p1 = tmp.Sub(ShardSnapshotFileName(1, 2));
  ASSERT_TRUE(WriteShardSnapshot(p0, Meta(0, 2), *a, nullptr).ok());
  ASSERT_TRUE(WriteShardSnapshot(p1, Meta(1, 2, 7, kSeed + 1), *b, nullptr).ok());
  auto r = LoadSnapshotForShard(tmp.path(), 0, 3);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("'seed'"));
  EXPECT_THAT(r.status().message(), HasSubstr(p1));
  // Same S: only the own file is read, so the mismatch does not matter.
  EXPECT_TRUE(LoadSnapshotForShard(tmp.path(), 0, 2).ok());

  ASSERT_TRUE(WriteShardSnapshot(p1, Meta(1, 2, 8, kSeed), *b, nullptr).ok());
  r = LoadSnapshotForShard(tmp.path(), 0, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("'step'"));
}

TEST(LoadSnapshotForShard, TableConfigMismatchAcrossFiles) {
  TempDir tmp;
  std::vector<TableConfig> other = Tables();
  other[2].optimizer.beta2 = 0.99f;
  auto a = MakeStore();
  auto b = EmbeddingStore::Create(other, StoreOptions{kSeed, 8});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(
      WriteShardSnapshot(tmp.Sub(ShardSnapshotFileName(0, 2)), Meta(0, 2), *a, nullptr).ok());
  SnapshotMeta m = Meta(1, 2);
  m.tables = other;
  ASSERT_TRUE(WriteShardSnapshot(tmp.Sub(ShardSnapshotFileName(1, 2)), m, **b, nullptr).ok());
  auto r = LoadSnapshotForShard(tmp.path(), 0, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("tables[2].optimizer.beta2"));
}

TEST(LoadSnapshotForShard, FileWhoseContentDisagreesWithItsName) {
  TempDir tmp;
  auto a = MakeStore();
  ASSERT_TRUE(
      WriteShardSnapshot(tmp.Sub(ShardSnapshotFileName(0, 2)), Meta(1, 2), *a, nullptr).ok());
  auto r = LoadSnapshotForShard(tmp.path(), 0, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("file name says 0/2"));
}

TEST(LoadSnapshotForShard, CorruptFileFailsTheWholeRestore) {
  TempDir tmp;
  WriteShardedSnapshot(tmp.path(), 2);
  const std::string p1 = tmp.Sub(ShardSnapshotFileName(1, 2));
  std::string bytes = ReadAll(p1);
  bytes[bytes.size() - 3] ^= 0x20;
  WriteAll(p1, bytes);
  // Restoring shard 0 of 3 reads both files: shard 1's corruption is reported.
  auto r = LoadSnapshotForShard(tmp.path(), 0, 3);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(p1));
  EXPECT_EQ(LoadSnapshotForShard(tmp.path(), 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadSnapshotForShard(tmp.path(), 3, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LoadSnapshotForShard, MisroutedKeysComeFromTheirHomeFileOnly) {
  TempDir tmp;
  auto a = MakeStore(kSeed), b = MakeStore(kSeed);
  // A key of shard 1 (of 2) that a misrouted push also put on shard 0, with a different value.
  uint64_t key = 0;
  while (ShardOf(5, key, 2) != 1) ++key;
  const std::vector<float> g1(16, 0.5f), g0(16, -0.25f);
  uint64_t own0 = key + 1;
  while (ShardOf(5, own0, 2) != 0) ++own0;
  std::vector<float> pulled(2 * 16);
  ASSERT_TRUE(a->Pull(5, {key, own0}, absl::MakeSpan(pulled)).ok());
  ASSERT_TRUE(b->Pull(5, {key}, absl::MakeSpan(pulled).subspan(0, 16)).ok());
  ASSERT_TRUE(b->Push(5, {key}, g1, 1).ok());
  ASSERT_TRUE(a->Push(5, {key}, g0, 1).ok());
  ASSERT_TRUE(a->Push(5, {own0}, g0, 1).ok());
  ASSERT_TRUE(
      WriteShardSnapshot(tmp.Sub(ShardSnapshotFileName(0, 2)), Meta(0, 2), *a, nullptr).ok());
  ASSERT_TRUE(
      WriteShardSnapshot(tmp.Sub(ShardSnapshotFileName(1, 2)), Meta(1, 2), *b, nullptr).ok());
  auto want = b->DumpTable(5);
  ASSERT_TRUE(want.ok());
  auto r = LoadSnapshotForShard(tmp.path(), 0, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->misrouted_rows, 1);
  const EmbeddingStore::TableDump& d = r->tables[2];
  ASSERT_EQ(d.ids, (std::vector<uint64_t>{std::min(key, own0), std::max(key, own0)}));
  const size_t at = d.ids[0] == key ? 0 : 1;
  EXPECT_EQ(std::vector<float>(d.data.begin() + at * d.row_floats,
                               d.data.begin() + (at + 1) * d.row_floats),
            want->data);
  // Same S: shard 0 keeps only its own key.
  auto r0 = LoadSnapshotForShard(tmp.path(), 0, 2);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->misrouted_rows, 1);
  EXPECT_EQ(r0->tables[2].ids, (std::vector<uint64_t>{own0}));
}

}  // namespace
}  // namespace sift::embedding
