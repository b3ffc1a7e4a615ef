#include "tests/util/test_pki.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/tls_certs.h"
#include "gtest/gtest.h"

namespace sift::testing {
namespace {

CertificateSpec Spec(const std::string& cn, absl::Time from, absl::Time to) {
  CertificateSpec s;
  s.common_name = cn;
  s.dns_names = {"localhost"};
  s.ip_addresses = {"127.0.0.1"};
  s.not_before = from;
  s.not_after = to;
  return s;
}

void Check(const Status& s, const std::string& what) { EXPECT_TRUE(s.ok()) << what << ": " << s; }

void WritePrivate(const std::string& path, const std::string& text) {
  Check(WriteFileAtomic(path, text), path);
  ::chmod(path.c_str(), 0600);
}

}  // namespace

std::string TestPki::Token(const std::string& user) {
  return absl::StrCat("test-token-of-", user, "-0123456789abcdef");
}

TestPki TestPki::Make(const std::string& root, int servers, int workers) {
  TestPki pki;
  pki.root = root;
  const absl::Time now = absl::Now();
  const absl::Time from = now - absl::Hours(1), to = now + absl::Hours(24);
  auto ca = MakeCertificateAuthority(Spec("sift test CA", from, to));
  EXPECT_TRUE(ca.ok()) << ca.status();
  if (!ca.ok()) return pki;
  Check(WriteCertificateAuthorityDir(root + "/ca", *ca), "ca");
  auto member = [&](const std::string& dir, const std::string& cn, const PemPair& issuer,
                    absl::Time a, absl::Time b) {
    auto cert = IssueCertificate(issuer, Spec(cn, a, b));
    EXPECT_TRUE(cert.ok()) << cn << ": " << cert.status();
    if (cert.ok()) Check(WriteMemberDir(root + "/" + dir, issuer.cert, *cert), dir);
  };
  member("coordinator", "coordinator", *ca, from, to);
  for (int i = 0; i < servers; ++i) {
    member(absl::StrCat("server-", i), absl::StrCat("server-", i), *ca, from, to);
  }
  for (int i = 0; i < workers; ++i) {
    member(absl::StrCat("worker-", i), absl::StrCat("worker-", i), *ca, from, to);
  }
  Check(MakeDirs(root + "/client"), "client");
  Check(WriteFileAtomic(root + "/client/ca.crt", ca->cert), "client/ca.crt");
  auto other = MakeCertificateAuthority(Spec("another CA", from, to));
  EXPECT_TRUE(other.ok()) << other.status();
  if (other.ok()) member("other-ca/worker-0", "worker-0", *other, from, to);
  member("expired/worker-0", "worker-0", *ca, now - absl::Hours(72), now - absl::Hours(24));

  std::string tokens = "# token,user,role\n";
  for (const auto& [user, role] : {std::pair<std::string, std::string>{"admin", "admin"},
                                   {"alice", "operator"},
                                   {"bob", "operator"},
                                   {"rita", "reader"}}) {
    absl::StrAppend(&tokens, Token(user), ",", user, ",", role, "\n");
    WritePrivate(pki.TokenFile(user), Token(user) + "\n");
  }
  WritePrivate(pki.TokensFile(), tokens);
  return pki;
}

SecurityOptions TestPki::As(const std::string& dir, const std::string& user) const {
  SecurityOptions s;
  s.tls_dir = root + "/" + dir;
  if (!user.empty()) s.token_file = TokenFile(user);
  return s;
}

}  // namespace sift::testing
