#include "server/coordinator/client.h"

#include <cstdlib>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/job_credential.h"
#include "common/wire_probe.h"

namespace sift::coordinator {

StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const CoordinatorClientOptions& options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError("coordinator address is empty (--coordinator host:port)");
  }
  std::unique_ptr<CoordinatorClient> client(new CoordinatorClient(options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  // Reconnect quickly after a coordinator restart (the default backoff grows to 120 s).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Not the retry interval: gRPC's minimum time one connection attempt may take (TCP, the TLS
  // handshake, HTTP/2 settings). At 100 ms a TLS handshake on a loaded machine never finished
  // ("tcp handshaker shutdown", a worker failing to register for a minute); a refused connection
  // still fails at once and is retried after the backoff above.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000);
  SIFT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds,
                        MakeChannelCredentials(options.security));
  ApplyChannelSecurity(options.security, &args);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.address, creds, args);
  if (options.connect_timeout > absl::ZeroDuration()) {
    const auto deadline =
        std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options.connect_timeout);
    if (!channel->WaitForConnected(deadline)) {
      if (std::string hint = client->TransportHint(); !hint.empty()) {
        // Not UNAVAILABLE: waiting does not mend it.
        return absl::FailedPreconditionError(
            absl::StrCat("cannot talk to the coordinator at ", options.address, ": ", hint));
      }
      return absl::UnavailableError(absl::StrCat(
          "cannot reach the coordinator at ", options.address, " within ",
          absl::FormatDuration(options.connect_timeout),
          options.security.tls()
              ? " (is `sift coordinator` running there, with TLS, and a certificate of the "
                "cluster CA in --tls-dir naming that host?)"
              : " (is `sift coordinator` running there? A coordinator with TLS needs --tls-dir)"));
    }
  }
  client->rpc_ = pb::CoordinatorService::NewStub(channel);
  return client;
}

std::string CoordinatorClient::TransportHint() const {
  return TransportMismatchHint(options_.address, options_.security.tls());
}

template <typename Req, typename Resp, typename Fn>
Status CoordinatorClient::Call(const char* method, Fn fn, const Req& request, Resp* response,
                               absl::Duration extra) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(options_.rpc_timeout + extra));
  {
    std::lock_guard<std::mutex> lock(credential_mu_);
    if (!job_credential_.empty()) ctx.AddMetadata(kJobCredentialHeader, job_credential_);
  }
  const grpc::Status s = (rpc_.get()->*fn)(&ctx, request, response);
  return FromGrpc(s, absl::StrCat("coordinator ", options_.address, " ", method));
}

void CoordinatorClient::SetJobCredential(std::string credential) {
  std::lock_guard<std::mutex> lock(credential_mu_);
  job_credential_ = std::move(credential);
}

StatusOr<std::string> CoordinatorClient::SubmitJob(const std::string& spec_yaml,
                                                   const std::string& source_name) {
  pb::SubmitJobRequest req;
  req.set_spec_yaml(spec_yaml);
  req.set_source_name(source_name);
  pb::SubmitJobResponse resp;
  SIFT_RETURN_IF_ERROR(Call("SubmitJob", &pb::CoordinatorService::Stub::SubmitJob, req, &resp));
  return resp.job_id();
}

StatusOr<pb::JobInfo> CoordinatorClient::GetJob(const std::string& job_id) {
  pb::GetJobRequest req;
  req.set_job_id(job_id);
  pb::JobInfo resp;
  SIFT_RETURN_IF_ERROR(Call("GetJob", &pb::CoordinatorService::Stub::GetJob, req, &resp));
  return resp;
}

StatusOr<std::vector<pb::JobInfo>> CoordinatorClient::ListJobs() {
  pb::ListJobsRequest req;
  pb::ListJobsResponse resp;
  SIFT_RETURN_IF_ERROR(Call("ListJobs", &pb::CoordinatorService::Stub::ListJobs, req, &resp));
  return std::vector<pb::JobInfo>(resp.jobs().begin(), resp.jobs().end());
}

StatusOr<pb::JobInfo> CoordinatorClient::CancelJob(const std::string& job_id) {
  pb::CancelJobRequest req;
  req.set_job_id(job_id);
  pb::JobInfo resp;
  SIFT_RETURN_IF_ERROR(Call("CancelJob", &pb::CoordinatorService::Stub::CancelJob, req, &resp));
  return resp;
}

StatusOr<pb::GetLogsResponse> CoordinatorClient::GetLogs(const std::string& job_id,
                                                         int64_t offset) {
  pb::GetLogsRequest req;
  req.set_job_id(job_id);
  req.set_offset(offset);
  pb::GetLogsResponse resp;
  SIFT_RETURN_IF_ERROR(Call("GetLogs", &pb::CoordinatorService::Stub::GetLogs, req, &resp));
  return resp;
}

StatusOr<pb::RegisterResponse> CoordinatorClient::Register(const pb::RegisterRequest& request) {
  pb::RegisterResponse resp;
  SIFT_RETURN_IF_ERROR(Call("Register", &pb::CoordinatorService::Stub::Register, request, &resp));
  return resp;
}

StatusOr<pb::HeartbeatResponse> CoordinatorClient::Heartbeat(const pb::HeartbeatRequest& request) {
  pb::HeartbeatResponse resp;
  SIFT_RETURN_IF_ERROR(Call("Heartbeat", &pb::CoordinatorService::Stub::Heartbeat, request, &resp));
  return resp;
}

Status CoordinatorClient::KvSet(const std::string& key, const std::string& value) {
  pb::KvSetRequest req;
  req.set_key(key);
  req.set_value(value);
  pb::KvSetResponse resp;
  return Call("KvSet", &pb::CoordinatorService::Stub::KvSet, req, &resp);
}

StatusOr<std::vector<std::string>> CoordinatorClient::KvGet(const std::vector<std::string>& keys,
                                                            absl::Duration timeout) {
  constexpr absl::Duration kServerCap = absl::Seconds(10);
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  pb::KvGetRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration wait = std::max(absl::ZeroDuration(), std::min(left, kServerCap));
    req.set_timeout_ms(absl::ToInt64Milliseconds(wait));
    pb::KvGetResponse resp;
    Status s = Call("KvGet", &pb::CoordinatorService::Stub::KvGet, req, &resp, wait);
    if (s.ok()) {
      if (resp.values_size() != static_cast<int>(keys.size())) {
        return absl::InternalError(absl::StrCat("coordinator ", options_.address,
                                                " KvGet: ", resp.values_size(), " values for ",
                                                keys.size(), " keys"));
      }
      return std::vector<std::string>(resp.values().begin(), resp.values().end());
    }
    if (!absl::IsDeadlineExceeded(s) || absl::Now() >= deadline) return s;
  }
}

Status CoordinatorClient::ReportProgress(const pb::ReportProgressRequest& request) {
  pb::ReportProgressResponse resp;
  return Call("ReportProgress", &pb::CoordinatorService::Stub::ReportProgress, request, &resp);
}

Status CoordinatorClient::ReportEval(const pb::ReportEvalRequest& request) {
  pb::ReportEvalResponse resp;
  return Call("ReportEval", &pb::CoordinatorService::Stub::ReportEval, request, &resp);
}

Status CoordinatorClient::CheckpointBegin(const pb::CheckpointBeginRequest& request) {
  pb::CheckpointBeginResponse resp;
  return Call("CheckpointBegin", &pb::CoordinatorService::Stub::CheckpointBegin, request, &resp);
}

Status CoordinatorClient::CheckpointCommit(const pb::CheckpointCommitRequest& request) {
  pb::CheckpointCommitResponse resp;
  return Call("CheckpointCommit", &pb::CoordinatorService::Stub::CheckpointCommit, request, &resp);
}

Status CoordinatorClient::ReportFailure(const pb::ReportFailureRequest& request) {
  pb::ReportFailureResponse resp;
  return Call("ReportFailure", &pb::CoordinatorService::Stub::ReportFailure, request, &resp);
}

std::string ResolveCoordinatorAddress(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  const char* env = std::getenv("SIFT_COORDINATOR");
  if (env != nullptr && *env != '\0') return env;
  return absl::StrCat("127.0.0.1:", kDefaultCoordinatorPort);
}

std::string JobStateName(pb::JobState state) { return pb::JobState_Name(state); }

bool IsFinished(pb::JobState state) {
  return state == pb::COMPLETED || state == pb::FAILED || state == pb::CANCELLED;
}

}  // namespace sift::coordinator
