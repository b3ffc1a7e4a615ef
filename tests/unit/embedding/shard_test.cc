// EmbeddingShard without a network: the proto-level behaviour of the embedding server (configure,
// pull, push with retry identity, stats, snapshot, restore) and its error codes and messages.
#include "server/embedding/shard.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/rng.h"
#include "common/sharding.h"
#include "common/wire_float.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/embedding/snapshot.h"
#include "tests/util/embedding_requests.h"
#include "tests/util/test_util.h"

namespace sift::embedding {
namespace {

using ::sift::testing::TempDir;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 4242;
constexpr uint32_t kUser = 1;  // sgd, dim 4, lr 1/8
constexpr uint32_t kItem = 7;  // adam, dim 8
constexpr uint32_t kCat = 3;   // adagrad, dim 3

pb::TableConfig TableProto(uint32_t id, const std::string& name, uint32_t dim, uint64_t cardinality,
                           pb::OptimizerKind kind, float lr) {
  pb::TableConfig t;
  t.set_table_id(id);
  t.set_name(name);
  t.set_dim(dim);
  t.set_cardinality(cardinality);
  t.mutable_optimizer()->set_kind(kind);
  t.mutable_optimizer()->set_learning_rate(lr);
  t.mutable_optimizer()->set_beta1(0.9f);
  t.mutable_optimizer()->set_beta2(0.999f);
  t.mutable_optimizer()->set_epsilon(1e-7f);
  t.mutable_optimizer()->set_initial_accumulator(0.125f);
  return t;
}

pb::ConfigureRequest Config(uint64_t seed = kSeed) {
  pb::ConfigureRequest c;
  c.set_seed(seed);
  *c.add_tables() = TableProto(kUser, "user", 4, 1000, pb::OPTIMIZER_SGD, 0.125f);
  *c.add_tables() = TableProto(kItem, "item", 8, 100000, pb::OPTIMIZER_ADAM, 0.01f);
  *c.add_tables() = TableProto(kCat, "cat", 3, 50, pb::OPTIMIZER_ADAGRAD, 0.05f);
  return c;
}

int DimOf(uint32_t table) { return table == kUser ? 4 : table == kItem ? 8 : 3; }

std::unique_ptr<EmbeddingShard> MakeShard(ShardOptions options = {}) {
  auto shard = EmbeddingShard::Create(options);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? std::move(*shard) : nullptr;
}

std::unique_ptr<EmbeddingShard> ConfiguredShard(ShardOptions options = {}) {
  auto shard = MakeShard(options);
  pb::ConfigureResponse r;
  const Status s = shard->Configure(Config(), &r);
  EXPECT_TRUE(s.ok()) << s;
  return shard;
}

using ::sift::testing::ExpectError;
using ::sift::testing::Grads;
using ::sift::testing::Keys;
using ::sift::testing::PullReq;
using ::sift::testing::PushReq;

std::vector<float> Decode(const pb::TableRows& rows, WireFloat encoding = WireFloat::kFp32) {
  std::vector<float> out(rows.rows().size() / static_cast<size_t>(WireFloatBytes(encoding)));
  const Status s = DecodeFloats(encoding, rows.rows(), absl::MakeSpan(out), "rows");
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// The current rows of one table's keys (fp32), without creating any.
std::vector<float> Peek(EmbeddingShard& shard, uint32_t table, const std::vector<uint64_t>& keys) {
  pb::PullResponse r;
  const Status s = shard.Pull(PullReq({{table, keys}}, /*create_missing=*/false), &r);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? Decode(r.tables(0)) : std::vector<float>();
}

// Pulls `tables` (create_missing): a worker pulls every row before it pushes it.
void PullToCreate(EmbeddingShard& shard, const std::vector<Keys>& tables) {
  pb::PullResponse r;
  const Status s = shard.Pull(PullReq(tables), &r);
  ASSERT_TRUE(s.ok()) << s;
}

int64_t RowsOf(const EmbeddingShard& shard, uint32_t table) {
  pb::StatsResponse stats;
  EXPECT_TRUE(shard.Stats(&stats).ok());
  for (const pb::TableStats& t : stats.tables()) {
    if (t.table_id() == table) return t.rows();
  }
  ADD_FAILURE() << "no stats for table " << table;
  return -1;
}

std::vector<float> InitRows(uint32_t table, const std::vector<uint64_t>& keys, uint64_t card,
                            uint64_t seed = kSeed) {
  const int dim = DimOf(table);
  std::vector<float> out(keys.size() * dim);
  for (size_t i = 0; i < keys.size(); ++i) InitRow(seed, table, keys[i], card, dim, &out[i * dim]);
  return out;
}

std::vector<float> Fill(size_t n, float v) { return std::vector<float>(n, v); }

TEST(ShardTest, CreateRejectsBadOptions) {
  ShardOptions o;
  o.shard = 2;
  o.num_shards = 2;
  ExpectError(EmbeddingShard::Create(o).status(), absl::StatusCode::kInvalidArgument, {"--shard"});
  o = {};
  o.num_shards = 0;
  EXPECT_EQ(EmbeddingShard::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = {};
  o.threads = 0;
  ExpectError(EmbeddingShard::Create(o).status(), absl::StatusCode::kInvalidArgument,
              {"--threads"});
  o = {};
  o.max_keys_per_request = 0;
  ExpectError(EmbeddingShard::Create(o).status(), absl::StatusCode::kInvalidArgument,
              {"--max-keys-per-request"});
  o = {};
  o.max_message_bytes = 100;
  ExpectError(EmbeddingShard::Create(o).status(), absl::StatusCode::kInvalidArgument,
              {"--max-message-bytes"});
}

TEST(ShardTest, EverythingBeforeConfigureIsFailedPrecondition) {
  TempDir dir;
  ShardOptions o;
  o.snapshot_dir = dir.path();
  auto shard = MakeShard(o);
  pb::PullResponse pull;
  ExpectError(shard->Pull(PullReq({{kUser, {1, 2}}}), &pull), absl::StatusCode::kFailedPrecondition,
              {"pull", "not configured"});
  pb::PushResponse push;
  ExpectError(shard->Push(PushReq({{kUser, {1}, Fill(4, 1)}}), &push),
              absl::StatusCode::kFailedPrecondition, {"push", "not configured"});
  pb::SnapshotRequest snap;
  snap.set_name("s");
  pb::SnapshotResponse snap_r;
  ExpectError(shard->Snapshot(snap, &snap_r), absl::StatusCode::kFailedPrecondition,
              {"snapshot", "not configured"});
  pb::StatsResponse stats;
  ASSERT_TRUE(shard->Stats(&stats).ok());
  EXPECT_FALSE(stats.configured());
  EXPECT_EQ(stats.tables_size(), 0);
  EXPECT_TRUE(shard->Metrics().empty());
}

TEST(ShardTest, ConfigureIsIdempotentRejectsAnotherConfigAndReplaces) {
  ShardOptions o;
  o.shard = 1;
  o.num_shards = 3;
  o.max_keys_per_request = 777;
  o.max_message_bytes = 123456;
  auto shard = MakeShard(o);
  pb::ConfigureResponse r;
  ASSERT_TRUE(shard->Configure(Config(), &r).ok());
  EXPECT_TRUE(r.created());
  EXPECT_EQ(r.shard(), 1u);
  EXPECT_EQ(r.num_shards(), 3u);
  EXPECT_EQ(r.max_keys_per_request(), 777u);
  EXPECT_EQ(r.max_message_bytes(), 123456u);

  // The same tables in another order: the same config.
  pb::ConfigureRequest reordered = Config();
  std::swap(*reordered.mutable_tables(0), *reordered.mutable_tables(2));
  r.Clear();
  ASSERT_TRUE(shard->Configure(reordered, &r).ok());
  EXPECT_FALSE(r.created());

  pb::PullResponse pull;
  ASSERT_TRUE(shard->Pull(PullReq({{kUser, {10, 11, 12}}}), &pull).ok());
  EXPECT_EQ(RowsOf(*shard, kUser), 3);

  pb::ConfigureRequest other = Config();
  other.mutable_tables(1)->mutable_optimizer()->set_learning_rate(0.02f);
  ExpectError(shard->Configure(other, &r), absl::StatusCode::kFailedPrecondition,
              {"different config", "replace", "learning_rate"});
  pb::ConfigureRequest other_seed = Config(kSeed + 1);
  ExpectError(shard->Configure(other_seed, &r), absl::StatusCode::kFailedPrecondition, {"seed"});
  EXPECT_EQ(RowsOf(*shard, kUser), 3);  // untouched

  other.set_replace(true);
  r.Clear();
  ASSERT_TRUE(shard->Configure(other, &r).ok());
  EXPECT_TRUE(r.created());
  EXPECT_EQ(RowsOf(*shard, kUser), 0);
  pb::StatsResponse stats;
  ASSERT_TRUE(shard->Stats(&stats).ok());
  ASSERT_EQ(stats.configs_size(), 3);
  // Configs are reported sorted by table id.
  EXPECT_EQ(stats.configs(0).table_id(), kUser);
  EXPECT_EQ(stats.configs(1).table_id(), kCat);
  EXPECT_EQ(stats.configs(2).table_id(), kItem);
  EXPECT_FLOAT_EQ(stats.configs(2).optimizer().learning_rate(), 0.02f);
}

TEST(ShardTest, BadConfigsAreInvalidArgumentAndKeepTheCurrentTables) {
  auto shard = ConfiguredShard();
  pb::PullResponse pull;
  ASSERT_TRUE(shard->Pull(PullReq({{kUser, {1, 2}}}), &pull).ok());
  pb::ConfigureResponse r;
  pb::ConfigureRequest bad = Config();
  bad.set_replace(true);
  bad.mutable_tables(1)->set_dim(0);
  ExpectError(shard->Configure(bad, &r), absl::StatusCode::kInvalidArgument, {"item", "'dim'"});
  bad = Config();
  bad.set_replace(true);
  bad.mutable_tables(0)->mutable_optimizer()->set_kind(static_cast<pb::OptimizerKind>(9));
  ExpectError(shard->Configure(bad, &r), absl::StatusCode::kInvalidArgument,
              {"user", "optimizer.kind"});
  bad = Config();
  bad.set_replace(true);
  bad.mutable_tables(2)->set_table_id(kUser);
  EXPECT_EQ(shard->Configure(bad, &r).code(), absl::StatusCode::kInvalidArgument);
  bad.Clear();
  bad.set_replace(true);
  ExpectError(shard->Configure(bad, &r), absl::StatusCode::kInvalidArgument, {"tables"});
  EXPECT_EQ(RowsOf(*shard, kUser), 2);
}

TEST(ShardTest, PullGivesTheDeterministicInitAndEncodings) {
  auto shard = ConfiguredShard();
  const std::vector<uint64_t> keys = {5, 1ull << 63, 0, 5, 999999999999ull};
  pb::PullResponse r;
  ASSERT_TRUE(shard->Pull(PullReq({{kUser, keys}, {kCat, {7}}}), &r).ok());
  ASSERT_EQ(r.tables_size(), 2);
  EXPECT_EQ(r.tables(0).table_id(), kUser);
  EXPECT_EQ(r.tables(0).dim(), 4u);
  EXPECT_EQ(Decode(r.tables(0)), InitRows(kUser, keys, 1000));
  EXPECT_EQ(r.tables(1).dim(), 3u);
  EXPECT_EQ(Decode(r.tables(1)), InitRows(kCat, {7}, 50));
  EXPECT_EQ(RowsOf(*shard, kUser), 4);  // the repeated key is one row

  // Evaluation pulls read the init value and create nothing.
  r.Clear();
  ASSERT_TRUE(shard->Pull(PullReq({{kItem, {3, 4}}}, /*create_missing=*/false), &r).ok());
  EXPECT_EQ(Decode(r.tables(0)), InitRows(kItem, {3, 4}, 100000));
  EXPECT_EQ(RowsOf(*shard, kItem), 0);

  // fp16 / bf16: the fp32 rows rounded through the encoding.
  for (const auto& [proto, wire] : {std::pair{pb::ROW_ENCODING_FP16, WireFloat::kFp16},
                                    std::pair{pb::ROW_ENCODING_BF16, WireFloat::kBf16}}) {
    r.Clear();
    ASSERT_TRUE(shard->Pull(PullReq({{kUser, keys}}, true, proto), &r).ok());
    ASSERT_EQ(r.tables(0).rows().size(), keys.size() * 4 * 2);
    const std::vector<float> got = Decode(r.tables(0), wire);
    const std::vector<float> want = InitRows(kUser, keys, 1000);
    for (size_t i = 0; i < want.size(); ++i) {
      const float rounded = wire == WireFloat::kFp16 ? HalfToFloat(FloatToHalf(want[i]))
                                                     : Bfloat16ToFloat(FloatToBfloat16(want[i]));
      EXPECT_EQ(got[i], rounded) << i;
    }
  }
}

TEST(ShardTest, BadPullsNameTheProblemAndCreateNothing) {
  ShardOptions o;
  o.max_keys_per_request = 10;
  auto shard = ConfiguredShard(o);
  pb::PullResponse r;
  // The unknown table comes second: the first table's keys must not be created.
  ExpectError(shard->Pull(PullReq({{kUser, {1, 2, 3}}, {99, {1}}}), &r),
              absl::StatusCode::kInvalidArgument, {"unknown table", "99"});
  EXPECT_EQ(RowsOf(*shard, kUser), 0);
  ExpectError(shard->Pull(PullReq({{kUser, {1}}}, true, static_cast<pb::RowEncoding>(5)), &r),
              absl::StatusCode::kInvalidArgument, {"'encoding'", "5"});
  ExpectError(shard->Pull(PullReq({{kUser, {1, 2, 3, 4, 5, 6}}, {kCat, {1, 2, 3, 4, 5}}}), &r),
              absl::StatusCode::kResourceExhausted, {"11 keys", "10"});
  ExpectError(shard->Pull(PullReq({{kUser, {1}}, {kCat, {1}}, {kUser, {2}}}), &r),
              absl::StatusCode::kInvalidArgument, {"table id 1", "twice"});
  EXPECT_EQ(RowsOf(*shard, kUser), 0);
  EXPECT_EQ(RowsOf(*shard, kCat), 0);
  // Exactly at the limit is fine.
  r.Clear();
  ASSERT_TRUE(shard->Pull(PullReq({{kUser, {1, 2, 3, 4, 5}}, {kCat, {1, 2, 3, 4, 5}}}), &r).ok());
  EXPECT_EQ(RowsOf(*shard, kUser), 5);
}

TEST(ShardTest, OversizeRepliesAndHugeTableListsAreRefusedBeforeAnyWork) {
  // A small request for wide rows: the reply (3 keys x dim 8 x 4 bytes + framing) is over the
  // limit, so it is refused before any row is created or any reply memory is taken.
  ShardOptions o;
  o.max_message_bytes = 1024;
  auto shard = ConfiguredShard(o);
  std::vector<uint64_t> keys(40);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
  pb::PullResponse r;
  ExpectError(shard->Pull(PullReq({{kItem, keys}}), &r), absl::StatusCode::kResourceExhausted,
              {"reply would take", "1024"});
  EXPECT_EQ(RowsOf(*shard, kItem), 0);
  keys.resize(20);  // 20 x 8 x 4 = 640 bytes: fine
  r.Clear();
  ASSERT_TRUE(shard->Pull(PullReq({{kItem, keys}}), &r).ok());
  EXPECT_EQ(RowsOf(*shard, kItem), 20);

  // More tables than any config may have: refused (in linear time) without looking further.
  std::vector<Keys> many;
  for (uint32_t t = 0; t <= kMaxTables; ++t) many.push_back({t + 100, {}});
  ExpectError(shard->Pull(PullReq(many), &r), absl::StatusCode::kInvalidArgument,
              {"tables in one request", "1024"});
  pb::ConfigureRequest big;
  for (uint32_t t = 0; t <= kMaxTables; ++t) {
    *big.add_tables() = TableProto(t, "t", 1, 10, pb::OPTIMIZER_SGD, 0.1f);
  }
  pb::ConfigureResponse cr;
  ExpectError(shard->Configure(big, &cr), absl::StatusCode::kInvalidArgument,
              {"tables in one request"});
}

TEST(ShardTest, FailedPushesChangeNothingInAnyTable) {
  ShardOptions o;
  o.max_keys_per_request = 20;
  auto shard = ConfiguredShard(o);
  const std::vector<uint64_t> old_keys = {1, 2, 3, 4};
  PullToCreate(*shard, {{kUser, old_keys}});
  const std::vector<float> before = Peek(*shard, kUser, old_keys);
  // The first table is valid (pulled keys); the second is bad in some way.
  const Grads good{kUser, {1, 2, 3, 4}, Fill(16, 0.5f)};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::string what;
    pb::PushRequest request;
    absl::StatusCode code;
    std::vector<std::string> parts;
  };
  std::vector<Case> cases = {
      {"wrong gradient length",
       PushReq({good, {kCat, {1, 2}, Fill(5, 1)}}),
       absl::StatusCode::kInvalidArgument,
       {"'cat'", "gradients", "20 bytes, expected 24"}},
      {"keys/gradients mismatch (more keys than rows)",
       PushReq({good, {kItem, {1, 2, 3}, Fill(16, 1)}}),
       absl::StatusCode::kInvalidArgument,
       {"'item'", "gradients", "3 keys"}},
      {"repeated key",
       PushReq({good, {kCat, {4, 9, 4}, Fill(9, 1)}}),
       absl::StatusCode::kInvalidArgument,
       {"'cat'", "id 4 twice"}},
      {"NaN gradient",
       PushReq({good, {kCat, {4}, {1, nan, 1}}}),
       absl::StatusCode::kInvalidArgument,
       {"'cat'", "non-finite"}},
      {"infinite gradient",
       PushReq({good, {kCat, {4}, {1, 1, -inf}}}),
       absl::StatusCode::kInvalidArgument,
       {"'cat'", "non-finite"}},
      {"unknown table",
       PushReq({good, {12345, {4}, Fill(3, 1)}}),
       absl::StatusCode::kInvalidArgument,
       {"unknown table", "12345"}},
      {"table twice",
       PushReq({good, {kUser, {1}, Fill(4, 1)}}),
       absl::StatusCode::kInvalidArgument,
       {"'user'", "twice"}},
      {"a row never pulled",
       PushReq({good, {kCat, {4}, Fill(3, 1)}}),
       absl::StatusCode::kInvalidArgument,
       {"table 'cat' (id 3): id 4: push for a row this shard does not hold: a worker pushes only "
        "rows it pulled"}},
      {"unknown encoding",
       PushReq({good}, 1, static_cast<pb::RowEncoding>(3)),
       absl::StatusCode::kInvalidArgument,
       {"'encoding'"}},
      {"negative step", PushReq({good}, -1), absl::StatusCode::kInvalidArgument, {"'step'"}},
      {"too many keys",
       PushReq({good, {kCat, std::vector<uint64_t>(17, 5), Fill(51, 1)}}),
       absl::StatusCode::kResourceExhausted,
       {"21 keys", "20"}},
  };
  for (float m : {-0.5f, 1.5f, nan}) {
    pb::PushRequest scheduled = PushReq({good});
    scheduled.set_lr_multiplier(m);
    cases.push_back({absl::StrCat("lr_multiplier ", m),
                     scheduled,
                     absl::StatusCode::kInvalidArgument,
                     {"'lr_multiplier'", "(0, 1]"}});
  }
  // fp16 overflows to inf on the wire: a non-finite gradient too.
  cases.push_back({"fp16 infinity",
                   PushReq({good, {kCat, {4}, {1, 1, 1e6f}}}, 1, pb::ROW_ENCODING_FP16),
                   absl::StatusCode::kInvalidArgument,
                   {"'cat'", "non-finite"}});
  for (Case& c : cases) {
    SCOPED_TRACE(c.what);
    c.request.set_client_id(77);
    c.request.set_sequence(1);
    pb::PushResponse r;
    ExpectError(shard->Push(c.request, &r), c.code, c.parts);
    EXPECT_EQ(Peek(*shard, kUser, old_keys), before);
    EXPECT_EQ(RowsOf(*shard, kUser), 4);
    EXPECT_EQ(RowsOf(*shard, kCat), 0);
    EXPECT_EQ(RowsOf(*shard, kItem), 0);
  }
  pb::StatsResponse stats;
  ASSERT_TRUE(shard->Stats(&stats).ok());
  for (const pb::TableStats& t : stats.tables()) {
    EXPECT_EQ(t.last_step(), -1) << t.name();
    EXPECT_EQ(t.pushed_keys(), 0u) << t.name();
  }
  // A failed push does not use up its (client_id, sequence): the fixed request applies.
  pb::PushRequest fixed = PushReq({good});
  fixed.set_client_id(77);
  fixed.set_sequence(1);
  pb::PushResponse r;
  ASSERT_TRUE(shard->Push(fixed, &r).ok());
  EXPECT_FALSE(r.duplicate());
  EXPECT_EQ(r.applied_keys(), 4u);
  std::vector<float> want = before;
  for (float& v : want) v -= 0.125f * 0.5f;
  EXPECT_EQ(Peek(*shard, kUser, old_keys), want);
  // A scheduled push (lr_multiplier 0.25) is the sgd step at a quarter of the rate.
  pb::PushRequest scheduled = PushReq({good});
  scheduled.set_lr_multiplier(0.25f);
  ASSERT_TRUE(shard->Push(scheduled, &r).ok());
  for (float& v : want) v -= 0.125f * 0.25f * 0.5f;
  EXPECT_EQ(Peek(*shard, kUser, old_keys), want);
}

TEST(ShardTest, SgdPushIsExactAndEncodedGradientsMatchFp32) {
  // Three shards with the same config get the same pushes in three encodings; the gradients are
  // exactly representable in fp16 and bf16, so every row must come out the same.
  std::vector<std::unique_ptr<EmbeddingShard>> shards;
  for (int i = 0; i < 3; ++i) shards.push_back(ConfiguredShard());
  const pb::RowEncoding encodings[] = {pb::ROW_ENCODING_FP32, pb::ROW_ENCODING_FP16,
                                       pb::ROW_ENCODING_BF16};
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 40; ++k) keys.push_back(k * 1000003);
  for (auto& shard : shards) PullToCreate(*shard, {{kUser, keys}, {kItem, keys}, {kCat, keys}});
  Rng rng(7);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> g_user(keys.size() * 4), g_item(keys.size() * 8), g_cat(keys.size() * 3);
    for (auto* g : {&g_user, &g_item, &g_cat}) {
      for (float& v : *g) v = static_cast<float>(static_cast<int>(rng.Below(64)) - 32) / 64.0f;
    }
    for (int i = 0; i < 3; ++i) {
      pb::PushResponse r;
      const Status s = shards[i]->Push(
          PushReq({{kUser, keys, g_user}, {kItem, keys, g_item}, {kCat, keys, g_cat}}, step,
                  encodings[i]),
          &r);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(r.applied_keys(), keys.size() * 3);
    }
  }
  for (uint32_t table : {kUser, kItem, kCat}) {
    const std::vector<float> fp32 = Peek(*shards[0], table, keys);
    EXPECT_EQ(Peek(*shards[1], table, keys), fp32) << table;
    EXPECT_EQ(Peek(*shards[2], table, keys), fp32) << table;
  }
}

TEST(ShardTest, SgdArithmeticIsExact) {
  auto shard = ConfiguredShard();
  const std::vector<uint64_t> keys = {3, 1, 2};
  const std::vector<float> init = InitRows(kUser, keys, 1000);
  // Gradient init/lr zeroes the rows exactly; then -lr * g with exact values.
  std::vector<float> zero(init.size());
  for (size_t i = 0; i < init.size(); ++i) zero[i] = init[i] * 8.0f;
  PullToCreate(*shard, {{kUser, keys}});
  pb::PushResponse r;
  ASSERT_TRUE(shard->Push(PushReq({{kUser, keys, zero}}), &r).ok());
  EXPECT_EQ(Peek(*shard, kUser, keys), std::vector<float>(12, 0.0f));
  std::vector<float> g(12);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i) - 5.5f;
  ASSERT_TRUE(shard->Push(PushReq({{kUser, keys, g}}), &r).ok());
  std::vector<float> want(12);
  for (size_t i = 0; i < g.size(); ++i) want[i] = -0.125f * g[i];
  EXPECT_EQ(Peek(*shard, kUser, keys), want);
}

// A push with a fresh response (the shard fills in, never clears, the response it is given).
pb::PushResponse MustPush(EmbeddingShard& shard, const pb::PushRequest& request) {
  pb::PushResponse r;
  const Status s = shard.Push(request, &r);
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

TEST(ShardTest, PushRetryIdentityAppliesOnce) {
  auto shard = ConfiguredShard();
  const std::vector<uint64_t> keys = {10, 20};
  const std::vector<float> init = InitRows(kUser, keys, 1000);
  PullToCreate(*shard, {{kUser, keys}, {kCat, {1}}});
  pb::PushRequest req = PushReq({{kUser, keys, Fill(8, 1.0f)}});
  req.set_client_id(0xabcdef);
  req.set_sequence(5);
  pb::PushResponse r;
  r = MustPush(*shard, req);
  EXPECT_FALSE(r.duplicate());
  EXPECT_EQ(r.applied_keys(), 2u);
  r = MustPush(*shard, req);
  EXPECT_TRUE(r.duplicate());
  EXPECT_EQ(r.applied_keys(), 0u);
  std::vector<float> once = init;
  for (float& v : once) v -= 0.125f;
  EXPECT_EQ(Peek(*shard, kUser, keys), once);
  pb::StatsResponse stats;
  ASSERT_TRUE(shard->Stats(&stats).ok());
  EXPECT_EQ(stats.tables(0).table_id(), kUser);
  EXPECT_EQ(stats.tables(0).pushed_keys(), 2u);

  // Another sequence, or another client with the same sequence, applies.
  req.set_sequence(6);
  r = MustPush(*shard, req);
  EXPECT_FALSE(r.duplicate());
  req.set_client_id(0xabcdee);
  req.set_sequence(5);
  r = MustPush(*shard, req);
  EXPECT_FALSE(r.duplicate());
  // client_id 0 disables the check.
  req.set_client_id(0);
  r = MustPush(*shard, req);
  r = MustPush(*shard, req);
  EXPECT_FALSE(r.duplicate());
  std::vector<float> five = once;
  for (float& v : five) v -= 4 * 0.125f;
  EXPECT_EQ(Peek(*shard, kUser, keys), five);

  // The window remembers the last kPushDedupWindow pushes: the oldest then applies again.
  pb::PushRequest filler = PushReq({{kCat, {1}, Fill(3, 0.25f)}});
  filler.set_client_id(99);
  for (uint64_t s = 0; s < kPushDedupWindow; ++s) {
    filler.set_sequence(s);
    r = MustPush(*shard, filler);
  }
  req.set_client_id(0xabcdef);
  req.set_sequence(5);
  r = MustPush(*shard, req);
  EXPECT_FALSE(r.duplicate());
  // ... while a recent one is still known.
  filler.set_sequence(kPushDedupWindow - 1);
  r = MustPush(*shard, filler);
  EXPECT_TRUE(r.duplicate());
}

TEST(ShardTest, StatsReportRowsDimsStepsConfigsAndLimits) {
  ShardOptions o;
  o.shard = 2;
  o.num_shards = 5;
  o.max_keys_per_request = 5000;
  o.max_message_bytes = 1 << 20;
  o.version = "9.8.7-test";
  auto shard = ConfiguredShard(o);
  pb::PullResponse pull;
  ASSERT_TRUE(shard->Pull(PullReq({{kUser, {1, 2, 3, 3}}, {kItem, {1, 2}}}), &pull).ok());
  pb::PushResponse push;
  ASSERT_TRUE(shard->Push(PushReq({{kItem, {1, 2}, Fill(16, 0.5f)}}, 17), &push).ok());
  ASSERT_TRUE(shard->Push(PushReq({{kItem, {2}, Fill(8, 0.5f)}}, 9), &push).ok());
  pb::PushResponse refused;
  EXPECT_EQ(shard->Push(PushReq({{kItem, {3}, Fill(8, 0.5f)}}, 18), &refused).code(),
            absl::StatusCode::kInvalidArgument);
  pb::StatsResponse s;
  ASSERT_TRUE(shard->Stats(&s).ok());
  EXPECT_EQ(s.shard(), 2u);
  EXPECT_EQ(s.num_shards(), 5u);
  EXPECT_TRUE(s.configured());
  EXPECT_EQ(s.seed(), kSeed);
  EXPECT_EQ(s.max_keys_per_request(), 5000u);
  EXPECT_EQ(s.max_message_bytes(), 1u << 20);
  EXPECT_EQ(s.version(), "9.8.7-test");
  ASSERT_EQ(s.configs_size(), 3);
  ASSERT_EQ(s.tables_size(), 3);
  // In table id order: user (1), cat (3), item (7).
  EXPECT_EQ(s.tables(0).name(), "user");
  EXPECT_EQ(s.tables(1).name(), "cat");
  EXPECT_EQ(s.tables(2).name(), "item");
  EXPECT_EQ(s.tables(0).dim(), 4u);
  EXPECT_EQ(s.tables(1).dim(), 3u);
  EXPECT_EQ(s.tables(2).dim(), 8u);
  EXPECT_EQ(s.tables(0).rows(), 3);
  EXPECT_EQ(s.tables(1).rows(), 0);
  EXPECT_EQ(s.tables(2).rows(), 2);
  EXPECT_EQ(s.tables(0).last_step(), -1);
  EXPECT_EQ(s.tables(2).last_step(), 17);
  EXPECT_EQ(s.tables(0).pulled_keys(), 4u);
  EXPECT_EQ(s.tables(2).pulled_keys(), 2u);
  EXPECT_EQ(s.tables(2).pushed_keys(), 3u);
  EXPECT_EQ(s.tables(0).value_bytes(), 3 * 4 * 4);
  EXPECT_EQ(s.tables(2).value_bytes(), 2 * 8 * 4);
  EXPECT_EQ(s.tables(2).state_bytes(), 2 * (2 * 8 + 1) * 4);  // adam: m, v, t
  EXPECT_EQ(s.tables(0).state_bytes(), 0);                    // sgd
  int64_t total = 0;
  for (const pb::TableStats& t : s.tables()) total += t.total_bytes();
  EXPECT_EQ(s.memory_bytes(), total);
  EXPECT_GT(total, 0);
  const pb::ConfigureRequest config = Config();
  for (const pb::TableConfig& c : s.configs()) {
    for (const pb::TableConfig& want : config.tables()) {
      if (want.table_id() == c.table_id()) {
        EXPECT_EQ(c.SerializeAsString(), want.SerializeAsString());
      }
    }
  }
  const auto metrics = shard->Metrics();
  ASSERT_EQ(metrics.size(), 3u);
  EXPECT_EQ(metrics[0].name, "user");
  EXPECT_EQ(metrics[0].rows, 3);
  EXPECT_EQ(metrics[0].pulled_keys, 4u);
  EXPECT_EQ(metrics[2].pushed_keys, 3u);
  EXPECT_EQ(metrics[2].refused_absent_pushes, 1u);
  EXPECT_EQ(metrics[0].refused_absent_pushes, 0u);
}

// checkpoint.keep: a snapshot with retain_only keeps, of its job's snapshots (any generation),
// those whose step it names and itself; other jobs' and other names are never touched.
TEST(ShardTest, RetainOnlyKeepsTheNamedStepsOfTheJob) {
  TempDir dir;
  ShardOptions o;
  o.snapshot_dir = dir.path();
  o.keep_snapshots = 1;  // not used by retain_only requests
  auto shard = ConfiguredShard(o);
  const auto snapshot = [&](const std::string& name, int64_t step, std::vector<int64_t> retain = {},
                            bool retain_only = false) {
    pb::SnapshotRequest s;
    s.set_name(name);
    s.set_step(step);
    s.set_retain_only(retain_only);
    s.mutable_retain_steps()->Add(retain.begin(), retain.end());
    pb::SnapshotResponse r;
    ASSERT_TRUE(shard->Snapshot(s, &r).ok()) << name;
  };
  snapshot("manual", 0);
  snapshot("ckpt-other-g1-step-1", 1);
  for (const char* n : {"ckpt-job-g1-step-3", "ckpt-job-g1-step-5", "ckpt-job-g2-step-5"}) {
    const std::string name = n;
    snapshot(name, std::stoll(name.substr(name.rfind('-') + 1)), {3, 5}, true);
  }
  snapshot("ckpt-job-g2-step-6", 6, {5}, true);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    if (e.path().filename().string()[0] != '.') names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"ckpt-job-g1-step-5", "ckpt-job-g2-step-5",
                                      "ckpt-job-g2-step-6", "ckpt-other-g1-step-1", "manual"}));
}

TEST(ShardTest, BadSnapshotNamesAreInvalidArgument) {
  TempDir dir;
  ShardOptions o;
  o.snapshot_dir = dir.path();
  auto shard = ConfiguredShard(o);
  for (const std::string& name :
       {std::string("../x"), std::string(""), std::string("a/b"), std::string("."),
        std::string(".."), std::string("a b"), std::string(129, 'x')}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(ValidateSnapshotName(name).code(), absl::StatusCode::kInvalidArgument);
    pb::SnapshotRequest s;
    s.set_name(name);
    pb::SnapshotResponse sr;
    ExpectError(shard->Snapshot(s, &sr), absl::StatusCode::kInvalidArgument, {"'name'"});
    pb::RestoreRequest q;
    q.set_name(name);
    pb::RestoreResponse qr;
    ExpectError(shard->Restore(q, &qr), absl::StatusCode::kInvalidArgument, {"'name'"});
  }
  EXPECT_TRUE(ValidateSnapshotName(std::string(128, 'x')).ok());
  EXPECT_TRUE(ValidateSnapshotName("step-00012_v1.2").ok());
  // Nothing was written outside (or inside) the snapshot dir.
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("x")));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));

  pb::RestoreRequest missing;
  missing.set_name("never-written");
  pb::RestoreResponse qr;
  EXPECT_EQ(shard->Restore(missing, &qr).code(), absl::StatusCode::kNotFound);
  pb::SnapshotRequest neg;
  neg.set_name("ok");
  neg.set_step(-3);
  pb::SnapshotResponse sr;
  ExpectError(shard->Snapshot(neg, &sr), absl::StatusCode::kInvalidArgument, {"'step'"});

  auto no_dir = ConfiguredShard();
  neg.set_step(0);
  ExpectError(no_dir->Snapshot(neg, &sr), absl::StatusCode::kFailedPrecondition,
              {"--snapshot-dir"});
}

// Rows and optimizer state of `keys` in all three tables, pushed with `step`'s gradients.
pb::PushRequest StepPush(const std::vector<uint64_t>& keys, int step) {
  std::vector<float> g_user(keys.size() * 4), g_item(keys.size() * 8), g_cat(keys.size() * 3);
  Rng rng(1000 + step);
  for (auto* g : {&g_user, &g_item, &g_cat}) {
    for (float& v : *g) v = static_cast<float>(rng.Uniform() * 2 - 1);
  }
  return PushReq({{kUser, keys, g_user}, {kItem, keys, g_item}, {kCat, keys, g_cat}}, step);
}

TEST(ShardTest, RestoreReturnsExactlyTheSnapshottedRowsAndOptimizerState) {
  TempDir dir;
  ShardOptions o;
  o.snapshot_dir = dir.path();
  o.threads = 2;
  auto shard = ConfiguredShard(o);
  auto control = ConfiguredShard();
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 300; ++k) keys.push_back(k * k * 7919 + k);
  for (auto* s : {shard.get(), control.get()}) {
    PullToCreate(*s, {{kUser, keys}, {kItem, keys}, {kCat, keys}});
  }
  pb::PushResponse r;
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(shard->Push(StepPush(keys, step), &r).ok());
    ASSERT_TRUE(control->Push(StepPush(keys, step), &r).ok());
  }
  pb::SnapshotRequest snap;
  snap.set_name("s1");
  snap.set_step(4);
  pb::SnapshotResponse sr;
  ASSERT_TRUE(shard->Snapshot(snap, &sr).ok());
  EXPECT_EQ(sr.rows(), 900);
  EXPECT_EQ(sr.path(), JoinPath(JoinPath(dir.path(), "s1"), ShardSnapshotFileName(0, 1)));
  EXPECT_GT(sr.bytes(), 900u * 4);
  // More pushes (and more keys) after the snapshot...
  for (int step = 4; step < 7; ++step) ASSERT_TRUE(shard->Push(StepPush(keys, step), &r).ok());
  PullToCreate(*shard, {{kUser, {123456789}}, {kItem, {123456789}}, {kCat, {123456789}}});
  ASSERT_TRUE(shard->Push(StepPush({123456789}, 7), &r).ok());
  ASSERT_NE(Peek(*shard, kItem, keys), Peek(*control, kItem, keys));
  // ... are undone by the restore.
  pb::RestoreRequest restore;
  restore.set_name("s1");
  pb::RestoreResponse rr;
  ASSERT_TRUE(shard->Restore(restore, &rr).ok());
  EXPECT_EQ(rr.rows(), 900);
  EXPECT_EQ(rr.source_shards(), 1u);
  EXPECT_EQ(rr.step(), 4);
  for (uint32_t t : {kUser, kItem, kCat}) EXPECT_EQ(Peek(*shard, t, keys), Peek(*control, t, keys));
  EXPECT_EQ(RowsOf(*shard, kUser), 300);
  // The optimizer state came back too: the same next push gives the same rows (adam's moments
  // and per-row step count, adagrad's accumulator).
  for (int step = 10; step < 12; ++step) {
    ASSERT_TRUE(shard->Push(StepPush(keys, step), &r).ok());
    ASSERT_TRUE(control->Push(StepPush(keys, step), &r).ok());
  }
  for (uint32_t t : {kUser, kItem, kCat}) EXPECT_EQ(Peek(*shard, t, keys), Peek(*control, t, keys));
  // A retry identity remembered before the restore applies again (the rows changed under it).
  pb::PushRequest again = StepPush(keys, 12);
  again.set_client_id(5);
  again.set_sequence(1);
  ASSERT_TRUE(shard->Push(again, &r).ok());
  ASSERT_TRUE(shard->Restore(restore, &rr).ok());
  ASSERT_TRUE(shard->Push(again, &r).ok());
  EXPECT_FALSE(r.duplicate());
}

// Per key of the adam table: its push count (the row's step count t, bit-copied after m and v).
std::vector<uint32_t> AdamCounts(const EmbeddingStore::TableDump& dump, int dim) {
  std::vector<uint32_t> counts(dump.ids.size());
  for (size_t i = 0; i < dump.ids.size(); ++i) {
    std::memcpy(&counts[i], &dump.data[i * dump.row_floats + 3 * dim], sizeof(uint32_t));
  }
  return counts;
}

// Per key of the adagrad table pushed with gradient 0.5 every time: acc = 0.125 + 0.25 n exactly.
std::vector<uint32_t> AdagradCounts(const EmbeddingStore::TableDump& dump, int dim) {
  std::vector<uint32_t> counts(dump.ids.size());
  for (size_t i = 0; i < dump.ids.size(); ++i) {
    const float acc = dump.data[i * dump.row_floats + dim];
    const float n = (acc - 0.125f) / 0.25f;
    EXPECT_EQ(n, std::floor(n)) << "accumulator " << acc;
    counts[i] = static_cast<uint32_t>(n);
  }
  return counts;
}

TEST(ShardTest, SnapshotsAreCutsBetweenWholePushes) {
  TempDir dir;
  ShardOptions o;
  o.snapshot_dir = dir.path();
  o.threads = 2;
  o.num_stripes = 8;
  auto shard = ConfiguredShard(o);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 400; ++k) keys.push_back(k * 31 + 5);
  PullToCreate(*shard, {{kItem, keys}, {kCat, keys}});
  const pb::PushRequest push = PushReq(
      {{kItem, keys, Fill(keys.size() * 8, 0.5f)}, {kCat, keys, Fill(keys.size() * 3, 0.5f)}});
  constexpr int kThreads = 3, kPushes = 40, kSnapshots = 6;
  std::atomic<int> done{0};
  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t) {
    pushers.emplace_back([&] {
      for (int i = 0; i < kPushes; ++i) {
        pb::PushResponse r;
        const Status s = shard->Push(push, &r);
        EXPECT_TRUE(s.ok()) << s;
        done.fetch_add(1);
      }
    });
  }
  std::vector<std::pair<int, std::string>> snapshots;  // (pushes done before, path)
  for (int k = 0; k < kSnapshots; ++k) {
    while (done.load() < k * kThreads * kPushes / kSnapshots) std::this_thread::yield();
    const int before = done.load();
    pb::SnapshotRequest req;
    req.set_name("cut-" + std::to_string(k));
    pb::SnapshotResponse r;
    const Status s = shard->Snapshot(req, &r);
    ASSERT_TRUE(s.ok()) << s;
    snapshots.emplace_back(before, r.path());
  }
  for (std::thread& t : pushers) t.join();
  for (const auto& [before, path] : snapshots) {
    SCOPED_TRACE(path);
    auto snap = ReadShardSnapshot(path);
    ASSERT_TRUE(snap.ok()) << snap.status();
    // Tables in id order: user (untouched), cat, item.
    ASSERT_EQ(snap->tables.size(), 3u);
    const EmbeddingStore::TableDump& cat = snap->tables[1];
    const EmbeddingStore::TableDump& item = snap->tables[2];
    ASSERT_EQ(cat.table_id, kCat);
    ASSERT_EQ(item.table_id, kItem);
    EXPECT_TRUE(snap->tables[0].ids.empty());
    if (before == 0 && item.ids.empty()) continue;  // taken before the first push
    ASSERT_EQ(item.ids.size(), keys.size());
    ASSERT_EQ(cat.ids.size(), keys.size());
    const std::vector<uint32_t> a = AdamCounts(item, 8), b = AdagradCounts(cat, 3);
    const std::set<uint32_t> distinct_a(a.begin(), a.end()), distinct_b(b.begin(), b.end());
    ASSERT_EQ(distinct_a.size(), 1u) << "adam counts differ between keys";
    ASSERT_EQ(distinct_b.size(), 1u) << "adagrad counts differ between keys";
    EXPECT_EQ(a[0], b[0]) << "the two tables of one push were cut apart";
    EXPECT_GE(a[0], static_cast<uint32_t>(before));
    EXPECT_LE(a[0], static_cast<uint32_t>(kThreads * kPushes));
  }
  auto final_dump = ReadShardSnapshot(snapshots.back().second);
  ASSERT_TRUE(final_dump.ok());
  pb::SnapshotRequest last;
  last.set_name("final");
  pb::SnapshotResponse lr;
  ASSERT_TRUE(shard->Snapshot(last, &lr).ok());
  auto all = ReadShardSnapshot(lr.path());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(AdamCounts(all->tables[2], 8)[0], static_cast<uint32_t>(kThreads * kPushes));
}

TEST(ShardTest, RestoreIntoAnotherShardCountKeepsEachKeyOnItsShard) {
  TempDir dir;
  std::vector<std::unique_ptr<EmbeddingShard>> two;
  for (uint32_t i = 0; i < 2; ++i) {
    ShardOptions o;
    o.shard = i;
    o.num_shards = 2;
    o.snapshot_dir = dir.path();
    two.push_back(ConfiguredShard(o));
  }
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 500; ++k) keys.push_back(k * 0x9e3779b97f4a7c15ull);
  // Each table's keys go to their own shard (as the client routes them).
  for (uint32_t i = 0; i < 2; ++i) {
    std::vector<Grads> grads;
    for (uint32_t t : {kUser, kItem, kCat}) {
      Grads g{t, {}, {}};
      for (uint64_t k : keys) {
        if (ShardOf(t, k, 2) != i) continue;
        g.keys.push_back(k);
        for (int c = 0; c < DimOf(t); ++c) g.grads.push_back(static_cast<float>(k % 17) / 16 - c);
      }
      grads.push_back(std::move(g));
    }
    std::vector<Keys> pulled;
    for (const Grads& g : grads) pulled.push_back({g.table, g.keys});
    PullToCreate(*two[i], pulled);
    pb::PushResponse r;
    ASSERT_TRUE(two[i]->Push(PushReq(grads, 3), &r).ok());
  }
  for (uint32_t i = 0; i < 2; ++i) {
    pb::SnapshotRequest s;
    s.set_name("s1");
    s.set_step(3);
    pb::SnapshotResponse sr;
    ASSERT_TRUE(two[i]->Snapshot(s, &sr).ok());
  }
  auto rows_of = [&](std::vector<std::unique_ptr<EmbeddingShard>>& shards, uint32_t table) {
    std::vector<float> out;
    const int dim = DimOf(table);
    for (uint64_t k : keys) {
      std::vector<float> row = Peek(*shards[ShardOf(table, k, shards.size())], table, {k});
      EXPECT_EQ(row.size(), static_cast<size_t>(dim));
      out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  };
  std::vector<std::vector<float>> before;
  for (uint32_t t : {kUser, kItem, kCat}) before.push_back(rows_of(two, t));
  std::vector<std::unique_ptr<EmbeddingShard>> three;
  int64_t total = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    ShardOptions o;
    o.shard = i;
    o.num_shards = 3;
    o.snapshot_dir = dir.path();
    three.push_back(MakeShard(o));
    pb::RestoreRequest q;
    q.set_name("s1");
    pb::RestoreResponse qr;
    const Status s = three[i]->Restore(q, &qr);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(qr.source_shards(), 2u);
    EXPECT_EQ(qr.step(), 3);
    int64_t home = 0;
    for (uint32_t t : {kUser, kItem, kCat}) {
      for (uint64_t k : keys) home += ShardOf(t, k, 3) == i;
    }
    EXPECT_EQ(qr.rows(), home);
    total += qr.rows();
  }
  EXPECT_EQ(total, 3 * 500);
  int index = 0;
  for (uint32_t t : {kUser, kItem, kCat}) EXPECT_EQ(rows_of(three, t), before[index++]) << t;
}

}  // namespace
}  // namespace sift::embedding

namespace sift::embedding {
namespace {

// A step push of rank `rank` of `world` (one part) at step 4.
pb::PushRequest StepPushReq(uint32_t table, const std::vector<uint64_t>& keys,
                            const std::vector<float>& grads, uint32_t rank, uint32_t world,
                            uint64_t generation = 1) {
  pb::PushRequest q = ::sift::testing::PushReq({{table, keys, grads}}, /*step=*/4);
  q.set_step_group(77);
  q.set_generation(generation);
  q.set_rank(rank);
  q.set_world(world);
  q.set_parts(1);
  return q;
}

std::vector<float> Scaled(std::vector<float> v, float s) {
  for (float& x : v) x *= s;
  return v;
}

// One update per key from the rank-ordered sum: the rows equal a fresh shard's after one push of
// the summed gradients (every optimizer), and nothing moves before the last rank's part is in.
TEST(ShardStepPushTest, TheStepAppliesOnceFromTheSumAndNotBefore) {
  for (const uint32_t table : {kUser, kItem, kCat}) {
    SCOPED_TRACE(table);
    const int d = DimOf(table);
    const std::vector<uint64_t> k0 = {2, 5}, k1 = {5, 9};
    const std::vector<float> g0 = Scaled(Fill(2 * d, 0.3f), 1.0f), g1 = Fill(2 * d, -0.7f);
    auto shard = ConfiguredShard();
    PullToCreate(*shard, {{table, {2, 5, 9}}});
    const std::vector<float> before = Peek(*shard, table, {2, 5, 9});
    pb::PushResponse r;
    ASSERT_TRUE(shard->Push(StepPushReq(table, k1, g1, 1, 2), &r).ok());
    EXPECT_TRUE(r.held());
    EXPECT_EQ(r.applied_keys(), 0u);
    // Half a step is never visible: the rows are untouched.
    EXPECT_EQ(Peek(*shard, table, {2, 5, 9}), before);
    pb::PushResponse r2;
    ASSERT_TRUE(shard->Push(StepPushReq(table, k0, g0, 0, 2), &r2).ok());
    EXPECT_FALSE(r2.held());
    EXPECT_EQ(r2.applied_keys(), 3u);

    auto one = ConfiguredShard();
    PullToCreate(*one, {{table, {2, 5, 9}}});
    std::vector<float> sum(3 * d);
    for (int c = 0; c < d; ++c) {
      sum[c] = g0[c];                  // key 2: rank 0 only
      sum[d + c] = g0[d + c] + g1[c];  // key 5: rank 0 then rank 1
      sum[2 * d + c] = g1[d + c];      // key 9: rank 1 only
    }
    pb::PushResponse r3;
    ASSERT_TRUE(one->Push(::sift::testing::PushReq({{table, {2, 5, 9}, sum}}, 4), &r3).ok());
    EXPECT_EQ(Peek(*shard, table, {2, 5, 9}), Peek(*one, table, {2, 5, 9}));
  }
}

// A rank that died after its push: Restore (the recovery's) and Configure(replace) drop the held
// part, and the next generation's step is its own.
TEST(ShardStepPushTest, AHeldPartIsDroppedByANewGenerationOrRestore) {
  auto shard = ConfiguredShard();
  PullToCreate(*shard, {{kItem, {3}}});
  const std::vector<float> before = Peek(*shard, kItem, {3});
  pb::PushResponse r;
  ASSERT_TRUE(shard->Push(StepPushReq(kItem, {3}, Fill(8, 1.0f), 0, 2, 1), &r).ok());
  ASSERT_TRUE(r.held());
  // Generation 2 pushes: generation 1's part can never be completed.
  ASSERT_TRUE(shard->Push(StepPushReq(kItem, {3}, Fill(8, 2.0f), 1, 2, 2), &r).ok());
  EXPECT_TRUE(r.held());
  ExpectError(shard->Push(StepPushReq(kItem, {3}, Fill(8, 1.0f), 1, 2, 1), &r),
              absl::StatusCode::kFailedPrecondition, {"stale"});
  EXPECT_EQ(Peek(*shard, kItem, {3}), before);
  pb::ConfigureRequest replace = Config();
  replace.set_replace(true);
  pb::ConfigureResponse cr;
  ASSERT_TRUE(shard->Configure(replace, &cr).ok());
  // The row went with the tables: a push of it is refused until it is pulled again.
  ExpectError(shard->Push(StepPushReq(kItem, {3}, Fill(8, 2.0f), 0, 2, 2), &r),
              absl::StatusCode::kInvalidArgument,
              {"id 3: push for a row this shard does not hold"});
  PullToCreate(*shard, {{kItem, {3}}});
  // Generation 2's held part is gone with the tables: rank 0's push alone is held again.
  ASSERT_TRUE(shard->Push(StepPushReq(kItem, {3}, Fill(8, 2.0f), 0, 2, 2), &r).ok());
  EXPECT_TRUE(r.held());
  EXPECT_EQ(Peek(*shard, kItem, {3}), before);
}

TEST(ShardStepPushTest, BadStepFieldsAndL2CoefficientsAreRefusedWhole) {
  auto shard = ConfiguredShard();
  pb::PushResponse r;
  pb::PushRequest q = StepPushReq(kUser, {1}, Fill(4, 1.0f), 2, 2);
  ExpectError(shard->Push(q, &r), absl::StatusCode::kInvalidArgument, {"'rank' is 2"});
  q = StepPushReq(kUser, {1}, Fill(4, 1.0f), 0, 2);
  q.mutable_tables(0)->set_l2_coefficients(std::string(3, '\0'));
  ExpectError(shard->Push(q, &r), absl::StatusCode::kInvalidArgument, {"l2_coefficients"});
  const float bad = -1.0f;
  q.mutable_tables(0)->set_l2_coefficients(std::string(reinterpret_cast<const char*>(&bad), 4));
  ExpectError(shard->Push(q, &r), absl::StatusCode::kInvalidArgument, {"finite and >= 0"});
  q = StepPushReq(kUser, {1}, {1, 2, std::numeric_limits<float>::infinity(), 4}, 0, 2);
  ExpectError(shard->Push(q, &r), absl::StatusCode::kInvalidArgument, {"non-finite"});
}

// The L2 term c * w is added once per key to the summed gradient (sgd: w -= lr (g + c w)).
TEST(ShardStepPushTest, L2IsAddedOnceToTheSum) {
  auto shard = ConfiguredShard();
  PullToCreate(*shard, {{kUser, {6}}});
  const std::vector<float> w = Peek(*shard, kUser, {6});
  const float c = 0.5f;
  std::string l2(reinterpret_cast<const char*>(&c), 4);
  pb::PushRequest q0 = StepPushReq(kUser, {6}, Fill(4, 1.0f), 0, 2);
  pb::PushRequest q1 = StepPushReq(kUser, {6}, Fill(4, 2.0f), 1, 2);
  q0.mutable_tables(0)->set_l2_coefficients(l2);
  q1.mutable_tables(0)->set_l2_coefficients(l2);
  pb::PushResponse r;
  ASSERT_TRUE(shard->Push(q0, &r).ok());
  ASSERT_TRUE(shard->Push(q1, &r).ok());
  const std::vector<float> after = Peek(*shard, kUser, {6});
  for (int i = 0; i < 4; ++i) {
    const float g = (1.0f + 2.0f) + c * w[i];
    EXPECT_EQ(after[i], w[i] - 0.125f * g) << i;
  }
}

// A part naming a row the shard does not hold is refused as it arrives and never held (counted);
// the step completes from the good parts, creating no row, as a step without the bad part would.
TEST(ShardStepPushTest, APartNamingAnAbsentRowIsRefusedAndNotHeld) {
  auto shard = ConfiguredShard();
  auto control = ConfiguredShard();
  for (auto* s : {shard.get(), control.get()}) PullToCreate(*s, {{kItem, {2, 5, 9}}});
  const std::vector<float> g0 = Fill(2 * 8, 0.25f), g1 = Fill(2 * 8, -0.5f);
  pb::PushResponse r;
  ASSERT_TRUE(shard->Push(StepPushReq(kItem, {2, 5}, g0, 0, 2), &r).ok());
  ASSERT_TRUE(r.held());
  // Rank 1's part names id 11, never pulled: refused whole, nothing of it held.
  pb::PushRequest bad = StepPushReq(kItem, {5, 11}, g1, 1, 2);
  bad.set_client_id(9);
  bad.set_sequence(1);
  ExpectError(shard->Push(bad, &r), absl::StatusCode::kInvalidArgument,
              {"table 'item' (id 7): id 11: push for a row this shard does not hold: a worker "
               "pushes only rows it pulled"});
  pb::StatsResponse stats;
  ASSERT_TRUE(shard->Stats(&stats).ok());
  EXPECT_EQ(stats.held_steps(), 1u);  // rank 0's part only
  EXPECT_EQ(RowsOf(*shard, kItem), 3);
  // The good part of rank 1 (same client and sequence: the refused one was not remembered)
  // completes the step.
  pb::PushRequest good = StepPushReq(kItem, {5, 9}, g1, 1, 2);
  good.set_client_id(9);
  good.set_sequence(1);
  pb::PushResponse done;
  ASSERT_TRUE(shard->Push(good, &done).ok());
  EXPECT_FALSE(done.held());
  EXPECT_FALSE(done.duplicate());
  EXPECT_EQ(done.applied_keys(), 3u);
  ASSERT_TRUE(control->Push(StepPushReq(kItem, {2, 5}, g0, 0, 2), &r).ok());
  ASSERT_TRUE(control->Push(StepPushReq(kItem, {5, 9}, g1, 1, 2), &r).ok());
  EXPECT_EQ(Peek(*shard, kItem, {2, 5, 9}), Peek(*control, kItem, {2, 5, 9}));
  EXPECT_EQ(RowsOf(*shard, kItem), 3);
  stats.Clear();
  ASSERT_TRUE(shard->Stats(&stats).ok());
  EXPECT_EQ(stats.held_steps(), 0u);
  const auto metrics = shard->Metrics();
  ASSERT_EQ(metrics.size(), 3u);
  EXPECT_EQ(metrics[2].name, "item");
  EXPECT_EQ(metrics[2].refused_absent_pushes, 1u);
}

// Capacity and memory budget reach the shard's Pull: a pull needing too many new rows is
// RESOURCE_EXHAUSTED and creates none, in any of its tables' rows counted so far.
TEST(ShardTest, APullBeyondACapacityCreatesNoRow) {
  auto shard = MakeShard();
  pb::ConfigureRequest config = Config();
  config.mutable_tables(0)->set_capacity(10);  // user
  pb::ConfigureResponse cr;
  ASSERT_TRUE(shard->Configure(config, &cr).ok());
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 15; ++k) keys.push_back(k);
  pb::PullResponse r;
  ExpectError(shard->Pull(PullReq({{kUser, keys}}), &r), absl::StatusCode::kResourceExhausted,
              {"table 'user' (id 1): the table is full: this pull needs 15 new rows",
               "tables.user.capacity"});
  EXPECT_EQ(RowsOf(*shard, kUser), 0);
  keys.resize(10);
  PullToCreate(*shard, {{kUser, keys}});
  EXPECT_EQ(RowsOf(*shard, kUser), 10);
  EXPECT_EQ(shard->Metrics()[0].refused_pulls, 1u);
}

}  // namespace
}  // namespace sift::embedding
