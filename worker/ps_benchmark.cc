#include "worker/ps_benchmark.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hash.h"
#include "common/perf_stats.h"
#include "common/thread_pool.h"
#include "server/embedding/service.h"
#include "server/embedding/table.h"
#include "worker/embedding_client.h"

namespace sift::worker {
namespace {

constexpr uint32_t kTable = 0;

// The floats `x` become after a trip over the wire in `encoding`.
void RoundThroughWire(WireFloat encoding, std::vector<float>& x) {
  if (encoding == WireFloat::kFp32) return;
  std::string bytes;
  EncodeFloats(encoding, x, &bytes);
  const Status s = DecodeFloats(encoding, bytes, absl::MakeSpan(x), "bench");
  (void)s;  // sizes match by construction
}

// One client's working set: its distinct keys (sorted, like a worker's deduplicated batch), its
// gradients (fixed, already rounded through the encoding) and its pull buffers.
struct ClientState {
  std::unique_ptr<EmbeddingClient> client;
  std::vector<uint64_t> keys;  // sorted, max_keys of them
  std::vector<float> grads;    // max_keys x dim
  std::vector<float> remote_rows, local_rows;
};

// Runs `calls` calls of fn(client, n) on every client at once; per-call latencies (seconds) go to
// `latencies`, the wall time of the whole round is returned.
StatusOr<double> RunRound(std::vector<ClientState>& clients, ThreadPool& pool, int calls,
                          const std::function<Status(ClientState&)>& fn,
                          std::vector<double>* latencies) {
  const size_t c = clients.size();
  std::vector<std::vector<double>> lat(c);
  std::vector<Status> status(c);
  const double start = SteadyClockSeconds();
  pool.ParallelFor(static_cast<int64_t>(c), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      for (int k = 0; k < calls && status[i].ok(); ++k) {
        const double t0 = SteadyClockSeconds();
        status[i] = fn(clients[i]);
        lat[i].push_back(SteadyClockSeconds() - t0);
      }
    }
  });
  const double wall = SteadyClockSeconds() - start;
  for (const Status& s : status) SIFT_RETURN_IF_ERROR(s);
  if (latencies != nullptr) {
    for (auto& l : lat) latencies->insert(latencies->end(), l.begin(), l.end());
  }
  return wall;
}

PsBenchRow MakeRow(const std::string& target, const std::string& op, int64_t keys, int dim,
                   int64_t total_calls, double wall, std::vector<double>& lat) {
  PsBenchRow row;
  row.target = target;
  row.op = op;
  row.keys = keys;
  row.p50_ms = PercentileLinear(lat, 50) * 1e3;
  row.p99_ms = PercentileLinear(lat, 99) * 1e3;
  const double total_keys = static_cast<double>(keys) * static_cast<double>(total_calls);
  row.keys_per_s = wall > 0 ? total_keys / wall : 0;
  row.gb_per_s = row.keys_per_s * dim * sizeof(float) / 1e9;
  return row;
}

}  // namespace

StatusOr<PsBenchResult> RunPsBenchmark(const PsBenchOptions& o) {
  if (o.min_keys < 1 || o.max_keys < o.min_keys) {
    return absl::InvalidArgumentError("--min-keys must be >= 1 and <= --max-keys");
  }
  if (o.factor < 2) return absl::InvalidArgumentError("--factor must be >= 2");
  if (o.iters < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("--iters must be >= 1 and --warmup >= 0");
  }
  if (o.clients < 1 || o.clients > 256) return absl::InvalidArgumentError("--clients in [1, 256]");
  if (o.dim < 1 || o.dim > 65536) return absl::InvalidArgumentError("--dim in [1, 65536]");
  if (o.max_keys > (int64_t{1} << 28)) return absl::InvalidArgumentError("--max-keys <= 2^28");
  const int threads = o.server_threads > 0 ? o.server_threads : AvailableCpus();

  PsBenchResult result;
  std::unique_ptr<embedding::EmbeddingServer> local_server;
  std::vector<std::string> servers = o.servers;
  if (servers.empty()) {
    embedding::EmbeddingServerOptions so;
    so.bind_address = "127.0.0.1";
    so.metrics_port = -1;
    so.shard.threads = threads;
    so.security = o.server_security;
    SIFT_ASSIGN_OR_RETURN(local_server, embedding::EmbeddingServer::Start(so));
    servers = {absl::StrCat("127.0.0.1:", local_server->port())};
    result.servers_label = absl::StrCat("in-process loopback server ", servers[0]);
  } else {
    result.servers_label = absl::StrJoin(servers, ",");
  }
  result.num_shards = static_cast<int>(servers.size());

  embedding::TableConfig table;
  table.table_id = kTable;
  table.name = "bench";
  table.dim = o.dim;
  table.cardinality = static_cast<uint64_t>(o.max_keys) * static_cast<uint64_t>(o.clients);
  table.optimizer.kind = embedding::OptimizerKind::kSgd;
  table.optimizer.learning_rate = 0.01f;

  EmbeddingClientOptions co;
  co.servers = servers;
  co.encoding = o.encoding;
  co.security = o.client_security;
  std::vector<ClientState> clients(static_cast<size_t>(o.clients));
  const size_t dim = static_cast<size_t>(o.dim);
  const size_t max_keys = static_cast<size_t>(o.max_keys);
  for (size_t c = 0; c < clients.size(); ++c) {
    ClientState& cs = clients[c];
    SIFT_ASSIGN_OR_RETURN(cs.client, EmbeddingClient::Connect(co));
    if (c == 0)
      SIFT_RETURN_IF_ERROR(cs.client->Configure(o.seed, {table}, o.replace));
    else
      SIFT_RETURN_IF_ERROR(cs.client->Configure(o.seed, {table}, false));
    // Distinct keys across clients: Mix64 is a bijection of (client << 40 | index).
    cs.keys.resize(max_keys);
    for (size_t i = 0; i < max_keys; ++i) cs.keys[i] = Mix64((uint64_t{c} << 40) | i);
    cs.grads.resize(max_keys * dim);
    for (size_t i = 0; i < cs.grads.size(); ++i) {
      cs.grads[i] = 1e-3f * static_cast<float>(static_cast<int>((i * 7 + c) % 9) - 4);
    }
    RoundThroughWire(o.encoding, cs.grads);
    cs.remote_rows.resize(max_keys * dim);
    cs.local_rows.resize(max_keys * dim);
  }
  SIFT_ASSIGN_OR_RETURN(auto store, embedding::EmbeddingStore::Create(
                                        {table}, embedding::StoreOptions{o.seed, 256, threads}));
  ThreadPool pool(o.clients);

  for (int64_t n = o.min_keys; n <= o.max_keys; n *= o.factor) {
    const size_t nk = static_cast<size_t>(n);
    // This size's keys: the first n of each client's pool, sorted (a deduplicated batch).
    std::vector<std::vector<uint64_t>> keys(clients.size());
    for (size_t c = 0; c < clients.size(); ++c) {
      keys[c].assign(clients[c].keys.begin(), clients[c].keys.begin() + n);
      std::sort(keys[c].begin(), keys[c].end());
    }
    auto index = [&](ClientState& cs) { return static_cast<size_t>(&cs - clients.data()); };
    auto remote_pull = [&](ClientState& cs) {
      const EmbeddingClient::PullItem item{kTable, keys[index(cs)],
                                           absl::MakeSpan(cs.remote_rows.data(), nk * dim)};
      return cs.client->Pull(absl::MakeConstSpan(&item, 1), /*create_missing=*/true);
    };
    auto remote_push = [&](ClientState& cs) {
      const EmbeddingClient::PushItem item{kTable, keys[index(cs)],
                                           absl::MakeConstSpan(cs.grads.data(), nk * dim)};
      return cs.client->Push(absl::MakeConstSpan(&item, 1), /*step=*/0);
    };
    auto local_pull = [&](ClientState& cs) {
      return store->Pull(kTable, keys[index(cs)], absl::MakeSpan(cs.local_rows.data(), nk * dim));
    };
    auto local_push = [&](ClientState& cs) {
      return store->Push(kTable, keys[index(cs)], absl::MakeConstSpan(cs.grads.data(), nk * dim),
                         0);
    };
    // #wrong: keys whose remote row differs from the in-process row (after the wire's rounding).
    auto count_wrong = [&]() -> int64_t {
      int64_t wrong = 0;
      for (ClientState& cs : clients) {
        std::vector<float> local(cs.local_rows.begin(), cs.local_rows.begin() + nk * dim);
        RoundThroughWire(o.encoding, local);
        for (size_t k = 0; k < nk; ++k) {
          if (std::memcmp(local.data() + k * dim, cs.remote_rows.data() + k * dim,
                          dim * sizeof(float)) != 0) {
            ++wrong;
          }
        }
      }
      return wrong;
    };
    struct Op {
      const char* target;
      const char* op;
      std::function<Status(ClientState&)> fn;
    };
    const std::vector<Op> ops = {{"remote", "pull", remote_pull},
                                 {"in-process", "pull", local_pull},
                                 {"remote", "push", remote_push},
                                 {"in-process", "push", local_push}};
    for (const Op& op : ops) {
      SIFT_RETURN_IF_ERROR(RunRound(clients, pool, o.warmup, op.fn, nullptr).status());
      std::vector<double> lat;
      SIFT_ASSIGN_OR_RETURN(const double wall, RunRound(clients, pool, o.iters, op.fn, &lat));
      PsBenchRow row =
          MakeRow(op.target, op.op, n, o.dim, static_cast<int64_t>(o.iters) * o.clients, wall, lat);
      if (o.check && std::string(op.target) == "in-process") {
        // Both sides have now seen the same pulls (and pushes): compare every row.
        SIFT_RETURN_IF_ERROR(RunRound(clients, pool, 1, remote_pull, nullptr).status());
        SIFT_RETURN_IF_ERROR(RunRound(clients, pool, 1, local_pull, nullptr).status());
        const int64_t wrong = count_wrong();
        row.wrong = wrong;
        result.rows[result.rows.size() - 1].wrong = wrong;  // the remote row of this op
      }
      result.rows.push_back(row);
    }
    if (n > o.max_keys / o.factor) break;
  }
  return result;
}

}  // namespace sift::worker
