// Fuzz target: the embedding server's request handling (server/embedding/shard.h EmbeddingShard),
// reached the way the gRPC service reaches it (service.cc parses each request's raw bytes as its
// message and calls the shard), in-process, without a network.
//
// Per input a fresh shard (snapshot dir in the scratch directory) is configured with two small
// tables (adam dim 4, sgd dim 2). Input: requests separated by kPartSeparator, each one byte
// choosing the method (Configure, Pull, Push, Stats, Snapshot, Restore) and the bytes of its
// message; bytes that do not parse are answered INVALID_ARGUMENT by the service and skipped here.
// Configure requests with a table wider than 1024 floats are skipped (memory, not behaviour: a
// fuzz input would otherwise allocate GBs of rows). Invariants: every error carries a message;
// a failed Pull or Push changes no table (rows, last step); PullTo's wire bytes are exactly the
// serialized PullResponse of Pull; a Pull answers one table per request table.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/embedding/shard.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace pb = ::sift::embedding::v1;
using sift::embedding::EmbeddingShard;

enum Method : uint8_t { kConfigure, kPull, kPush, kStats, kSnapshot, kRestore, kMethods };

pb::ConfigureRequest BaseConfig() {
  pb::ConfigureRequest c;
  c.set_seed(11);
  pb::TableConfig* a = c.add_tables();
  a->set_table_id(0);
  a->set_name("users");
  a->set_dim(4);
  a->set_cardinality(100);
  a->mutable_optimizer()->set_kind(pb::OPTIMIZER_ADAM);
  a->mutable_optimizer()->set_learning_rate(0.01f);
  a->mutable_optimizer()->set_beta1(0.9f);
  a->mutable_optimizer()->set_beta2(0.999f);
  a->mutable_optimizer()->set_epsilon(1e-7f);
  pb::TableConfig* b = c.add_tables();
  b->set_table_id(7);
  b->set_name("items");
  b->set_dim(2);
  b->set_cardinality(1000);
  b->mutable_optimizer()->set_kind(pb::OPTIMIZER_SGD);
  b->mutable_optimizer()->set_learning_rate(0.1f);
  return c;
}

// What a failed request must leave unchanged: per table, its rows and last pushed step.
std::string TableState(const EmbeddingShard& shard) {
  pb::StatsResponse stats;
  FUZZ_CHECK(shard.Stats(&stats).ok(), "stats");
  std::string out = std::to_string(stats.configured()) + ";";
  for (const pb::TableStats& t : stats.tables()) {
    out += std::to_string(t.table_id()) + ":" + std::to_string(t.rows()) + ":" +
           std::to_string(t.last_step()) + ";";
  }
  return out;
}

void CheckError(const sift::Status& s) {
  sift::fuzz::Note("error", s);
  FUZZ_CHECK(!s.message().empty(), "an error says something: " + s.ToString());
  FUZZ_CHECK(s.code() != absl::StatusCode::kUnknown, s.ToString());
}

void Pull(EmbeddingShard* shard, const pb::PullRequest& q) {
  const std::string before = TableState(*shard);
  // PullTo's pieces, in order: each framing, then the rows memory it was handed (kept alive and
  // unmoved until the reply is complete, as the service's slices are).
  std::vector<std::pair<std::string, std::unique_ptr<std::string>>> pieces;
  const sift::Status to = shard->PullTo(q, [&](absl::string_view framing, size_t n) -> char* {
    pieces.emplace_back(std::string(framing), std::make_unique<std::string>(n, '\0'));
    return pieces.back().second->data();
  });
  pb::PullResponse r;
  const sift::Status s = shard->Pull(q, &r);
  FUZZ_CHECK(to.code() == s.code(),
             "PullTo and Pull agree: " + to.ToString() + " / " + s.ToString());
  if (!s.ok()) {
    CheckError(s);
    FUZZ_CHECK(pieces.empty(), "no piece is asked for when validation fails");
    FUZZ_CHECK(TableState(*shard) == before, "a failed Pull changes nothing: " + s.ToString());
    return;
  }
  std::string wire;
  for (const auto& [framing, rows] : pieces) wire += framing + *rows;
  FUZZ_CHECK(wire == r.SerializeAsString(), "PullTo's bytes are Pull's response");
  FUZZ_CHECK(r.tables_size() == q.tables_size(), "one table per request table");
}

void Push(EmbeddingShard* shard, const pb::PushRequest& q) {
  const std::string before = TableState(*shard);
  pb::PushResponse r;
  const sift::Status s = shard->Push(q, &r);
  if (!s.ok()) {
    CheckError(s);
    FUZZ_CHECK(TableState(*shard) == before, "a failed Push changes nothing: " + s.ToString());
  }
}

bool TooWide(const pb::ConfigureRequest& c) {
  for (const pb::TableConfig& t : c.tables()) {
    if (t.dim() > 1024) return true;
  }
  return false;
}

template <typename Request>
bool Parse(absl::string_view bytes, Request* q) {
  return q->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sift::fuzz::QuietProtobuf();
  const auto& scratch = sift::fuzz::ScratchDir::Get();
  scratch.Reset();
  sift::embedding::ShardOptions options;
  options.snapshot_dir = scratch.File("snapshots");
  options.num_stripes = 4;
  options.max_keys_per_request = 4096;
  auto shard = EmbeddingShard::Create(options);
  FUZZ_CHECK(shard.ok(), shard.status().ToString());
  {
    pb::ConfigureResponse r;
    const sift::Status s = (*shard)->Configure(BaseConfig(), &r);
    FUZZ_CHECK(s.ok(), s.ToString());
  }
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (absl::string_view part : sift::fuzz::SplitParts(bytes)) {
    if (part.empty()) continue;
    const uint8_t method = static_cast<uint8_t>(part[0]) % kMethods;
    part.remove_prefix(1);
    sift::Status s;
    switch (method) {
      case kConfigure: {
        pb::ConfigureRequest q;
        if (!Parse(part, &q) || TooWide(q)) continue;
        pb::ConfigureResponse r;
        s = (*shard)->Configure(q, &r);
        break;
      }
      case kPull: {
        pb::PullRequest q;
        if (!Parse(part, &q)) continue;
        Pull(shard->get(), q);
        continue;
      }
      case kPush: {
        pb::PushRequest q;
        if (!Parse(part, &q)) continue;
        Push(shard->get(), q);
        continue;
      }
      case kStats: {
        pb::StatsResponse r;
        s = (*shard)->Stats(&r);
        FUZZ_CHECK(s.ok(), s.ToString());
        break;
      }
      case kSnapshot: {
        pb::SnapshotRequest q;
        if (!Parse(part, &q)) continue;
        pb::SnapshotResponse r;
        s = (*shard)->Snapshot(q, &r);
        break;
      }
      case kRestore: {
        pb::RestoreRequest q;
        if (!Parse(part, &q)) continue;
        pb::RestoreResponse r;
        s = (*shard)->Restore(q, &r);
        break;
      }
    }
    if (!s.ok()) CheckError(s);
  }
  return 0;
}

// Seeds for the standalone driver's --write-seeds: request sequences a worker and the
// coordinator send (pull with create_missing, push, stats, snapshot, restore, reconfigure).
extern "C" void SiftFuzzWriteSeeds(const char* out_dir) {
  auto part = [](Method m, const google::protobuf::Message& q) {
    std::string out(1, static_cast<char>(m));
    out += q.SerializeAsString();
    return out;
  };
  pb::PullRequest pull;
  pull.set_create_missing(true);
  pb::TableKeys* k = pull.add_tables();
  k->set_table_id(0);
  for (uint64_t id : {3, 1, 3, 99}) k->add_keys(id);
  pb::TableKeys* k7 = pull.add_tables();
  k7->set_table_id(7);
  for (uint64_t id : {5, 6}) k7->add_keys(id);
  pb::PullRequest pull16 = pull;
  pull16.set_encoding(pb::ROW_ENCODING_FP16);
  pb::PushRequest push;
  push.set_step(3);
  push.set_client_id(0x1234);
  push.set_sequence(1);
  pb::TableGradients* g = push.add_tables();
  g->set_table_id(0);
  g->add_keys(3);
  g->add_keys(1);
  std::vector<float> grads(8, 0.25f);
  g->set_gradients(std::string(reinterpret_cast<const char*>(grads.data()), 32));
  pb::PushRequest push_bf16 = push;
  push_bf16.set_encoding(pb::ROW_ENCODING_BF16);
  push_bf16.set_sequence(2);
  push_bf16.mutable_tables(0)->set_gradients(std::string(16, '\x3f'));
  pb::SnapshotRequest snap;
  snap.set_name("ckpt-3");
  snap.set_step(3);
  pb::RestoreRequest restore;
  restore.set_name("ckpt-3");
  pb::ConfigureRequest replace = BaseConfig();
  replace.set_replace(true);
  pb::StatsRequest stats;
  const std::vector<std::vector<std::string>> seeds = {
      {part(kPull, pull)},
      {part(kPull, pull16)},
      {part(kPush, push), part(kPush, push), part(kStats, stats)},
      {part(kPush, push_bf16)},
      {part(kPull, pull), part(kPush, push), part(kSnapshot, snap), part(kConfigure, replace),
       part(kRestore, restore), part(kPull, pull)},
      {part(kConfigure, BaseConfig())},
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    sift::fuzz::WriteFile(std::string(out_dir) + "/requests-" + std::to_string(i),
                          sift::fuzz::JoinParts(seeds[i]));
  }
}
