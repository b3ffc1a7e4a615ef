#include "common/grpc_security.h"

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <utility>

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_context.h>
#include <openssl/evp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/job_credential.h"
#include "common/log_window.h"
#include "common/metrics.h"

namespace sift {
namespace {

std::atomic<uint64_t> g_reload_signals{0};

std::string Join(const std::string& dir, const char* name) { return dir + "/" + name; }

StatusOr<std::string> ReadPem(const std::string& path, absl::string_view what) {
  StatusOr<std::string> pem = ReadFileToString(path);
  if (!pem.ok()) {
    return Status(pem.status().code(),
                  absl::StrCat(what, ": ", pem.status().message(),
                               " (a TLS directory holds ca.crt, tls.crt, tls.key: `sift certs "
                               "init` makes them)"));
  }
  if (pem->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a PEM file"));
  }
  return pem;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// SHA-256 of `token` as 32 raw bytes.
std::string Digest(absl::string_view token) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), len);
}

bool ValidUserName(absl::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '@' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

bool ValidToken(absl::string_view token) {
  if (token.size() < TokenStore::kMinTokenBytes || token.size() > 4096) return false;
  for (char c : token) {
    if (c < 0x21 || c > 0x7e || c == ',') return false;
  }
  return true;
}

void OnReloadSignal(int) { RequestTokenReload(); }

}  // namespace

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const SecurityOptions& o) {
  if (!o.tls()) return grpc::InsecureServerCredentials();
  SIFT_ASSIGN_OR_RETURN(std::string ca, ReadPem(Join(o.tls_dir, "ca.crt"), "the cluster CA"));
  SIFT_ASSIGN_OR_RETURN(std::string cert,
                        ReadPem(Join(o.tls_dir, "tls.crt"), "the server certificate"));
  const std::string key_path = Join(o.tls_dir, "tls.key");
  SIFT_RETURN_IF_ERROR(CheckPrivateFile(key_path, "the private key"));
  SIFT_ASSIGN_OR_RETURN(std::string key, ReadPem(key_path, "the private key"));
  grpc::SslServerCredentialsOptions opts(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = std::move(ca);
  opts.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  return grpc::SslServerCredentials(opts);
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const SecurityOptions& o) {
  if (!o.tls()) {
    if (!o.token_file.empty()) {
      return absl::InvalidArgumentError(
          "a bearer token (--token-file) needs TLS (--tls-dir with the cluster's ca.crt): it "
          "would travel in clear");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions opts;
  SIFT_ASSIGN_OR_RETURN(opts.pem_root_certs, ReadPem(Join(o.tls_dir, "ca.crt"), "the cluster CA"));
  const std::string cert_path = Join(o.tls_dir, "tls.crt");
  if (Exists(cert_path)) {
    SIFT_ASSIGN_OR_RETURN(opts.pem_cert_chain, ReadPem(cert_path, "the member certificate"));
    const std::string key_path = Join(o.tls_dir, "tls.key");
    SIFT_RETURN_IF_ERROR(CheckPrivateFile(key_path, "the private key"));
    SIFT_ASSIGN_OR_RETURN(opts.pem_private_key, ReadPem(key_path, "the private key"));
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(opts);
  if (!o.token_file.empty()) {
    SIFT_RETURN_IF_ERROR(CheckPrivateFile(o.token_file, "the token file"));
    SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(o.token_file));
    std::string token(absl::StripAsciiWhitespace(
        std::vector<absl::string_view>(absl::StrSplit(text, '\n')).front()));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the token file ", o.token_file, " is empty (its first line is the token)"));
    }
    creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(token));
  }
  return creds;
}

void ApplyChannelSecurity(const SecurityOptions& o, grpc::ChannelArguments* args) {
  if (o.tls() && !o.server_name_override.empty()) {
    args->SetSslTargetNameOverride(o.server_name_override);
  }
}

// ---- TokenStore ----

StatusOr<std::unique_ptr<TokenStore>> TokenStore::Open(const std::string& path) {
  std::unique_ptr<TokenStore> store(new TokenStore(path));
  FileStamp stamp;
  SIFT_ASSIGN_OR_RETURN(store->tokens_, store->Load(&stamp));
  store->stamp_ = stamp;
  store->seen_signals_ = g_reload_signals.load();
  return store;
}

StatusOr<std::shared_ptr<const TokenStore::Map>> TokenStore::Load(FileStamp* stamp) const {
  SIFT_RETURN_IF_ERROR(CheckPrivateFile(path_, "the tokens file"));
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0) {
    stamp->inode = st.st_ino;
    stamp->size = st.st_size;
    stamp->mtime = st.st_mtim;
    stamp->ctime = st.st_ctim;
  }
  SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path_));
  auto map = std::make_shared<Map>();
  absl::flat_hash_map<std::string, int> line_of;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    const std::string where = absl::StrCat(path_, ":", line_no, ": ");
    if (f.size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected `token,user,role`, found ", f.size(), " fields"));
    }
    const absl::string_view token = absl::StripAsciiWhitespace(f[0]);
    const absl::string_view user = absl::StripAsciiWhitespace(f[1]);
    if (!ValidToken(token)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "the token must be ", kMinTokenBytes,
          " to 4096 printable characters without ',' or spaces (e.g. `openssl rand -hex 32`)"));
    }
    if (!ValidUserName(user)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "user '", user, "' must be 1 to 128 of [A-Za-z0-9._@-]"));
    }
    StatusOr<UserRole> role = ParseUserRole(absl::StripAsciiWhitespace(f[2]));
    if (!role.ok()) return absl::InvalidArgumentError(absl::StrCat(where, role.status().message()));
    std::string digest = Digest(token);
    auto [it, inserted] = line_of.emplace(digest, line_no);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "this token is also on line ", it->second));
    }
    (*map)[digest] = std::make_shared<const User>(User{std::string(user), *role});
  }
  return std::shared_ptr<const Map>(std::move(map));
}

std::shared_ptr<const TokenStore::User> TokenStore::Find(absl::string_view token) const {
  // Looked up by the token's SHA-256: what the lookup's timing depends on is the digest, which
  // tells nothing about a token that is not known.
  const std::string digest = Digest(token);
  std::shared_ptr<const Map> tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens = tokens_;
  }
  auto it = tokens->find(digest);
  if (it == tokens->end()) return nullptr;
  return it->second;
}

size_t TokenStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_->size();
}

StatusOr<bool> TokenStore::MaybeReload() {
  const uint64_t signals = g_reload_signals.load();
  struct stat st;
  const bool have = ::stat(path_.c_str(), &st) == 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto differ = [](const timespec& a, const timespec& b) {
      return a.tv_sec != b.tv_sec || a.tv_nsec != b.tv_nsec;
    };
    const bool changed =
        have && (st.st_ino != stamp_.inode || st.st_size != stamp_.size ||
                 differ(st.st_mtim, stamp_.mtime) || differ(st.st_ctim, stamp_.ctime));
    if (!changed && signals == seen_signals_) return false;
    seen_signals_ = signals;
    if (have) {
      // A file that fails to load is not retried until it changes again (or a signal asks).
      stamp_.inode = st.st_ino;
      stamp_.size = st.st_size;
      stamp_.mtime = st.st_mtim;
      stamp_.ctime = st.st_ctim;
    }
  }
  FileStamp stamp;
  StatusOr<std::shared_ptr<const Map>> loaded = Load(&stamp);
  if (!loaded.ok()) {
    return Status(loaded.status().code(),
                  absl::StrCat("reloading the tokens failed, the previous ones stay in use: ",
                               loaded.status().message()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_ = std::move(*loaded);
    stamp_ = stamp;
  }
  reloads_.fetch_add(1);
  return true;
}

void RequestTokenReload() { g_reload_signals.fetch_add(1); }

void InstallTokenReloadSignal() {
  struct sigaction handler = {};
  handler.sa_handler = OnReloadSignal;
  handler.sa_flags = SA_RESTART;
  sigemptyset(&handler.sa_mask);
  sigaction(SIGHUP, &handler, nullptr);
}

// ---- gRPC's log ----

namespace {

const char* SeverityLetter(gpr_log_severity s) {
  return s == GPR_LOG_SEVERITY_ERROR ? "E" : s == GPR_LOG_SEVERITY_INFO ? "I" : "D";
}

void TranslateGrpcLog(gpr_log_func_args* args) {
  const absl::string_view message = args->message != nullptr ? args->message : "";
  // A server that cannot listen: its Start returns the reason in one line (no nested dump).
  if (absl::StrContains(message, "No address added out of total")) return;
  if (absl::StrContains(message, "wrong version number")) {
    // Once per 10 s at most: a client retrying with backoff would print a line a second.
    static LogWindow window(1, std::chrono::seconds(10));
    int64_t held_back = 0;
    if (!window.Admit(&held_back)) return;
    std::fprintf(
        stderr,
        "sift: TLS/plaintext mismatch: a TLS handshake failed because the other end does "
        "not speak TLS (a plaintext client of a server with --tls-dir, or a TLS client of "
        "a server without it; pass --tls-dir on both sides or on neither)%s\n",
        held_back > 0 ? absl::StrCat(" [", held_back, " more since the last line]").c_str() : "");
    return;
  }
  std::fprintf(stderr, "%s%s %s:%d] %.*s\n", SeverityLetter(args->severity),
               absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone()).c_str(),
               args->file != nullptr ? args->file : "?", args->line,
               static_cast<int>(message.size()), message.data());
}

}  // namespace

void InstallGrpcLogTranslation() { gpr_set_log_function(TranslateGrpcLog); }

// ---- Callers ----

Principal IdentifyCaller(const grpc::ServerContextBase& ctx, bool checked,
                         const TokenStore* tokens) {
  Principal p;
  p.checked = checked;
  p.remote = true;
  const auto& md = ctx.client_metadata();
  if (auto cred = md.find(kJobCredentialHeader); cred != md.end()) {
    p.job_credential.assign(cred->second.data(), cred->second.size());
  }
  if (!checked) return p;
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth != nullptr) {
    // Present only for a client certificate that passed verification against the cluster CA.
    for (const grpc::string_ref& cn : auth->FindPropertyValues("x509_common_name")) {
      p.member.assign(cn.data(), cn.size());
      break;
    }
  }
  auto it = md.find("authorization");
  if (it == md.end()) {
    p.token_problem = "no bearer token";
    return p;
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ")) {
    p.token_problem = "an authorization header that is not `Bearer <token>`";
    return p;
  }
  if (tokens == nullptr) {
    p.token_problem = "a bearer token, but this server has no tokens file";
    return p;
  }
  std::shared_ptr<const TokenStore::User> user = tokens->Find(value);
  if (user == nullptr) {
    p.token_problem = "a bearer token that is not in the server's tokens file";
    return p;
  }
  p.user = user->name;
  p.role = user->role;
  return p;
}

// ---- RefusalRecorder ----

RefusalRecorder::RefusalRecorder(prometheus::Registry& registry, std::string server_name,
                                 const std::string& metric, const std::string& help)
    : family_(&prometheus::BuildCounter()
                   .Name(metric.empty() ? "sift_auth_refusals_total" : metric)
                   .Help(metric.empty() ? "Calls refused for their credentials (UNAUTHENTICATED, "
                                          "PERMISSION_DENIED, ALREADY_EXISTS of a live member "
                                          "slot, a job credential or scope)."
                                        : help)
                   .Register(registry)),
      server_name_(std::move(server_name)) {}

void RefusalRecorder::Record(absl::string_view method, const Principal& caller,
                             const Status& refusal, const grpc::ServerContextBase& ctx) {
  Principal who = caller;
  who.peer = ctx.peer();
  const int code = static_cast<int>(refusal.code());
  family_
      ->Add({{"grpc_method", std::string(method)},
             {"grpc_code", std::string(GrpcServerMetrics::CodeName(code))}})
      .Increment();
  total_.fetch_add(1);
  int64_t held_back = 0;
  const bool log = log_window_.Admit(&held_back);
  if (held_back > 0) {
    std::fprintf(stderr, "%s: %lld more refusals were not logged\n", server_name_.c_str(),
                 static_cast<long long>(held_back));
  }
  if (!log) return;
  std::fprintf(stderr, "%s: refused %.*s from %s: %s: %.*s\n", server_name_.c_str(),
               static_cast<int>(method.size()), method.data(), who.Describe().c_str(),
               std::string(GrpcServerMetrics::CodeName(code)).c_str(),
               static_cast<int>(refusal.message().size()), refusal.message().data());
  std::fflush(stderr);
}

}  // namespace sift
