// The gRPC side of common/security.h: credentials from SecurityOptions, the users' token file,
// the Principal of a call, and the record of refusals (a metric and a log line). Used by every
// sift server (coordinator, embedding server) and client (CLI, workers, servers as members).
// Link sift_grpc_security.
//
// TLS (gRPC's own SSL credentials, OpenSSL underneath):
//   servers  their tls.crt/tls.key, and they ask every client for a certificate, verified
//            against ca.crt when one is presented (REQUEST_CLIENT_CERTIFICATE_AND_VERIFY): a
//            certificate of another CA, or an expired one, fails the handshake; a plaintext client
//            cannot connect. Users come without a certificate and with a bearer token instead;
//            which calls need which is the services' decision (CheckCaller).
//   clients  verify the server against ca.crt (its certificate must name the host dialled, or
//            server_name_override), present tls.crt when the directory has one, and send the
//            bearer token of token_file on every call.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/log_window.h"
#include "common/security.h"
#include "common/status.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace sift {

// Insecure credentials when security is off. INVALID_ARGUMENT / NOT_FOUND naming the file that
// is missing or unreadable; FAILED_PRECONDITION for a key readable by others.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityOptions& options);
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const SecurityOptions& options);
// The channel arguments security needs (the server name override).
void ApplyChannelSecurity(const SecurityOptions& options, grpc::ChannelArguments* args);

// The users' tokens (SecurityOptions::tokens_file): lines `token,user,role`; blank lines and
// lines starting with '#' are skipped. Tokens are kept as SHA-256 digests and compared in
// constant time. A token must be at least kMinTokenBytes printable characters without ',' or
// spaces; users [A-Za-z0-9._@-]+; a token listed twice is an error. Errors name file:line.
// Thread-safe.
class TokenStore {
 public:
  static constexpr size_t kMinTokenBytes = 16;
  struct User {
    std::string name;
    UserRole role = UserRole::kNone;
  };

  static StatusOr<std::unique_ptr<TokenStore>> Open(const std::string& path);
  // The user of `token`; nullptr when unknown.
  std::shared_ptr<const User> Find(absl::string_view token) const;

  // Re-reads the file when its mtime, ctime (a chmod), size or inode changed, or when a reload
  // signal (RequestTokenReload) came since the last call. A file that fails to load keeps the
  // tokens in use and returns the error (the caller logs it). Returns whether tokens were replaced.
  StatusOr<bool> MaybeReload();
  int64_t reloads() const { return reloads_.load(); }
  size_t size() const;
  const std::string& path() const { return path_; }

 private:
  struct FileStamp {
    ino_t inode = 0;
    off_t size = 0;
    timespec mtime = {};
    timespec ctime = {};  // a chmod of a file refused for its mode retries it
  };
  using Map = absl::flat_hash_map<std::string, std::shared_ptr<const User>>;  // digest -> user
  explicit TokenStore(std::string path) : path_(std::move(path)) {}
  StatusOr<std::shared_ptr<const Map>> Load(FileStamp* stamp) const;

  const std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const Map> tokens_;  // guarded by mu_
  FileStamp stamp_;                    // guarded by mu_
  uint64_t seen_signals_ = 0;          // guarded by mu_
  std::atomic<int64_t> reloads_{0};
};

// Async-signal-safe: asks every TokenStore to re-read its file at its next MaybeReload. The
// roles' SIGHUP handler (InstallTokenReloadSignal) calls it.
void RequestTokenReload();
// Installs a SIGHUP handler calling RequestTokenReload (SIGHUP would otherwise end the process).
void InstallTokenReloadSignal();

// Routes gRPC's own log lines through sift: a TLS handshake that fails because the peer spoke
// plaintext (OpenSSL's "wrong version number") becomes one line that names the TLS/plaintext
// mismatch, printed at most once per 10 s with the count of those it held back; every other line
// is printed as gRPC prints it (GRPC_VERBOSITY still applies). Call once, early in main.
void InstallGrpcLogTranslation();

// The Principal of a call on a server whose security is `checked`: the verified client
// certificate's CN, and the user of its bearer token (off: neither); always remote, with the job
// credential the call presents (common/job_credential.h). The
// peer is left empty (a string per call on the Pull/Push path): RefusalRecorder::Record fills it.
Principal IdentifyCaller(const grpc::ServerContextBase& ctx, bool checked,
                         const TokenStore* tokens);

// Counts refusals in sift_auth_refusals_total{grpc_method, grpc_code} and logs each one to
// stderr — "<server>: refused <method> from <peer> (<who>): <CODE>: <message>", never the
// token — at most kLogBurst lines per kLogWindowSeconds (then one line with how many were not
// logged). Thread-safe.
class RefusalRecorder {
 public:
  static constexpr int kLogBurst = 20;
  static constexpr int kLogWindowSeconds = 10;
  // `metric`: the counter's name ("" = sift_auth_refusals_total) and `help` its help text (other
  // refusals than the caller's credentials: an embedding server's table bounds).
  RefusalRecorder(prometheus::Registry& registry, std::string server_name,
                  const std::string& metric = "", const std::string& help = "");
  // `ctx`: the refused call (its peer goes into the log line).
  void Record(absl::string_view method, const Principal& who, const Status& refusal,
              const grpc::ServerContextBase& ctx);
  int64_t total() const { return total_.load(); }

 private:
  prometheus::Family<prometheus::Counter>* family_;
  const std::string server_name_;
  std::atomic<int64_t> total_{0};
  LogWindow log_window_{kLogBurst, std::chrono::seconds(kLogWindowSeconds)};
};

}  // namespace sift
