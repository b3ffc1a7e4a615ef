// Security of sift's gRPC endpoints: who a caller is (Principal), what each kind of caller may do,
// and the files that configure it (SecurityOptions). No gRPC here: common/grpc_security.h turns
// the options into credentials and a call into a Principal.
//
// Identities.
//   Members (coordinator, embedding servers, workers) present a client certificate signed by the
//   cluster CA (mutual TLS). Its Subject CN is the member's identity, bound to role and index:
//     "server-<i>"   embedding server of shard i (may register only as shard i)
//     "worker-<i>"   worker i (one live registration at a time)
//     "worker"       a worker of any index (no slot: for launchers that cannot give each worker a
//                    certificate of its own)
//     "coordinator"  the coordinator's server certificate (calls nothing itself)
//   Users (the CLI, dashboards, scripts) send a bearer token (`authorization: Bearer <token>`)
//   listed in the coordinator's tokens file with a user name and a role:
//     reader    GetJob, ListJobs, GetLogs of every job
//     operator  SubmitJob; GetJob, ListJobs, GetLogs, CancelJob of the jobs it owns
//     admin     every job call on every job
//   A job records the user that submitted it as its owner.
// Security is on when SecurityOptions::tls_dir is set; off (plaintext, no checks) otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/status.h"

namespace sift {

// The files of a process's security, with the same names everywhere: flag --tls-dir /
// environment SIFT_TLS_DIR / job spec security.tls_dir, and so on.
struct SecurityOptions {
  // ca.crt (the cluster CA, PEM), tls.crt + tls.key (this process's certificate and key; a CLI
  // client needs only ca.crt) — the layout of a cert-manager Secret and of `sift certs`.
  // "" = security off.
  std::string tls_dir;
  // Servers (the coordinator): the users' tokens, one `token,user,role` line each (# comments);
  // re-read when it changes and on SIGHUP. Not readable by others (mode 0600 or 0640).
  std::string tokens_file;
  // Clients: the file holding this client's bearer token (its first line).
  std::string token_file;
  // Clients, tests: the name the server's certificate must carry ("" = the host dialled).
  std::string server_name_override;
  // Clients acting inside a job (a worker's rank): the generation's credential
  // (common/job_credential.h), sent with every call; "" = none. Not a file: the coordinator
  // hands it out per generation.
  std::string job_credential;

  bool tls() const { return !tls_dir.empty(); }
};

enum class UserRole { kNone = 0, kReader = 1, kOperator = 2, kAdmin = 3 };
const char* UserRoleName(UserRole role);  // "reader", "operator", "admin", "none"
// "reader" / "operator" / "admin" -> the role; anything else INVALID_ARGUMENT.
StatusOr<UserRole> ParseUserRole(absl::string_view name);

// A member certificate's identity, parsed from its CN (see the header comment).
struct MemberName {
  enum Kind { kWorker, kServer, kCoordinator } kind = kWorker;
  int64_t index = -1;  // -1: "worker" (any index); else the index in the name
};
// INVALID_ARGUMENT for a CN that is none of the member forms.
StatusOr<MemberName> ParseMemberName(absl::string_view common_name);

// Who made a call, as the server saw it.
struct Principal {
  bool checked = false;  // the server runs with security on: the checks below apply
  std::string member;    // CN of a verified member certificate ("" = none presented)
  std::string user;      // the token's user ("" = no valid token)
  UserRole role = UserRole::kNone;
  std::string token_problem;  // why no user: "no bearer token" / "an unknown bearer token"
  std::string peer;           // "ipv4:10.0.0.5:41234"
  // The call came over the network (security on or off), not from in-process code: the job
  // credential rules (common/job_credential.h) apply to it.
  bool remote = false;
  std::string job_credential;  // the kJobCredentialHeader value presented ("" = none)

  // A principal for in-process calls and servers with security off: every check passes.
  static Principal Unchecked() { return Principal(); }
  // "user alice (operator)", "member worker-0", "an anonymous caller" (+ " from <peer>").
  std::string Describe() const;
};

// What a method needs of its caller.
enum class CallerNeeds {
  kReader,    // a user with any role
  kReadJob,   // a user with any role, or a member (a worker ending with its job reads its state)
  kOperator,  // a user with role operator or admin
  kMember,    // a member certificate (worker or server)
  kWorker,    // a worker's certificate
};

// OK when `who` may call a method needing `needs` (always when !who.checked); else
// UNAUTHENTICATED (no credentials of the kind needed) or PERMISSION_DENIED (the wrong ones),
// with a message naming the method, what it needs and what the call presented. The status
// carries the refusal mark (IsAuthRefusal).
Status CheckCaller(const Principal& who, CallerNeeds needs, absl::string_view method);

// An authentication or authorisation refusal: UNAUTHENTICATED / PERMISSION_DENIED /
// ALREADY_EXISTS (a member slot held by a live member), marked so servers count and log it apart
// from other errors of the same code (a file's EACCES).
Status AuthRefusal(absl::StatusCode code, absl::string_view message);
bool IsAuthRefusal(const Status& status);

// A token file's or key's mode is safe: no permission bits for others. FAILED_PRECONDITION
// naming the file and the chmod to run; NOT_FOUND when it does not exist.
Status CheckPrivateFile(const std::string& path, absl::string_view what);

}  // namespace sift
