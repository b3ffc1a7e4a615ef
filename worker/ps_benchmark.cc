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

// Client c's working set, the same whatever the transport: its distinct keys, its gradients
// (fixed, already rounded through the encoding) and the in-process table's pull buffer.
struct ClientData {
  std::vector<uint64_t> pool;  // max_keys distinct keys
  std::vector<uint64_t>
      keys;                  // this size's: the first n of the pool, sorted (a deduplicated batch)
  std::vector<float> grads;  // max_keys x dim
  std::vector<float> local_rows;
};

// Client c of one transport: its connection and its pull buffer.
struct ClientState {
  ClientData* data = nullptr;
  std::unique_ptr<EmbeddingClient> client;
  std::vector<float> remote_rows;
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

// What one timed series accumulated: wall and CPU seconds, and the per-call latencies.
struct Timing {
  double wall = 0, cpu = 0;
  std::vector<double> lat;
};

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

// One client set (and its in-process server, when the benchmark starts one) per transport.
struct TransportState {
  const PsBenchTransport* transport = nullptr;
  std::unique_ptr<embedding::EmbeddingServer> local_server;
  std::vector<std::string> servers;
  std::vector<ClientState> clients;
};

// The clients' working sets (distinct keys across clients: Mix64 is a bijection of
// (client << 40 | index)).
std::vector<ClientData> MakeClientData(const PsBenchOptions& o) {
  std::vector<ClientData> data(static_cast<size_t>(o.clients));
  const size_t dim = static_cast<size_t>(o.dim);
  const size_t max_keys = static_cast<size_t>(o.max_keys);
  for (size_t c = 0; c < data.size(); ++c) {
    ClientData& d = data[c];
    d.pool.resize(max_keys);
    for (size_t i = 0; i < max_keys; ++i) d.pool[i] = Mix64((uint64_t{c} << 40) | i);
    d.grads.resize(max_keys * dim);
    for (size_t i = 0; i < d.grads.size(); ++i) {
      d.grads[i] = 1e-3f * static_cast<float>(static_cast<int>((i * 7 + c) % 9) - 4);
    }
    RoundThroughWire(o.encoding, d.grads);
    d.local_rows.resize(max_keys * dim);
  }
  return data;
}

// Connects one client per working set to transport t's servers, the first configuring the
// benchmark table (replacing it if `replace`).
Status ConnectClients(const PsBenchOptions& o, const embedding::TableConfig& table,
                      std::vector<ClientData>& data, TransportState& t) {
  EmbeddingClientOptions co;
  co.servers = t.servers;
  co.encoding = o.encoding;
  co.security = t.transport->client_security;
  t.clients.resize(data.size());
  for (size_t c = 0; c < data.size(); ++c) {
    ClientState& cs = t.clients[c];
    cs.data = &data[c];
    SIFT_ASSIGN_OR_RETURN(cs.client, EmbeddingClient::Connect(co));
    SIFT_RETURN_IF_ERROR(cs.client->Configure(o.seed, {table}, c == 0 && o.replace));
    cs.remote_rows.resize(data[c].local_rows.size());
  }
  return absl::OkStatus();
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
  if (o.transports.empty() || (!o.servers.empty() && o.transports.size() != 1)) {
    return absl::InvalidArgumentError(
        "bench ps: one transport against --servers, at least one for in-process servers");
  }
  const int threads = o.server_threads > 0 ? o.server_threads : AvailableCpus();

  PsBenchResult result;
  std::vector<TransportState> transports(o.transports.size());
  std::vector<std::string> labels;
  for (size_t t = 0; t < transports.size(); ++t) {
    TransportState& ts = transports[t];
    ts.transport = &o.transports[t];
    ts.servers = o.servers;
    if (!o.servers.empty()) {
      labels.push_back(absl::StrJoin(o.servers, ","));
      continue;
    }
    embedding::EmbeddingServerOptions so;
    so.bind_address = "127.0.0.1";
    so.metrics_port = -1;
    so.shard.threads = threads;
    so.security = ts.transport->server_security;
    SIFT_ASSIGN_OR_RETURN(ts.local_server, embedding::EmbeddingServer::Start(so));
    ts.servers = {absl::StrCat("127.0.0.1:", ts.local_server->port())};
    labels.push_back(absl::StrCat(ts.servers[0], transports.size() > 1 ? " (" : "",
                                  transports.size() > 1 ? ts.transport->name : "",
                                  transports.size() > 1 ? ")" : ""));
  }
  result.servers_label =
      o.servers.empty() ? absl::StrCat("in-process loopback server", labels.size() > 1 ? "s " : " ",
                                       absl::StrJoin(labels, ", "))
                        : labels[0];
  result.num_shards = static_cast<int>(transports[0].servers.size());

  embedding::TableConfig table;
  table.table_id = kTable;
  table.name = "bench";
  table.dim = o.dim;
  table.cardinality = static_cast<uint64_t>(o.max_keys) * static_cast<uint64_t>(o.clients);
  table.optimizer.kind = embedding::OptimizerKind::kSgd;
  table.optimizer.learning_rate = 0.01f;
  std::vector<ClientData> data = MakeClientData(o);
  for (TransportState& ts : transports) SIFT_RETURN_IF_ERROR(ConnectClients(o, table, data, ts));
  // The in-process table's calls run on the first transport's client threads' working sets.
  std::vector<ClientState>& local_clients = transports[0].clients;
  const size_t dim = static_cast<size_t>(o.dim);
  const double width = WireFloatBytes(o.encoding);
  SIFT_ASSIGN_OR_RETURN(auto store, embedding::EmbeddingStore::Create(
                                        {table}, embedding::StoreOptions{o.seed, 256, threads}));
  ThreadPool pool(o.clients);

  for (int64_t n = o.min_keys; n <= o.max_keys; n *= o.factor) {
    const size_t nk = static_cast<size_t>(n);
    for (ClientData& d : data) {
      d.keys.assign(d.pool.begin(), d.pool.begin() + n);
      std::sort(d.keys.begin(), d.keys.end());
    }
    auto remote_pull = [&](ClientState& cs) {
      const EmbeddingClient::PullItem item{kTable, cs.data->keys,
                                           absl::MakeSpan(cs.remote_rows.data(), nk * dim)};
      return cs.client->Pull(absl::MakeConstSpan(&item, 1), /*create_missing=*/true);
    };
    auto remote_push = [&](ClientState& cs) {
      const EmbeddingClient::PushItem item{kTable, cs.data->keys,
                                           absl::MakeConstSpan(cs.data->grads.data(), nk * dim)};
      return cs.client->Push(absl::MakeConstSpan(&item, 1), /*step=*/0);
    };
    auto local_pull = [&](ClientState& cs) {
      return store->Pull(kTable, cs.data->keys,
                         absl::MakeSpan(cs.data->local_rows.data(), nk * dim));
    };
    auto local_push = [&](ClientState& cs) {
      return store->Push(kTable, cs.data->keys,
                         absl::MakeConstSpan(cs.data->grads.data(), nk * dim), 0);
    };
    // #wrong: keys whose remote row (of transport t's servers) differs from the in-process row
    // (after the wire's rounding).
    auto count_wrong = [&](const TransportState& ts) -> int64_t {
      int64_t wrong = 0;
      for (const ClientState& cs : ts.clients) {
        std::vector<float> local(cs.data->local_rows.begin(),
                                 cs.data->local_rows.begin() + nk * dim);
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
      bool remote;
      const char* op;
      std::function<Status(ClientState&)> fn;
      double wire_bytes;  // keys, and rows or gradients, per call
    };
    const double key_bytes = 8.0 * static_cast<double>(n);
    const double row_bytes = width * static_cast<double>(n * o.dim);
    const std::vector<Op> ops = {{true, "pull", remote_pull, key_bytes + row_bytes},
                                 {false, "pull", local_pull, 0},
                                 {true, "push", remote_push, key_bytes + row_bytes},
                                 {false, "push", local_push, 0}};
    const int64_t total_calls = static_cast<int64_t>(o.iters) * o.clients;
    size_t remote_rows_begin = 0;  // this op's first remote row in result.rows
    for (const Op& op : ops) {
      if (!op.remote) {
        SIFT_RETURN_IF_ERROR(RunRound(local_clients, pool, o.warmup, op.fn, nullptr).status());
        Timing tm;
        const double cpu0 = ProcessCpuSeconds();
        SIFT_ASSIGN_OR_RETURN(tm.wall, RunRound(local_clients, pool, o.iters, op.fn, &tm.lat));
        tm.cpu = ProcessCpuSeconds() - cpu0;
        PsBenchRow row = MakeRow("in-process", op.op, n, o.dim, total_calls, tm.wall, tm.lat);
        row.cpu_ms = tm.cpu / static_cast<double>(total_calls) * 1e3;
        if (o.check) {
          // Every side has now seen the same pulls (and pushes): compare every row.
          for (size_t t = 0; t < transports.size(); ++t) {
            SIFT_RETURN_IF_ERROR(
                RunRound(transports[t].clients, pool, 1, remote_pull, nullptr).status());
          }
          SIFT_RETURN_IF_ERROR(RunRound(local_clients, pool, 1, local_pull, nullptr).status());
          for (size_t t = 0; t < transports.size(); ++t) {
            result.rows[remote_rows_begin + t].wrong = count_wrong(transports[t]);
          }
        }
        result.rows.push_back(row);
        continue;
      }
      for (TransportState& ts : transports) {
        SIFT_RETURN_IF_ERROR(RunRound(ts.clients, pool, o.warmup, op.fn, nullptr).status());
      }
      // Timed: one call per client per transport at a time, the transports' order rotating.
      std::vector<Timing> tm(transports.size());
      for (int k = 0; k < o.iters; ++k) {
        for (size_t j = 0; j < transports.size(); ++j) {
          const size_t t = (j + static_cast<size_t>(k)) % transports.size();
          const double cpu0 = ProcessCpuSeconds();
          SIFT_ASSIGN_OR_RETURN(const double wall,
                                RunRound(transports[t].clients, pool, 1, op.fn, &tm[t].lat));
          tm[t].cpu += ProcessCpuSeconds() - cpu0;
          tm[t].wall += wall;
        }
      }
      remote_rows_begin = result.rows.size();
      for (size_t t = 0; t < transports.size(); ++t) {
        PsBenchRow row = MakeRow("remote", op.op, n, o.dim, total_calls, tm[t].wall, tm[t].lat);
        row.transport = transports[t].transport->name;
        row.cpu_ms = tm[t].cpu / static_cast<double>(total_calls) * 1e3;
        row.wire_bytes = op.wire_bytes;
        result.rows.push_back(row);
      }
    }
    if (n > o.max_keys / o.factor) break;
  }
  return result;
}

}  // namespace sift::worker
