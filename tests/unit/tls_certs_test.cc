// common/tls_certs.h: the CA and member certificates, checked with OpenSSL's own verifier
// (X509_verify_cert), and the files of a member directory.
#include "common/tls_certs.h"

#include <dirent.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/openssl_test_util.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using sift::testing::ReadAll;
using sift::testing::TempDir;
using sift::testing::WriteAll;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

template <typename T>
using Ptr = sift::testing::OsslPtr<T>;
using sift::testing::ParseCert;

Ptr<EVP_PKEY> ParseKey(const std::string& pem) {
  Ptr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Ptr<EVP_PKEY> key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  EXPECT_NE(key, nullptr);
  return key;
}

// X509_verify_cert of `leaf_pem` against the one trusted `ca_pem` for TLS `purpose`:
// X509_V_OK or the verifier's error.
int Verify(const std::string& ca_pem, const std::string& leaf_pem,
           int purpose = X509_PURPOSE_SSL_SERVER) {
  return sift::testing::VerifyCert(ca_pem, leaf_pem, purpose);
}

// Whether `cert` has the extension `nid`, marked critical.
bool IsCritical(X509* cert, int nid) {
  const int i = X509_get_ext_by_NID(cert, nid, -1);
  return i >= 0 && X509_EXTENSION_get_critical(X509_get_ext(cert, i)) == 1;
}

std::vector<std::string> Sans(const std::string& cert_pem) {
  return sift::testing::CertSans(cert_pem);
}

CertificateSpec Spec(const std::string& cn) {
  CertificateSpec spec;
  spec.common_name = cn;
  spec.not_before = absl::Now() - absl::Hours(1);
  spec.not_after = absl::Now() + absl::Hours(24 * 30);
  return spec;
}

PemPair MakeCa(const std::string& cn = "test CA") {
  StatusOr<PemPair> ca = MakeCertificateAuthority(Spec(cn));
  EXPECT_TRUE(ca.ok()) << ca.status();
  return ca.ok() ? *ca : PemPair{};
}

PemPair Issue(const PemPair& ca, const CertificateSpec& spec) {
  StatusOr<PemPair> leaf = IssueCertificate(ca, spec);
  EXPECT_TRUE(leaf.ok()) << leaf.status();
  return leaf.ok() ? *leaf : PemPair{};
}

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

TEST(TlsCerts, CaHasTheCaExtensions) {
  PemPair ca = MakeCa();
  Ptr<X509> cert = ParseCert(ca.cert);
  EXPECT_EQ(X509_check_ca(cert.get()), 1);
  const uint32_t ku = X509_get_key_usage(cert.get());
  EXPECT_EQ(ku, static_cast<uint32_t>(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  EXPECT_TRUE(IsCritical(cert.get(), NID_basic_constraints));
  EXPECT_TRUE(IsCritical(cert.get(), NID_key_usage));
  EXPECT_NE(X509_get0_subject_key_id(cert.get()), nullptr);
  EXPECT_THAT(ca.key, HasSubstr("-----BEGIN PRIVATE KEY-----"));  // PKCS#8
  Ptr<EVP_PKEY> key = ParseKey(ca.key);
  EXPECT_TRUE(EVP_PKEY_is_a(key.get(), "EC"));
  EXPECT_EQ(EVP_PKEY_get_bits(key.get()), 256);
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  // Self-signed.
  Ptr<EVP_PKEY> pub(X509_get_pubkey(cert.get()));
  EXPECT_EQ(X509_verify(cert.get(), pub.get()), 1);
  EXPECT_EQ(*CertificateCommonName(ca.cert), "test CA");
}

TEST(TlsCerts, LeafVerifiesAgainstItsCaForServerAndClient) {
  PemPair ca = MakeCa();
  PemPair leaf = Issue(ca, Spec("server-0"));
  EXPECT_EQ(Verify(ca.cert, leaf.cert, X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_EQ(Verify(ca.cert, leaf.cert, X509_PURPOSE_SSL_CLIENT), X509_V_OK);
}

TEST(TlsCerts, LeafHasTheLeafExtensions) {
  PemPair ca = MakeCa();
  PemPair leaf = Issue(ca, Spec("worker-3"));
  Ptr<X509> cert = ParseCert(leaf.cert);
  Ptr<X509> ca_cert = ParseCert(ca.cert);
  EXPECT_EQ(X509_check_ca(cert.get()), 0);
  EXPECT_FALSE(X509_get_extension_flags(cert.get()) & EXFLAG_CA);
  EXPECT_TRUE(X509_get_extension_flags(cert.get()) & EXFLAG_BCONS);  // CA:FALSE, present
  EXPECT_TRUE(IsCritical(cert.get(), NID_basic_constraints));
  EXPECT_EQ(X509_get_key_usage(cert.get()),
            static_cast<uint32_t>(KU_DIGITAL_SIGNATURE | KU_KEY_ENCIPHERMENT));
  EXPECT_TRUE(IsCritical(cert.get(), NID_key_usage));
  EXPECT_FALSE(IsCritical(cert.get(), NID_ext_key_usage));
  EXPECT_EQ(X509_get_extended_key_usage(cert.get()),
            static_cast<uint32_t>(XKU_SSL_SERVER | XKU_SSL_CLIENT));
  const ASN1_OCTET_STRING* akid = X509_get0_authority_key_id(cert.get());
  const ASN1_OCTET_STRING* ca_skid = X509_get0_subject_key_id(ca_cert.get());
  ASSERT_NE(akid, nullptr);
  ASSERT_NE(ca_skid, nullptr);
  EXPECT_EQ(ASN1_OCTET_STRING_cmp(akid, ca_skid), 0);
  EXPECT_NE(X509_get0_subject_key_id(cert.get()), nullptr);
  Ptr<EVP_PKEY> key = ParseKey(leaf.key);
  EXPECT_TRUE(EVP_PKEY_is_a(key.get(), "EC"));
  EXPECT_EQ(EVP_PKEY_get_bits(key.get()), 256);
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  EXPECT_EQ(X509_get_signature_nid(cert.get()), NID_ecdsa_with_SHA256);
}

TEST(TlsCerts, SerialsArePositiveRandomAndAtMost127Bits) {
  PemPair ca = MakeCa();
  std::vector<std::string> serials;
  for (int i = 0; i < 8; ++i) {
    Ptr<X509> cert = ParseCert(Issue(ca, Spec("worker")).cert);
    Ptr<BIGNUM> bn(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert.get()), nullptr));
    ASSERT_NE(bn, nullptr);
    EXPECT_FALSE(BN_is_negative(bn.get()));
    EXPECT_FALSE(BN_is_zero(bn.get()));
    EXPECT_LE(BN_num_bits(bn.get()), 127);
    char* hex = BN_bn2hex(bn.get());
    serials.push_back(hex);
    OPENSSL_free(hex);
  }
  std::sort(serials.begin(), serials.end());
  EXPECT_EQ(std::unique(serials.begin(), serials.end()), serials.end());
}

TEST(TlsCerts, LeafFromAnotherCaFailsVerification) {
  PemPair ca = MakeCa("CA one");
  PemPair other = MakeCa("CA two");
  PemPair leaf = Issue(other, Spec("server-0"));
  EXPECT_EQ(Verify(ca.cert, leaf.cert), X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
  EXPECT_EQ(Verify(other.cert, leaf.cert), X509_V_OK);
}

TEST(TlsCerts, CommonNameAndSansReadBack) {
  PemPair ca = MakeCa();
  CertificateSpec spec = Spec("server-1");
  spec.dns_names = {"localhost", "sift-server-1.sift.svc"};
  spec.ip_addresses = {"127.0.0.1", "10.0.0.5", "::1"};
  PemPair leaf = Issue(ca, spec);
  EXPECT_EQ(*CertificateCommonName(leaf.cert), "server-1");
  EXPECT_THAT(Sans(leaf.cert), ElementsAre("DNS:localhost", "DNS:sift-server-1.sift.svc",
                                           "IP:127.0.0.1", "IP:10.0.0.5", "IP:0:0:0:0:0:0:0:1"));
}

TEST(TlsCerts, NotAfterReadsBack) {
  PemPair ca = MakeCa();
  CertificateSpec spec = Spec("coordinator");
  spec.not_after = absl::FromUnixSeconds(4102444800);  // 2100-01-01: a GeneralizedTime
  PemPair leaf = Issue(ca, spec);
  EXPECT_EQ(*CertificateNotAfter(leaf.cert), spec.not_after);
}

TEST(TlsCerts, ExpiredLeafFailsVerification) {
  PemPair ca = MakeCa();
  CertificateSpec spec = Spec("worker-0");
  spec.not_before = absl::Now() - absl::Hours(48);
  spec.not_after = absl::Now() - absl::Hours(24);
  PemPair leaf = Issue(ca, spec);
  EXPECT_EQ(Verify(ca.cert, leaf.cert), X509_V_ERR_CERT_HAS_EXPIRED);
}

TEST(TlsCerts, BadSpecsAreInvalidArguments) {
  PemPair ca = MakeCa();
  for (const char* ip : {"10.0.0.256", "not-an-ip", "", "1.2.3.4/24"}) {
    CertificateSpec spec = Spec("server-0");
    spec.ip_addresses = {"127.0.0.1", ip};
    StatusOr<PemPair> r = IssueCertificate(ca, spec);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << ip;
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("'", ip, "'")));
    EXPECT_EQ(MakeCertificateAuthority(spec).status().code(), absl::StatusCode::kInvalidArgument);
  }
  for (const char* dns : {"", "a,DNS:evil.example", "has space"}) {
    CertificateSpec spec = Spec("server-0");
    spec.dns_names = {dns};
    StatusOr<PemPair> r = IssueCertificate(ca, spec);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << dns;
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("'", dns, "'")));
  }
  StatusOr<PemPair> empty_cn = IssueCertificate(ca, Spec(""));
  EXPECT_EQ(empty_cn.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty_cn.status().message(), HasSubstr("common name"));
  EXPECT_EQ(MakeCertificateAuthority(Spec("")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IssueCertificate(ca, Spec(std::string(65, 'a'))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IssueCertificate(ca, Spec(std::string(64, 'a'))).ok());
  CertificateSpec backwards = Spec("server-0");
  backwards.not_after = backwards.not_before;
  EXPECT_EQ(IssueCertificate(ca, backwards).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCertificateAuthority(backwards).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TlsCerts, BadCaIsInvalidArgument) {
  PemPair ca = MakeCa("CA one");
  PemPair other = MakeCa("CA two");
  StatusOr<PemPair> mismatched = IssueCertificate({ca.cert, other.key}, Spec("server-0"));
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("does not match"));

  StatusOr<PemPair> garbage = IssueCertificate({"not a PEM", ca.key}, Spec("server-0"));
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.status().message(), HasSubstr("CA certificate is not a PEM certificate"));
  // The OpenSSL error string rides along.
  EXPECT_THAT(garbage.status().message(), HasSubstr("error:"));

  StatusOr<PemPair> bad_key = IssueCertificate({ca.cert, "garbage"}, Spec("server-0"));
  EXPECT_EQ(bad_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_key.status().message(), HasSubstr("CA key"));

  PemPair leaf = Issue(ca, Spec("server-0"));  // a leaf cannot issue
  StatusOr<PemPair> not_ca = IssueCertificate(leaf, Spec("server-1"));
  EXPECT_EQ(not_ca.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_ca.status().message(), HasSubstr("not a CA"));
}

TEST(TlsCerts, CommonNameOfGarbageIsInvalidArgument) {
  EXPECT_EQ(CertificateCommonName("nope").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CertificateNotAfter("nope").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TlsCerts, WriteMemberDirWritesThreeFilesWithTheirModes) {
  TempDir tmp;
  PemPair ca = MakeCa();
  PemPair leaf = Issue(ca, Spec("server-0"));
  const std::string dir = tmp.Sub("certs/server-0");  // parents too
  ASSERT_TRUE(WriteMemberDir(dir, ca.cert, leaf).ok());
  EXPECT_THAT(ListDir(dir), UnorderedElementsAre("ca.crt", "tls.crt", "tls.key"));
  EXPECT_EQ(ReadAll(dir + "/ca.crt"), ca.cert);
  EXPECT_EQ(ReadAll(dir + "/tls.crt"), leaf.cert);
  EXPECT_EQ(ReadAll(dir + "/tls.key"), leaf.key);
  EXPECT_EQ(FileMode(dir + "/tls.key"), 0600);
  EXPECT_EQ(FileMode(dir), 0700);  // a new directory
  EXPECT_EQ(FileMode(dir + "/tls.crt") & 0600, 0600);
  // Only the three files: no temp or staging leftovers in the directory or next to it.
  EXPECT_THAT(ListDir(tmp.Sub("certs")), ElementsAre("server-0"));

  // A rotation overwrites; an existing directory keeps its mode.
  ASSERT_EQ(::chmod(dir.c_str(), 0750), 0);
  PemPair rotated = Issue(ca, Spec("server-0"));
  ASSERT_TRUE(WriteMemberDir(dir + "/", ca.cert, rotated).ok());
  EXPECT_EQ(ReadAll(dir + "/tls.key"), rotated.key);
  EXPECT_EQ(FileMode(dir + "/tls.key"), 0600);
  EXPECT_EQ(FileMode(dir), 0750);
  EXPECT_THAT(ListDir(dir), UnorderedElementsAre("ca.crt", "tls.crt", "tls.key"));
}

TEST(TlsCerts, WriteMemberDirRefusesAKeyThatIsNotTheCertificates) {
  TempDir tmp;
  PemPair ca = MakeCa();
  PemPair a = Issue(ca, Spec("server-0"));
  PemPair b = Issue(ca, Spec("server-1"));
  Status s = WriteMemberDir(tmp.Sub("m"), ca.cert, {a.cert, b.key});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("does not match"));
  EXPECT_FALSE(PathExists(tmp.Sub("m")));
  EXPECT_EQ(WriteMemberDir(tmp.Sub("m"), "garbage", a).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TlsCerts, CertificateAuthorityDirRoundTrips) {
  TempDir tmp;
  PemPair ca = MakeCa();
  const std::string dir = tmp.Sub("ca");
  ASSERT_TRUE(WriteCertificateAuthorityDir(dir, ca).ok());
  EXPECT_EQ(FileMode(dir + "/ca.key"), 0600);
  EXPECT_EQ(FileMode(dir), 0700);
  EXPECT_THAT(ListDir(dir), UnorderedElementsAre("ca.crt", "ca.key"));
  StatusOr<PemPair> back = ReadCertificateAuthority(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->cert, ca.cert);
  EXPECT_EQ(back->key, ca.key);
  EXPECT_EQ(Verify(ca.cert, Issue(*back, Spec("worker-7")).cert), X509_V_OK);
}

TEST(TlsCerts, ReadCertificateAuthorityErrorsNameTheFile) {
  TempDir tmp;
  PemPair ca = MakeCa();
  PemPair other = MakeCa("other");
  const std::string dir = tmp.Sub("ca");

  StatusOr<PemPair> missing = ReadCertificateAuthority(dir);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir + "/ca.crt"));

  ASSERT_TRUE(MakeDirs(dir).ok());
  WriteAll(dir + "/ca.crt", ca.cert);
  StatusOr<PemPair> no_key = ReadCertificateAuthority(dir);
  EXPECT_EQ(no_key.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_key.status().message(), HasSubstr(dir + "/ca.key"));

  WriteAll(dir + "/ca.key", "not a key");
  StatusOr<PemPair> bad_key = ReadCertificateAuthority(dir);
  EXPECT_EQ(bad_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_key.status().message(), HasSubstr(dir + "/ca.key"));

  WriteAll(dir + "/ca.key", other.key);
  StatusOr<PemPair> mismatched = ReadCertificateAuthority(dir);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr(dir + "/ca.key does not match"));

  WriteAll(dir + "/ca.crt", "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n");
  StatusOr<PemPair> bad_cert = ReadCertificateAuthority(dir);
  EXPECT_EQ(bad_cert.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_cert.status().message(), HasSubstr(dir + "/ca.crt"));
}

}  // namespace
}  // namespace sift
