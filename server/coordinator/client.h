// CoordinatorClient: the typed client of proto/coordinator.proto for the CLI, workers and
// embedding servers. Every call has a deadline; errors keep the gRPC code and name the
// coordinator's address and the method ("coordinator 127.0.0.1:7000 SubmitJob: NOT_FOUND: ...").
// Thread-safe (one channel, calls may run concurrently).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/security.h"
#include "common/status.h"
#include "proto/coordinator.grpc.pb.h"

namespace sift::coordinator {

namespace pb = ::sift::coordinator::v1;

struct CoordinatorClientOptions {
  std::string address;                                 // host:port
  absl::Duration connect_timeout = absl::Seconds(10);  // Connect waits this long for the channel
  absl::Duration rpc_timeout = absl::Seconds(30);      // deadline of every call (KvGet: + its wait)
  // TLS (the cluster CA; a member's certificate) and a user's bearer token (common/security.h).
  SecurityOptions security;
};

class CoordinatorClient {
 public:
  // Creates the channel and waits until it is connected. UNAVAILABLE naming the address when the
  // coordinator cannot be reached within connect_timeout (FAILED_PRECONDITION when it answers in
  // the other protocol: TLS against plaintext, TransportHint); INVALID_ARGUMENT for an empty
  // address.
  // With connect_timeout == 0 it does not wait (calls fail UNAVAILABLE until it is up). The
  // errors of MakeChannelCredentials (a missing CA, a token file readable by others).
  static StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const CoordinatorClientOptions& options);

  const std::string& address() const { return options_.address; }
  // "" unless the coordinator speaks TLS and this client plaintext or the other way round; then
  // one sentence naming the mismatch (common/wire_probe.h). Probes the address (up to 1 s).
  std::string TransportHint() const;

  // The job credential (common/job_credential.h) sent with every later call ("" = none): a
  // worker's rank sets its generation's before it acts inside the job.
  void SetJobCredential(std::string credential);

  // ---- Jobs ----
  StatusOr<std::string> SubmitJob(const std::string& spec_yaml, const std::string& source_name);
  StatusOr<pb::JobInfo> GetJob(const std::string& job_id);  // "" = the latest job
  StatusOr<std::vector<pb::JobInfo>> ListJobs();
  StatusOr<pb::JobInfo> CancelJob(const std::string& job_id);
  StatusOr<pb::GetLogsResponse> GetLogs(const std::string& job_id, int64_t offset);

  // ---- Members ----
  StatusOr<pb::RegisterResponse> Register(const pb::RegisterRequest& request);
  StatusOr<pb::HeartbeatResponse> Heartbeat(const pb::HeartbeatRequest& request);

  // ---- Rendezvous KV ----
  Status KvSet(const std::string& key, const std::string& value);
  // Every key's value, in order, once all are set; DEADLINE_EXCEEDED naming the missing keys
  // after `timeout` (InfiniteDuration waits forever). Loops over the server's 10 s wait cap.
  StatusOr<std::vector<std::string>> KvGet(const std::vector<std::string>& keys,
                                           absl::Duration timeout);

  // ---- Workers of the running job ----
  Status ReportProgress(const pb::ReportProgressRequest& request);
  Status ReportEval(const pb::ReportEvalRequest& request);
  Status CheckpointBegin(const pb::CheckpointBeginRequest& request);
  Status CheckpointCommit(const pb::CheckpointCommitRequest& request);
  Status ReportFailure(const pb::ReportFailureRequest& request);

 private:
  explicit CoordinatorClient(CoordinatorClientOptions options) : options_(std::move(options)) {}
  // Runs one unary call with the default deadline (+ `extra`), converting the status.
  template <typename Req, typename Resp, typename Fn>
  Status Call(const char* method, Fn fn, const Req& request, Resp* response,
              absl::Duration extra = absl::ZeroDuration());

  CoordinatorClientOptions options_;
  std::unique_ptr<pb::CoordinatorService::Stub> rpc_;
  mutable std::mutex credential_mu_;
  std::string job_credential_;  // guarded by credential_mu_
};

// The address from --coordinator, else $SIFT_COORDINATOR, else "127.0.0.1:7070"
// (kDefaultCoordinatorPort).
inline constexpr int kDefaultCoordinatorPort = 7070;
std::string ResolveCoordinatorAddress(const std::string& flag_value);

// "RUNNING", "COMPLETED", ... (the enum's name).
std::string JobStateName(pb::JobState state);
// COMPLETED, FAILED or CANCELLED.
bool IsFinished(pb::JobState state);

}  // namespace sift::coordinator
