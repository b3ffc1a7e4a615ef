// sift certs init | issue: the cluster CA and its member certificates for TLS with mutual
// authentication (common/tls_certs.h). `init` makes a CA and every member of a cluster of S
// servers and W workers; `issue` adds one member from an existing CA (a new worker, a rotation).
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/exit_code.h"
#include "common/file_util.h"
#include "common/tls_certs.h"

namespace sift::cli {
namespace {

constexpr char kCertsCaCommonName[] = "sift cluster CA";
constexpr int kCertsMaxMembers = 4096;
constexpr int kCertsMaxDays = 36500;
// not_before lies this far in the past, so a member whose clock runs a little behind the
// machine that made the certificate still accepts it.
constexpr absl::Duration kCertsClockSkew = absl::Hours(1);

// The names every member certificate is valid for, besides the --dns / --ip given.
constexpr char kCertsDefaultDns[] = "localhost";
constexpr char kCertsDefaultIp[] = "127.0.0.1";

struct CertsSans {
  std::vector<std::string> dns;
  std::vector<std::string> ip;
};

struct CertsInitFlags {
  std::string out;
  int servers = 1;
  int workers = 1;
  CertsSans sans;
  int days = 365;
  int ca_days = 3650;
  bool force = false;
};

struct CertsIssueFlags {
  std::string ca;
  std::string name;
  std::string out;
  CertsSans sans;
  int days = 365;
};

Status CertsUsageError(Status s) { return WithExitCode(std::move(s), kExitUsage); }

// Bad flag values (a --dns or --ip the library refuses) are usage errors; the rest exit 1.
Status CertsFlagError(Status s) {
  return s.code() == absl::StatusCode::kInvalidArgument ? CertsUsageError(std::move(s)) : s;
}

// `s` with no duplicates, in first-seen order.
std::vector<std::string> CertsUnique(const std::vector<std::string>& s) {
  std::vector<std::string> out;
  for (const std::string& x : s) {
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  return out;
}

CertificateSpec CertsMemberSpec(const std::string& common_name, const CertsSans& sans, int days,
                                absl::Time now) {
  CertificateSpec spec;
  spec.common_name = common_name;
  std::vector<std::string> dns = {kCertsDefaultDns};
  dns.insert(dns.end(), sans.dns.begin(), sans.dns.end());
  std::vector<std::string> ip = {kCertsDefaultIp};
  ip.insert(ip.end(), sans.ip.begin(), sans.ip.end());
  spec.dns_names = CertsUnique(dns);
  spec.ip_addresses = CertsUnique(ip);
  spec.not_before = now - kCertsClockSkew;
  spec.not_after = now + absl::Hours(24) * days;
  return spec;
}

// "<prefix><n>" with n a decimal number without leading zeros.
bool CertsIsIndexedName(absl::string_view name, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix) || name.empty()) return false;
  if (name.size() > 1 && name[0] == '0') return false;
  uint32_t n = 0;
  return std::all_of(name.begin(), name.end(), absl::ascii_isdigit) && absl::SimpleAtoi(name, &n);
}

// The four names sift grants member rights to: coordinator, server-<i>, worker-<i>, worker.
bool CertsIsMemberName(absl::string_view name) {
  return name == "coordinator" || name == "worker" || CertsIsIndexedName(name, "server-") ||
         CertsIsIndexedName(name, "worker-");
}

Status CertsValidateName(const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
      });
  if (!ok) {
    return CertsUsageError(absl::InvalidArgumentError(
        absl::StrCat("--name '", name,
                     "' is not a certificate name: coordinator, server-<i>, worker-<i>, worker, or "
                     "[A-Za-z0-9._-]+ of at most 64 characters")));
  }
  return absl::OkStatus();
}

void CertsPrintWritten(const std::string& dir, std::initializer_list<const char*> files) {
  for (const char* f : files) std::printf("wrote %s\n", JoinPath(dir, f).c_str());
}

StatusOr<PemPair> CertsIssueMember(const PemPair& ca, const std::string& name,
                                   const CertsSans& sans, int days, absl::Time now) {
  StatusOr<PemPair> member = IssueCertificate(ca, CertsMemberSpec(name, sans, days, now));
  if (!member.ok()) return CertsFlagError(member.status());
  return member;
}

Status CertsWriteMember(const std::string& dir, const std::string& ca_cert, const PemPair& member) {
  SIFT_RETURN_IF_ERROR(WriteMemberDir(dir, ca_cert, member));
  CertsPrintWritten(dir, {kCaCertFile, kTlsCertFile, kTlsKeyFile});
  return absl::OkStatus();
}

Status RunCertsInit(const CertsInitFlags& f) {
  const std::string ca_dir = JoinPath(f.out, "ca");
  if (PathExists(ca_dir) && !f.force) {
    return CertsUsageError(absl::FailedPreconditionError(
        absl::StrCat(ca_dir,
                     " already exists: pass --force to replace the CA and rewrite the members, or "
                     "add a member with `sift certs issue --ca ",
                     ca_dir, "`")));
  }
  if (f.days > f.ca_days) {
    return CertsUsageError(absl::InvalidArgumentError(
        absl::StrCat("--days ", f.days, " is longer than --ca-days ", f.ca_days,
                     ": the members would outlive their CA")));
  }
  const absl::Time now = absl::Now();
  CertificateSpec ca_spec;
  ca_spec.common_name = kCertsCaCommonName;
  ca_spec.not_before = now - kCertsClockSkew;
  ca_spec.not_after = now + absl::Hours(24) * f.ca_days;
  SIFT_ASSIGN_OR_RETURN(PemPair ca, MakeCertificateAuthority(ca_spec));

  // Every certificate is made before any file is written: a bad --dns or --ip leaves DIR as it was.
  std::vector<std::string> names = {"coordinator"};
  for (int i = 0; i < f.servers; ++i) names.push_back(absl::StrCat("server-", i));
  for (int i = 0; i < f.workers; ++i) names.push_back(absl::StrCat("worker-", i));
  std::vector<PemPair> members;
  members.reserve(names.size());
  for (const std::string& name : names) {
    SIFT_ASSIGN_OR_RETURN(PemPair member, CertsIssueMember(ca, name, f.sans, f.days, now));
    members.push_back(std::move(member));
  }

  SIFT_RETURN_IF_ERROR(WriteCertificateAuthorityDir(ca_dir, ca));
  CertsPrintWritten(ca_dir, {kCaCertFile, kCaKeyFile});
  for (size_t i = 0; i < names.size(); ++i) {
    SIFT_RETURN_IF_ERROR(CertsWriteMember(JoinPath(f.out, names[i]), ca.cert, members[i]));
  }
  // A CLI user only verifies the servers: the CA, no key of its own.
  const std::string client_dir = JoinPath(f.out, "client");
  SIFT_RETURN_IF_ERROR(MakeDirs(client_dir));
  SIFT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(client_dir, kCaCertFile), ca.cert));
  CertsPrintWritten(client_dir, {kCaCertFile});
  return absl::OkStatus();
}

Status RunCertsIssue(const CertsIssueFlags& f) {
  SIFT_RETURN_IF_ERROR(CertsValidateName(f.name));
  if (!CertsIsMemberName(f.name)) {
    std::fprintf(stderr,
                 "sift certs: note: '%s' is not a member name; sift grants member rights only to "
                 "coordinator, server-<i>, worker-<i> and worker\n",
                 f.name.c_str());
  }
  SIFT_ASSIGN_OR_RETURN(PemPair ca, ReadCertificateAuthority(f.ca));
  const absl::Time now = absl::Now();
  SIFT_ASSIGN_OR_RETURN(absl::Time ca_not_after, CertificateNotAfter(ca.cert));
  if (ca_not_after < now + absl::Hours(24) * f.days) {
    std::fprintf(stderr,
                 "sift certs: note: the CA expires %s, before this certificate; it stops "
                 "verifying then\n",
                 absl::FormatTime("%Y-%m-%d", ca_not_after, absl::UTCTimeZone()).c_str());
  }
  SIFT_ASSIGN_OR_RETURN(PemPair member, CertsIssueMember(ca, f.name, f.sans, f.days, now));
  return CertsWriteMember(f.out, ca.cert, member);
}

void AddCertsSanFlags(CLI::App* cmd, CertsSans* sans) {
  cmd->add_option("--dns", sans->dns,
                  "Another DNS name the member is dialled at (repeatable; every certificate also "
                  "has localhost)");
  cmd->add_option("--ip", sans->ip,
                  "Another IP address (v4 or v6) the member is dialled at (repeatable; every "
                  "certificate also has 127.0.0.1)");
}

constexpr char kCertsFooter[] =
    "Files: ca/ca.crt is the cluster CA's certificate (every member trusts it), ca/ca.key its "
    "private key (mode 0600: keep it off the cluster, it only issues certificates). A member "
    "directory (coordinator, server-<i>, worker-<i>) holds ca.crt (the CA), tls.crt (the member's "
    "certificate, its identity is the Subject CN) and tls.key (its private key, mode 0600); "
    "client/ holds only ca.crt, what a CLI user needs to verify the servers. The layout is "
    "cert-manager's Secret layout, so a member directory becomes a Kubernetes Secret as it is: "
    "kubectl create secret generic sift-server-0-tls --from-file=DIR/server-0";

void AddCertsInit(CLI::App* certs, Action* action) {
  auto f = std::make_shared<CertsInitFlags>();
  CLI::App* cmd = certs->add_subcommand(
      "init", "Make a cluster CA and the certificates of the coordinator, every server and worker");
  cmd->add_option("--out", f->out,
                  "Directory to write: ca/, coordinator/, server-<i>/, worker-<i>/, client/")
      ->required();
  cmd->add_option("--servers", f->servers, "Embedding servers (server-0 .. server-<S-1>)")
      ->capture_default_str()
      ->check(CLI::Range(0, kCertsMaxMembers));
  cmd->add_option("--workers", f->workers, "Workers (worker-0 .. worker-<W-1>)")
      ->capture_default_str()
      ->check(CLI::Range(0, kCertsMaxMembers));
  AddCertsSanFlags(cmd, &f->sans);
  cmd->add_option("--days", f->days, "Days the member certificates are valid")
      ->capture_default_str()
      ->check(CLI::Range(1, kCertsMaxDays));
  cmd->add_option("--ca-days", f->ca_days,
                  "Days the CA is valid (members issued later must expire before it)")
      ->capture_default_str()
      ->check(CLI::Range(1, kCertsMaxDays));
  cmd->add_flag("--force", f->force,
                "Replace an existing DIR/ca and rewrite the member directories made here (others "
                "stop verifying: they belong to the old CA)");
  cmd->footer(kCertsFooter);
  cmd->callback([f, action] { *action = [f] { return RunCertsInit(*f); }; });
}

void AddCertsIssue(CLI::App* certs, Action* action) {
  auto f = std::make_shared<CertsIssueFlags>();
  CLI::App* cmd = certs->add_subcommand(
      "issue", "Issue one more member certificate from an existing CA (a new member, a rotation)");
  cmd->add_option("--ca", f->ca, "The CA's directory (DIR/ca of `sift certs init`)")->required();
  cmd->add_option("--name", f->name,
                  "The member's name, its certificate's CN: coordinator, server-<i>, worker-<i> "
                  "or worker (a worker of any index)")
      ->required();
  cmd->add_option("--out", f->out, "Member directory to write: ca.crt, tls.crt, tls.key")
      ->required();
  AddCertsSanFlags(cmd, &f->sans);
  cmd->add_option("--days", f->days, "Days the certificate is valid")
      ->capture_default_str()
      ->check(CLI::Range(1, kCertsMaxDays));
  cmd->footer(kCertsFooter);
  cmd->callback([f, action] { *action = [f] { return RunCertsIssue(*f); }; });
}

}  // namespace

void AddCerts(CLI::App* app, Action* action) {
  CLI::App* certs = app->add_subcommand(
      "certs", "TLS certificates for the cluster: a CA and one certificate per member (mTLS)");
  certs->require_subcommand(1);
  certs->footer(kCertsFooter);
  AddCertsInit(certs, action);
  AddCertsIssue(certs, action);
}

}  // namespace sift::cli
