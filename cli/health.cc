// sift health: asks a sift gRPC server for its grpc.health.v1 status — the exec probe for
// orchestrators whose kubelet has no native gRPC probe (docs/ops-notes.md 4.5). Exit 0 when the
// service is SERVING; 1 otherwise (NOT_SERVING, unknown service, unreachable before the timeout).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/security_flags.h"
#include "common/grpc_security.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace sift::cli {
namespace {

struct HealthFlags {
  std::string server;
  std::string service;
  double timeout_s = 5;
  bool wait = false;
  SecurityOptions security;
};

Status RunHealth(const HealthFlags& f) {
  SIFT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds,
                        MakeChannelCredentials(f.security));
  grpc::ChannelArguments args;
  ApplyChannelSecurity(f.security, &args);
  auto channel = grpc::CreateCustomChannel(f.server, creds, args);
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(static_cast<int64_t>(f.timeout_s * 1e6)));
  ctx.set_wait_for_ready(f.wait);  // --wait: keep trying until the server is up
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(f.service);
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status st = health->Check(&ctx, req, &resp);
  const std::string what = absl::StrCat(f.server, " service '", f.service, "'");
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat(what, ": ", st.error_message(), " (gRPC code ",
                                               static_cast<int>(st.error_code()), ")"));
  }
  const std::string status =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
  std::printf("%s: %s\n", what.c_str(), status.c_str());
  if (resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(what, " is ", status));
  }
  return absl::OkStatus();
}

}  // namespace

void AddHealth(CLI::App* app, Action* action) {
  auto flags = std::make_shared<HealthFlags>();
  CLI::App* cmd = app->add_subcommand(
      "health", "Check a sift server's gRPC health (exit 0 when SERVING): for probes and scripts");
  cmd->add_option("server", flags->server, "host:port")->required();
  cmd->add_option("--service", flags->service,
                  "Service name (\"\" = the whole server; sift.embedding.v1.EmbeddingService)");
  AddSecurityFlags(cmd, &flags->security, SecurityFlagsFor::kClient);
  cmd->add_option("--timeout", flags->timeout_s, "Seconds to wait for the answer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--wait", flags->wait,
                "Wait (up to --timeout) for a server that is not reachable yet");
  cmd->callback([flags, action] { *action = [flags] { return RunHealth(*flags); }; });
}

}  // namespace sift::cli
