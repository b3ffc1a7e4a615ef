#include "worker/embedding_client.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/job_credential.h"
#include "common/metrics.h"
#include "common/proto_wire.h"
#include "common/sharding.h"
#include "common/thread_pool.h"
#include "proto/embedding.grpc.pb.h"
#include "server/embedding/shard.h"
#include "server/embedding/slice_pool.h"

namespace sift::worker {
namespace {

using wire::LenFieldSize;
using wire::PutLenHeader;
using wire::PutVarint;
using wire::PutVarintField;
using wire::VarintFieldSize;
using wire::VarintSize;

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

// Bytes per RPC (keys and rows) and RPCs in flight at once per shard: a large shard request is
// split into sub-requests of about kSplitBytes, at most kWindow in flight, so that building,
// sending, serving and decoding them overlap (on the client's and the server's cores).
constexpr uint64_t kSplitBytes = uint64_t{1} << 20;
constexpr size_t kWindow = 4;

// One RPC's share of a shard's keys: segments [begin, end) of item `item`'s slice for the shard.
struct Segment {
  size_t item;
  uint32_t begin, end;
};
using Chunk = std::vector<Segment>;

// Splits each shard's keys (over all items, in item order) into chunks of at most max_keys keys
// and max_bytes bytes (bytes_per_key[item] each), and of about kSplitBytes. RESOURCE_EXHAUSTED
// naming the table when one key of an item does not fit max_bytes.
StatusOr<std::vector<std::vector<Chunk>>> PlanChunks(const std::vector<ShardSlices>& slices,
                                                     uint32_t shards,
                                                     const std::vector<uint32_t>& table_ids,
                                                     const std::vector<uint64_t>& bytes_per_key,
                                                     uint64_t max_keys, uint64_t max_bytes) {
  for (size_t item = 0; item < slices.size(); ++item) {
    if (bytes_per_key[item] > max_bytes && !slices[item].positions.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("embedding client: one key of table ", table_ids[item], " takes ",
                       bytes_per_key[item], " bytes (key and row), more than the request limit of ",
                       max_bytes, " bytes (the servers' max_message_bytes less framing)"));
    }
  }
  // Sub-requests of about kSplitBytes (at least one key each), within the servers' limit.
  uint64_t chunk_bytes = kSplitBytes;
  for (const uint64_t b : bytes_per_key) chunk_bytes = std::max(chunk_bytes, b);
  max_bytes = std::min(max_bytes, chunk_bytes);
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

// ---- Pull and Push on the wire ----
// Pull and Push requests are written, and Pull replies read, as protobuf wire bytes (fields in
// number order, proto3 defaults omitted, as protobuf writes them) directly between the caller's
// arrays and gRPC's buffers: no intermediate message, string or per-row decode. A reply in any
// other valid encoding falls back to protobuf's parser.
static_assert(std::endian::native == std::endian::little,
              "fixed64 keys and fp32 rows are copied as little-endian bytes");

// Reads protobuf wire data spread over the slices of a ByteBuffer. Every method returns false at
// the end of the data or on a malformed value.
class WireReader {
 public:
  explicit WireReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {}
  size_t position() const { return pos_; }
  bool AtEnd() { return !Refill(); }
  bool ReadVarint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (!Refill()) return false;
      const uint8_t byte = static_cast<uint8_t>(*cur_++);
      ++pos_;
      result |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;
  }
  // Copies the next n bytes to dst (nullptr: skips them).
  bool Read(char* dst, size_t n) {
    while (n > 0) {
      if (!Refill()) return false;
      const size_t k = std::min(n, static_cast<size_t>(end_ - cur_));
      if (dst != nullptr) {
        std::memcpy(dst, cur_, k);
        dst += k;
      }
      cur_ += k;
      pos_ += k;
      n -= k;
    }
    return true;
  }
  // Skips the value of a field of wire type `wire_type` (groups are not expected).
  bool SkipField(uint64_t wire_type) {
    uint64_t v = 0;
    switch (wire_type) {
      case 0:
        return ReadVarint(&v);
      case 1:
        return Read(nullptr, 8);
      case 2:
        return ReadVarint(&v) && Read(nullptr, v);
      case 5:
        return Read(nullptr, 4);
      default:
        return false;
    }
  }

 private:
  bool Refill() {
    while (cur_ == end_) {
      if (next_ == slices_.size()) return false;
      const grpc::Slice& slice = slices_[next_++];
      cur_ = reinterpret_cast<const char*>(slice.begin());
      end_ = reinterpret_cast<const char*>(slice.end());
    }
    return true;
  }
  const std::vector<grpc::Slice>& slices_;
  size_t next_ = 0;
  const char* cur_ = nullptr;
  const char* end_ = nullptr;
  size_t pos_ = 0;
};

// Calls fn(k, run) for each maximal run pos[k .. k + run) of consecutive positions (k < n).
template <typename Fn>
void ForEachRun(const uint32_t* pos, size_t n, Fn fn) {
  for (size_t k = 0; k < n;) {
    size_t run = 1;
    while (k + run < n && pos[k + run] == pos[k] + run) ++run;
    fn(k, run);
    k += run;
  }
}

// A Pull's or Push's keys prepared for the wire: per item its unique keys, their slices by shard
// and the row width; per shard the planned RPCs.
struct RequestLayout {
  std::vector<UniqueKeys> uniq;
  std::vector<ShardSlices> slices;
  std::vector<size_t> dims;
  std::vector<std::vector<Chunk>> plan;
  // Positions (in the item's unique keys) of the keys of `seg`, an RPC segment of `shard`.
  const uint32_t* Positions(uint32_t shard, const Segment& seg) const {
    const ShardSlices& sl = slices[seg.item];
    return sl.positions.data() + sl.offsets[shard] + seg.begin;
  }
};

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
  std::vector<std::unique_ptr<grpc::GenericStub>> generic;     // Pull and Push as raw bytes
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;  // per shard: its calls' replies
  std::unique_ptr<ThreadPool> pool;  // one thread per shard (the caller included)
  absl::flat_hash_map<uint32_t, int> dims;
  uint64_t max_keys = 0, max_bytes = 0;  // effective request limits
  uint64_t client_id = 0;
  uint64_t sequence = 0;
  std::atomic<int64_t> retries{0};
  const std::string pull_method =
      absl::StrCat("/", pb::EmbeddingService::service_full_name(), "/Pull");
  const std::string push_method =
      absl::StrCat("/", pb::EmbeddingService::service_full_name(), "/Push");

  uint32_t shards() const { return static_cast<uint32_t>(stubs.size()); }

  ~Impl() {
    for (auto& cq : queues) {
      cq->Shutdown();
      void* tag;
      bool ok;
      while (cq->Next(&tag, &ok)) {
      }
    }
  }

  std::chrono::system_clock::time_point Deadline() const {
    return std::chrono::system_clock::now() +
           std::chrono::microseconds(static_cast<int64_t>(options.deadline_s * 1e6));
  }

  // Sends requests 0 .. n-1 (build(i) makes request i when it is due) to shard s by raw method
  // `method`, at most kWindow at once, each with a deadline and retried on UNAVAILABLE (backoff
  // doubling per attempt); on_reply(i, reply) runs on this thread as each reply arrives. No
  // request is started after an error; every started call is waited for. Returns the error of
  // the lowest failing request.
  Status CallPipelined(uint32_t s, const char* name, const std::string& method, size_t n,
                       const std::function<grpc::ByteBuffer(size_t)>& build,
                       const std::function<Status(size_t, grpc::ByteBuffer*)>& on_reply) {
    struct Rpc {
      size_t index = 0;
      int attempt = 0;
      grpc::ByteBuffer request;
      std::unique_ptr<grpc::ClientContext> ctx;
      std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
      grpc::ByteBuffer reply;
      grpc::Status status;
    };
    grpc::CompletionQueue* cq = queues[s].get();
    std::vector<Rpc> rpcs(n);
    size_t next = 0, in_flight = 0;
    size_t failed_index = n;
    Status failed;
    auto fail = [&](size_t i, Status st) {
      if (i < failed_index) {
        failed_index = i;
        failed = std::move(st);
      }
    };
    auto start = [&](Rpc& r) {
      r.ctx = std::make_unique<grpc::ClientContext>();
      r.ctx->set_deadline(Deadline());
      AddJobCredential(r.ctx.get());
      r.reply.Clear();
      r.reader = generic[s]->PrepareUnaryCall(r.ctx.get(), method, r.request, cq);
      r.reader->StartCall();
      r.reader->Finish(&r.reply, &r.status, &r);
      ++in_flight;
    };
    for (;;) {
      while (in_flight < kWindow && next < n && failed_index == n) {
        rpcs[next].index = next;
        rpcs[next].request = build(next);
        start(rpcs[next]);
        ++next;
      }
      if (in_flight == 0) break;
      void* tag = nullptr;
      bool ok = false;
      if (!cq->Next(&tag, &ok)) {
        return absl::InternalError("embedding client: completion queue shut down");
      }
      --in_flight;
      Rpc& r = *static_cast<Rpc*>(tag);
      if (r.status.ok()) {
        Status st = on_reply(r.index, &r.reply);
        if (!st.ok()) fail(r.index, std::move(st));
        r.reply.Clear();
        r.request.Clear();
        continue;
      }
      const std::string where =
          absl::StrCat("embedding server ", options.servers[s], " (shard ", s, "): ", name);
      if (r.status.error_code() == grpc::StatusCode::UNAVAILABLE &&
          r.attempt < options.max_retries && failed_index == n) {
        retries.fetch_add(1, std::memory_order_relaxed);
        const double backoff = options.retry_backoff_s * std::ldexp(1.0, r.attempt);
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(backoff * 1e6)));
        ++r.attempt;
        start(r);
        continue;
      }
      fail(r.index, FromGrpc(r.status, r.attempt == 0 ? where
                                                      : absl::StrCat(where, " (after ", r.attempt,
                                                                     " retries)")));
    }
    return failed;
  }

  // The servers of a cluster job serve only its generation's ranks (common/job_credential.h).
  void AddJobCredential(grpc::ClientContext* ctx) const {
    if (!options.security.job_credential.empty()) {
      ctx->AddMetadata(kJobCredentialHeader, options.security.job_credential);
    }
  }

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
      AddJobCredential(&ctx);
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

  // Dedups each item's keys, checks its float count (`floats_of`), slices the unique keys by
  // shard and plans the RPCs. INVALID_ARGUMENT naming the table for an unknown table or a wrong
  // float count.
  template <typename Item, typename FloatsOf>
  StatusOr<RequestLayout> Layout(absl::Span<const Item> items, absl::string_view op,
                                 absl::string_view what, FloatsOf floats_of,
                                 size_t extra_bytes_per_key = 0) const {
    const size_t width = static_cast<size_t>(WireFloatBytes(options.encoding));
    RequestLayout l;
    l.uniq.resize(items.size());
    l.slices.resize(items.size());
    l.dims.resize(items.size());
    std::vector<uint64_t> bytes_per_key(items.size());
    std::vector<uint32_t> table_ids(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      SIFT_ASSIGN_OR_RETURN(const int dim, Dim(items[i].table_id));
      const size_t d = static_cast<size_t>(dim);
      const size_t n = items[i].keys.size();
      if (floats_of(items[i]) != n * d) {
        return absl::InvalidArgumentError(absl::StrCat(
            "embedding client: ", op, " of table ", items[i].table_id, ": ", n, " keys x dim ", dim,
            " need ", n * d, " ", what, " floats, got ", floats_of(items[i])));
      }
      l.dims[i] = d;
      table_ids[i] = items[i].table_id;
      MakeUnique(items[i].keys, &l.uniq[i]);
      SliceByShard(items[i].table_id, l.uniq[i].keys, shards(), &l.slices[i]);
      bytes_per_key[i] = 8 + d * width + extra_bytes_per_key;
    }
    SIFT_ASSIGN_OR_RETURN(
        l.plan, PlanChunks(l.slices, shards(), table_ids, bytes_per_key, max_keys, max_bytes));
    return l;
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
  embedding::KeepFreedHeapMemory();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->max_keys = options.max_keys_per_request > 0 ? options.max_keys_per_request : UINT64_MAX;
  impl->max_bytes = options.max_request_bytes > 0 ? options.max_request_bytes : UINT64_MAX;
  std::random_device rd;
  impl->client_id = (static_cast<uint64_t>(rd()) << 32 | rd()) ^ static_cast<uint64_t>(getpid());
  if (impl->client_id == 0) impl->client_id = 1;
  const uint32_t n = static_cast<uint32_t>(options.servers.size());
  SIFT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds,
                        MakeChannelCredentials(options.security));
  for (uint32_t s = 0; s < n; ++s) {
    grpc::ChannelArguments args;
    ApplyChannelSecurity(options.security, &args);
    args.SetMaxReceiveMessageSize(-1);  // the server's send limit bounds replies
    args.SetMaxSendMessageSize(-1);     // requests are chunked to the server's limit
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    // One TCP connection per server per client: shards do not share a subchannel.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    impl->channels.push_back(grpc::CreateCustomChannel(options.servers[s], creds, args));
    impl->stubs.push_back(pb::EmbeddingService::NewStub(impl->channels.back()));
    impl->generic.push_back(std::make_unique<grpc::GenericStub>(impl->channels.back()));
    impl->queues.push_back(std::make_unique<grpc::CompletionQueue>());
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
    impl->AddJobCredential(&ctx);
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
  const WireFloat encoding = im.options.encoding;
  const size_t width = static_cast<size_t>(WireFloatBytes(encoding));
  SIFT_ASSIGN_OR_RETURN(
      RequestLayout layout,
      im.Layout(items, "pull", "output", [](const PullItem& item) { return item.out.size(); }));
  const std::vector<UniqueKeys>& uniq = layout.uniq;
  const std::vector<size_t>& dims = layout.dims;
  const auto& plan = layout.plan;
  std::vector<std::vector<float>> uniq_rows(items.size());  // only for items with repeats
  for (size_t i = 0; i < items.size(); ++i) {
    if (!uniq[i].inverse.empty()) uniq_rows[i].resize(uniq[i].keys.size() * dims[i]);
  }
  // Where item i's unique rows go.
  auto rows_of = [&](size_t i) {
    return uniq[i].inverse.empty() ? items[i].out.data() : uniq_rows[i].data();
  };
  const uint64_t encoding_value = static_cast<uint64_t>(encoding);
  SIFT_RETURN_IF_ERROR(im.ForEachShard([&](uint32_t s) -> Status {
    const std::vector<Chunk>& chunks = plan[s];
    auto positions = [&](const Segment& seg) { return layout.Positions(s, seg); };
    std::vector<char> scratch;
    // Copies n rows from the reply to rows[pos[k] * dim ..]: false when the bytes run out.
    auto read_rows = [&](WireReader& r, float* rows, const uint32_t* pos, size_t n, size_t dim) {
      const size_t row_bytes = dim * width;
      bool ok = true;
      ForEachRun(pos, n, [&](size_t k, size_t run) {
        float* out = rows + pos[k] * dim;
        if (!ok) return;
        if (encoding == WireFloat::kFp32) {
          ok = r.Read(reinterpret_cast<char*>(out), run * row_bytes);
          return;
        }
        scratch.resize(run * row_bytes);
        ok = r.Read(scratch.data(), scratch.size()) &&
             DecodeFloats(encoding, absl::string_view(scratch.data(), scratch.size()),
                          absl::MakeSpan(out, run * dim), "pulled rows")
                 .ok();
      });
      return ok;
    };
    auto build = [&](size_t c) {
      const Chunk& chunk = chunks[c];
      std::vector<size_t> inner(chunk.size());
      size_t total = VarintFieldSize(create_missing ? 1 : 0) + VarintFieldSize(encoding_value);
      for (size_t t = 0; t < chunk.size(); ++t) {
        const size_t n = chunk[t].end - chunk[t].begin;
        inner[t] = VarintFieldSize(items[chunk[t].item].table_id) + LenFieldSize(n * 8);
        total += LenFieldSize(inner[t], /*always=*/true);
      }
      char* p = nullptr;
      grpc::Slice slice = embedding::SlicePool::Get().Take(total, &p);
      for (size_t t = 0; t < chunk.size(); ++t) {  // PullRequest.tables: TableKeys
        const Segment& seg = chunk[t];
        const size_t n = seg.end - seg.begin;
        p = PutLenHeader(p, embedding::tags::kTables, inner[t]);
        p = PutVarintField(p, embedding::tags::kTableId, items[seg.item].table_id);
        if (n == 0) continue;
        p = PutLenHeader(p, embedding::tags::kKeys, n * 8);
        const uint64_t* keys = uniq[seg.item].keys.data();
        const uint32_t* pos = positions(seg);
        ForEachRun(pos, n, [&](size_t k, size_t run) {
          std::memcpy(p, keys + pos[k], run * 8);
          p += run * 8;
        });
      }
      p = PutVarintField(p, embedding::tags::kCreateMissing, create_missing ? 1 : 0);
      PutVarintField(p, embedding::tags::kEncoding, encoding_value);
      return grpc::ByteBuffer(&slice, 1);
    };
    // The usual reply (PullResponse as protobuf writes it) straight into the rows; false for
    // any other shape, which protobuf's parser then judges.
    auto decode_fast = [&](const Chunk& chunk, const grpc::ByteBuffer& reply) {
      std::vector<grpc::Slice> parts;
      if (!reply.Dump(&parts).ok()) return false;
      WireReader r(parts);
      size_t t = 0;
      while (!r.AtEnd()) {
        uint64_t tag = 0, len = 0;
        if (!r.ReadVarint(&tag)) return false;
        if (tag >> 3 != 1) {
          if (!r.SkipField(tag & 7)) return false;
          continue;
        }
        if ((tag & 7) != 2 || t >= chunk.size() || !r.ReadVarint(&len)) return false;
        const Segment& seg = chunk[t++];
        const size_t n = seg.end - seg.begin, dim = dims[seg.item];
        const size_t end = r.position() + len, want = n * dim * width;
        bool seen_rows = false;
        while (r.position() < end) {
          if (!r.ReadVarint(&tag)) return false;
          if (tag != embedding::tags::kValues) {  // table_id, dim and unknown fields
            if (!r.SkipField(tag & 7)) return false;
            continue;
          }
          if (seen_rows || !r.ReadVarint(&len) || len != want || r.position() + len > end ||
              !read_rows(r, rows_of(seg.item), positions(seg), n, dim)) {
            return false;
          }
          seen_rows = true;
        }
        if (r.position() != end || (!seen_rows && want != 0)) return false;
      }
      return t == chunk.size();
    };
    auto decode_proto = [&](const Chunk& chunk, grpc::ByteBuffer* reply) -> Status {
      pb::PullResponse resp;
      grpc::ProtoBufferReader reader(reply);
      if (!resp.ParseFromZeroCopyStream(&reader)) {
        return absl::InternalError(absl::StrCat("embedding server ", im.options.servers[s],
                                                ": Pull answered bytes that are not a ",
                                                pb::PullResponse::descriptor()->full_name()));
      }
      if (resp.tables_size() != static_cast<int>(chunk.size())) {
        return absl::InternalError(absl::StrCat("embedding server ", im.options.servers[s],
                                                ": Pull answered ", resp.tables_size(),
                                                " tables for ", chunk.size()));
      }
      for (size_t t = 0; t < chunk.size(); ++t) {
        const Segment& seg = chunk[t];
        const size_t dim = dims[seg.item], n = seg.end - seg.begin;
        const std::string& bytes = resp.tables(static_cast<int>(t)).rows();
        if (bytes.size() != n * dim * width) {
          return absl::InternalError(absl::StrCat("embedding server ", im.options.servers[s],
                                                  ": Pull answered ", bytes.size(),
                                                  " bytes of rows for ", n, " keys of dim ", dim));
        }
        const grpc::Slice whole(bytes.data(), bytes.size(), grpc::Slice::STATIC_SLICE);
        const std::vector<grpc::Slice> parts = {whole};
        WireReader r(parts);
        if (!read_rows(r, rows_of(seg.item), positions(seg), n, dim)) {
          return absl::InternalError("embedding client: pulled rows do not decode");
        }
      }
      return absl::OkStatus();
    };
    return im.CallPipelined(s, "Pull", im.pull_method, chunks.size(), build,
                            [&](size_t c, grpc::ByteBuffer* reply) -> Status {
                              if (decode_fast(chunks[c], *reply)) return absl::OkStatus();
                              return decode_proto(chunks[c], reply);
                            });
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

Status EmbeddingClient::Push(absl::Span<const PushItem> items, int64_t step, float lr_multiplier,
                             const StepPush* step_push) {
  Impl& im = *impl_;
  const uint32_t S = im.shards();
  const WireFloat encoding = im.options.encoding;
  const size_t width = static_cast<size_t>(WireFloatBytes(encoding));
  bool any_l2 = false;
  for (const PushItem& item : items) {
    if (item.l2.empty()) continue;
    if (step_push == nullptr || item.l2.size() != item.keys.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding client: push of table ", item.table_id, ": ", item.l2.size(),
                       " L2 coefficients for ", item.keys.size(), " keys",
                       step_push == nullptr ? " (coefficients travel with step pushes only)" : ""));
    }
    any_l2 = true;
  }
  SIFT_ASSIGN_OR_RETURN(
      RequestLayout layout,
      im.Layout(
          items, "push", "gradient", [](const PushItem& item) { return item.grads.size(); },
          any_l2 ? sizeof(float) : 0));
  if (step_push != nullptr) {
    // A step completes on a shard once every rank has pushed to it: a rank with no key there
    // still sends one (empty) part.
    for (std::vector<Chunk>& chunks : layout.plan) {
      if (chunks.empty()) chunks.emplace_back();
    }
  }
  const std::vector<UniqueKeys>& uniq = layout.uniq;
  const std::vector<size_t>& dims = layout.dims;
  const auto& plan = layout.plan;
  // Gradients per unique key: the caller's, or the sums over repeated keys.
  std::vector<std::vector<float>> summed(items.size());
  std::vector<const float*> grads(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t d = dims[i];
    grads[i] = items[i].grads.data();
    if (uniq[i].inverse.empty()) continue;
    summed[i].assign(uniq[i].keys.size() * d, 0.0f);
    for (size_t k = 0; k < uniq[i].inverse.size(); ++k) {
      float* dst = summed[i].data() + uniq[i].inverse[k] * d;
      const float* src = items[i].grads.data() + k * d;
      for (size_t c = 0; c < d; ++c) dst[c] += src[c];
    }
    grads[i] = summed[i].data();
  }
  // L2 coefficients per unique key (a repeated key's are equal: they are a function of the key).
  std::vector<std::vector<float>> l2_unique(items.size());
  std::vector<const float*> l2(items.size(), nullptr);
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].l2.empty()) continue;
    l2[i] = items[i].l2.data();
    if (uniq[i].inverse.empty()) continue;
    l2_unique[i].assign(uniq[i].keys.size(), 0.0f);
    for (size_t k = 0; k < uniq[i].inverse.size(); ++k) {
      l2_unique[i][uniq[i].inverse[k]] = items[i].l2[k];
    }
    l2[i] = l2_unique[i].data();
  }
  // Sequence numbers are fixed before sending, so a retry repeats its request's identity.
  std::vector<uint64_t> first_sequence(S);
  for (uint32_t s = 0; s < S; ++s) {
    first_sequence[s] = im.sequence;
    im.sequence += plan[s].size();
  }
  const uint64_t encoding_value = static_cast<uint64_t>(encoding);
  return im.ForEachShard([&](uint32_t s) -> Status {
    const std::vector<Chunk>& chunks = plan[s];
    auto build = [&](size_t c) {
      const Chunk& chunk = chunks[c];
      const uint64_t sequence = first_sequence[s] + c;
      std::vector<size_t> inner(chunk.size());
      size_t total = VarintFieldSize(static_cast<uint64_t>(step)) +
                     VarintFieldSize(encoding_value) + (im.client_id != 0 ? 9 : 0) +
                     VarintFieldSize(sequence) + (lr_multiplier != 1.0f ? 5 : 0);
      if (step_push != nullptr) {
        total += 9 + VarintFieldSize(step_push->generation) + VarintFieldSize(step_push->rank) +
                 VarintFieldSize(step_push->world) + VarintFieldSize(c) +
                 VarintFieldSize(chunks.size());
      }
      for (size_t t = 0; t < chunk.size(); ++t) {
        const size_t n = chunk[t].end - chunk[t].begin;
        inner[t] = VarintFieldSize(items[chunk[t].item].table_id) + LenFieldSize(n * 8) +
                   LenFieldSize(n * dims[chunk[t].item] * width) +
                   (l2[chunk[t].item] != nullptr ? LenFieldSize(n * sizeof(float)) : 0);
        total += LenFieldSize(inner[t], /*always=*/true);
      }
      char* p = nullptr;
      grpc::Slice slice = embedding::SlicePool::Get().Take(total, &p);
      for (size_t t = 0; t < chunk.size(); ++t) {  // PushRequest.tables: TableGradients
        const Segment& seg = chunk[t];
        const size_t n = seg.end - seg.begin, dim = dims[seg.item];
        p = PutLenHeader(p, embedding::tags::kTables, inner[t]);
        p = PutVarintField(p, embedding::tags::kTableId, items[seg.item].table_id);
        if (n == 0) continue;
        const uint32_t* pos = layout.Positions(s, seg);
        p = PutLenHeader(p, embedding::tags::kKeys, n * 8);
        const uint64_t* keys = uniq[seg.item].keys.data();
        ForEachRun(pos, n, [&](size_t k, size_t run) {
          std::memcpy(p, keys + pos[k], run * 8);
          p += run * 8;
        });
        p = PutLenHeader(p, embedding::tags::kValues, n * dim * width);
        const float* g = grads[seg.item];
        ForEachRun(pos, n, [&](size_t k, size_t run) {
          EncodeFloatsTo(encoding, absl::MakeConstSpan(g + pos[k] * dim, run * dim), p);
          p += run * dim * width;
        });
        if (const float* c2 = l2[seg.item]; c2 != nullptr) {
          p = PutLenHeader(p, embedding::tags::kL2Coefficients, n * sizeof(float));
          ForEachRun(pos, n, [&](size_t k, size_t run) {
            std::memcpy(p, c2 + pos[k], run * sizeof(float));
            p += run * sizeof(float);
          });
        }
      }
      p = PutVarintField(p, embedding::tags::kStep, static_cast<uint64_t>(step));
      p = PutVarintField(p, embedding::tags::kEncoding, encoding_value);
      if (im.client_id != 0) {
        *p++ = static_cast<char>(embedding::tags::kClientId);
        std::memcpy(p, &im.client_id, 8);
        p += 8;
      }
      p = PutVarintField(p, embedding::tags::kSequence, sequence);
      if (lr_multiplier != 1.0f) {  // 1 is the field's absence (0 on the wire means 1 too)
        *p++ = static_cast<char>(embedding::tags::kLrMultiplier);
        std::memcpy(p, &lr_multiplier, 4);
        p += 4;
      }
      if (step_push != nullptr) {  // part c of this shard's chunks.size() parts
        *p++ = static_cast<char>(embedding::tags::kStepGroup);
        std::memcpy(p, &step_push->group, 8);
        p += 8;
        p = PutVarintField(p, embedding::tags::kGeneration, step_push->generation);
        p = PutVarintField(p, embedding::tags::kRank, step_push->rank);
        p = PutVarintField(p, embedding::tags::kWorld, step_push->world);
        p = PutVarintField(p, embedding::tags::kPart, c);
        p = PutVarintField(p, embedding::tags::kParts, chunks.size());
      }
      return grpc::ByteBuffer(&slice, 1);
    };
    return im.CallPipelined(
        s, "Push", im.push_method, chunks.size(), build,
        [&](size_t, grpc::ByteBuffer* reply) -> Status {
          pb::PushResponse resp;
          grpc::ProtoBufferReader reader(reply);
          if (!resp.ParseFromZeroCopyStream(&reader)) {
            return absl::InternalError(absl::StrCat("embedding server ", im.options.servers[s],
                                                    ": Push answered bytes that are not a ",
                                                    pb::PushResponse::descriptor()->full_name()));
          }
          return absl::OkStatus();
        });
  });
}

StatusOr<std::vector<pb::StatsResponse>> EmbeddingClient::Stats() {
  std::vector<pb::StatsResponse> out(impl_->shards());
  SIFT_RETURN_IF_ERROR(impl_->ForEachShard([&](uint32_t s) {
    return impl_->Call(s, "Stats", &pb::EmbeddingService::Stub::Stats, pb::StatsRequest(), &out[s]);
  }));
  return out;
}

StatusOr<std::vector<pb::SnapshotResponse>> EmbeddingClient::Snapshot(
    const std::string& name, int64_t step, const std::vector<int64_t>* retain_steps) {
  pb::SnapshotRequest req;
  req.set_name(name);
  req.set_step(step);
  if (retain_steps != nullptr) {
    req.set_retain_only(true);
    req.mutable_retain_steps()->Add(retain_steps->begin(), retain_steps->end());
  }
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
