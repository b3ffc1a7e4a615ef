// `sift certs init | issue` end to end: the files and modes of the cert-manager layout, the names
// in the certificates, the refusal to overwrite a CA, and a member issued later that verifies
// against the CA (checked with OpenSSL's X509_verify_cert).
#include <dirent.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/tls_certs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/openssl_test_util.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using sift::testing::ReadAll;
using sift::testing::RunSift;
using sift::testing::TempDir;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// X509_verify_cert of the certificate file `leaf` against the CA file `ca`, as a TLS server and
// as a TLS client: X509_V_OK or the verifier's error.
int Verify(const std::string& ca, const std::string& leaf) {
  for (int purpose : {X509_PURPOSE_SSL_SERVER, X509_PURPOSE_SSL_CLIENT}) {
    const int err = sift::testing::VerifyCert(ReadAll(ca), ReadAll(leaf), purpose);
    if (err != X509_V_OK) return err;
  }
  return X509_V_OK;
}

// The certificate's SANs of one kind ("IP" in dotted text, "DNS"), in order.
std::vector<std::string> SansOf(const std::string& cert_file, const std::string& kind) {
  std::vector<std::string> out;
  for (const std::string& san : sift::testing::CertSans(ReadAll(cert_file))) {
    if (san.rfind(kind + ":", 0) == 0) out.push_back(san.substr(kind.size() + 1));
  }
  return out;
}
std::vector<std::string> IpSans(const std::string& cert_file) { return SansOf(cert_file, "IP"); }
std::vector<std::string> DnsSans(const std::string& cert_file) { return SansOf(cert_file, "DNS"); }

int FileMode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<int>(st.st_mode & 07777);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  EXPECT_NE(d, nullptr) << dir;
  if (d == nullptr) return out;
  for (dirent* e = ::readdir(d); e != nullptr; e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  return out;
}

std::string CommonName(const std::string& cert_file) {
  StatusOr<std::string> cn = CertificateCommonName(ReadAll(cert_file));
  EXPECT_TRUE(cn.ok()) << cn.status();
  return cn.ok() ? *cn : "";
}

class CliCertsTest : public ::testing::Test {
 protected:
  // `sift certs init --out T --servers 2 --workers 1 --ip 10.0.0.5`.
  void Init() {
    auto r = RunSift(
        {"certs", "init", "--out", out_, "--servers", "2", "--workers", "1", "--ip", "10.0.0.5"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    init_stdout_ = r.out;
  }

  TempDir tmp_;
  const std::string out_ = tmp_.Sub("certs");
  std::string init_stdout_;
};

TEST_F(CliCertsTest, InitMakesTheCertManagerLayout) {
  ASSERT_NO_FATAL_FAILURE(Init());
  EXPECT_THAT(ListDir(out_), UnorderedElementsAre("ca", "coordinator", "server-0", "server-1",
                                                  "worker-0", "client"));
  EXPECT_THAT(ListDir(out_ + "/ca"), UnorderedElementsAre("ca.crt", "ca.key"));
  EXPECT_THAT(ListDir(out_ + "/client"), UnorderedElementsAre("ca.crt"));
  EXPECT_EQ(FileMode(out_ + "/ca/ca.key"), 0600);
  EXPECT_EQ(FileMode(out_ + "/ca"), 0700);
  const std::string ca = ReadAll(out_ + "/ca/ca.crt");
  EXPECT_EQ(ReadAll(out_ + "/client/ca.crt"), ca);
  for (const char* member : {"coordinator", "server-0", "server-1", "worker-0"}) {
    const std::string dir = out_ + "/" + member;
    EXPECT_THAT(ListDir(dir), UnorderedElementsAre("ca.crt", "tls.crt", "tls.key")) << member;
    EXPECT_EQ(FileMode(dir + "/tls.key"), 0600) << member;
    EXPECT_EQ(FileMode(dir), 0700) << member;
    EXPECT_EQ(ReadAll(dir + "/ca.crt"), ca) << member;
    EXPECT_EQ(CommonName(dir + "/tls.crt"), member);
    EXPECT_EQ(Verify(out_ + "/ca/ca.crt", dir + "/tls.crt"), X509_V_OK) << member;
    EXPECT_THAT(IpSans(dir + "/tls.crt"), UnorderedElementsAre("127.0.0.1", "10.0.0.5"));
    EXPECT_THAT(DnsSans(dir + "/tls.crt"), UnorderedElementsAre("localhost"));
  }
  EXPECT_EQ(CommonName(out_ + "/server-1/tls.crt"), "server-1");
  // One line per file written: ca.crt + ca.key, 3 per member, client/ca.crt.
  std::vector<std::string> lines = absl::StrSplit(init_stdout_, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 2u + 4 * 3 + 1) << init_stdout_;
  EXPECT_THAT(init_stdout_, HasSubstr(out_ + "/server-1/tls.key"));
  EXPECT_THAT(init_stdout_, HasSubstr(out_ + "/client/ca.crt"));
}

TEST_F(CliCertsTest, SecondInitNeedsForce) {
  ASSERT_NO_FATAL_FAILURE(Init());
  const std::string ca = ReadAll(out_ + "/ca/ca.crt");
  auto again = RunSift({"certs", "init", "--out", out_});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.err, HasSubstr(out_ + "/ca"));
  EXPECT_THAT(again.err, HasSubstr("--force"));
  EXPECT_EQ(ReadAll(out_ + "/ca/ca.crt"), ca);  // untouched

  auto forced = RunSift({"certs", "init", "--out", out_, "--force"});
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_NE(ReadAll(out_ + "/ca/ca.crt"), ca);
  EXPECT_EQ(Verify(out_ + "/ca/ca.crt", out_ + "/server-0/tls.crt"), X509_V_OK);
  // server-1 was not rewritten (--servers 1 now): it belongs to the old CA.
  EXPECT_NE(Verify(out_ + "/ca/ca.crt", out_ + "/server-1/tls.crt"), X509_V_OK);
}

TEST_F(CliCertsTest, IssueMakesAMemberThatVerifies) {
  ASSERT_NO_FATAL_FAILURE(Init());
  const std::string dir = tmp_.Sub("worker-7");
  auto r = RunSift({"certs", "issue", "--ca", out_ + "/ca", "--name", "worker-7", "--out", dir,
                    "--dns", "worker-7.sift.svc"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // a member name: no note
  EXPECT_THAT(ListDir(dir), UnorderedElementsAre("ca.crt", "tls.crt", "tls.key"));
  EXPECT_EQ(FileMode(dir + "/tls.key"), 0600);
  EXPECT_EQ(CommonName(dir + "/tls.crt"), "worker-7");
  EXPECT_EQ(Verify(out_ + "/ca/ca.crt", dir + "/tls.crt"), X509_V_OK);
  EXPECT_THAT(DnsSans(dir + "/tls.crt"), UnorderedElementsAre("localhost", "worker-7.sift.svc"));
  EXPECT_THAT(IpSans(dir + "/tls.crt"), UnorderedElementsAre("127.0.0.1"));
}

TEST_F(CliCertsTest, IssueNotesANameWithoutMemberRights) {
  ASSERT_NO_FATAL_FAILURE(Init());
  auto r = RunSift({"certs", "issue", "--ca", out_ + "/ca", "--name", "backup.job", "--out",
                    tmp_.Sub("backup")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("note: 'backup.job' is not a member name"));
  EXPECT_EQ(CommonName(tmp_.Sub("backup/tls.crt")), "backup.job");
  // The any-index worker is a member name.
  auto w = RunSift(
      {"certs", "issue", "--ca", out_ + "/ca", "--name", "worker", "--out", tmp_.Sub("worker")});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_THAT(w.err, Not(HasSubstr("note")));
}

TEST_F(CliCertsTest, UsageErrorsExitWithTwo) {
  ASSERT_NO_FATAL_FAILURE(Init());
  const std::string ca = out_ + "/ca";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"certs", "init", "--out", tmp_.Sub("a"), "--servers", "4097"},
           {"certs", "init", "--out", tmp_.Sub("a"), "--workers", "-1"},
           {"certs", "init", "--out", tmp_.Sub("a"), "--days", "0"},
           {"certs", "init", "--out", tmp_.Sub("a"), "--days", "36501"},
           {"certs", "init", "--out", tmp_.Sub("a"), "--ip", "10.0.0.999"},
           {"certs", "init"},
           {"certs", "issue", "--ca", ca, "--name", "bad/name", "--out", tmp_.Sub("b")},
           {"certs", "issue", "--ca", ca, "--name", "", "--out", tmp_.Sub("b")},
           {"certs", "issue", "--ca", ca, "--name", "server-0", "--out", tmp_.Sub("b"), "--ip",
            "nope"},
       }) {
    auto r = RunSift(args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
  }
  // A bad --ip is named and leaves nothing behind.
  auto r = RunSift({"certs", "init", "--out", tmp_.Sub("a"), "--ip", "10.0.0.999"});
  EXPECT_THAT(r.err, HasSubstr("'10.0.0.999'"));
  EXPECT_THAT(ListDir(tmp_.path()), Not(Contains("a")));
  EXPECT_THAT(ListDir(tmp_.path()), Not(Contains("b")));
}

TEST_F(CliCertsTest, IssueFromAMissingCaNamesTheFile) {
  auto r = RunSift(
      {"certs", "issue", "--ca", tmp_.Sub("nope"), "--name", "worker-0", "--out", tmp_.Sub("w")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(tmp_.Sub("nope") + "/ca.crt"));
}

TEST_F(CliCertsTest, HelpExplainsTheFiles) {
  auto r = RunSift({"certs", "init", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("tls.key"));
  EXPECT_THAT(r.out, HasSubstr("cert-manager"));
  EXPECT_THAT(r.out, HasSubstr("kubectl create secret generic sift-server-0-tls"));
}

// A TLS/plaintext mismatch is named as such on both sides: a plaintext client of a TLS
// coordinator, a TLS client of a plaintext one (the probe of common/wire_probe.h), and the TLS
// coordinator's own log line for the refused handshake. Unset --bind: plaintext on loopback,
// TLS on every interface.
TEST_F(CliCertsTest, TlsPlaintextMismatchIsNamedOnBothSides) {
  Init();
  testing::SiftProcess tls(
      {"coordinator", "--port", "0", "--state-dir", tmp_.Sub("tls-state"), "--metrics-port", "-1",
       "--port-file", tmp_.Sub("tls.port"), "--tls-dir", out_ + "/coordinator"},
      tmp_.Sub("tls-coordinator"));
  testing::SiftProcess plain({"coordinator", "--port", "0", "--state-dir", tmp_.Sub("plain-state"),
                              "--metrics-port", "-1", "--port-file", tmp_.Sub("plain.port")},
                             tmp_.Sub("plain-coordinator"));
  const std::string tls_port = testing::WaitForFile(tmp_.Sub("tls.port"));
  const std::string plain_port = testing::WaitForFile(tmp_.Sub("plain.port"));
  ASSERT_FALSE(tls_port.empty()) << tls.Err();
  ASSERT_FALSE(plain_port.empty()) << plain.Err();
  const std::string tls_addr = absl::StrCat("127.0.0.1:", tls_port.substr(0, tls_port.find(' ')));
  const std::string plain_addr =
      absl::StrCat("127.0.0.1:", plain_port.substr(0, plain_port.find(' ')));
  EXPECT_THAT(tls.Out(), HasSubstr("serving on 0.0.0.0:"));
  EXPECT_THAT(plain.Out(), HasSubstr("serving on 127.0.0.1:"));

  auto r = RunSift({"jobs", "--coordinator", tls_addr, "--connect-timeout", "3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("TLS/plaintext mismatch: the server at " + tls_addr +
                               " speaks TLS and this client does not: pass --tls-dir"));
  r = RunSift({"worker", "--coordinator", tls_addr, "--register-timeout", "30"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot register with the coordinator at " + tls_addr +
                               ": TLS/plaintext mismatch"));
  r = RunSift({"jobs", "--coordinator", plain_addr, "--connect-timeout", "3", "--tls-dir",
               out_ + "/client"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("the server at " + plain_addr + " speaks plaintext"));
  // The TLS coordinator's side of the refused plaintext connections.
  for (int i = 0; i < 50 && tls.Err().find("TLS/plaintext mismatch") == std::string::npos; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(tls.Err(), HasSubstr("sift: TLS/plaintext mismatch: a TLS handshake failed"));
  EXPECT_THAT(tls.Err(), Not(HasSubstr("wrong version number")));
}

}  // namespace
}  // namespace sift
