// Job credentials: what makes a process a member of one generation of one job.
//
// The coordinator draws a secret when it starts and issues, for each generation it starts, the
// credential "<job_id>/g<generation>/<64 hex digits>" (the hex is HMAC-SHA256 of
// "<job_id>/g<generation>" under the secret). It hands it to the generation's ranks (in their
// Assignment) and to the job's embedding servers (in theirs), nobody else. The ranks send it in
// the kJobCredentialHeader metadata of every call to a server and of their KV and fenced calls to
// the coordinator; the servers compare it with the one they were given, the coordinator verifies
// it. An idle worker, a member of another job or of an ended generation has no valid credential
// for the job and generation it would act on. docs/security.md lists, per RPC, who may call it.
//
// Credentials are secrets: never logged (ParseJobCredential's claim — job and generation — is what
// messages name). They travel in clear when TLS is off, as everything else does then.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/status.h"

namespace sift {

// The gRPC metadata key (lower case, as gRPC requires) a job credential travels in.
inline constexpr char kJobCredentialHeader[] = "x-sift-job-credential";

// The job and generation a credential names (not proof that it is genuine).
struct JobCredentialClaim {
  std::string job_id;
  int64_t generation = 0;
  std::string Describe() const;  // "job-3 generation 2"
};

// "<job_id>/g<generation>/<64 hex>" -> its claim. INVALID_ARGUMENT for anything else (the message
// does not quote the value: it may be a secret).
StatusOr<JobCredentialClaim> ParseJobCredential(absl::string_view credential);

// Equality that takes the same time wherever the first difference is.
bool JobCredentialEquals(absl::string_view a, absl::string_view b);

// Issues and verifies credentials under one secret. Thread-safe (immutable after Create).
class JobCredentialIssuer {
 public:
  // A fresh 32-byte secret from OpenSSL's CSPRNG; INTERNAL if it fails.
  static StatusOr<JobCredentialIssuer> Create();
  // A fixed secret (tests).
  explicit JobCredentialIssuer(std::string secret) : secret_(std::move(secret)) {}

  std::string Issue(absl::string_view job_id, int64_t generation) const;
  // The secret (to persist it: the coordinator keeps it in its state directory, mode 0600).
  const std::string& secret() const { return secret_; }
  // True when `credential` is exactly what Issue(claim) returns for its own claim; fills `claim`.
  bool Verify(absl::string_view credential, JobCredentialClaim* claim) const;

 private:
  std::string secret_;
};

}  // namespace sift
