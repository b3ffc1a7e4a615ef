#include "server/embedding/service.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/dir_lock.h"
#include "common/grpc_listener_watchdog.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/job_credential.h"
#include "common/metrics.h"
#include "common/thread_pool.h"
#include "google/protobuf/arena.h"
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
// What each method needs of its caller (security on), in the order of Method: the tables are
// the workers' alone; Stats (shard index, limits, table sizes) is open to every member.
const CallerNeeds kMethodNeeds[] = {CallerNeeds::kWorker, CallerNeeds::kWorker,
                                    CallerNeeds::kWorker, CallerNeeds::kMember,
                                    CallerNeeds::kWorker, CallerNeeds::kWorker};

using RawService = pb::EmbeddingService::WithRawCallbackMethod_Configure<
    pb::EmbeddingService::WithRawCallbackMethod_Pull<
        pb::EmbeddingService::WithRawCallbackMethod_Push<
            pb::EmbeddingService::WithRawCallbackMethod_Stats<
                pb::EmbeddingService::WithRawCallbackMethod_Snapshot<
                    pb::EmbeddingService::WithRawCallbackMethod_Restore<
                        pb::EmbeddingService::Service>>>>>>;

// The job a managed server serves (EmbeddingServer::SetJobGrant), read on every table call.
class GrantHolder {
 public:
  void Set(std::optional<JobGrant> grant) {
    std::lock_guard<std::mutex> lock(mu_);
    grant_ = grant ? std::make_shared<const JobGrant>(std::move(*grant)) : nullptr;
  }
  std::shared_ptr<const JobGrant> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return grant_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const JobGrant> grant_;  // guarded by mu_
};

// A managed server's check of the job credential a table call presents.
Status CheckJobCredential(const grpc::ServerContextBase& ctx, const JobGrant* grant,
                          absl::string_view method) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kJobCredentialHeader);
  const absl::string_view presented = it == md.end()
                                          ? absl::string_view()
                                          : absl::string_view(it->second.data(), it->second.size());
  if (grant != nullptr && JobCredentialEquals(presented, grant->credential)) {
    return absl::OkStatus();
  }
  const std::string serving =
      grant == nullptr ? std::string("serves no job now (none is running on it)")
                       : absl::StrCat("serves ", grant->job_id, " generation ", grant->generation);
  if (presented.empty()) {
    return AuthRefusal(absl::StatusCode::kPermissionDenied,
                       absl::StrCat(method, ": no job credential; this server ", serving,
                                    " and takes table calls only from that generation's ranks"));
  }
  StatusOr<JobCredentialClaim> claim = ParseJobCredential(presented);
  if (claim.ok() && (grant == nullptr ||
                     (claim->job_id == grant->job_id && claim->generation < grant->generation))) {
    // A rank of an ended generation (the coordinator has moved on, or ended the job): nothing it
    // sends is applied, and nothing is gained by telling it so.
    return absl::FailedPreconditionError(absl::StrCat(
        "stale generation: ", method, " from ", claim->Describe(), "; this server ", serving));
  }
  return AuthRefusal(
      absl::StatusCode::kPermissionDenied,
      absl::StrCat(method, ": the job credential presented ",
                   claim.ok() ? absl::StrCat("(", claim->Describe(), ") is not this server's")
                              : std::string("is malformed"),
                   "; this server ", serving,
                   " and takes table calls only from that generation's ranks"));
}

// Snapshot and Restore name snapshots: a managed server's calls stay inside its job's.
Status CheckRequestScope(const pb::SnapshotRequest& q, const JobGrant& grant) {
  return CheckSnapshotScope(grant, q.name(), /*restore=*/false);
}
Status CheckRequestScope(const pb::RestoreRequest& q, const JobGrant& grant) {
  return CheckSnapshotScope(grant, q.name(), /*restore=*/true);
}
template <typename Req>
Status CheckRequestScope(const Req&, const JobGrant&) {
  return absl::OkStatus();
}

}  // namespace

std::string JobSnapshotPrefix(const std::string& job_id) {
  return absl::StrCat("ckpt-", job_id, "-g");
}

Status CheckSnapshotScope(const JobGrant& grant, const std::string& name, bool restore) {
  const std::string prefix = JobSnapshotPrefix(grant.job_id);
  if (absl::StartsWith(name, prefix)) return absl::OkStatus();
  if (restore && !grant.restorable_snapshot.empty() && name == grant.restorable_snapshot) {
    return absl::OkStatus();
  }
  return AuthRefusal(
      absl::StatusCode::kPermissionDenied,
      absl::StrCat(restore ? "Restore" : "Snapshot", ": snapshot \"", name, "\" is not ",
                   grant.job_id, "'s (its names start with \"", prefix, "\"",
                   restore && !grant.restorable_snapshot.empty()
                       ? absl::StrCat("; it may also restore \"", grant.restorable_snapshot,
                                      "\", the checkpoint it resumes from")
                       : std::string(),
                   "): a job ", restore ? "reads" : "writes and prunes",
                   " only its own snapshots"));
}

// The service: parses each raw request, runs the shard's method on the request pool, serializes
// the reply, and records the gRPC metrics.
class EmbeddingService final : public RawService {
 public:
  EmbeddingService(EmbeddingShard* shard, int threads, GrpcServerMetrics* metrics, bool secured,
                   RefusalRecorder* refusals, RefusalRecorder* bound_refusals,
                   const GrantHolder* grants)
      : shard_(shard),
        pool_(threads + 1),
        metrics_(metrics),
        secured_(secured),
        refusals_(refusals),
        bound_refusals_(bound_refusals),
        grants_(grants) {}

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
    // Checked on gRPC's thread, before any request bytes are parsed.
    std::shared_ptr<const JobGrant> grant;
    Status allowed;
    if (secured_) {
      allowed = CheckCaller(IdentifyCaller(*ctx, /*checked=*/true, /*tokens=*/nullptr),
                            kMethodNeeds[method], kMethodNames[method]);
    }
    if (allowed.ok() && grants_ != nullptr && method != kStats) {
      grant = grants_->Get();
      allowed = CheckJobCredential(*ctx, grant.get(), kMethodNames[method]);
    }
    if (!allowed.ok()) {
      if (IsAuthRefusal(allowed)) RecordRefusal(method, allowed, *ctx);
      metrics_->Handled(
          method, static_cast<int>(allowed.code()),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      reactor->Finish(ToGrpc(allowed));
      return reactor;
    }
    pool_.Schedule([this, method, ctx, request, response, reactor, start, fn, grant] {
      grpc::Status status = Run<Req, Resp>(method, ctx, request, response, fn, grant.get());
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      metrics_->Handled(method, static_cast<int>(status.error_code()), seconds);
      reactor->Finish(status);
    });
    return reactor;
  }

  void RecordRefusal(Method method, const Status& refusal, const grpc::ServerContextBase& ctx) {
    refusals_->Record(kMethodNames[method], IdentifyCaller(ctx, secured_, /*tokens=*/nullptr),
                      refusal, ctx);
  }

  // `grant`: a managed server's job (null: not managed), for the request's scope check.
  template <typename Req, typename Resp, typename Fn>
  grpc::Status Run(Method method, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                   grpc::ByteBuffer* response, Fn& fn, const JobGrant* grant) {
    if (ctx->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled or past its deadline");
    }
    // The request is parsed into this thread's message of its type, reused from call to call:
    // its repeated fields and strings keep their capacity, so a multi-MB Push allocates nothing.
    thread_local std::unique_ptr<Req> cached;
    if (cached == nullptr) cached = std::make_unique<Req>();
    Req* req = cached.get();
    const size_t request_bytes = request->Length();
    if (method == kPush) shard_->AddPushRequestBytes(request_bytes);
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
    if (grant != nullptr && grants_->Get().get() != grant) {
      // The server moved to another generation while this call waited for a request thread.
      req->Clear();
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("stale generation: ", kMethodNames[method], " from ", grant->job_id,
                       " generation ", grant->generation, ", which this server no longer serves"));
    }
    if (grant != nullptr) {
      const Status scope = CheckRequestScope(*req, *grant);
      if (!scope.ok()) {
        RecordRefusal(method, scope, *ctx);
        req->Clear();
        return ToGrpc(scope);
      }
    }
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
    // A pull or push refused whole by a table bound (the memory budget, a capacity, a row the
    // shard does not hold): who, what, from where.
    const bool bound_refusal =
        (method == kPull && result.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ||
        (method == kPush && (result.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                             result.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED));
    if (bound_refusal) {
      bound_refusals_->Record(
          kMethodNames[method], IdentifyCaller(*ctx, secured_, /*tokens=*/nullptr),
          Status(static_cast<absl::StatusCode>(result.error_code()), result.error_message()), *ctx);
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
  const bool secured_;
  RefusalRecorder* refusals_;
  RefusalRecorder* bound_refusals_;
  const GrantHolder* grants_;  // null: not managed (no job checks)
};

class EmbeddingServer::Impl {
 public:
  // Declaration order = reverse destruction order: the gRPC server (with its services, whose
  // request pools drain) goes before the shard they call.
  std::optional<DirLock> snapshot_lock;  // this shard's claim on --snapshot-dir
  std::unique_ptr<EmbeddingShard> shard;
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<GrpcServerMetrics> grpc_metrics;
  std::unique_ptr<RefusalRecorder> refusals;
  std::unique_ptr<RefusalRecorder> bound_refusals;
  std::unique_ptr<GrantHolder> grants;  // managed servers only
  std::unique_ptr<MetricsExposer> exposer;
  // The gRPC server under the listener watchdog (common/grpc_listener_watchdog.h): rebuilt on
  // its port when it stops accepting; the tables live on in the shard.
  std::unique_ptr<WatchedGrpcServer> grpc;
};

EmbeddingServer::EmbeddingServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EmbeddingServer::~EmbeddingServer() {
  Shutdown();
  impl_->grpc.reset();
}

int EmbeddingServer::port() const { return impl_->grpc->port(); }
int EmbeddingServer::metrics_port() const { return impl_->exposer ? impl_->exposer->port() : -1; }
EmbeddingShard& EmbeddingServer::shard() { return *impl_->shard; }

void EmbeddingServer::SetJobGrant(std::optional<JobGrant> grant) {
  if (impl_->grants != nullptr) impl_->grants->Set(std::move(grant));
}

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
       "Pulls refused whole (nothing created) because the table memory budget or the table's "
       "capacity would be passed, per table.",
       CallbackCollectable::Type::kCounter,
       make([](const T& t) { return static_cast<double>(t.refused_pulls); })},
      {"sift_ps_refused_absent_pushes_total",
       "Pushes refused whole for naming a row this shard does not hold, per table.",
       CallbackCollectable::Type::kCounter,
       make([](const T& t) { return static_cast<double>(t.refused_absent_pushes); })},
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
  SIFT_RETURN_IF_ERROR(ValidateGrpcServerLimits(options.limits));
  if (options.limits.max_threads != 0) {
    return absl::InvalidArgumentError(
        "embedding server: --max-threads applies to sync servers only (requests run on "
        "--threads)");
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
  impl->refusals = std::make_unique<RefusalRecorder>(
      *impl->registry, absl::StrCat("sift embedding-server shard ", options.shard.shard));
  impl->bound_refusals = std::make_unique<RefusalRecorder>(
      *impl->registry, absl::StrCat("sift embedding-server shard ", options.shard.shard),
      "sift_ps_refused_requests_total",
      "Pulls and pushes refused whole (INVALID_ARGUMENT / RESOURCE_EXHAUSTED): a table bound (the "
      "memory budget, a capacity), a row this shard does not hold, a bad gradient.");
  if (options.metrics_port >= 0) {
    SIFT_ASSIGN_OR_RETURN(
        impl->exposer,
        MetricsExposer::Start(absl::StrCat(options.bind_address, ":", options.metrics_port),
                              impl->registry));
    SIFT_RETURN_IF_ERROR(AddShardCollectables(impl->shard.get(), impl->exposer.get()));
  }

  WatchedGrpcServerOptions g;
  g.name = "sift embedding-server";
  g.bind_address = options.bind_address;
  g.port = options.port;
  g.health_service = kServiceName;
  g.max_message_bytes = static_cast<int>(options.shard.max_message_bytes);
  g.limits = options.limits;
  g.security = options.security;
  EmbeddingShard* shard = impl->shard.get();
  GrpcServerMetrics* metrics = impl->grpc_metrics.get();
  RefusalRecorder* refusals = impl->refusals.get();
  RefusalRecorder* bound_refusals = impl->bound_refusals.get();
  if (options.managed) impl->grants = std::make_unique<GrantHolder>();
  const GrantHolder* grants = impl->grants.get();
  const int threads = options.shard.threads;
  const bool secured = options.security.tls();
  auto grpc = WatchedGrpcServer::Start(g, OneService([=] {
                                         return std::make_unique<EmbeddingService>(
                                             shard, threads, metrics, secured, refusals,
                                             bound_refusals, grants);
                                       }));
  if (!grpc.ok()) return grpc.status();
  impl->grpc = std::move(*grpc);
  return std::unique_ptr<EmbeddingServer>(new EmbeddingServer(std::move(impl)));
}

void EmbeddingServer::Shutdown(double grace_s) { impl_->grpc->Shutdown(grace_s); }

}  // namespace sift::embedding
