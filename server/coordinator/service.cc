#include "server/coordinator/service.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_listener_watchdog.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/metrics.h"
#include "proto/coordinator.grpc.pb.h"

namespace sift::coordinator {
namespace {

constexpr char kServiceName[] = "sift.coordinator.v1.CoordinatorService";

// Method indices of the metrics, in the order of kMethodNames.
enum Method {
  kSubmitJob,
  kGetJob,
  kListJobs,
  kCancelJob,
  kGetLogs,
  kRegister,
  kHeartbeat,
  kKvSet,
  kKvGet,
  kReportProgress,
  kReportEval,
  kCheckpointBegin,
  kCheckpointCommit,
  kReportFailure,
};
// What each method needs of its caller (security on), in the order of Method.
const CallerNeeds kMethodNeeds[] = {
    CallerNeeds::kOperator, CallerNeeds::kReadJob, CallerNeeds::kReader,  // Submit, Get, List
    CallerNeeds::kOperator, CallerNeeds::kReader,                         // Cancel, GetLogs
    CallerNeeds::kMember,   CallerNeeds::kMember,                         // Register, Heartbeat
    CallerNeeds::kWorker,   CallerNeeds::kWorker,                         // KvSet, KvGet
    CallerNeeds::kWorker,   CallerNeeds::kWorker,  // ReportProgress, ReportEval
    CallerNeeds::kWorker,   CallerNeeds::kWorker,  // CheckpointBegin, CheckpointCommit
    CallerNeeds::kWorker,                          // ReportFailure
};
const std::vector<std::string> kMethodNames = {
    "SubmitJob",        "GetJob",       "ListJobs",
    "CancelJob",        "GetLogs",      "Register",
    "Heartbeat",        "KvSet",        "KvGet",
    "ReportProgress",   "ReportEval",   "CheckpointBegin",
    "CheckpointCommit", "ReportFailure"};

// The generated sync service; every handler is one Coordinator call plus the gRPC metrics.
class CoordinatorService final : public pb::CoordinatorService::Service {
 public:
  CoordinatorService(Coordinator* coordinator, GrpcServerMetrics* metrics, bool secured,
                     const TokenStore* tokens, RefusalRecorder* refusals)
      : c_(coordinator),
        metrics_(metrics),
        secured_(secured),
        tokens_(tokens),
        refusals_(refusals) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const pb::SubmitJobRequest* q,
                         pb::SubmitJobResponse* r) override {
    return Handle(
        kSubmitJob, ctx, [&](const Principal& who) { return c_->SubmitJob(*q, who); }, r);
  }
  grpc::Status GetJob(grpc::ServerContext* ctx, const pb::GetJobRequest* q,
                      pb::JobInfo* r) override {
    return Handle(
        kGetJob, ctx, [&](const Principal& who) { return c_->GetJob(*q, who); }, r);
  }
  grpc::Status ListJobs(grpc::ServerContext* ctx, const pb::ListJobsRequest* q,
                        pb::ListJobsResponse* r) override {
    return Handle(
        kListJobs, ctx, [&](const Principal& who) { return c_->ListJobs(*q, who); }, r);
  }
  grpc::Status CancelJob(grpc::ServerContext* ctx, const pb::CancelJobRequest* q,
                         pb::JobInfo* r) override {
    return Handle(
        kCancelJob, ctx, [&](const Principal& who) { return c_->CancelJob(*q, who); }, r);
  }
  grpc::Status GetLogs(grpc::ServerContext* ctx, const pb::GetLogsRequest* q,
                       pb::GetLogsResponse* r) override {
    return Handle(
        kGetLogs, ctx, [&](const Principal& who) { return c_->GetLogs(*q, who); }, r);
  }
  grpc::Status Register(grpc::ServerContext* ctx, const pb::RegisterRequest* q,
                        pb::RegisterResponse* r) override {
    return Handle(
        kRegister, ctx, [&](const Principal& who) { return c_->Register(*q, who); }, r);
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const pb::HeartbeatRequest* q,
                         pb::HeartbeatResponse* r) override {
    return Handle(
        kHeartbeat, ctx, [&](const Principal& who) { return c_->Heartbeat(*q, who); }, r);
  }
  grpc::Status KvSet(grpc::ServerContext* ctx, const pb::KvSetRequest* q,
                     pb::KvSetResponse* r) override {
    return Handle(
        kKvSet, ctx, [&](const Principal& who) { return c_->KvSet(*q, who); }, r);
  }
  grpc::Status KvGet(grpc::ServerContext* ctx, const pb::KvGetRequest* q,
                     pb::KvGetResponse* r) override {
    return Handle(
        kKvGet, ctx, [&](const Principal& who) { return c_->KvGet(*q, who); }, r);
  }
  grpc::Status ReportProgress(grpc::ServerContext* ctx, const pb::ReportProgressRequest* q,
                              pb::ReportProgressResponse* r) override {
    return Handle(
        kReportProgress, ctx, [&](const Principal& who) { return c_->ReportProgress(*q, who); }, r);
  }
  grpc::Status ReportEval(grpc::ServerContext* ctx, const pb::ReportEvalRequest* q,
                          pb::ReportEvalResponse* r) override {
    return Handle(
        kReportEval, ctx, [&](const Principal& who) { return c_->ReportEval(*q, who); }, r);
  }
  grpc::Status CheckpointBegin(grpc::ServerContext* ctx, const pb::CheckpointBeginRequest* q,
                               pb::CheckpointBeginResponse* r) override {
    return Handle(
        kCheckpointBegin, ctx, [&](const Principal& who) { return c_->CheckpointBegin(*q, who); },
        r);
  }
  grpc::Status CheckpointCommit(grpc::ServerContext* ctx, const pb::CheckpointCommitRequest* q,
                                pb::CheckpointCommitResponse* r) override {
    return Handle(
        kCheckpointCommit, ctx, [&](const Principal& who) { return c_->CheckpointCommit(*q, who); },
        r);
  }
  grpc::Status ReportFailure(grpc::ServerContext* ctx, const pb::ReportFailureRequest* q,
                             pb::ReportFailureResponse* r) override {
    return Handle(
        kReportFailure, ctx, [&](const Principal& who) { return c_->ReportFailure(*q, who); }, r);
  }

 private:
  // The caller's credentials are checked against what the method needs, then the coordinator
  // answers (with its own checks of owners and member identities); refusals are recorded.
  template <typename Fn, typename Resp>
  grpc::Status Handle(Method method, grpc::ServerContext* ctx, Fn fn, Resp* response) {
    metrics_->Started(method);
    const auto start = std::chrono::steady_clock::now();
    grpc::Status result;
    try {
      const Principal who = IdentifyCaller(*ctx, secured_, tokens_);
      Status allowed = CheckCaller(who, kMethodNeeds[method], kMethodNames[method]);
      if (allowed.ok()) {
        auto answer = fn(who);
        if (answer.ok()) {
          *response = std::move(answer).value();
        } else {
          allowed = answer.status();
        }
      }
      if (!allowed.ok()) {
        if (IsAuthRefusal(allowed)) refusals_->Record(kMethodNames[method], who, allowed, *ctx);
        result = ToGrpc(allowed);
      }
    } catch (const std::exception& e) {
      // Nothing in the coordinator throws on purpose; a library that does must not take it down.
      result = grpc::Status(grpc::StatusCode::INTERNAL,
                            absl::StrCat(kMethodNames[method], ": ", e.what()));
    }
    metrics_->Handled(
        method, static_cast<int>(result.error_code()),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return result;
  }

  Coordinator* c_;
  GrpcServerMetrics* metrics_;
  const bool secured_;
  const TokenStore* tokens_;  // null: no users' tokens (user calls are refused)
  RefusalRecorder* refusals_;
};

// The job-level and membership series, computed from the coordinator at scrape time.
Status AddJobCollectables(Coordinator* c, MetricsExposer* exposer) {
  using Samples = std::vector<CallbackCollectable::Sample>;
  using View = JobMetricsView;
  auto per_job = [c](std::function<bool(const View&, double*)> pick) {
    return [c, pick]() {
      Samples out;
      for (const View& v : c->JobMetrics()) {
        double value = 0;
        if (pick(v, &value)) out.push_back({{{"job_id", v.job_id}}, value});
      }
      return out;
    };
  };
  auto always = [](auto get) {
    return [get](const View& v, double* out) {
      *out = static_cast<double>(get(v));
      return true;
    };
  };
  struct Spec {
    const char* name;
    const char* help;
    CallbackCollectable::Type type;
    CallbackCollectable::Callback fn;
  };
  using T = CallbackCollectable::Type;
  const std::vector<Spec> specs = {
      {"sift_job_samples_total", "Samples trained by the job, all generations.", T::kCounter,
       per_job(always([](const View& v) { return v.samples_total; }))},
      {"sift_job_steps_total", "Training steps reported by the job, all generations.", T::kCounter,
       per_job(always([](const View& v) { return v.steps_total; }))},
      {"sift_job_recoveries_total", "Recoveries of the job (lost members, failures).", T::kCounter,
       per_job(always([](const View& v) { return v.recoveries; }))},
      {"sift_job_epoch", "The job's 0-based epoch in progress (or last one).", T::kGauge,
       per_job(always([](const View& v) { return v.epoch; }))},
      {"sift_job_generation", "The job's current generation (a new one per (re)start).", T::kGauge,
       per_job(always([](const View& v) { return v.generation; }))},
      {"sift_job_train_loss", "Total loss of the job's last training step.", T::kGauge,
       per_job(always([](const View& v) { return v.last_loss; }))},
      {"sift_job_test_auc", "Test AUC of the job's latest evaluated epoch.", T::kGauge,
       per_job([](const View& v, double* out) {
         *out = v.test_auc;
         return v.has_test_auc;
       })},
      {"sift_job_state", "1 for the job's current state, 0 for the others.", T::kGauge,
       [c] {
         Samples out;
         for (const View& v : c->JobMetrics()) {
           for (int s = pb::PENDING; s <= pb::CANCELLED; ++s) {
             out.push_back({{{"job_id", v.job_id},
                             {"state", pb::JobState_Name(static_cast<pb::JobState>(s))}},
                            v.state == s ? 1.0 : 0.0});
           }
         }
         return out;
       }},
      {"sift_coordinator_members", "Alive (registered, lease not expired) members by member_role.",
       T::kGauge,
       [c] {
         Samples out;
         for (const auto& [role, n] : c->AliveMembers()) {
           out.push_back({{{"member_role", role}}, static_cast<double>(n)});
         }
         return out;
       }},
  };
  for (const Spec& spec : specs) {
    SIFT_ASSIGN_OR_RETURN(auto collectable,
                          CallbackCollectable::Create(spec.name, spec.help, spec.type, spec.fn));
    SIFT_RETURN_IF_ERROR(exposer->AddCollectable(std::move(collectable)));
  }
  return absl::OkStatus();
}

// A changed tokens file (or SIGHUP) takes effect here; a bad one keeps the old tokens.
void ReloadTokens(TokenStore* tokens) {
  StatusOr<bool> reloaded = tokens->MaybeReload();
  if (!reloaded.ok()) {
    std::fprintf(stderr, "sift coordinator: %s\n",
                 std::string(reloaded.status().message()).c_str());
  } else if (*reloaded) {
    std::fprintf(stderr, "sift coordinator: reloaded %zu tokens from %s\n", tokens->size(),
                 tokens->path().c_str());
  }
}

}  // namespace

class CoordinatorServer::Impl {
 public:
  // Declaration order = reverse destruction order: the server goes first, the coordinator last.
  std::unique_ptr<Coordinator> coordinator;
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<GrpcServerMetrics> grpc_metrics;
  std::unique_ptr<RefusalRecorder> refusals;
  std::unique_ptr<TokenStore> tokens;  // null without --tokens-file
  std::unique_ptr<MetricsExposer> exposer;
  // The gRPC server under the listener watchdog (common/grpc_listener_watchdog.h): rebuilt on
  // its port when it stops accepting; the jobs live on in the coordinator.
  std::unique_ptr<WatchedGrpcServer> grpc;

  // The scheduler thread.
  std::mutex tick_mu;
  std::condition_variable tick_cv;
  bool stop_ticking = false;  // guarded by tick_mu
  std::thread ticker;

  std::mutex shutdown_mu;
  bool shut_down = false;  // guarded by shutdown_mu
};

CoordinatorServer::CoordinatorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CoordinatorServer::~CoordinatorServer() {
  Shutdown();
  impl_->grpc.reset();
}

int CoordinatorServer::port() const { return impl_->grpc->port(); }
int CoordinatorServer::metrics_port() const { return impl_->exposer ? impl_->exposer->port() : -1; }
Coordinator& CoordinatorServer::coordinator() { return *impl_->coordinator; }

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port ", options.port, " not in [0, 65535]"));
  }
  if (options.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-port ", options.metrics_port, " not in [0, 65535]"));
  }
  if (options.tick <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the scheduler tick must be > 0");
  }
  SIFT_RETURN_IF_ERROR(ValidateGrpcServerLimits(options.limits));
  auto impl = std::make_unique<Impl>();
  SIFT_ASSIGN_OR_RETURN(impl->coordinator, Coordinator::Open(options.coordinator));
  impl->registry = std::make_shared<prometheus::Registry>();
  AddBuildInfo(*impl->registry, options.version);
  impl->grpc_metrics =
      std::make_unique<GrpcServerMetrics>(*impl->registry, kServiceName, kMethodNames);
  impl->refusals = std::make_unique<RefusalRecorder>(*impl->registry, "sift coordinator");
  if (!options.security.tokens_file.empty()) {
    if (!options.security.tls()) {
      return absl::InvalidArgumentError(
          "--tokens-file needs TLS (--tls-dir): bearer tokens would travel in clear");
    }
    SIFT_ASSIGN_OR_RETURN(impl->tokens, TokenStore::Open(options.security.tokens_file));
  }
  if (options.metrics_port >= 0) {
    SIFT_ASSIGN_OR_RETURN(
        impl->exposer,
        MetricsExposer::Start(absl::StrCat(options.bind_address, ":", options.metrics_port),
                              impl->registry));
    SIFT_RETURN_IF_ERROR(AddJobCollectables(impl->coordinator.get(), impl->exposer.get()));
  }
  WatchedGrpcServerOptions g;
  g.name = "sift coordinator";
  g.bind_address = options.bind_address;
  g.port = options.port;
  g.health_service = kServiceName;
  g.max_message_bytes = 256 << 20;  // evaluation predictions arrive in chunks; allow generous ones
  g.limits = options.limits;
  g.security = options.security;
  Coordinator* c = impl->coordinator.get();
  GrpcServerMetrics* metrics = impl->grpc_metrics.get();
  const bool secured = options.security.tls();
  const TokenStore* tokens = impl->tokens.get();
  RefusalRecorder* refusals = impl->refusals.get();
  auto grpc = WatchedGrpcServer::Start(g, OneService([c, metrics, secured, tokens, refusals] {
                                         return std::make_unique<CoordinatorService>(
                                             c, metrics, secured, tokens, refusals);
                                       }));
  if (!grpc.ok()) return grpc.status();
  impl->grpc = std::move(*grpc);

  Impl* raw = impl.get();
  const auto tick = absl::ToChronoMilliseconds(options.tick);
  impl->ticker = std::thread([raw, tick] {
    std::unique_lock<std::mutex> lock(raw->tick_mu);
    while (!raw->tick_cv.wait_for(lock, tick, [raw] { return raw->stop_ticking; })) {
      lock.unlock();
      raw->coordinator->Tick();
      if (raw->tokens != nullptr) ReloadTokens(raw->tokens.get());
      lock.lock();
    }
  });
  return std::unique_ptr<CoordinatorServer>(new CoordinatorServer(std::move(impl)));
}

void CoordinatorServer::Shutdown(double grace_s) {
  {
    std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->tick_mu);
    impl_->stop_ticking = true;
  }
  impl_->tick_cv.notify_all();
  if (impl_->ticker.joinable()) impl_->ticker.join();
  // KvGet waiters return at once once the services are NOT_SERVING.
  impl_->grpc->Shutdown(grace_s, [this] { impl_->coordinator->Shutdown(); });
}

}  // namespace sift::coordinator
