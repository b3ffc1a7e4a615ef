#include "server/embedding/service.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"
#include "common/dir_lock.h"
#include "common/grpc_server_util.h"
#include "common/grpc_status.h"
#include "common/metrics.h"
#include "common/thread_pool.h"
#include "google/protobuf/arena.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/embedding.grpc.pb.h"
#include "server/embedding/slice_pool.h"

namespace sift::embedding {
namespace {

constexpr char kServiceName[] = "sift.embedding.v1.EmbeddingService";
// A request thread keeps its parsed request's memory for the next call up to this size.
constexpr size_t kMaxCachedRequestBytes = size_t{16} << 20;

// Method indices of the metrics, in the order of kMethodNames.
enum Method { kConfigure, kPull, kPush, kStats, kSnapshot, kRestore };
const std::vector<std::string> kMethodNames = {"Configure", "Pull",     "Push",
                                               "Stats",     "Snapshot", "Restore"};

using RawService = pb::EmbeddingService::WithRawCallbackMethod_Configure<
    pb::EmbeddingService::WithRawCallbackMethod_Pull<
        pb::EmbeddingService::WithRawCallbackMethod_Push<
            pb::EmbeddingService::WithRawCallbackMethod_Stats<
                pb::EmbeddingService::WithRawCallbackMethod_Snapshot<
                    pb::EmbeddingService::WithRawCallbackMethod_Restore<
                        pb::EmbeddingService::Service>>>>>>;

}  // namespace

// The service: parses each raw request, runs the shard's method on the request pool, serializes
// the reply, and records the gRPC metrics.
class EmbeddingService final : public RawService {
 public:
  EmbeddingService(EmbeddingShard* shard, int threads, GrpcServerMetrics* metrics)
      : shard_(shard), pool_(threads + 1), metrics_(metrics) {}

  // The generated typed (sync) overloads stay visible; they are disabled by the raw bases.
  using RawService::Configure;
  using RawService::Pull;
  using RawService::Push;
  using RawService::Restore;
  using RawService::Snapshot;
  using RawService::Stats;

  grpc::ServerUnaryReactor* Configure(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override {
    return Handle<pb::ConfigureRequest, pb::ConfigureResponse>(
        kConfigure, ctx, req, resp,
        [this](const auto& q, auto* r) { return shard_->Configure(q, r); });
  }
  // The reply is written as wire bytes: framing in small slices, rows straight from the store
  // into pooled slices (no PullResponse, no copy of the rows).
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override {
    return Handle<pb::PullRequest, grpc::ByteBuffer>(
        kPull, ctx, req, resp, [this](const pb::PullRequest& q, grpc::ByteBuffer* r) {
          std::vector<grpc::Slice> slices;
          const Status status =
              shard_->PullTo(q, [&slices](absl::string_view framing, size_t rows_bytes) {
                slices.emplace_back(framing.data(), framing.size());
                char* rows = nullptr;
                if (rows_bytes > 0) slices.push_back(SlicePool::Get().Take(rows_bytes, &rows));
                return rows;
              });
          if (status.ok()) *r = grpc::ByteBuffer(slices.data(), slices.size());
          return status;
        });
  }
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override {
    return Handle<pb::PushRequest, pb::PushResponse>(
        kPush, ctx, req, resp, [this](const auto& q, auto* r) { return shard_->Push(q, r); });
  }
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                  grpc::ByteBuffer* resp) override {
    return Handle<pb::StatsRequest, pb::StatsResponse>(
        kStats, ctx, req, resp, [this](const auto&, auto* r) { return shard_->Stats(r); });
  }
  grpc::ServerUnaryReactor* Snapshot(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override {
    return Handle<pb::SnapshotRequest, pb::SnapshotResponse>(
        kSnapshot, ctx, req, resp,
        [this](const auto& q, auto* r) { return shard_->Snapshot(q, r); });
  }
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                    grpc::ByteBuffer* resp) override {
    return Handle<pb::RestoreRequest, pb::RestoreResponse>(
        kRestore, ctx, req, resp, [this](const auto& q, auto* r) { return shard_->Restore(q, r); });
  }

 private:
  template <typename Req, typename Resp, typename Fn>
  grpc::ServerUnaryReactor* Handle(Method method, grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                                   Fn fn) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    metrics_->Started(method);
    const auto start = std::chrono::steady_clock::now();
    pool_.Schedule([this, method, ctx, request, response, reactor, start, fn] {
      grpc::Status status = Run<Req, Resp>(method, ctx, request, response, fn);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      metrics_->Handled(method, static_cast<int>(status.error_code()), seconds);
      reactor->Finish(status);
    });
    return reactor;
  }

  template <typename Req, typename Resp, typename Fn>
  grpc::Status Run(Method method, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                   grpc::ByteBuffer* response, Fn& fn) {
    if (ctx->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled or past its deadline");
    }
    // The request is parsed into this thread's message of its type, reused from call to call:
    // its repeated fields and strings keep their capacity, so a multi-MB Push allocates nothing.
    thread_local std::unique_ptr<Req> cached;
    if (cached == nullptr) cached = std::make_unique<Req>();
    Req* req = cached.get();
    const size_t request_bytes = request->Length();
    {
      grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(request));
      if (!req->ParseFromZeroCopyStream(&reader)) {
        req->Clear();
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat(kMethodNames[method], ": the request is not a valid ",
                         Req::descriptor()->full_name(), " message (", request_bytes, " bytes)"));
      }
    }
    grpc::Status result;
    try {
      if constexpr (std::is_same_v<Resp, grpc::ByteBuffer>) {
        result = ToGrpc(fn(*req, response));
      } else {
        google::protobuf::Arena arena;
        Resp* resp = google::protobuf::Arena::CreateMessage<Resp>(&arena);
        const Status status = fn(*req, resp);
        if (status.ok()) {
          bool own = false;
          result = grpc::SerializationTraits<Resp>::Serialize(*resp, response, &own);
        } else {
          result = ToGrpc(status);
        }
      }
    } catch (const std::bad_alloc&) {
      // One request too large for this machine's memory must not take the shard down.
      result =
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat(kMethodNames[method], ": out of memory serving this request (",
                                    request_bytes, " bytes); split it"));
    }
    // Keep the memory of ordinary requests; let an unusually large one go — by what the parsed
    // message holds, not its wire size (millions of empty sub-messages are small on the wire).
    if (request_bytes > kMaxCachedRequestBytes ||
        req->SpaceUsedLong() > static_cast<size_t>(2 * kMaxCachedRequestBytes)) {
      cached.reset();
    } else {
      req->Clear();
    }
    return result;
  }

  EmbeddingShard* shard_;
  ThreadPool pool_;  // request threads; destroyed (drained) before the shard
  GrpcServerMetrics* metrics_;
};

class EmbeddingServer::Impl {
 public:
  std::optional<DirLock> snapshot_lock;  // this shard's claim on --snapshot-dir
  std::unique_ptr<EmbeddingShard> shard;
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<GrpcServerMetrics> grpc_metrics;
  std::unique_ptr<MetricsExposer> exposer;
  std::unique_ptr<EmbeddingService> service;
  std::unique_ptr<grpc::Server> server;
  // Services of listeners the watchdog replaced (a service must outlive its server; they are
  // few: one per restart).
  std::vector<std::unique_ptr<EmbeddingService>> retired;
  EmbeddingServerOptions options;
  int port = 0;
  std::mutex shutdown_mu;
  bool shut_down = false;  // guarded by shutdown_mu

  // The listener watchdog (issue 16 row 2): gRPC 1.51 stops accepting for good once accept4
  // fails with EMFILE (grpc/grpc#20418). Every kProbeInterval a fresh connection asks this
  // server's health; after kProbeFailures failures in a row the gRPC server is rebuilt on the
  // same port (the tables stay: they live in the shard). While descriptors are still exhausted
  // the rebuild fails and is tried again at the next probe.
  std::thread watchdog;
  std::mutex watchdog_mu;
  std::condition_variable watchdog_cv;
  bool watchdog_stop = false;  // guarded by watchdog_mu
  std::mutex server_mu;        // serialises the rebuild against Shutdown
  std::atomic<int64_t> listener_restarts{0};

  void WatchdogLoop();
  bool Probe() const;
  Status RebuildListener();
};

namespace {

constexpr auto kProbeInterval = std::chrono::seconds(1);
constexpr auto kProbeDeadline = std::chrono::seconds(5);
constexpr int kProbeFailures = 3;

// The gRPC server of `service` on options.bind_address:port (0 = any; the bound port in
// *bound_port); null when it cannot listen.
std::unique_ptr<grpc::Server> BuildGrpcServer(const EmbeddingServerOptions& options, int port,
                                              EmbeddingService* service, int* bound_port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  AddNonEmptyStatusInterceptor(&builder);
  const std::string address = absl::StrCat(options.bind_address, ":", port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), bound_port);
  builder.RegisterService(service);
  const int max_bytes = static_cast<int>(options.shard.max_message_bytes);
  // A second server on the same port must fail, not share it (gRPC sets SO_REUSEPORT by default,
  // which would split clients between two copies of a shard).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  // Let clients keep idle connections alive with pings every 10 s or more (ops-notes 4.3).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound_port == 0) return nullptr;
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus("", true);
  return server;
}

}  // namespace

bool EmbeddingServer::Impl::Probe() const {
  // A channel of its own (a local subchannel pool): a new TCP connection, as a new client makes.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const std::string host = options.bind_address == "0.0.0.0" ? "127.0.0.1" : options.bind_address;
  auto channel = grpc::CreateCustomChannel(absl::StrCat(host, ":", port),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kProbeDeadline);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, request, &response).ok();
}

Status EmbeddingServer::Impl::RebuildListener() {
  std::lock_guard<std::mutex> lock(server_mu);
  {
    std::lock_guard<std::mutex> s(shutdown_mu);
    if (shut_down) return absl::OkStatus();
  }
  if (server != nullptr) {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server.reset();
  }
  if (service != nullptr) retired.push_back(std::move(service));
  service =
      std::make_unique<EmbeddingService>(shard.get(), options.shard.threads, grpc_metrics.get());
  int bound = 0;
  server = BuildGrpcServer(options, port, service.get(), &bound);
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on port ", port, " again yet"));
  }
  listener_restarts.fetch_add(1);
  return absl::OkStatus();
}

void EmbeddingServer::Impl::WatchdogLoop() {
  int failures = 0;
  std::unique_lock<std::mutex> lock(watchdog_mu);
  while (!watchdog_cv.wait_for(lock, kProbeInterval, [this] { return watchdog_stop; })) {
    lock.unlock();
    const bool ok = server != nullptr && Probe();
    failures = ok ? 0 : failures + 1;
    if (failures >= kProbeFailures) {
      std::fprintf(stderr,
                   "sift embedding-server: port %d has not answered %d health probes in a row "
                   "(out of file descriptors?); restarting the listener\n",
                   port, failures);
      const Status s = RebuildListener();
      if (!s.ok()) std::fprintf(stderr, "sift embedding-server: %s\n", s.ToString().c_str());
      failures = 0;
    }
    lock.lock();
  }
}

EmbeddingServer::EmbeddingServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EmbeddingServer::~EmbeddingServer() {
  Shutdown();
  impl_->retired.clear();
  // gRPC's rule: the server goes before the services registered with it; the service's pool then
  // drains before the shard it calls is destroyed.
  impl_->server.reset();
  impl_->service.reset();
}

int EmbeddingServer::port() const { return impl_->port; }
int EmbeddingServer::metrics_port() const { return impl_->exposer ? impl_->exposer->port() : -1; }
EmbeddingShard& EmbeddingServer::shard() { return *impl_->shard; }

namespace {

// Scrape-time series of the shard's tables.
Status AddShardCollectables(EmbeddingShard* shard, MetricsExposer* exposer) {
  const std::string shard_label = absl::StrCat(shard->options().shard);
  using Samples = std::vector<std::pair<std::map<std::string, std::string>, double>>;
  auto make = [shard, shard_label](auto pick) {
    return [shard, shard_label, pick]() {
      Samples out;
      for (const EmbeddingShard::TableMetrics& t : shard->Metrics()) {
        out.push_back({{{"shard", shard_label}, {"table", t.name}}, pick(t)});
      }
      return out;
    };
  };
  using T = EmbeddingShard::TableMetrics;
  struct Spec {
    const char* name;
    const char* help;
    CallbackCollectable::Type type;
    std::function<Samples()> fn;
  };
  const std::vector<Spec> specs = {
      {"sift_ps_rows", "Rows held by this shard, per table.", CallbackCollectable::Type::kGauge,
       make([](const T& t) { return static_cast<double>(t.rows); })},
      {"sift_ps_memory_bytes", "Memory of this shard's rows and hash maps, per table.",
       CallbackCollectable::Type::kGauge,
       make([](const T& t) { return static_cast<double>(t.total_bytes); })},
      {"sift_ps_pulled_keys_total", "Keys served by Pull, per table.",
       CallbackCollectable::Type::kCounter,
       make([](const T& t) { return static_cast<double>(t.pulled_keys); })},
      {"sift_ps_pushed_keys_total", "Keys updated by Push, per table.",
       CallbackCollectable::Type::kCounter,
       make([](const T& t) { return static_cast<double>(t.pushed_keys); })},
      {"sift_ps_refused_pushes_total",
       "Pushes refused whole for a non-finite or out-of-range gradient, per table.",
       CallbackCollectable::Type::kCounter,
       make([](const T& t) { return static_cast<double>(t.refused_pushes); })},
      {"sift_ps_refused_rows_total",
       "Rows a push left unchanged because the update would have been non-finite, per table.",
       CallbackCollectable::Type::kCounter,
       make([](const T& t) { return static_cast<double>(t.refused_rows); })},
      {"sift_ps_refused_pulls_total",
       "Pulls refused because the table memory budget is used up, per table.",
       CallbackCollectable::Type::kCounter,
       make([](const T& t) { return static_cast<double>(t.refused_pulls); })},
  };
  for (const Spec& spec : specs) {
    SIFT_ASSIGN_OR_RETURN(auto collectable,
                          CallbackCollectable::Create(spec.name, spec.help, spec.type, spec.fn));
    SIFT_RETURN_IF_ERROR(exposer->AddCollectable(std::move(collectable)));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<EmbeddingServer>> EmbeddingServer::Start(
    const EmbeddingServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port ", options.port, " not in [0, 65535]"));
  }
  if (options.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-port ", options.metrics_port, " not in [0, 65535]"));
  }
  if (options.shard.max_message_bytes > static_cast<uint64_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("--max-message-bytes must be < 2 GiB");
  }
  auto impl = std::make_unique<Impl>();
  if (!options.shard.snapshot_dir.empty()) {
    // Shards share the directory (a restore reads every shard's files); one server per shard.
    const ShardOptions& so = options.shard;
    SIFT_ASSIGN_OR_RETURN(
        impl->snapshot_lock,
        DirLock::Acquire(so.snapshot_dir,
                         absl::StrCat("embedding server shard ", so.shard, " of ", so.num_shards),
                         absl::StrCat(".shard-", so.shard, "-of-", so.num_shards, ".lock")));
  }
  SIFT_ASSIGN_OR_RETURN(impl->shard, EmbeddingShard::Create(options.shard));
  KeepFreedHeapMemory();
  impl->registry = std::make_shared<prometheus::Registry>();
  AddBuildInfo(*impl->registry, options.shard.version);
  impl->grpc_metrics = std::make_unique<GrpcServerMetrics>(
      *impl->registry, kServiceName, kMethodNames,
      std::map<std::string, std::string>{{"shard", absl::StrCat(options.shard.shard)}});
  if (options.metrics_port >= 0) {
    SIFT_ASSIGN_OR_RETURN(
        impl->exposer,
        MetricsExposer::Start(absl::StrCat(options.bind_address, ":", options.metrics_port),
                              impl->registry));
    SIFT_RETURN_IF_ERROR(AddShardCollectables(impl->shard.get(), impl->exposer.get()));
  }
  impl->service = std::make_unique<EmbeddingService>(impl->shard.get(), options.shard.threads,
                                                     impl->grpc_metrics.get());

  impl->options = options;
  impl->server = BuildGrpcServer(options, options.port, impl->service.get(), &impl->port);
  if (impl->server == nullptr) {
    return absl::UnavailableError(absl::StrCat("embedding server: cannot listen on ",
                                               options.bind_address, ":", options.port,
                                               " (port in use?)"));
  }
  Impl* raw = impl.get();
  impl->watchdog = std::thread([raw] { raw->WatchdogLoop(); });
  return std::unique_ptr<EmbeddingServer>(new EmbeddingServer(std::move(impl)));
}

void EmbeddingServer::Shutdown(double grace_s) {
  {
    std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->watchdog_mu);
    impl_->watchdog_stop = true;
  }
  impl_->watchdog_cv.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  std::lock_guard<std::mutex> lock(impl_->server_mu);
  if (impl_->server == nullptr) return;
  grpc::HealthCheckServiceInterface* health = impl_->server->GetHealthCheckService();
  if (health != nullptr) health->Shutdown();  // every service NOT_SERVING, frozen
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
}

}  // namespace sift::embedding
