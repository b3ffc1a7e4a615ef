#include "worker/embedding_client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/sharding.h"
#include "common/thread_pool.h"
#include "proto/embedding.grpc.pb.h"
#include "server/embedding/shard.h"

namespace sift::worker {
namespace {

constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

Status FromGrpc(const grpc::Status& s, const std::string& where) {
  const int code = static_cast<int>(s.error_code());
  const char* name = code >= 0 && code <= 16 ? kCodeNames[code] : "UNKNOWN";
  return Status(static_cast<absl::StatusCode>(code),
                absl::StrCat(where, ": ", name, ": ", s.error_message()));
}

// A table's keys made unique and ascending: `keys` points at the caller's keys when they already
// are (inverse empty), else at `storage`, with inverse[i] = index of keys[i] in the unique set.
struct UniqueKeys {
  absl::Span<const uint64_t> keys;
  std::vector<uint64_t> storage;
  std::vector<uint32_t> inverse;
};

bool StrictlyAscending(absl::Span<const uint64_t> keys) {
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] <= keys[i - 1]) return false;
  }
  return true;
}

void MakeUnique(absl::Span<const uint64_t> keys, UniqueKeys* u) {
  if (StrictlyAscending(keys)) {
    u->keys = keys;
    return;
  }
  std::vector<uint32_t> order(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return keys[a] < keys[b] || (keys[a] == keys[b] && a < b);
  });
  u->inverse.resize(keys.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const uint64_t key = keys[order[k]];
    if (u->storage.empty() || u->storage.back() != key) u->storage.push_back(key);
    u->inverse[order[k]] = static_cast<uint32_t>(u->storage.size() - 1);
  }
  u->keys = u->storage;
}

// One RPC's share of a shard's keys: segments [begin, end) of item `item`'s slice for the shard.
struct Segment {
  size_t item;
  uint32_t begin, end;
};
using Chunk = std::vector<Segment>;

// Splits each shard's keys (over all items, in item order) into chunks of at most max_keys keys
// and max_bytes bytes (bytes_per_key[item] each).
std::vector<std::vector<Chunk>> PlanChunks(const std::vector<ShardSlices>& slices, uint32_t shards,
                                           const std::vector<uint64_t>& bytes_per_key,
                                           uint64_t max_keys, uint64_t max_bytes) {
  std::vector<std::vector<Chunk>> plan(shards);
  for (uint32_t s = 0; s < shards; ++s) {
    Chunk chunk;
    uint64_t keys = 0, bytes = 0;
    for (size_t item = 0; item < slices.size(); ++item) {
      const uint32_t n = slices[item].Size(s);
      uint32_t done = 0;
      while (done < n) {
        const uint64_t by_keys = max_keys - keys;
        const uint64_t by_bytes = (max_bytes - bytes) / bytes_per_key[item];
        const uint32_t take =
            static_cast<uint32_t>(std::min<uint64_t>({n - done, by_keys, by_bytes}));
        if (take == 0) {
          plan[s].push_back(std::move(chunk));
          chunk.clear();
          keys = bytes = 0;
          continue;
        }
        chunk.push_back({item, done, done + take});
        done += take;
        keys += take;
        bytes += take * bytes_per_key[item];
      }
    }
    if (!chunk.empty()) plan[s].push_back(std::move(chunk));
  }
  return plan;
}

}  // namespace

StatusOr<std::vector<std::string>> ParseServerList(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    const size_t colon = part.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(part.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--embedding-servers: '", part, "' is not host:port (port 1..65535)"));
    }
    out.emplace_back(part);
  }
  if (out.empty()) return absl::InvalidArgumentError("--embedding-servers: no server given");
  return out;
}

class EmbeddingClient::Impl {
 public:
  EmbeddingClientOptions options;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<pb::EmbeddingService::Stub>> stubs;
  std::unique_ptr<ThreadPool> pool;  // one thread per shard (the caller included)
  absl::flat_hash_map<uint32_t, int> dims;
  uint64_t max_keys = 0, max_bytes = 0;  // effective request limits
  uint64_t client_id = 0;
  uint64_t sequence = 0;
  std::atomic<int64_t> retries{0};

  uint32_t shards() const { return static_cast<uint32_t>(stubs.size()); }

  // One RPC to shard s with a deadline, retried on UNAVAILABLE.
  template <typename Req, typename Resp, typename Method>
  Status Call(uint32_t s, const char* name, Method method, const Req& req, Resp* resp) {
    const std::string where =
        absl::StrCat("embedding server ", options.servers[s], " (shard ", s, "): ", name);
    double backoff = options.retry_backoff_s;
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::microseconds(static_cast<int64_t>(options.deadline_s * 1e6)));
      const grpc::Status st = (stubs[s].get()->*method)(&ctx, req, resp);
      if (st.ok()) return absl::OkStatus();
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE || attempt >= options.max_retries) {
        return FromGrpc(
            st, attempt == 0 ? where : absl::StrCat(where, " (after ", attempt, " retries)"));
      }
      retries.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(backoff * 1e6)));
      backoff *= 2;
    }
  }

  // Runs fn(s) for every shard in parallel; the error of the lowest failing shard.
  Status ForEachShard(const std::function<Status(uint32_t)>& fn) {
    std::vector<Status> status(shards());
    pool->ParallelFor(shards(), 1, [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) status[s] = fn(static_cast<uint32_t>(s));
    });
    for (const Status& st : status) SIFT_RETURN_IF_ERROR(st);
    return absl::OkStatus();
  }

  StatusOr<int> Dim(uint32_t table_id) const {
    auto it = dims.find(table_id);
    if (it == dims.end()) {
      return absl::InvalidArgumentError(absl::StrCat("embedding client: table id ", table_id,
                                                     " is not configured on the servers"));
    }
    return it->second;
  }

  void LearnLimits(uint64_t server_keys, uint64_t server_bytes) {
    // Leave room for the message framing beyond keys and values.
    const uint64_t bytes = server_bytes - std::min<uint64_t>(server_bytes / 8, 1 << 20);
    max_keys = std::min(max_keys, server_keys);
    max_bytes = std::min(max_bytes, bytes);
  }
};

EmbeddingClient::EmbeddingClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EmbeddingClient::~EmbeddingClient() = default;

int EmbeddingClient::num_shards() const { return static_cast<int>(impl_->shards()); }
int64_t EmbeddingClient::retries() const { return impl_->retries.load(); }

StatusOr<std::unique_ptr<EmbeddingClient>> EmbeddingClient::Connect(
    const EmbeddingClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("embedding client: no servers");
  if (!(options.deadline_s > 0) || options.max_retries < 0 || !(options.retry_backoff_s >= 0)) {
    return absl::InvalidArgumentError(
        "embedding client: deadline must be > 0, retries and backoff >= 0");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->max_keys = options.max_keys_per_request > 0 ? options.max_keys_per_request : UINT64_MAX;
  impl->max_bytes = options.max_request_bytes > 0 ? options.max_request_bytes : UINT64_MAX;
  std::random_device rd;
  impl->client_id = (static_cast<uint64_t>(rd()) << 32 | rd()) ^ static_cast<uint64_t>(getpid());
  if (impl->client_id == 0) impl->client_id = 1;
  const uint32_t n = static_cast<uint32_t>(options.servers.size());
  for (uint32_t s = 0; s < n; ++s) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // the server's send limit bounds replies
    args.SetMaxSendMessageSize(-1);     // requests are chunked to the server's limit
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    // One TCP connection per server per client: shards do not share a subchannel.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    impl->channels.push_back(
        grpc::CreateCustomChannel(options.servers[s], grpc::InsecureChannelCredentials(), args));
    impl->stubs.push_back(pb::EmbeddingService::NewStub(impl->channels.back()));
  }
  impl->pool = std::make_unique<ThreadPool>(static_cast<int>(n));
  // Wait for every server (they may still be starting), then check who is who.
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(options.connect_timeout_s * 1e6));
  for (uint32_t s = 0; s < n; ++s) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    ctx.set_wait_for_ready(true);
    pb::StatsResponse stats;
    const grpc::Status st = impl->stubs[s]->Stats(&ctx, pb::StatsRequest(), &stats);
    if (!st.ok()) {
      return FromGrpc(st,
                      absl::StrCat("embedding server ", options.servers[s], " (shard ", s,
                                   "): not reachable within ", options.connect_timeout_s, " s"));
    }
    if (stats.shard() != s || stats.num_shards() != n) {
      return absl::FailedPreconditionError(
          absl::StrCat("embedding server ", options.servers[s], " is shard ", stats.shard(), " of ",
                       stats.num_shards(), ", but it is listed as shard ", s, " of ", n,
                       " (list the servers in shard order)"));
    }
    impl->LearnLimits(stats.max_keys_per_request(), stats.max_message_bytes());
    for (const pb::TableConfig& t : stats.configs()) {
      impl->dims[t.table_id()] = static_cast<int>(t.dim());
    }
  }
  return std::unique_ptr<EmbeddingClient>(new EmbeddingClient(std::move(impl)));
}

Status EmbeddingClient::Configure(uint64_t seed, const std::vector<embedding::TableConfig>& tables,
                                  bool replace) {
  pb::ConfigureRequest req;
  req.set_seed(seed);
  req.set_replace(replace);
  for (const embedding::TableConfig& t : tables) {
    *req.add_tables() = embedding::TableConfigToProto(t);
  }
  std::vector<pb::ConfigureResponse> resp(impl_->shards());
  SIFT_RETURN_IF_ERROR(impl_->ForEachShard([&](uint32_t s) {
    return impl_->Call(s, "Configure", &pb::EmbeddingService::Stub::Configure, req, &resp[s]);
  }));
  for (const pb::ConfigureResponse& r : resp) {
    impl_->LearnLimits(r.max_keys_per_request(), r.max_message_bytes());
  }
  impl_->dims.clear();
  for (const embedding::TableConfig& t : tables) impl_->dims[t.table_id] = t.dim;
  return absl::OkStatus();
}

Status EmbeddingClient::Pull(absl::Span<const PullItem> items, bool create_missing) {
  Impl& im = *impl_;
  const uint32_t S = im.shards();
  const size_t width = static_cast<size_t>(WireFloatBytes(im.options.encoding));
  std::vector<UniqueKeys> uniq(items.size());
  std::vector<ShardSlices> slices(items.size());
  std::vector<uint64_t> bytes_per_key(items.size());
  std::vector<size_t> dims(items.size());
  std::vector<std::vector<float>> uniq_rows(items.size());  // only for items with repeats
  for (size_t i = 0; i < items.size(); ++i) {
    SIFT_ASSIGN_OR_RETURN(const int dim, im.Dim(items[i].table_id));
    dims[i] = static_cast<size_t>(dim);
    if (items[i].out.size() != items[i].keys.size() * dims[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "embedding client: pull of table ", items[i].table_id, ": ", items[i].keys.size(),
          " keys x dim ", dim, " need ", items[i].keys.size() * dims[i], " output floats, got ",
          items[i].out.size()));
    }
    MakeUnique(items[i].keys, &uniq[i]);
    if (!uniq[i].inverse.empty()) uniq_rows[i].resize(uniq[i].keys.size() * dims[i]);
    SliceByShard(items[i].table_id, uniq[i].keys, S, &slices[i]);
    bytes_per_key[i] = 8 + dims[i] * width;
  }
  const auto plan = PlanChunks(slices, S, bytes_per_key, im.max_keys, im.max_bytes);
  SIFT_RETURN_IF_ERROR(im.ForEachShard([&](uint32_t s) -> Status {
    pb::PullRequest req;
    pb::PullResponse resp;
    for (const Chunk& chunk : plan[s]) {
      req.Clear();
      resp.Clear();
      req.set_create_missing(create_missing);
      req.set_encoding(static_cast<pb::RowEncoding>(im.options.encoding));
      for (const Segment& seg : chunk) {
        pb::TableKeys* tk = req.add_tables();
        tk->set_table_id(items[seg.item].table_id);
        const uint32_t* pos = slices[seg.item].positions.data() + slices[seg.item].offsets[s];
        auto* keys = tk->mutable_keys();
        keys->Resize(static_cast<int>(seg.end - seg.begin), 0);
        for (uint32_t k = seg.begin; k < seg.end; ++k) {
          keys->Set(static_cast<int>(k - seg.begin), uniq[seg.item].keys[pos[k]]);
        }
      }
      SIFT_RETURN_IF_ERROR(im.Call(s, "Pull", &pb::EmbeddingService::Stub::Pull, req, &resp));
      if (resp.tables_size() != static_cast<int>(chunk.size())) {
        return absl::InternalError(absl::StrCat("embedding server ", im.options.servers[s],
                                                ": Pull answered ", resp.tables_size(),
                                                " tables for ", chunk.size()));
      }
      for (size_t c = 0; c < chunk.size(); ++c) {
        const Segment& seg = chunk[c];
        const size_t dim = dims[seg.item];
        const std::string& bytes = resp.tables(static_cast<int>(c)).rows();
        const size_t n = seg.end - seg.begin;
        if (bytes.size() != n * dim * width) {
          return absl::InternalError(absl::StrCat("embedding server ", im.options.servers[s],
                                                  ": Pull answered ", bytes.size(),
                                                  " bytes of rows for ", n, " keys of dim ", dim));
        }
        float* dst = uniq[seg.item].inverse.empty() ? items[seg.item].out.data()
                                                    : uniq_rows[seg.item].data();
        const uint32_t* pos = slices[seg.item].positions.data() + slices[seg.item].offsets[s];
        for (size_t k = 0; k < n; ++k) {
          const absl::string_view row(bytes.data() + k * dim * width, dim * width);
          SIFT_RETURN_IF_ERROR(DecodeFloats(im.options.encoding, row,
                                            absl::MakeSpan(dst + pos[seg.begin + k] * dim, dim),
                                            "pulled row"));
        }
      }
    }
    return absl::OkStatus();
  }));
  // Expand the unique rows to the caller's keys.
  for (size_t i = 0; i < items.size(); ++i) {
    if (uniq[i].inverse.empty()) continue;
    const size_t dim = dims[i];
    for (size_t k = 0; k < uniq[i].inverse.size(); ++k) {
      std::memcpy(items[i].out.data() + k * dim, uniq_rows[i].data() + uniq[i].inverse[k] * dim,
                  dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

Status EmbeddingClient::Push(absl::Span<const PushItem> items, int64_t step) {
  Impl& im = *impl_;
  const uint32_t S = im.shards();
  const size_t width = static_cast<size_t>(WireFloatBytes(im.options.encoding));
  std::vector<UniqueKeys> uniq(items.size());
  std::vector<ShardSlices> slices(items.size());
  std::vector<uint64_t> bytes_per_key(items.size());
  std::vector<size_t> dims(items.size());
  std::vector<std::vector<float>> summed(items.size());  // only for items with repeats
  std::vector<const float*> grads(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    SIFT_ASSIGN_OR_RETURN(const int dim, im.Dim(items[i].table_id));
    const size_t d = static_cast<size_t>(dim);
    dims[i] = d;
    if (items[i].grads.size() != items[i].keys.size() * d) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding client: push of table ", items[i].table_id, ": ",
                       items[i].keys.size(), " keys x dim ", dim, " need ",
                       items[i].keys.size() * d, " gradient floats, got ", items[i].grads.size()));
    }
    MakeUnique(items[i].keys, &uniq[i]);
    grads[i] = items[i].grads.data();
    if (!uniq[i].inverse.empty()) {
      summed[i].assign(uniq[i].keys.size() * d, 0.0f);
      for (size_t k = 0; k < uniq[i].inverse.size(); ++k) {
        float* dst = summed[i].data() + uniq[i].inverse[k] * d;
        const float* src = items[i].grads.data() + k * d;
        for (size_t c = 0; c < d; ++c) dst[c] += src[c];
      }
      grads[i] = summed[i].data();
    }
    SliceByShard(items[i].table_id, uniq[i].keys, S, &slices[i]);
    bytes_per_key[i] = 8 + d * width;
  }
  const auto plan = PlanChunks(slices, S, bytes_per_key, im.max_keys, im.max_bytes);
  // Sequence numbers are fixed before sending, so a retry repeats its request's identity.
  std::vector<uint64_t> first_sequence(S);
  for (uint32_t s = 0; s < S; ++s) {
    first_sequence[s] = im.sequence;
    im.sequence += plan[s].size();
  }
  return im.ForEachShard([&](uint32_t s) -> Status {
    pb::PushRequest req;
    pb::PushResponse resp;
    std::vector<float> rows;
    for (size_t c = 0; c < plan[s].size(); ++c) {
      const Chunk& chunk = plan[s][c];
      req.Clear();
      req.set_step(step);
      req.set_encoding(static_cast<pb::RowEncoding>(im.options.encoding));
      req.set_client_id(im.client_id);
      req.set_sequence(first_sequence[s] + c);
      for (const Segment& seg : chunk) {
        const size_t dim = dims[seg.item];
        const size_t n = seg.end - seg.begin;
        pb::TableGradients* tg = req.add_tables();
        tg->set_table_id(items[seg.item].table_id);
        const uint32_t* pos = slices[seg.item].positions.data() + slices[seg.item].offsets[s];
        auto* keys = tg->mutable_keys();
        keys->Resize(static_cast<int>(n), 0);
        rows.resize(n * dim);
        for (size_t k = 0; k < n; ++k) {
          const uint32_t p = pos[seg.begin + k];
          keys->Set(static_cast<int>(k), uniq[seg.item].keys[p]);
          std::memcpy(rows.data() + k * dim, grads[seg.item] + p * dim, dim * sizeof(float));
        }
        EncodeFloats(im.options.encoding, rows, tg->mutable_gradients());
      }
      SIFT_RETURN_IF_ERROR(im.Call(s, "Push", &pb::EmbeddingService::Stub::Push, req, &resp));
    }
    return absl::OkStatus();
  });
}

StatusOr<std::vector<pb::StatsResponse>> EmbeddingClient::Stats() {
  std::vector<pb::StatsResponse> out(impl_->shards());
  SIFT_RETURN_IF_ERROR(impl_->ForEachShard([&](uint32_t s) {
    return impl_->Call(s, "Stats", &pb::EmbeddingService::Stub::Stats, pb::StatsRequest(), &out[s]);
  }));
  return out;
}

StatusOr<std::vector<pb::SnapshotResponse>> EmbeddingClient::Snapshot(const std::string& name,
                                                                      int64_t step) {
  pb::SnapshotRequest req;
  req.set_name(name);
  req.set_step(step);
  std::vector<pb::SnapshotResponse> out(impl_->shards());
  SIFT_RETURN_IF_ERROR(impl_->ForEachShard([&](uint32_t s) {
    return impl_->Call(s, "Snapshot", &pb::EmbeddingService::Stub::Snapshot, req, &out[s]);
  }));
  return out;
}

StatusOr<std::vector<pb::RestoreResponse>> EmbeddingClient::Restore(const std::string& name) {
  pb::RestoreRequest req;
  req.set_name(name);
  std::vector<pb::RestoreResponse> out(impl_->shards());
  SIFT_RETURN_IF_ERROR(impl_->ForEachShard([&](uint32_t s) {
    return impl_->Call(s, "Restore", &pb::EmbeddingService::Stub::Restore, req, &out[s]);
  }));
  // The restored tables are the snapshot's.
  impl_->dims.clear();
  SIFT_ASSIGN_OR_RETURN(auto stats, Stats());
  for (const pb::TableConfig& t : stats[0].configs()) {
    impl_->dims[t.table_id()] = static_cast<int>(t.dim());
  }
  return out;
}

}  // namespace sift::worker
