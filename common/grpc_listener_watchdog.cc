#include "common/grpc_listener_watchdog.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/grpc_server_util.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace sift {

Status ValidateGrpcServerLimits(const GrpcServerLimits& limits) {
  if (limits.max_concurrent_streams < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-concurrent-streams ", limits.max_concurrent_streams, " must be >= 0"));
  }
  if (limits.max_connection_idle_ms < 0 || limits.max_connection_idle_ms > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-connection-idle-ms ", limits.max_connection_idle_ms, " not in [0, ", INT_MAX, "]"));
  }
  if (limits.handshake_timeout_ms <= 0 || limits.handshake_timeout_ms > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--handshake-timeout-ms ", limits.handshake_timeout_ms, " not in [1, ", INT_MAX, "]"));
  }
  if (limits.max_threads < 0 || (limits.max_threads > 0 && limits.max_threads < 2)) {
    // One thread is the poller: a quota of 1 would answer every call RESOURCE_EXHAUSTED.
    return absl::InvalidArgumentError(
        absl::StrCat("--max-threads ", limits.max_threads, " must be 0 (unlimited) or >= 2"));
  }
  return absl::OkStatus();
}

void ApplyGrpcServerLimits(const GrpcServerLimits& limits, grpc::ServerBuilder* builder) {
  if (limits.max_concurrent_streams > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  }
  if (limits.max_connection_idle_ms > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                                static_cast<int>(limits.max_connection_idle_ms));
  }
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                              static_cast<int>(limits.handshake_timeout_ms));
  if (limits.max_threads > 0) {
    // The builder keeps its own reference to the quota.
    grpc::ResourceQuota quota("sift-server-threads");
    quota.SetMaxThreads(limits.max_threads);
    builder->SetResourceQuota(quota);
  }
}

namespace {

// Why `bind_address:port` cannot be listened on, from a bind of our own (gRPC's error is a
// nested dump): "port P is in use ..." or the system's reason.
std::string DescribeListenFailure(const std::string& bind_address, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addrs = nullptr;
  if (::getaddrinfo(bind_address.c_str(), std::to_string(port).c_str(), &hints, &addrs) != 0) {
    return absl::StrCat("cannot resolve --bind ", bind_address);
  }
  int error = 0;
  for (addrinfo* a = addrs; a != nullptr && error == 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0) error = errno;
    ::close(fd);
  }
  ::freeaddrinfo(addrs);
  if (error == EADDRINUSE) {
    return absl::StrCat("port ", port,
                        " is in use by another process: choose another --port, or --port 0 for "
                        "any free one");
  }
  if (error == EADDRNOTAVAIL) {
    return absl::StrCat(bind_address, " is not an address of this machine (--bind)");
  }
  if (error != 0) return std::strerror(error);
  return "port in use?";
}

}  // namespace

WatchedGrpcServer::WatchedGrpcServer(const WatchedGrpcServerOptions& options,
                                     RegisterServices register_services)
    : options_(options), register_services_(std::move(register_services)) {}

StatusOr<std::unique_ptr<WatchedGrpcServer>> WatchedGrpcServer::Start(
    const WatchedGrpcServerOptions& options, RegisterServices register_services) {
  SIFT_RETURN_IF_ERROR(ValidateGrpcServerLimits(options.limits));
  std::unique_ptr<WatchedGrpcServer> s(
      new WatchedGrpcServer(options, std::move(register_services)));
  SIFT_ASSIGN_OR_RETURN(s->credentials_, MakeServerCredentials(options.security));
  {
    std::lock_guard<std::mutex> lock(s->mu_);
    if (!s->Build(options.port, &s->port_)) {
      return absl::UnavailableError(
          absl::StrCat(options.name, ": cannot listen on ", options.bind_address, ":", options.port,
                       ": ", DescribeListenFailure(options.bind_address, options.port)));
    }
  }
  WatchedGrpcServer* raw = s.get();
  s->watchdog_ = std::thread([raw] { raw->WatchdogLoop(); });
  return s;
}

WatchedGrpcServer::~WatchedGrpcServer() {
  Shutdown(0);
  // gRPC's rule: the server goes before the services registered with it.
  server_.reset();
  services_.clear();
}

int64_t WatchedGrpcServer::listener_restarts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return restarts_;
}

bool WatchedGrpcServer::Build(int port, int* bound) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  AddNonEmptyStatusInterceptor(&builder);
  // A rebuild reads the TLS files again (a renewed certificate takes effect); if they became
  // unreadable it keeps the credentials it had.
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      MakeServerCredentials(options_.security);
  if (creds.ok()) credentials_ = *creds;
  builder.AddListeningPort(absl::StrCat(options_.bind_address, ":", port), credentials_, bound);
  // A second server on the same port must fail, not share it (gRPC sets SO_REUSEPORT by default,
  // which would split clients between two copies of a server).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  // Let clients keep idle connections alive with pings every 10 s or more (ops-notes 4.3).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  ApplyGrpcServerLimits(options_.limits, &builder);
  for (auto& service : register_services_(&builder)) services_.push_back(std::move(service));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound == 0) return false;
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(options_.health_service, true);
  health->SetServingStatus("", true);
  server_ = std::move(server);
  return true;
}

bool WatchedGrpcServer::Probe() const {
  // A channel of its own (a local subchannel pool): a new TCP connection, as a new client makes.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const std::string host = options_.bind_address == "0.0.0.0" ? "127.0.0.1" : options_.bind_address;
  // With TLS on, the probe handshakes without verifying the server (it asks whether the listener
  // answers, not who it is) and presents no certificate: health is open to every client.
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (options_.security.tls()) {
    grpc::experimental::TlsChannelCredentialsOptions tls;
    tls.set_verify_server_certs(false);
    tls.set_check_call_host(false);
    tls.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
    creds = grpc::experimental::TlsCredentials(tls);
  }
  auto channel = grpc::CreateCustomChannel(absl::StrCat(host, ":", port_), creds, args);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kProbeDeadline);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::StatusCode code = stub->Check(&ctx, request, &response).error_code();
  // Any answer came through an accepted connection; only "no answer" means the listener is gone.
  return code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED;
}

Status WatchedGrpcServer::Rebuild() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return absl::OkStatus();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
  }
  int bound = 0;
  if (!Build(port_, &bound)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on port ", port_, " again yet"));
  }
  ++restarts_;
  return absl::OkStatus();
}

void WatchedGrpcServer::WatchdogLoop() {
  int failures = 0;
  std::unique_lock<std::mutex> lock(watchdog_mu_);
  while (!watchdog_cv_.wait_for(lock, kProbeInterval, [this] { return watchdog_stop_; })) {
    lock.unlock();
    failures = Probe() ? 0 : failures + 1;
    if (failures >= kProbeFailures) {
      std::fprintf(stderr,
                   "%s: port %d has not answered %d health probes in a row (out of file "
                   "descriptors?); restarting the listener\n",
                   options_.name.c_str(), port_, failures);
      const Status s = Rebuild();
      if (s.ok()) {
        std::fprintf(stderr, "%s: listening on port %d again\n", options_.name.c_str(), port_);
      } else {
        std::fprintf(stderr, "%s: %s\n", options_.name.c_str(), s.ToString().c_str());
      }
      failures = 0;
    }
    lock.lock();
  }
}

void WatchedGrpcServer::Shutdown(double grace_s, const std::function<void()>& after_not_serving) {
  std::lock_guard<std::mutex> once(shutdown_mu_);  // later callers wait, then return
  {
    std::lock_guard<std::mutex> lock(watchdog_mu_);
    if (watchdog_stop_) return;
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health != nullptr) health->Shutdown();  // every service NOT_SERVING, frozen
  if (after_not_serving) after_not_serving();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
}

}  // namespace sift
