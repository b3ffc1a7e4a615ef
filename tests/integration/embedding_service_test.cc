// The embedding server over real gRPC on 127.0.0.1 (ephemeral ports, servers in this process):
// error codes and messages of bad requests (the server keeps serving), no lost update under
// concurrent pushers, snapshots as cuts between requests, restore into another shard count,
// the client's chunking / dedup / encodings / deadlines / retries, push retry identity, metrics
// (scraped over HTTP, linted by promtool), health and stats.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/job_credential.h"
#include "common/rng.h"
#include "common/sharding.h"
#include "common/wire_float.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "proto/embedding.grpc.pb.h"
#include "proto/embedding.pb.h"
#include "server/embedding/service.h"
#include "server/embedding/snapshot.h"
#include "server/embedding/table.h"
#include "tests/integration/flood_util.h"
#include "tests/util/embedding_requests.h"
#include "tests/util/test_util.h"
#include "worker/embedding_client.h"

namespace sift {
namespace {

namespace pb = ::sift::embedding::v1;
using ::sift::embedding::EmbeddingServer;
using ::sift::embedding::TableConfig;
using ::sift::testing::TempDir;
using ::sift::worker::EmbeddingClient;
using ::sift::worker::EmbeddingClientOptions;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 777;
constexpr uint32_t kUser = 1;  // sgd, lr 1/8, dim 4
constexpr uint32_t kItem = 7;  // adam, dim 8
constexpr uint32_t kCat = 3;   // adagrad, dim 3, initial accumulator 1/8
constexpr char kService[] = "sift.embedding.v1.EmbeddingService";

int DimOf(uint32_t table) { return table == kUser ? 4 : table == kItem ? 8 : 3; }

std::vector<TableConfig> Tables(float item_lr = 0.01f) {
  std::vector<TableConfig> t(3);
  t[0].table_id = kUser;
  t[0].name = "user";
  t[0].dim = 4;
  t[0].cardinality = 1000;
  t[0].optimizer.kind = embedding::OptimizerKind::kSgd;
  t[0].optimizer.learning_rate = 0.125f;
  t[1].table_id = kItem;
  t[1].name = "item";
  t[1].dim = 8;
  t[1].cardinality = 100000;
  t[1].optimizer.kind = embedding::OptimizerKind::kAdam;
  t[1].optimizer.learning_rate = item_lr;
  t[2].table_id = kCat;
  t[2].name = "cat";
  t[2].dim = 3;
  t[2].cardinality = 50;
  t[2].optimizer.kind = embedding::OptimizerKind::kAdagrad;
  t[2].optimizer.learning_rate = 0.05f;
  t[2].optimizer.initial_accumulator = 0.125f;
  return t;
}

pb::ConfigureRequest ConfigProto(float item_lr = 0.01f) {
  pb::ConfigureRequest c;
  c.set_seed(kSeed);
  for (const TableConfig& t : Tables(item_lr)) *c.add_tables() = embedding::TableConfigToProto(t);
  return c;
}

struct ServerSpec {
  uint32_t shard = 0;
  uint32_t num_shards = 1;
  std::string snapshot_dir;
  uint64_t max_keys = uint64_t{1} << 20;
  uint64_t max_bytes = uint64_t{64} << 20;
  bool metrics = false;
  int threads = 2;
  int64_t memory_budget = 0;  // ShardOptions::memory_budget_bytes
  GrpcServerLimits limits;
  bool managed = false;  // EmbeddingServerOptions::managed (job credentials)
};

std::unique_ptr<EmbeddingServer> StartServer(const ServerSpec& spec) {
  embedding::EmbeddingServerOptions o;
  o.shard.shard = spec.shard;
  o.shard.num_shards = spec.num_shards;
  o.shard.snapshot_dir = spec.snapshot_dir;
  o.shard.threads = spec.threads;
  o.shard.max_keys_per_request = spec.max_keys;
  o.shard.max_message_bytes = spec.max_bytes;
  o.shard.version = "1.2.3-test";
  o.shard.memory_budget_bytes = spec.memory_budget;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  o.metrics_port = spec.metrics ? 0 : -1;
  o.limits = spec.limits;
  o.managed = spec.managed;
  auto server = EmbeddingServer::Start(o);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// `n` servers: shard i of n, sharing `snapshot_dir`.
std::vector<std::unique_ptr<EmbeddingServer>> StartServers(uint32_t n, ServerSpec spec = {}) {
  std::vector<std::unique_ptr<EmbeddingServer>> out;
  for (uint32_t i = 0; i < n; ++i) {
    spec.shard = i;
    spec.num_shards = n;
    out.push_back(StartServer(spec));
  }
  return out;
}

std::string Address(const EmbeddingServer& s) { return absl::StrCat("127.0.0.1:", s.port()); }

std::unique_ptr<EmbeddingClient> Connect(const std::vector<std::unique_ptr<EmbeddingServer>>& s,
                                         EmbeddingClientOptions o = {}) {
  for (const auto& server : s) o.servers.push_back(Address(*server));
  o.connect_timeout_s = 30;
  auto client = EmbeddingClient::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

std::shared_ptr<grpc::Channel> Channel(const EmbeddingServer& s) {
  return grpc::CreateChannel(Address(s), grpc::InsecureChannelCredentials());
}

void SetDeadline(grpc::ClientContext* ctx, int seconds = 30) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

// A unary call of `method` with raw request bytes (grpc::GenericStub).
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub rpc(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::promise<grpc::Status> done;
  rpc.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                [&done](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

void ExpectGrpcError(const grpc::Status& s, grpc::StatusCode code,
                     const std::vector<std::string>& parts) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  for (const std::string& p : parts) EXPECT_THAT(s.error_message(), HasSubstr(p));
}

using ::sift::testing::ExpectError;
using ::sift::testing::Grads;
using ::sift::testing::Keys;
using ::sift::testing::PullReq;
using ::sift::testing::PushReq;

std::vector<float> Decode(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

std::vector<float> Fill(size_t n, float v) { return std::vector<float>(n, v); }

// Rows of one table through the client.
std::vector<float> PullRows(EmbeddingClient& client, uint32_t table,
                            const std::vector<uint64_t>& keys, bool create_missing = true) {
  std::vector<float> out(keys.size() * DimOf(table));
  const EmbeddingClient::PullItem item{table, keys, absl::MakeSpan(out)};
  const Status s = client.Pull({item}, create_missing);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

Status PushRows(EmbeddingClient& client, uint32_t table, const std::vector<uint64_t>& keys,
                const std::vector<float>& grads, int64_t step = 1) {
  const EmbeddingClient::PushItem item{table, keys, grads};
  return client.Push({item}, step);
}

std::vector<uint64_t> SpreadKeys(size_t n, uint64_t salt) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < n; ++k) keys.push_back(Mix64(k * 2654435761u + salt));
  return keys;
}

// Gradients in [-0.5, 0.5], multiples of 1/64: exact in fp32, fp16 and bf16.
std::vector<float> SmallGrads(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> g(n);
  for (float& v : g) v = static_cast<float>(static_cast<int>(rng.Below(65)) - 32) / 64.0f;
  return g;
}

// Series name{labels} -> value of a Prometheus text exposition.
std::map<std::string, double> ParseExposition(const std::string& text) {
  std::map<std::string, double> series;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    double value = 0;
    const std::string number(line.substr(space + 1));
    if (!absl::SimpleAtod(number, &value)) value = std::numeric_limits<double>::quiet_NaN();
    series[std::string(line.substr(0, space))] = value;
  }
  return series;
}

double ValueOf(const std::map<std::string, double>& series, const std::string& key) {
  auto it = series.find(key);
  EXPECT_NE(it, series.end()) << "no series " << key;
  return it == series.end() ? -1 : it->second;
}

std::string GrpcSeries(const std::string& name, const std::string& method,
                       const std::string& code = "", const std::string& le = "", int shard = 0) {
  std::string labels = code.empty() ? "" : absl::StrCat("grpc_code=\"", code, "\",");
  absl::StrAppend(&labels, "grpc_method=\"", method, "\",grpc_service=\"", kService,
                  "\",grpc_type=\"unary\",shard=\"", shard, "\"");
  if (!le.empty()) absl::StrAppend(&labels, ",le=\"", le, "\"");
  return absl::StrCat(name, "{", labels, "}");
}

std::string TableSeries(const std::string& name, const std::string& table) {
  return absl::StrCat(name, "{shard=\"0\",table=\"", table, "\"}");
}

std::map<std::string, double> Scrape(const EmbeddingServer& server, std::string* text = nullptr) {
  auto body = testing::HttpGet("127.0.0.1", server.metrics_port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  if (!body.ok()) return {};
  if (text != nullptr) *text = *body;
  return ParseExposition(*body);
}

// ---------------------------------------------------------------------------------------------
// 1. Bad input: the right code and a message naming the table or field; the server keeps serving.

TEST(EmbeddingServiceTest, ASecondServerOnTheSamePortFails) {
  // gRPC allows SO_REUSEPORT by default; two copies of a shard on one port would split clients.
  auto first = StartServer({});
  ASSERT_NE(first, nullptr);
  embedding::EmbeddingServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = first->port();
  o.metrics_port = -1;
  auto second = EmbeddingServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(absl::StrCat("127.0.0.1:", first->port())));
}

TEST(EmbeddingServiceTest, BadRequestsGetTheirCodesAndTheServerKeepsServing) {
  TempDir dir;
  ServerSpec spec;
  spec.snapshot_dir = dir.path();
  spec.max_keys = 64;
  spec.max_bytes = 4096;
  auto server = StartServer(spec);
  ASSERT_NE(server, nullptr);
  auto channel = Channel(*server);
  auto rpc = pb::EmbeddingService::NewStub(channel);
  auto pull = [&](const pb::PullRequest& req, pb::PullResponse* resp = nullptr) {
    pb::PullResponse local;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return rpc->Pull(&ctx, req, resp != nullptr ? resp : &local);
  };
  auto push = [&](const pb::PushRequest& req, pb::PushResponse* resp = nullptr) {
    pb::PushResponse local;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return rpc->Push(&ctx, req, resp != nullptr ? resp : &local);
  };
  const std::vector<uint64_t> probe = {1, 2, 3};
  std::vector<float> probe_rows;  // the user rows of `probe` once configured
  auto expect_serving = [&](const std::string& after) {
    SCOPED_TRACE("normal pull after: " + after);
    pb::PullResponse r;
    const grpc::Status s = pull(PullReq({{kUser, probe}}), &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(r.tables_size(), 1);
    EXPECT_EQ(Decode(r.tables(0).rows()), probe_rows);
  };

  // Before Configure.
  ExpectGrpcError(pull(PullReq({{kUser, probe}})), grpc::StatusCode::FAILED_PRECONDITION,
                  {"pull", "not configured"});
  ExpectGrpcError(push(PushReq({{kUser, {1}, Fill(4, 1)}})), grpc::StatusCode::FAILED_PRECONDITION,
                  {"push", "not configured"});
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::ConfigureResponse r;
    ASSERT_TRUE(rpc->Configure(&ctx, ConfigProto(), &r).ok());
    EXPECT_TRUE(r.created());
    EXPECT_EQ(r.max_keys_per_request(), 64u);
    EXPECT_EQ(r.max_message_bytes(), 4096u);
  }
  probe_rows.resize(probe.size() * 4);
  for (size_t i = 0; i < probe.size(); ++i) {
    embedding::InitRow(kSeed, kUser, probe[i], 1000, 4, &probe_rows[i * 4]);
  }
  expect_serving("configure");

  const float nan = std::numeric_limits<float>::quiet_NaN();
  ExpectGrpcError(pull(PullReq({{kUser, {9}}, {4242, {1}}})), grpc::StatusCode::INVALID_ARGUMENT,
                  {"unknown table", "4242"});
  expect_serving("unknown table (pull)");
  ExpectGrpcError(push(PushReq({{4242, {1}, Fill(4, 1)}})), grpc::StatusCode::INVALID_ARGUMENT,
                  {"unknown table", "4242"});
  expect_serving("unknown table (push)");
  ExpectGrpcError(push(PushReq({{kItem, {1, 2}, Fill(15, 1)}})), grpc::StatusCode::INVALID_ARGUMENT,
                  {"'item'", "'gradients'", "60 bytes, expected 64"});
  expect_serving("dimension mismatch");
  ExpectGrpcError(push(PushReq({{kCat, {1, 2, 3}, Fill(6, 1)}})),
                  grpc::StatusCode::INVALID_ARGUMENT, {"'cat'", "'gradients'", "3 keys"});
  expect_serving("keys/gradients length mismatch");
  ExpectGrpcError(push(PushReq({{kCat, {5, 6, 5}, Fill(9, 1)}})),
                  grpc::StatusCode::INVALID_ARGUMENT, {"'cat'", "id 5 twice"});
  expect_serving("repeated key");
  ExpectGrpcError(push(PushReq({{kCat, {5}, {0, nan, 0}}})), grpc::StatusCode::INVALID_ARGUMENT,
                  {"'cat'", "non-finite"});
  expect_serving("non-finite gradient");
  ExpectGrpcError(pull(PullReq({{kUser, {1}}}, true, static_cast<pb::RowEncoding>(17))),
                  grpc::StatusCode::INVALID_ARGUMENT, {"'encoding'", "17"});
  ExpectGrpcError(push(PushReq({{kUser, {1}, Fill(4, 1)}}, 1, static_cast<pb::RowEncoding>(9))),
                  grpc::StatusCode::INVALID_ARGUMENT, {"'encoding'", "9"});
  expect_serving("unknown encoding");
  ExpectGrpcError(pull(PullReq({{kUser, SpreadKeys(40, 1)}, {kCat, SpreadKeys(25, 2)}})),
                  grpc::StatusCode::RESOURCE_EXHAUSTED, {"65 keys", "64"});
  ExpectGrpcError(push(PushReq({{kUser, SpreadKeys(65, 1), Fill(65 * 4, 0)}})),
                  grpc::StatusCode::RESOURCE_EXHAUSTED, {"65 keys", "64"});
  expect_serving("too many keys");
  // 600 keys = 4800 bytes of keys: over the 4096-byte message limit, gRPC refuses it.
  // (Over the key limit too, but gRPC answers first, in its own words.)
  ExpectGrpcError(pull(PullReq({{kUser, SpreadKeys(600, 3)}})),
                  grpc::StatusCode::RESOURCE_EXHAUSTED, {"larger than max", "4096"});
  // One key with 5000 bytes of gradients: only the size is wrong for gRPC's limit.
  ExpectGrpcError(push(PushReq({{kUser, {1}, Fill(1250, 0)}})),
                  grpc::StatusCode::RESOURCE_EXHAUSTED, {"larger than max", "4096"});
  expect_serving("over-size message");

  // Garbage bytes: INVALID_ARGUMENT naming the message type (not INTERNAL).
  Rng rng(99);
  std::string garbage;
  for (int i = 0; i < 200; ++i) garbage.push_back(static_cast<char>(rng.Below(256)));
  ASSERT_FALSE(pb::PullRequest().ParseFromString(garbage));
  ASSERT_FALSE(pb::PushRequest().ParseFromString(garbage));
  ExpectGrpcError(RawCall(channel, absl::StrCat("/", kService, "/Pull"), garbage),
                  grpc::StatusCode::INVALID_ARGUMENT, {"sift.embedding.v1.PullRequest"});
  ExpectGrpcError(RawCall(channel, absl::StrCat("/", kService, "/Push"), garbage),
                  grpc::StatusCode::INVALID_ARGUMENT, {"sift.embedding.v1.PushRequest"});
  expect_serving("garbage bytes");

  // Bad snapshot names.
  for (const std::string name : {"../x", "", "a/b"}) {
    SCOPED_TRACE(name);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::SnapshotRequest req;
    req.set_name(name);
    pb::SnapshotResponse r;
    ExpectGrpcError(rpc->Snapshot(&ctx, req, &r), grpc::StatusCode::INVALID_ARGUMENT,
                    {"'name'", absl::StrCat("'", name, "'")});
    grpc::ClientContext ctx2;
    SetDeadline(&ctx2);
    pb::RestoreRequest rreq;
    rreq.set_name(name);
    pb::RestoreResponse rr;
    ExpectGrpcError(rpc->Restore(&ctx2, rreq, &rr), grpc::StatusCode::INVALID_ARGUMENT, {"'name'"});
  }
  // Nothing written but the shard's lock file.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_THAT(names, ::testing::ElementsAre(".shard-0-of-1.lock"));
  expect_serving("bad snapshot names");

  // A multi-table push whose second table is bad changes nothing in the first one.
  const std::vector<float> before = probe_rows;
  for (const pb::PushRequest& bad :
       {PushReq({{kUser, probe, Fill(12, 1)}, {kCat, {7}, {1, 1, nan}}}),
        PushReq({{kUser, probe, Fill(12, 1)}, {kCat, {7, 7}, Fill(6, 1)}}),
        PushReq({{kUser, {1, 2, 3, 444}, Fill(16, 1)}, {kItem, {7}, Fill(7, 1)}}),
        PushReq({{kUser, {1, 2, 3, 444}, Fill(16, 1)}, {999, {7}, Fill(3, 1)}})}) {
    EXPECT_EQ(push(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    expect_serving("a bad multi-table push");
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::StatsResponse stats;
    ASSERT_TRUE(rpc->Stats(&ctx, pb::StatsRequest(), &stats).ok());
    for (const pb::TableStats& t : stats.tables()) {
      EXPECT_EQ(t.rows(), t.table_id() == kUser ? 3 : 0) << t.name();  // no row 444, no cat row
      EXPECT_EQ(t.pushed_keys(), 0u) << t.name();
      EXPECT_EQ(t.last_step(), -1) << t.name();
    }
  }

  // Configure with another config: FAILED_PRECONDITION; replace=true starts over.
  pb::ConfigureRequest other = ConfigProto(0.5f);
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::ConfigureResponse r;
    ExpectGrpcError(rpc->Configure(&ctx, other, &r), grpc::StatusCode::FAILED_PRECONDITION,
                    {"different config", "learning_rate"});
  }
  expect_serving("a different config");
  other.set_replace(true);
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::ConfigureResponse r;
    ASSERT_TRUE(rpc->Configure(&ctx, other, &r).ok());
    EXPECT_TRUE(r.created());
    grpc::ClientContext ctx2;
    SetDeadline(&ctx2);
    pb::StatsResponse stats;
    ASSERT_TRUE(rpc->Stats(&ctx2, pb::StatsRequest(), &stats).ok());
    for (const pb::TableStats& t : stats.tables()) EXPECT_EQ(t.rows(), 0) << t.name();
    for (const pb::TableConfig& c : stats.configs()) {
      if (c.table_id() == kItem) {
        EXPECT_EQ(c.optimizer().learning_rate(), 0.5f);
      }
    }
  }
  expect_serving("replace");
}

// ---------------------------------------------------------------------------------------------
// 2. Concurrency: no lost update.

TEST(EmbeddingServiceTest, ConcurrentPushersToTheSameKeysLoseNoUpdate) {
  ServerSpec spec;
  spec.threads = 4;
  auto servers = StartServers(2, spec);
  auto admin = Connect(servers);
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->Configure(kSeed, Tables()).ok());
  constexpr int kThreads = 8, kPushes = 50, kKeys = 1000, kDim = 4;
  const std::vector<uint64_t> keys = SpreadKeys(kKeys, 5);
  // Zero every row exactly: gradient = row / lr (lr = 1/8, a power of two).
  std::vector<float> zero = PullRows(*admin, kUser, keys);
  for (float& v : zero) v *= 8.0f;
  ASSERT_TRUE(PushRows(*admin, kUser, keys, zero).ok());
  ASSERT_EQ(PullRows(*admin, kUser, keys), std::vector<float>(kKeys * kDim, 0.0f));

  // g = (small integer) / 64: every partial sum of -g/8 is exact, so the order does not matter.
  auto grad = [](int t, int p, int k, int c) {
    return static_cast<float>((t * 7 + p * 3 + k + c * 5) % 17 - 8) / 64.0f;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = Connect(servers);
      ASSERT_NE(client, nullptr);
      // Each thread sends the keys in its own (rotated, unsorted) order.
      std::vector<uint64_t> order(kKeys);
      std::vector<int> index(kKeys);
      for (int i = 0; i < kKeys; ++i) index[i] = (i * 7 + t * 131) % kKeys;
      for (int i = 0; i < kKeys; ++i) order[i] = keys[index[i]];
      std::vector<float> g(kKeys * kDim);
      for (int p = 0; p < kPushes; ++p) {
        for (int i = 0; i < kKeys; ++i) {
          for (int c = 0; c < kDim; ++c) g[i * kDim + c] = grad(t, p, index[i], c);
        }
        const Status s = PushRows(*client, kUser, order, g, p);
        ASSERT_TRUE(s.ok()) << s;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<float> want(kKeys * kDim);
  for (int k = 0; k < kKeys; ++k) {
    for (int c = 0; c < kDim; ++c) {
      double sum = 0;
      for (int t = 0; t < kThreads; ++t) {
        for (int p = 0; p < kPushes; ++p) sum += grad(t, p, k, c);
      }
      want[k * kDim + c] = static_cast<float>(-0.125 * sum);
    }
  }
  const std::vector<float> got = PullRows(*admin, kUser, keys);
  int wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != want[i];
  EXPECT_EQ(wrong, 0) << "rows that lost an update";
  EXPECT_EQ(got, want);
  auto stats = admin->Stats();
  ASSERT_TRUE(stats.ok());
  uint64_t pushed = 0;
  for (const pb::StatsResponse& s : *stats) {
    for (const pb::TableStats& t : s.tables()) {
      if (t.table_id() == kUser) pushed += t.pushed_keys();
    }
  }
  EXPECT_EQ(pushed, static_cast<uint64_t>(kKeys) * (kThreads * kPushes + 1));
}

// ---------------------------------------------------------------------------------------------
// 3. Snapshots: a cut between whole requests; snapshot -> more pushes -> restore is exact.

// Per key: its push count, from the adam row's step count t (bit-copied after m and v).
std::vector<uint32_t> AdamCounts(const embedding::EmbeddingStore::TableDump& dump, int dim) {
  std::vector<uint32_t> counts(dump.ids.size());
  for (size_t i = 0; i < dump.ids.size(); ++i) {
    std::memcpy(&counts[i], &dump.data[i * dump.row_floats + 3 * dim], sizeof(uint32_t));
  }
  return counts;
}

// Per key of the adagrad table pushed with 0.5 every time: acc = 1/8 + n/4, exact.
std::vector<uint32_t> AdagradCounts(const embedding::EmbeddingStore::TableDump& dump, int dim) {
  std::vector<uint32_t> counts(dump.ids.size());
  for (size_t i = 0; i < dump.ids.size(); ++i) {
    const float n = (dump.data[i * dump.row_floats + dim] - 0.125f) / 0.25f;
    EXPECT_EQ(n, std::floor(n));
    counts[i] = static_cast<uint32_t>(n);
  }
  return counts;
}

TEST(EmbeddingServiceTest, SnapshotsTakenDuringPushesAreCutsBetweenRequests) {
  TempDir dir;
  ServerSpec spec;
  spec.snapshot_dir = dir.path();
  spec.threads = 3;
  auto servers = StartServers(1, spec);
  auto admin = Connect(servers);
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> keys = SpreadKeys(300, 9);
  PullRows(*admin, kItem, keys);
  PullRows(*admin, kCat, keys);
  const std::vector<float> g_item = Fill(keys.size() * 8, 0.5f),
                           g_cat = Fill(keys.size() * 3, 0.5f);
  constexpr int kThreads = 3, kPushes = 30, kSnapshots = 5;
  std::atomic<int> done{0};
  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t) {
    pushers.emplace_back([&] {
      auto client = Connect(servers);
      if (client == nullptr) {
        done.fetch_add(kPushes);  // (the failure is reported by Connect) keep the waits finite
        return;
      }
      for (int i = 0; i < kPushes; ++i) {
        const EmbeddingClient::PushItem items[] = {{kItem, keys, g_item}, {kCat, keys, g_cat}};
        const Status s = client->Push(items, i);
        EXPECT_TRUE(s.ok()) << s;
        done.fetch_add(1);
      }
    });
  }
  std::vector<std::pair<int, std::string>> snapshots;  // (pushes done before, path)
  for (int k = 0; k < kSnapshots; ++k) {
    while (done.load() < (k + 1) * kThreads * kPushes / (kSnapshots + 1)) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const int before = done.load();
    auto r = admin->Snapshot(absl::StrCat("cut-", k), k);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 1u);
    snapshots.emplace_back(before, (*r)[0].path());
  }
  for (std::thread& t : pushers) t.join();
  for (const auto& [before, path] : snapshots) {
    SCOPED_TRACE(path);
    auto snap = embedding::ReadShardSnapshot(path);
    ASSERT_TRUE(snap.ok()) << snap.status();
    ASSERT_EQ(snap->tables.size(), 3u);  // in id order: user, cat, item
    const auto& cat = snap->tables[1];
    const auto& item = snap->tables[2];
    ASSERT_EQ(cat.table_id, kCat);
    ASSERT_EQ(item.table_id, kItem);
    ASSERT_EQ(item.ids.size(), keys.size());
    ASSERT_EQ(cat.ids.size(), keys.size());
    const std::vector<uint32_t> a = AdamCounts(item, 8), b = AdagradCounts(cat, 3);
    EXPECT_EQ(std::set<uint32_t>(a.begin(), a.end()).size(), 1u) << "item keys differ";
    EXPECT_EQ(std::set<uint32_t>(b.begin(), b.end()).size(), 1u) << "cat keys differ";
    EXPECT_EQ(a[0], b[0]) << "one push request was split by the snapshot";
    EXPECT_GE(a[0], static_cast<uint32_t>(before));
    EXPECT_LE(a[0], static_cast<uint32_t>(kThreads * kPushes));
  }
}

// Pulls every key of every table (create_missing=false): rows in table order, then key order.
std::vector<float> PullAll(EmbeddingClient& client, const std::vector<uint64_t>& keys) {
  std::vector<float> out;
  for (uint32_t t : {kUser, kItem, kCat}) {
    const std::vector<float> rows = PullRows(client, t, keys, /*create_missing=*/false);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

// Pulls every key of every table (create_missing): a worker pulls each row before it pushes it.
void PullToCreate(EmbeddingClient& client, const std::vector<uint64_t>& keys) {
  for (uint32_t t : {kUser, kItem, kCat}) PullRows(client, t, keys);
}

Status PushAll(EmbeddingClient& client, const std::vector<uint64_t>& keys, uint64_t seed,
               int64_t step) {
  const std::vector<float> gu = SmallGrads(keys.size() * 4, seed),
                           gi = SmallGrads(keys.size() * 8, seed + 1),
                           gc = SmallGrads(keys.size() * 3, seed + 2);
  const EmbeddingClient::PushItem items[] = {
      {kUser, keys, gu}, {kItem, keys, gi}, {kCat, keys, gc}};
  return client.Push(items, step);
}

// ---------------------------------------------------------------------------------------------
// 4. Restore into another number of shards through real servers.

TEST(EmbeddingServiceTest, RestoreFromTwoServersIntoThreeServers) {
  TempDir dir;
  ServerSpec spec;
  spec.snapshot_dir = dir.path();
  auto two = StartServers(2, spec);
  auto client2 = Connect(two);
  ASSERT_NE(client2, nullptr);
  ASSERT_TRUE(client2->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> keys = SpreadKeys(700, 21);
  PullToCreate(*client2, keys);
  ASSERT_TRUE(PushAll(*client2, keys, 1, 10).ok());
  ASSERT_TRUE(PushAll(*client2, keys, 2, 11).ok());
  const std::vector<float> rows = PullAll(*client2, keys);
  auto snap = client2->Snapshot("s1", 11);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->size(), 2u);
  EXPECT_EQ((*snap)[0].rows() + (*snap)[1].rows(), 3 * 700);

  // Snapshot -> more pushes (and keys) -> restore gives the snapshotted rows back.
  ASSERT_TRUE(PushAll(*client2, keys, 3, 12).ok());
  PullToCreate(*client2, SpreadKeys(50, 999));
  ASSERT_TRUE(PushAll(*client2, SpreadKeys(50, 999), 4, 13).ok());
  ASSERT_NE(PullAll(*client2, keys), rows);
  auto back = client2->Restore("s1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)[0].step(), 11);
  EXPECT_EQ((*back)[0].source_shards(), 2u);
  EXPECT_EQ(PullAll(*client2, keys), rows);
  ASSERT_TRUE(PushAll(*client2, keys, 3, 12).ok());  // state came back: same as a fresh control
  const std::vector<float> after_push = PullAll(*client2, keys);

  auto three = StartServers(3, spec);
  auto client3 = Connect(three);
  ASSERT_NE(client3, nullptr);
  auto restored = client3->Restore("s1");
  ASSERT_TRUE(restored.ok()) << restored.status();
  int64_t total = 0;
  for (const pb::RestoreResponse& r : *restored) {
    EXPECT_EQ(r.source_shards(), 2u);
    EXPECT_EQ(r.step(), 11);
    total += r.rows();
  }
  EXPECT_EQ(total, 3 * 700);
  EXPECT_EQ(PullAll(*client3, keys), rows);
  auto stats = client3->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  int64_t stats_rows = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    const pb::StatsResponse& s = (*stats)[i];
    EXPECT_EQ(s.shard(), i);
    EXPECT_EQ(s.num_shards(), 3u);
    EXPECT_TRUE(s.configured());
    EXPECT_EQ(s.seed(), kSeed);
    ASSERT_EQ(s.tables_size(), 3);
    for (const pb::TableStats& t : s.tables()) {
      int64_t home = 0;
      for (uint64_t k : keys) home += ShardOf(t.table_id(), k, 3) == i;
      EXPECT_EQ(t.rows(), home) << "shard " << i << " table " << t.name();
      stats_rows += t.rows();
    }
  }
  EXPECT_EQ(stats_rows, 3 * 700);
  // The optimizer state moved with the rows: the same push gives the same rows as on 2 servers.
  ASSERT_TRUE(PushAll(*client3, keys, 3, 12).ok());
  EXPECT_EQ(PullAll(*client3, keys), after_push);
}

// ---------------------------------------------------------------------------------------------
// 5. Client behaviour.

// Runs the same pulls and pushes of 5000 keys over 3 tables through `client`; returns the rows.
std::vector<float> ChunkWorkload(EmbeddingClient& client) {
  const std::vector<uint64_t> ku = SpreadKeys(2000, 31), ki = SpreadKeys(2000, 32),
                              kc = SpreadKeys(1000, 33);
  std::vector<float> ou(ku.size() * 4), oi(ki.size() * 8), oc(kc.size() * 3);
  const EmbeddingClient::PullItem pulls[] = {{kUser, ku, absl::MakeSpan(ou)},
                                             {kItem, ki, absl::MakeSpan(oi)},
                                             {kCat, kc, absl::MakeSpan(oc)}};
  Status s = client.Pull(pulls, true);
  EXPECT_TRUE(s.ok()) << s;
  for (int step = 0; step < 2; ++step) {
    const std::vector<float> gu = SmallGrads(ku.size() * 4, 40 + step),
                             gi = SmallGrads(ki.size() * 8, 50 + step),
                             gc = SmallGrads(kc.size() * 3, 60 + step);
    const EmbeddingClient::PushItem pushes[] = {{kUser, ku, gu}, {kItem, ki, gi}, {kCat, kc, gc}};
    s = client.Push(pushes, step);
    EXPECT_TRUE(s.ok()) << s;
  }
  s = client.Pull(pulls, false);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> out = ou;
  out.insert(out.end(), oi.begin(), oi.end());
  out.insert(out.end(), oc.begin(), oc.end());
  return out;
}

TEST(EmbeddingServiceTest, ChunkedRequestsGiveTheSameRowsAsUnchunked) {
  auto plain_servers = StartServers(2);
  auto plain = Connect(plain_servers);
  ASSERT_NE(plain, nullptr);
  ASSERT_TRUE(plain->Configure(kSeed, Tables()).ok());
  const std::vector<float> want = ChunkWorkload(*plain);

  // The client's own limit: 100 keys per request.
  ServerSpec metered;
  metered.metrics = true;
  auto chunk_servers = StartServers(2, metered);
  EmbeddingClientOptions small;
  small.max_keys_per_request = 100;
  auto chunked = Connect(chunk_servers, small);
  ASSERT_NE(chunked, nullptr);
  ASSERT_TRUE(chunked->Configure(kSeed, Tables()).ok());
  EXPECT_EQ(ChunkWorkload(*chunked), want);
  double pulls = 0, pushes = 0;
  for (int shard = 0; shard < 2; ++shard) {
    const auto series = Scrape(*chunk_servers[shard]);
    pulls += ValueOf(series, GrpcSeries("grpc_server_started_total", "Pull", "", "", shard));
    pushes += ValueOf(series, GrpcSeries("grpc_server_started_total", "Push", "", "", shard));
  }
  EXPECT_GE(pulls, 2 * 5000 / 100);  // two pulls of 5000 keys in chunks of <= 100
  EXPECT_GE(pushes, 2 * 5000 / 100);

  // The servers' limits, learnt by the client (keys per request, and message bytes).
  ServerSpec limited;
  limited.max_keys = 120;
  limited.max_bytes = 4096;
  auto limited_servers = StartServers(2, limited);
  auto learner = Connect(limited_servers);
  ASSERT_NE(learner, nullptr);
  ASSERT_TRUE(learner->Configure(kSeed, Tables()).ok());
  EXPECT_EQ(ChunkWorkload(*learner), want);
}

// A key whose row can never fit one request is an error (it once looped forever planning chunks).
TEST(EmbeddingServiceTest, ARowOverTheMessageLimitIsAnErrorNotAHang) {
  ServerSpec spec;
  spec.max_bytes = 4096;
  auto servers = StartServers(1, spec);
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  std::vector<TableConfig> tables = Tables();
  tables[0].dim = 2048;  // 8 KiB per fp32 row: can never fit a 4 KiB message
  ASSERT_TRUE(client->Configure(kSeed, tables).ok());
  const std::vector<uint64_t> keys = {1, 2};
  std::vector<float> out(keys.size() * 2048);
  const EmbeddingClient::PullItem item{kUser, keys, absl::MakeSpan(out)};
  ExpectError(client->Pull({item}, true), absl::StatusCode::kResourceExhausted,
              {"table 1", "bytes"});
  const EmbeddingClient::PushItem push{kUser, keys, out};
  ExpectError(client->Push({push}, 0), absl::StatusCode::kResourceExhausted, {"table 1", "bytes"});
  // Smaller rows of the other tables still work.
  std::vector<float> cat(6);
  const EmbeddingClient::PullItem ok_item{kCat, keys, absl::MakeSpan(cat)};
  EXPECT_TRUE(client->Pull({ok_item}, true).ok());
}

TEST(EmbeddingServiceTest, DuplicateAndUnsortedKeys) {
  auto servers_a = StartServers(2);
  auto servers_b = StartServers(2);
  auto a = Connect(servers_a);
  auto b = Connect(servers_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->Configure(kSeed, Tables()).ok());
  ASSERT_TRUE(b->Configure(kSeed, Tables()).ok());

  // Pull: duplicates and any order expand to each key's row.
  const std::vector<uint64_t> messy = {50, 3, 50, 9, 3, 3, 1ull << 60, 0};
  const std::vector<uint64_t> sorted = {0, 3, 9, 50, 1ull << 60};
  for (uint32_t t : {kUser, kItem}) {
    const int dim = DimOf(t);
    const std::vector<float> got = PullRows(*a, t, messy);
    const std::vector<float> unique = PullRows(*a, t, sorted);
    for (size_t i = 0; i < messy.size(); ++i) {
      const size_t u = std::find(sorted.begin(), sorted.end(), messy[i]) - sorted.begin();
      for (int c = 0; c < dim; ++c) EXPECT_EQ(got[i * dim + c], unique[u * dim + c]) << i;
    }
  }
  auto stats = a->Stats();
  ASSERT_TRUE(stats.ok());
  int64_t user_rows = 0;
  for (const auto& s : *stats) user_rows += s.tables(0).rows();
  EXPECT_EQ(user_rows, 5);

  // Push: the gradients of a repeated key are summed (adam: summed once != applied twice).
  const std::vector<uint64_t> push_keys = {9, 4, 9, 1, 9, 4};
  const std::vector<float> g = SmallGrads(push_keys.size() * 8, 77);
  PullRows(*a, kItem, push_keys);
  PullRows(*b, kItem, push_keys);
  ASSERT_TRUE(PushRows(*a, kItem, push_keys, g).ok());
  const std::vector<uint64_t> once_keys = {1, 4, 9};
  std::vector<float> sum(3 * 8, 0.0f);
  for (size_t i = 0; i < push_keys.size(); ++i) {
    const size_t u =
        std::find(once_keys.begin(), once_keys.end(), push_keys[i]) - once_keys.begin();
    for (int c = 0; c < 8; ++c) sum[u * 8 + c] += g[i * 8 + c];
  }
  ASSERT_TRUE(PushRows(*b, kItem, once_keys, sum).ok());
  EXPECT_EQ(PullRows(*a, kItem, once_keys), PullRows(*b, kItem, once_keys));
  // Applying the repeats one by one would differ (the check above can fail).
  for (size_t i = 0; i < push_keys.size(); ++i) {
    ASSERT_TRUE(PushRows(*b, kItem, {push_keys[i]},
                         std::vector<float>(g.begin() + i * 8, g.begin() + (i + 1) * 8))
                    .ok());
  }
  ASSERT_TRUE(PushRows(*a, kItem, once_keys, sum).ok());
  EXPECT_NE(PullRows(*a, kItem, once_keys), PullRows(*b, kItem, once_keys));
}

TEST(EmbeddingServiceTest, Fp16AndBf16Encodings) {
  const WireFloat encodings[] = {WireFloat::kFp32, WireFloat::kFp16, WireFloat::kBf16};
  std::vector<std::vector<std::unique_ptr<EmbeddingServer>>> servers;
  std::vector<std::unique_ptr<EmbeddingClient>> clients, fp32_clients;
  for (WireFloat e : encodings) {
    servers.push_back(StartServers(2));
    EmbeddingClientOptions o;
    o.encoding = e;
    clients.push_back(Connect(servers.back(), o));
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(clients.back()->Configure(kSeed, Tables()).ok());
    fp32_clients.push_back(Connect(servers.back()));  // learns the tables from Stats
    ASSERT_NE(fp32_clients.back(), nullptr);
  }
  const std::vector<uint64_t> keys = SpreadKeys(300, 71);
  // Pulled rows: the fp32 rows rounded through the encoding.
  for (uint32_t t : {kUser, kItem}) {
    const std::vector<float> fp32 = PullRows(*clients[0], t, keys);
    const std::vector<float> fp16 = PullRows(*clients[1], t, keys);
    const std::vector<float> bf16 = PullRows(*clients[2], t, keys);
    ASSERT_EQ(fp16.size(), fp32.size());
    int changed = 0;
    for (size_t i = 0; i < fp32.size(); ++i) {
      EXPECT_EQ(fp16[i], HalfToFloat(FloatToHalf(fp32[i]))) << i;
      EXPECT_EQ(bf16[i], Bfloat16ToFloat(FloatToBfloat16(fp32[i]))) << i;
      changed += fp16[i] != fp32[i];
    }
    EXPECT_GT(changed, 0);  // the rounding did happen
  }
  // Gradients exact in every encoding: the same rows as fp32 pushes.
  for (auto& c : clients) PullToCreate(*c, keys);
  for (int step = 0; step < 3; ++step) {
    for (auto& c : clients) ASSERT_TRUE(PushAll(*c, keys, 100 + step, step).ok());
  }
  const std::vector<float> want = PullAll(*fp32_clients[0], keys);
  EXPECT_EQ(PullAll(*fp32_clients[1], keys), want);
  EXPECT_EQ(PullAll(*fp32_clients[2], keys), want);
}

TEST(EmbeddingServiceTest, APassedDeadlineIsDeadlineExceeded) {
  auto servers = StartServers(1);
  auto admin = Connect(servers);
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->Configure(kSeed, Tables()).ok());
  EmbeddingClientOptions o;
  o.deadline_s = 1e-6;
  auto hasty = Connect(servers, o);
  ASSERT_NE(hasty, nullptr);
  // A pull far bigger than 1 us of work: the deadline passes long before it could finish.
  const std::vector<uint64_t> keys = SpreadKeys(200000, 1);
  std::vector<float> out(keys.size() * 4);
  const EmbeddingClient::PullItem item{kUser, keys, absl::MakeSpan(out)};
  ExpectError(hasty->Pull({item}, true), absl::StatusCode::kDeadlineExceeded,
              {Address(*servers[0]), "Pull", "DEADLINE_EXCEEDED"});
  EXPECT_EQ(hasty->retries(), 0);
  // The server is fine.
  EXPECT_EQ(PullRows(*admin, kUser, keys).size(), keys.size() * 4);
}

TEST(EmbeddingServiceTest, UnavailableIsRetriedThenNamesTheServer) {
  auto servers = StartServers(1);
  EmbeddingClientOptions o;
  o.max_retries = 3;
  o.retry_backoff_s = 0.01;
  o.deadline_s = 10;
  auto client = Connect(servers, o);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> keys = {1, 2, 3};
  ASSERT_EQ(PullRows(*client, kUser, keys).size(), 12u);
  EXPECT_EQ(client->retries(), 0);
  const std::string address = Address(*servers[0]);
  servers[0]->Shutdown(0);
  std::vector<float> out(12);
  const EmbeddingClient::PullItem item{kUser, keys, absl::MakeSpan(out)};
  ExpectError(client->Pull({item}, true), absl::StatusCode::kUnavailable,
              {address, "Pull", "after 3 retries"});
  EXPECT_EQ(client->retries(), 3);
  ExpectError(PushRows(*client, kUser, keys, out), absl::StatusCode::kUnavailable,
              {address, "Push"});
  EXPECT_EQ(client->retries(), 6);
}

TEST(EmbeddingServiceTest, PushRetryIdentityAppliesOnce) {
  auto servers = StartServers(1);
  auto rpc = pb::EmbeddingService::NewStub(Channel(*servers[0]));
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> keys = {11, 12};
  const std::vector<float> init = PullRows(*client, kUser, keys);
  auto push = [&](uint64_t client_id, uint64_t sequence) {
    pb::PushRequest req = PushReq({{kUser, keys, Fill(8, 1.0f)}});
    req.set_client_id(client_id);
    req.set_sequence(sequence);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::PushResponse r;
    const grpc::Status s = rpc->Push(&ctx, req, &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r;
  };
  pb::PushResponse r = push(0x1234, 7);
  EXPECT_FALSE(r.duplicate());
  EXPECT_EQ(r.applied_keys(), 2u);
  r = push(0x1234, 7);
  EXPECT_TRUE(r.duplicate());
  EXPECT_EQ(r.applied_keys(), 0u);
  std::vector<float> want = init;
  for (float& v : want) v -= 0.125f;
  EXPECT_EQ(PullRows(*client, kUser, keys), want);
  // client_id 0: no identity, both apply.
  r = push(0, 7);
  EXPECT_FALSE(r.duplicate());
  r = push(0, 7);
  EXPECT_FALSE(r.duplicate());
  EXPECT_EQ(r.applied_keys(), 2u);
  for (float& v : want) v -= 2 * 0.125f;
  EXPECT_EQ(PullRows(*client, kUser, keys), want);
}

// ---------------------------------------------------------------------------------------------
// 6. Metrics.

TEST(EmbeddingServiceTest, MetricsCountRowsKeysAndCodesAndPassPromtool) {
  ServerSpec spec;
  spec.metrics = true;
  auto servers = StartServers(1, spec);
  ASSERT_GT(servers[0]->metrics_port(), 0);
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> keys = SpreadKeys(250, 3);
  PullRows(*client, kUser, keys);  // 250 user keys
  PullRows(*client, kUser, std::vector<uint64_t>(keys.begin(), keys.begin() + 50));  // 50 more
  PullRows(*client, kCat, {1, 2, 3, 4}, /*create_missing=*/false);  // 4 cat keys, no rows
  PullRows(*client, kItem, {5, 6, 7});                              // pushed next
  ASSERT_TRUE(PushRows(*client, kItem, {5, 6, 7}, Fill(24, 0.25f)).ok());
  auto channel = Channel(*servers[0]);
  auto rpc = pb::EmbeddingService::NewStub(channel);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::PullResponse r;
    EXPECT_EQ(rpc->Pull(&ctx, PullReq({{555, {1}}}), &r).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(
      RawCall(channel, absl::StrCat("/", kService, "/Push"), std::string(9, '\xff')).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);

  std::string text;
  const auto m = Scrape(*servers[0], &text);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_rows", "user")), 250);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_rows", "item")), 3);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_rows", "cat")), 0);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_pulled_keys_total", "user")), 300);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_pulled_keys_total", "cat")), 4);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_pushed_keys_total", "item")), 3);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_pushed_keys_total", "user")), 0);
  EXPECT_GT(ValueOf(m, TableSeries("sift_ps_memory_bytes", "user")), 250 * 4 * 4);
  EXPECT_EQ(ValueOf(m, GrpcSeries("grpc_server_handled_total", "Pull", "INVALID_ARGUMENT")), 2);
  EXPECT_EQ(ValueOf(m, GrpcSeries("grpc_server_handled_total", "Push", "INVALID_ARGUMENT")), 1);
  EXPECT_EQ(ValueOf(m, GrpcSeries("grpc_server_handled_total", "Pull", "OK")), 4);
  EXPECT_EQ(ValueOf(m, GrpcSeries("grpc_server_handled_total", "Push", "OK")), 1);
  EXPECT_EQ(ValueOf(m, GrpcSeries("grpc_server_started_total", "Pull")), 6);
  EXPECT_EQ(ValueOf(m, GrpcSeries("grpc_server_handling_seconds_bucket", "Pull", "", "+Inf")), 6);
  EXPECT_EQ(ValueOf(m, GrpcSeries("grpc_server_handling_seconds_count", "Pull")), 6);
  EXPECT_THAT(text, HasSubstr("sift_build_info{"));
  EXPECT_THAT(text, HasSubstr("version=\"1.2.3-test\""));

  if (!testing::PromtoolAvailable()) GTEST_SKIP() << "promtool not on PATH";
  auto lint = testing::PromtoolCheckMetrics(text);
  EXPECT_TRUE(lint.ok()) << lint.status() << "\n" << text;
}

// ---------------------------------------------------------------------------------------------
// 7. Health.

// Issue 16 row 1: a finite but huge gradient (FLT_MAX) used to be accepted and froze the row for
// good (adam's second moment became inf). Now it is refused whole, nothing is written, the row
// keeps training, and the refusal is counted.
TEST(EmbeddingServiceTest, HugeGradientsAreRefusedWholeAndRowsStayTrainable) {
  ServerSpec spec;
  spec.metrics = true;
  auto servers = StartServers(1, spec);
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> keys = {7, 8};
  const std::vector<float> before = PullRows(*client, kItem, keys);
  auto rpc = pb::EmbeddingService::NewStub(Channel(*servers[0]));
  const auto push = [&](float g) {
    std::vector<float> grads(16, 0.25f);
    grads[11] = g;  // key 8, component 3
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::PushResponse r;
    return rpc->Push(&ctx, PushReq({{kItem, keys, grads}}), &r);
  };
  ExpectGrpcError(push(std::numeric_limits<float>::max()), grpc::StatusCode::INVALID_ARGUMENT,
                  {"table 'item'", "for id 8 component 3 is beyond +-1e+06", "--max-abs-gradient",
                   "refused whole"});
  ExpectGrpcError(push(-2e6f), grpc::StatusCode::INVALID_ARGUMENT, {"beyond +-1e+06"});
  ExpectGrpcError(push(std::numeric_limits<float>::quiet_NaN()), grpc::StatusCode::INVALID_ARGUMENT,
                  {"non-finite gradient"});
  EXPECT_EQ(PullRows(*client, kItem, keys), before);  // nothing written, not even key 7
  // The rows still learn: a push of 0.5 moves every component (adam: by about lr).
  ASSERT_TRUE(push(0.5f).ok());
  const std::vector<float> after = PullRows(*client, kItem, keys);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_NEAR(after[i], before[i] - 0.01f, 1e-4f) << i;
  }
  ASSERT_TRUE(push(1e6f).ok());  // the bound itself is accepted
  const auto m = Scrape(*servers[0]);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_refused_pushes_total", "item")), 3);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_refused_pushes_total", "user")), 0);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_refused_rows_total", "item")), 0);
}

// Row 3: pulling millions of new ids grew the server without limit. With a table memory budget
// the pulls that need rows beyond it are RESOURCE_EXHAUSTED naming the table; memory stays
// within the budget; the rows already held are still served and trained.
TEST(EmbeddingServiceTest, ATableMemoryBudgetBoundsRowsAndRefusesNewOnes) {
  ServerSpec spec;
  spec.metrics = true;
  spec.memory_budget = 1 << 20;  // 1 MiB; an item row (dim 8, adam) takes 8*3+1 floats + 17 B
  auto servers = StartServers(1, spec);
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> held = {1, 2, 3};
  const std::vector<float> first = PullRows(*client, kItem, held);
  auto rpc = pb::EmbeddingService::NewStub(Channel(*servers[0]));
  Status refused;
  uint64_t next = 1000;
  for (int round = 0; round < 100 && refused.ok(); ++round) {  // at most 100 x 1000 ids
    std::vector<uint64_t> ids;
    for (int i = 0; i < 1000; ++i) ids.push_back(next++);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::PullResponse r;
    refused = FromGrpc(rpc->Pull(&ctx, PullReq({{kItem, ids}}), &r), "pull");
  }
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("table 'item' (id 7): no room for new rows"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("budget of 1048576"));
  const int64_t row_bytes = (8 * 3 + 1) * 4 + 17;
  pb::StatsResponse stats;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    ASSERT_TRUE(rpc->Stats(&ctx, pb::StatsRequest(), &stats).ok());
  }
  int64_t rows = 0;
  for (const auto& t : stats.tables()) rows += t.rows();
  EXPECT_LE(rows * row_bytes, 1 << 20);
  EXPECT_GT(rows * row_bytes, (1 << 20) - 1000 * row_bytes);
  // Held rows: still served, still trained.
  EXPECT_EQ(PullRows(*client, kItem, held), first);
  ASSERT_TRUE(PushRows(*client, kItem, held, Fill(24, 0.5f)).ok());
  EXPECT_NE(PullRows(*client, kItem, held), first);
  // A push of rows this shard does not hold (new ids): refused whole, nothing created.
  const Status absent = PushRows(*client, kItem, {next, next + 1}, Fill(16, 0.5f));
  EXPECT_EQ(absent.code(), absl::StatusCode::kInvalidArgument) << absent;
  int64_t after = 0;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    ASSERT_TRUE(rpc->Stats(&ctx, pb::StatsRequest(), &stats).ok());
  }
  for (const auto& t : stats.tables()) after += t.rows();
  EXPECT_EQ(after, rows);
  const auto m = Scrape(*servers[0]);
  EXPECT_GE(ValueOf(m, TableSeries("sift_ps_refused_pulls_total", "item")), 1);
  EXPECT_EQ(ValueOf(m, TableSeries("sift_ps_refused_absent_pushes_total", "item")), 1);
  // Per method and code, each also a log line (who, what, from where).
  auto page = testing::HttpGet("127.0.0.1", servers[0]->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(*page, HasSubstr("sift_ps_refused_requests_total{grpc_code=\"RESOURCE_EXHAUSTED\","
                               "grpc_method=\"Pull\"} 1"));
  EXPECT_THAT(*page, HasSubstr("sift_ps_refused_requests_total{grpc_code=\"INVALID_ARGUMENT\","
                               "grpc_method=\"Push\"} 1"));
}

// Row 7: shards share a --snapshot-dir, but each shard has one server.
TEST(EmbeddingServiceTest, OneServerPerShardOfASnapshotDir) {
  testing::TempDir dir;
  ServerSpec spec;
  spec.snapshot_dir = dir.Sub("snap");
  auto two = StartServers(2, spec);  // shards 0 and 1 of 2 share it
  ASSERT_NE(two[1], nullptr);
  embedding::EmbeddingServerOptions o;
  o.shard.shard = 1;
  o.shard.num_shards = 2;
  o.shard.snapshot_dir = spec.snapshot_dir;
  o.bind_address = "127.0.0.1";
  o.metrics_port = -1;
  auto again = EmbeddingServer::Start(o);
  ASSERT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()),
              HasSubstr("is in use by embedding server shard 1 of 2 (pid "));
}

// Issue 16 row 2: after its open-file limit was reached (a flood of connections), a server
// never accepted a connection again (gRPC 1.51's listener stops after EMFILE). Now its
// self-probe notices and restarts the listener once descriptors are free again: the flood ends,
// and a new client is served. Bounded: at most 4096 connections on loopback, 120 s to recover.
TEST(EmbeddingServiceTest, AServerRecoversAfterItsFileDescriptorsRunOut) {
  auto servers = StartServers(1);
  ASSERT_NE(servers[0], nullptr);
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  const std::vector<float> before = PullRows(*client, kUser, {1, 2});
  // This process holds both ends: capped a little above what it uses now, it connects until the
  // cap is reached (the server's accepts then fail with EMFILE).
  ASSERT_GT(sift::testing::ExhaustDescriptors(servers[0]->port()), 100u);
  // A new client (a new connection) is served again within the bound.
  Status served = absl::UnavailableError("not tried");
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (!served.ok() && absl::Now() < deadline) {
    EmbeddingClientOptions o;
    o.servers = {Address(*servers[0])};
    o.connect_timeout_s = 5;
    auto fresh = EmbeddingClient::Connect(o);
    if (fresh.ok()) {
      std::vector<float> out(2 * DimOf(kUser));
      served = (*fresh)->Pull({{kUser, {1, 2}, absl::MakeSpan(out)}}, true);
      if (served.ok()) {
        EXPECT_EQ(out, before);
      }
    } else {
      served = fresh.status();
    }
  }
  EXPECT_TRUE(served.ok()) << served;
}

// Issue 16 row 2: a flood of connections that never speak HTTP/2 is closed after
// --handshake-timeout-ms, idle HTTP/2 connections after --max-connection-idle-ms; the shard
// serves throughout, and Pull + Push after it as before.
TEST(EmbeddingServiceTest, AConnectionFloodIsReclaimedAndTheShardServesThroughout) {
  ServerSpec spec;
  spec.limits.handshake_timeout_ms = 1000;
  spec.limits.max_connection_idle_ms = 1000;
  auto servers = StartServers(1, spec);
  ASSERT_NE(servers[0], nullptr);
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> keys = {1, 2, 3};
  const std::vector<float> before = PullRows(*client, kUser, keys);

  std::vector<int> raw = sift::testing::OpenRawConnections(servers[0]->port(), 300);
  ASSERT_EQ(raw.size(), 300u);
  std::vector<std::shared_ptr<grpc::Channel>> idle;
  for (int i = 0; i < 50; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection each
    idle.push_back(
        grpc::CreateCustomChannel(Address(*servers[0]), grpc::InsecureChannelCredentials(), args));
    ASSERT_TRUE(
        idle.back()->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  }
  // Served during the flood, by a new client too.
  EXPECT_EQ(PullRows(*Connect(servers), kUser, keys), before);

  EXPECT_EQ(sift::testing::WaitUntilClosedByPeer(raw, absl::Now() + absl::Seconds(30)), 300u);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  size_t still_ready = idle.size();
  while (still_ready > 0 && absl::Now() < deadline) {
    still_ready = 0;
    for (const auto& c : idle) still_ready += c->GetState(false) == GRPC_CHANNEL_READY ? 1 : 0;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(still_ready, 0u) << "idle connections the server did not close";
  sift::testing::CloseAll(&raw);
  idle.clear();

  // The first client's connection was idle too (closed); its next calls reconnect. Push
  // row * 8 with lr 1/8: every row becomes exactly 0.
  EXPECT_EQ(PullRows(*client, kUser, keys), before);
  std::vector<float> grads = before;
  for (float& g : grads) g *= 8.0f;
  ASSERT_TRUE(PushRows(*client, kUser, keys, grads).ok());
  EXPECT_EQ(PullRows(*client, kUser, keys), std::vector<float>(before.size(), 0.0f));
}

// Row 6: snapshots were never deleted (9 for one 90-step job). A shard keeps its files of the
// newest 4 checkpoint snapshots of a job (by step, then generation) and deletes older ones; a
// directory goes when no shard's file is left; other names are never touched.
TEST(EmbeddingServiceTest, OldCheckpointSnapshotsAreDeleted) {
  testing::TempDir dir;
  ServerSpec spec;
  spec.snapshot_dir = dir.Sub("snap");
  auto servers = StartServers(1, spec);
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  PullRows(*client, kUser, {1, 2, 3});
  auto rpc = pb::EmbeddingService::NewStub(Channel(*servers[0]));
  const auto snapshot = [&](const std::string& name, int64_t step) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    pb::SnapshotRequest q;
    q.set_name(name);
    q.set_step(step);
    pb::SnapshotResponse r;
    return rpc->Snapshot(&ctx, q, &r).ok();
  };
  ASSERT_TRUE(snapshot("manual", 0));
  ASSERT_TRUE(snapshot("ckpt-job-2-g1-step-3", 3));  // another job: its own family
  // Another shard's file in an old directory keeps the directory (only this shard's goes).
  ASSERT_TRUE(sift::MakeDirs(spec.snapshot_dir + "/ckpt-job-1-g1-step-1").ok());
  testing::WriteAll(spec.snapshot_dir + "/ckpt-job-1-g1-step-1/shard-1-of-2.bin", "x");
  for (const char* name :
       {"ckpt-job-1-g1-step-1", "ckpt-job-1-g1-step-2", "ckpt-job-1-g2-step-2",
        "ckpt-job-1-g2-step-4", "ckpt-job-1-g2-step-10", "ckpt-job-1-g3-step-12"}) {
    const std::string n = name;
    ASSERT_TRUE(snapshot(n, std::stoll(n.substr(n.rfind('-') + 1)))) << n;
  }
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(spec.snapshot_dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".shard-0-of-1.lock", "ckpt-job-1-g1-step-1",
                                             "ckpt-job-1-g2-step-10", "ckpt-job-1-g2-step-2",
                                             "ckpt-job-1-g2-step-4", "ckpt-job-1-g3-step-12",
                                             "ckpt-job-2-g1-step-3", "manual"}));
  // step-1 stays only for shard 1's file; this shard's is gone. g1-step-2 lost to g2-step-2.
  EXPECT_FALSE(sift::PathExists(spec.snapshot_dir + "/ckpt-job-1-g1-step-1/" +
                                embedding::ShardSnapshotFileName(0, 1)));
  EXPECT_TRUE(sift::PathExists(spec.snapshot_dir + "/ckpt-job-1-g1-step-1/shard-1-of-2.bin"));
}

// A server registered with a coordinator serves one generation of one job: table calls need that
// generation's credential (security off here: the rule is the same), snapshots are that job's,
// an earlier generation's rank is told it is stale, and each refusal is counted.
TEST(EmbeddingServiceTest, AManagedServerServesOnlyTheGenerationItWasGiven) {
  testing::TempDir dir;
  ServerSpec spec;
  spec.snapshot_dir = dir.Sub("snap");
  spec.managed = true;
  spec.metrics = true;
  auto servers = StartServers(1, spec);
  const JobCredentialIssuer issuer(std::string(32, 'k'));
  const auto client_with = [&](const std::string& credential) {
    EmbeddingClientOptions o;
    o.security.job_credential = credential;
    o.max_retries = 0;
    return Connect(servers, o);
  };
  const std::string g1 = issuer.Issue("job-1", 1);
  auto rank = client_with(g1);  // Connect reads Stats: open to every caller
  ASSERT_NE(rank, nullptr);
  Status s = rank->Configure(kSeed, Tables());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("serves no job now"));

  servers[0]->SetJobGrant(embedding::JobGrant{"job-1", 1, g1, "ckpt-job-0-g4-step-9"});
  ASSERT_TRUE(rank->Configure(kSeed, Tables()).ok());
  const std::vector<float> rows = PullRows(*rank, kUser, {1, 2, 3});
  // No credential, another job's, another coordinator's: refused; the tables are unchanged.
  for (const std::string& credential :
       {std::string(), issuer.Issue("job-2", 1),
        JobCredentialIssuer(std::string(32, 'z')).Issue("job-1", 1)}) {
    auto other = client_with(credential);
    ASSERT_NE(other, nullptr);
    s = other->Configure(kSeed, Tables(), /*replace=*/true);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << credential;
    EXPECT_THAT(std::string(s.message()), HasSubstr("serves job-1 generation 1"));
  }
  EXPECT_EQ(PullRows(*rank, kUser, {1, 2, 3}), rows);
  EXPECT_EQ(servers[0]->shard().Metrics().size(), 3u);

  // Snapshots: the job's own only (writing and pruning); restores also the resume snapshot.
  auto rpc = pb::EmbeddingService::NewStub(Channel(*servers[0]));
  const auto snapshot = [&](const std::string& name, bool retain_only) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    ctx.AddMetadata(kJobCredentialHeader, g1);
    pb::SnapshotRequest q;
    q.set_name(name);
    q.set_step(5);
    q.set_retain_only(retain_only);
    pb::SnapshotResponse r;
    return rpc->Snapshot(&ctx, q, &r);
  };
  const auto restore = [&](const std::string& name) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    ctx.AddMetadata(kJobCredentialHeader, g1);
    pb::RestoreRequest q;
    q.set_name(name);
    pb::RestoreResponse r;
    return rpc->Restore(&ctx, q, &r);
  };
  ASSERT_TRUE(snapshot("ckpt-job-1-g1-step-5", false).ok());
  for (const char* name : {"ckpt-job-2-g9-step-999999", "manual", "ckpt-job-10-g1-step-5"}) {
    const grpc::Status st = snapshot(name, /*retain_only=*/true);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << name;
    EXPECT_THAT(st.error_message(), HasSubstr("a job writes and prunes only its own snapshots"));
  }
  EXPECT_TRUE(sift::PathExists(spec.snapshot_dir + "/ckpt-job-1-g1-step-5"));
  EXPECT_EQ(restore("ckpt-job-2-g1-step-5").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // The resume snapshot passes the scope check (and then fails: it does not exist here).
  EXPECT_EQ(restore("ckpt-job-0-g4-step-9").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(restore("ckpt-job-1-g1-step-5").ok());

  // Generation 2: generation 1's ranks are stale; none: everything refused.
  const std::string g2 = issuer.Issue("job-1", 2);
  servers[0]->SetJobGrant(embedding::JobGrant{"job-1", 2, g2, ""});
  std::vector<float> out(3 * DimOf(kUser));
  const std::vector<uint64_t> keys = {1, 2, 3};
  const EmbeddingClient::PullItem item{kUser, keys, absl::MakeSpan(out)};
  s = rank->Pull({&item, 1}, /*create_missing=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("stale generation: Pull from job-1 generation 1"));
  EXPECT_TRUE(client_with(g2)->Pull({&item, 1}, true).ok());
  servers[0]->SetJobGrant(std::nullopt);
  EXPECT_EQ(client_with(g2)->Pull({&item, 1}, true).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_with("")->Pull({&item, 1}, true).code(), absl::StatusCode::kPermissionDenied);

  // Counted per method and code.
  auto page = testing::HttpGet("127.0.0.1", servers[0]->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(*page, HasSubstr("sift_auth_refusals_total{grpc_code=\"PERMISSION_DENIED\","
                               "grpc_method=\"Configure\"} 3"));
  EXPECT_THAT(*page, HasSubstr("sift_auth_refusals_total{grpc_code=\"PERMISSION_DENIED\","
                               "grpc_method=\"Snapshot\"} 3"));
}

TEST(EmbeddingServiceTest, HealthIsServingUntilShutdown) {
  auto servers = StartServers(1);
  auto channel = Channel(*servers[0]);
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto check = [&](const std::string& service, grpc::health::v1::HealthCheckResponse* r) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10);
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    return health->Check(&ctx, req, r);
  };
  for (const std::string service : {"", kService}) {
    grpc::health::v1::HealthCheckResponse r;
    const grpc::Status s = check(service, &r);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(r.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  grpc::health::v1::HealthCheckResponse unknown;
  EXPECT_EQ(check("no.such.Service", &unknown).error_code(), grpc::StatusCode::NOT_FOUND);

  servers[0]->Shutdown(1.0);
  for (const std::string service : {"", kService}) {
    grpc::health::v1::HealthCheckResponse r;
    const grpc::Status s = check(service, &r);
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                (s.ok() && r.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING))
        << service << ": " << s.error_code() << " " << s.error_message() << " " << r.status();
  }
  servers[0]->Shutdown();  // twice is fine
}

// ---------------------------------------------------------------------------------------------
// 8. Stats.

TEST(EmbeddingServiceTest, StatsReportRowsDimsStepsConfigsAndLimits) {
  ServerSpec spec;
  spec.max_keys = 3000;
  spec.max_bytes = 1 << 20;
  auto servers = StartServers(2, spec);
  auto client = Connect(servers);
  ASSERT_NE(client, nullptr);
  auto before = client->Stats();
  ASSERT_TRUE(before.ok());
  EXPECT_FALSE((*before)[0].configured());
  EXPECT_EQ((*before)[0].tables_size(), 0);
  ASSERT_TRUE(client->Configure(kSeed, Tables()).ok());
  const std::vector<uint64_t> keys = SpreadKeys(400, 8);
  PullRows(*client, kUser, keys);
  PullRows(*client, kItem, keys);
  PullRows(*client, kCat, keys);
  ASSERT_TRUE(PushAll(*client, keys, 5, 41).ok());
  ASSERT_TRUE(PushAll(*client, std::vector<uint64_t>(keys.begin(), keys.begin() + 10), 6, 40).ok());
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 2u);
  std::map<uint32_t, int64_t> rows;
  std::map<uint32_t, uint64_t> pulled, pushed;
  for (uint32_t i = 0; i < 2; ++i) {
    const pb::StatsResponse& s = (*stats)[i];
    EXPECT_EQ(s.shard(), i);
    EXPECT_EQ(s.num_shards(), 2u);
    EXPECT_TRUE(s.configured());
    EXPECT_EQ(s.seed(), kSeed);
    EXPECT_EQ(s.max_keys_per_request(), 3000u);
    EXPECT_EQ(s.max_message_bytes(), 1u << 20);
    EXPECT_EQ(s.version(), "1.2.3-test");
    ASSERT_EQ(s.configs_size(), 3);
    const pb::ConfigureRequest want = ConfigProto();
    for (const pb::TableConfig& c : s.configs()) {
      bool found = false;
      for (const pb::TableConfig& w : want.tables()) {
        if (w.table_id() == c.table_id()) {
          found = true;
          EXPECT_EQ(c.SerializeAsString(), w.SerializeAsString()) << c.name();
        }
      }
      EXPECT_TRUE(found) << c.table_id();
    }
    ASSERT_EQ(s.tables_size(), 3);
    int64_t memory = 0;
    for (const pb::TableStats& t : s.tables()) {
      EXPECT_EQ(t.dim(), static_cast<uint32_t>(DimOf(t.table_id()))) << t.name();
      EXPECT_EQ(t.last_step(), 41) << t.name();
      EXPECT_EQ(t.value_bytes(), t.rows() * DimOf(t.table_id()) * 4) << t.name();
      rows[t.table_id()] += t.rows();
      pulled[t.table_id()] += t.pulled_keys();
      pushed[t.table_id()] += t.pushed_keys();
      memory += t.total_bytes();
    }
    EXPECT_EQ(s.memory_bytes(), memory);
  }
  for (uint32_t t : {kUser, kItem, kCat}) {
    EXPECT_EQ(rows[t], 400) << t;
    EXPECT_EQ(pushed[t], 410u) << t;
  }
  EXPECT_EQ(pulled[kUser], 400u);
  EXPECT_EQ(pulled[kItem], 400u);
}

}  // namespace
}  // namespace sift
