#include "common/tls_certs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace sift {
namespace {

// Owning pointers to OpenSSL objects: every object is freed on every path.
struct OpenSslFree {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(GENERAL_NAME* p) const { GENERAL_NAME_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
  // Also ASN1_INTEGER, ASN1_IA5STRING, ASN1_OCTET_STRING: one type in OpenSSL.
  void operator()(ASN1_STRING* p) const { ASN1_STRING_free(p); }
  void operator()(unsigned char* p) const { OPENSSL_free(p); }
};
template <typename T>
using OsslPtr = std::unique_ptr<T, OpenSslFree>;

// The longest Subject CN X.509 allows (RFC 5280, ub-common-name).
constexpr size_t kMaxCommonName = 64;
// 16 random bytes with the top bit cleared: a positive serial of at most 127 bits, which stays
// within RFC 5280's 20 octets once DER-encoded.
constexpr size_t kSerialBytes = 16;

// Drains this thread's OpenSSL error queue into one line.
std::string OpenSslErrors() {
  std::string out;
  char buf[256];
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("no OpenSSL error reported") : out;
}

Status OpenSslError(absl::StatusCode code, absl::string_view what) {
  return Status(code, absl::StrCat(what, ": ", OpenSslErrors()));
}

Status InternalOpenSslError(absl::string_view what) {
  return OpenSslError(absl::StatusCode::kInternal, what);
}

// --- PEM in and out ---------------------------------------------------------------------------

OsslPtr<BIO> MemoryBio(const std::string& pem) {
  return OsslPtr<BIO>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// A passphrase callback that refuses: an encrypted key is an error, never a terminal prompt.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return -1; }

// `what` names the text in the error ("CA certificate").
StatusOr<OsslPtr<X509>> ParseCertificate(const std::string& pem, absl::string_view what) {
  ERR_clear_error();
  OsslPtr<BIO> bio = MemoryBio(pem);
  if (bio == nullptr) return InternalOpenSslError("BIO_new_mem_buf");
  OsslPtr<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  if (cert == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(what, " is not a PEM certificate"));
  }
  return cert;
}

StatusOr<OsslPtr<EVP_PKEY>> ParsePrivateKey(const std::string& pem, absl::string_view what) {
  ERR_clear_error();
  OsslPtr<BIO> bio = MemoryBio(pem);
  if (bio == nullptr) return InternalOpenSslError("BIO_new_mem_buf");
  OsslPtr<EVP_PKEY> key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(what, " is not an unencrypted PEM private key"));
  }
  return key;
}

// Everything written to a memory BIO by `write` (returning 1 on success), as a string.
template <typename WriteFn>
StatusOr<std::string> ToPem(absl::string_view what, WriteFn write) {
  OsslPtr<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr) return InternalOpenSslError("BIO_new");
  if (write(bio.get()) != 1) return InternalOpenSslError(absl::StrCat("writing the PEM ", what));
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

StatusOr<PemPair> ToPemPair(X509* cert, EVP_PKEY* key) {
  PemPair out;
  SIFT_ASSIGN_OR_RETURN(
      out.cert, ToPem("certificate", [cert](BIO* b) { return PEM_write_bio_X509(b, cert); }));
  // PEM_write_bio_PrivateKey writes PKCS#8 ("BEGIN PRIVATE KEY") in OpenSSL 3.
  SIFT_ASSIGN_OR_RETURN(out.key, ToPem("private key", [key](BIO* b) {
                          return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr,
                                                          nullptr);
                        }));
  return out;
}

// --- The spec -----------------------------------------------------------------------------------

bool IsDnsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_' || c == '*';
}

Status ValidateDnsName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 253;
  for (char c : name) ok = ok && IsDnsNameChar(c);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("DNS name '", name, "' is not a host name ([A-Za-z0-9*._-]+, <= 253 chars)"));
  }
  return absl::OkStatus();
}

// The 4 or 16 bytes of an IPv4 or IPv6 address in text.
StatusOr<std::string> ParseIpAddress(const std::string& text) {
  unsigned char buf[16];
  if (::inet_pton(AF_INET, text.c_str(), buf) == 1) return std::string(buf, buf + 4);
  if (::inet_pton(AF_INET6, text.c_str(), buf) == 1) return std::string(buf, buf + 16);
  return absl::InvalidArgumentError(
      absl::StrCat("IP address '", text, "' is not an IPv4 or IPv6 address"));
}

Status ValidateSpec(const CertificateSpec& spec) {
  if (spec.common_name.empty()) return absl::InvalidArgumentError("the common name (CN) is empty");
  if (spec.common_name.size() > kMaxCommonName) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the common name '", spec.common_name, "' is longer than ", kMaxCommonName, " characters"));
  }
  if (spec.not_after <= spec.not_before) {
    return absl::InvalidArgumentError(absl::StrCat(
        "certificate '", spec.common_name, "': not_after (", absl::FormatTime(spec.not_after),
        ") is not after not_before (", absl::FormatTime(spec.not_before), ")"));
  }
  for (const std::string& dns : spec.dns_names) SIFT_RETURN_IF_ERROR(ValidateDnsName(dns));
  for (const std::string& ip : spec.ip_addresses) {
    SIFT_RETURN_IF_ERROR(ParseIpAddress(ip).status());
  }
  return absl::OkStatus();
}

// --- Building a certificate ---------------------------------------------------------------------

StatusOr<OsslPtr<EVP_PKEY>> NewP256Key() {
  ERR_clear_error();
  OsslPtr<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (key == nullptr) return InternalOpenSslError("generating an ECDSA P-256 key");
  return key;
}

Status SetRandomSerial(X509* cert) {
  unsigned char bytes[kSerialBytes];
  do {
    if (RAND_bytes(bytes, sizeof(bytes)) != 1) return InternalOpenSslError("RAND_bytes");
    bytes[0] &= 0x7f;
  } while (std::all_of(bytes, bytes + sizeof(bytes), [](unsigned char b) { return b == 0; }));
  OsslPtr<BIGNUM> bn(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  if (bn == nullptr) return InternalOpenSslError("BN_bin2bn");
  OsslPtr<ASN1_INTEGER> serial(BN_to_ASN1_INTEGER(bn.get(), nullptr));
  if (serial == nullptr || X509_set_serialNumber(cert, serial.get()) != 1) {
    return InternalOpenSslError("setting the serial number");
  }
  return absl::OkStatus();
}

Status SetValidity(X509* cert, const CertificateSpec& spec) {
  if (ASN1_TIME_set(X509_getm_notBefore(cert), absl::ToTimeT(spec.not_before)) == nullptr) {
    return OpenSslError(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat("not_before ", absl::FormatTime(spec.not_before), " is out of X.509's range"));
  }
  if (ASN1_TIME_set(X509_getm_notAfter(cert), absl::ToTimeT(spec.not_after)) == nullptr) {
    return OpenSslError(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat("not_after ", absl::FormatTime(spec.not_after), " is out of X.509's range"));
  }
  return absl::OkStatus();
}

Status SetSubjectCommonName(X509* cert, const std::string& cn) {
  X509_NAME* name = X509_get_subject_name(cert);  // owned by cert
  const auto* bytes = reinterpret_cast<const unsigned char*>(cn.data());
  if (X509_NAME_add_entry_by_NID(name, NID_commonName, MBSTRING_UTF8, bytes,
                                 static_cast<int>(cn.size()), -1, 0) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, absl::StrCat("common name '", cn, "'"));
  }
  return absl::OkStatus();
}

// Adds the extension `nid` written in openssl.cnf's syntax ("critical,CA:TRUE"). `ctx` names the
// issuer and subject certificates (for the key ids).
Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  OsslPtr<X509_EXTENSION> ext(X509V3_EXT_nconf_nid(nullptr, ctx, nid, value));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return InternalOpenSslError(absl::StrCat("adding ", OBJ_nid2sn(nid), " = ", value));
  }
  return absl::OkStatus();
}

// One GENERAL_NAME of `type` (GEN_DNS: IA5String; GEN_IPADD: OCTET STRING) holding `bytes`.
Status AppendGeneralName(GENERAL_NAMES* names, int type, const std::string& bytes) {
  OsslPtr<ASN1_STRING> value(type == GEN_DNS ? ASN1_IA5STRING_new() : ASN1_OCTET_STRING_new());
  if (value == nullptr ||
      ASN1_STRING_set(value.get(), bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return InternalOpenSslError("ASN1_STRING_set");
  }
  OsslPtr<GENERAL_NAME> name(GENERAL_NAME_new());
  if (name == nullptr) return InternalOpenSslError("GENERAL_NAME_new");
  GENERAL_NAME_set0_value(name.get(), type, value.release());
  if (sk_GENERAL_NAME_push(names, name.get()) == 0) return InternalOpenSslError("push a SAN");
  name.release();  // owned by `names` now
  return absl::OkStatus();
}

// subjectAltName with the spec's DNS names and IP addresses (built as values, not as config text,
// so no name can smuggle in another entry); nothing when there are none.
Status AddSubjectAltNames(X509* cert, const CertificateSpec& spec) {
  if (spec.dns_names.empty() && spec.ip_addresses.empty()) return absl::OkStatus();
  OsslPtr<GENERAL_NAMES> names(sk_GENERAL_NAME_new_null());
  if (names == nullptr) return InternalOpenSslError("sk_GENERAL_NAME_new_null");
  for (const std::string& dns : spec.dns_names) {
    SIFT_RETURN_IF_ERROR(AppendGeneralName(names.get(), GEN_DNS, dns));
  }
  for (const std::string& ip : spec.ip_addresses) {
    SIFT_ASSIGN_OR_RETURN(std::string bytes, ParseIpAddress(ip));
    SIFT_RETURN_IF_ERROR(AppendGeneralName(names.get(), GEN_IPADD, bytes));
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return InternalOpenSslError("adding subjectAltName");
  }
  return absl::OkStatus();
}

// A v3 certificate for `spec` with `key`'s public key, issued by `issuer_name`: serial,
// validity, subject, SANs; the caller adds the other extensions and signs.
StatusOr<OsslPtr<X509>> NewCertificate(const CertificateSpec& spec, EVP_PKEY* key,
                                       const X509_NAME* issuer_name) {
  OsslPtr<X509> cert(X509_new());
  if (cert == nullptr) return InternalOpenSslError("X509_new");
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1) {
    return InternalOpenSslError("X509_set_version");
  }
  SIFT_RETURN_IF_ERROR(SetRandomSerial(cert.get()));
  SIFT_RETURN_IF_ERROR(SetValidity(cert.get(), spec));
  SIFT_RETURN_IF_ERROR(SetSubjectCommonName(cert.get(), spec.common_name));
  const X509_NAME* issuer = issuer_name ? issuer_name : X509_get_subject_name(cert.get());
  if (X509_set_issuer_name(cert.get(), issuer) != 1) {
    return InternalOpenSslError("X509_set_issuer_name");
  }
  if (X509_set_pubkey(cert.get(), key) != 1) return InternalOpenSslError("X509_set_pubkey");
  SIFT_RETURN_IF_ERROR(AddSubjectAltNames(cert.get(), spec));
  return cert;
}

Status Sign(X509* cert, EVP_PKEY* issuer_key) {
  if (X509_sign(cert, issuer_key, EVP_sha256()) == 0) {
    return InternalOpenSslError("signing the certificate");
  }
  return absl::OkStatus();
}

// The CA's certificate and key, checked to belong together and to be a CA.
struct ParsedCa {
  OsslPtr<X509> cert;
  OsslPtr<EVP_PKEY> key;
};

// INVALID_ARGUMENT unless `cert` is a CA certificate whose public key matches `key`; the
// messages name the texts `cert_what` and `key_what`.
Status CheckCaPair(X509* cert, EVP_PKEY* key, absl::string_view cert_what,
                   absl::string_view key_what) {
  if (X509_check_ca(cert) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(cert_what, " is not a CA certificate (no basicConstraints CA:TRUE)"));
  }
  ERR_clear_error();
  if (X509_check_private_key(cert, key) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(key_what, " does not match ", cert_what));
  }
  return absl::OkStatus();
}

StatusOr<ParsedCa> ParseCa(const PemPair& ca, absl::string_view cert_what,
                           absl::string_view key_what) {
  ParsedCa out;
  SIFT_ASSIGN_OR_RETURN(out.cert, ParseCertificate(ca.cert, cert_what));
  SIFT_ASSIGN_OR_RETURN(out.key, ParsePrivateKey(ca.key, key_what));
  SIFT_RETURN_IF_ERROR(CheckCaPair(out.cert.get(), out.key.get(), cert_what, key_what));
  return out;
}

// INVALID_ARGUMENT unless `pair` parses and its key matches its certificate.
Status CheckPemPair(const PemPair& pair, absl::string_view cert_what, absl::string_view key_what) {
  SIFT_ASSIGN_OR_RETURN(OsslPtr<X509> cert, ParseCertificate(pair.cert, cert_what));
  SIFT_ASSIGN_OR_RETURN(OsslPtr<EVP_PKEY> key, ParsePrivateKey(pair.key, key_what));
  ERR_clear_error();
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(key_what, " does not match ", cert_what));
  }
  return absl::OkStatus();
}

// --- Files --------------------------------------------------------------------------------------

Status ErrnoError(absl::string_view what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string ParentDir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? std::string(".") : parent;
}

std::string BaseName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// Creates `dir` with mode 0700 (its parents as MakeDirs does) unless it exists; an existing
// directory keeps its mode.
Status MakePrivateDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(dir, ": exists and is not a directory"));
    }
    return absl::OkStatus();
  }
  SIFT_RETURN_IF_ERROR(MakeDirs(ParentDir(dir)));
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError("cannot create directory", dir);
  }
  return absl::OkStatus();
}

Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync directory", dir);
  return absl::OkStatus();
}

// A fresh directory (mode 0700, from mkdtemp) next to `path`, removed with what is left in it when
// this goes out of scope.
class StagingDir {
 public:
  ~StagingDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  Status Create(const std::string& next_to) {
    std::string tmpl =
        JoinPath(ParentDir(next_to), absl::StrCat(".", BaseName(next_to), ".XXXXXX"));
    if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoError("cannot create directory", tmpl);
    path_ = tmpl;
    return absl::OkStatus();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `data` to `path` atomically with mode 0600, never readable by others: WriteFileAtomic's
// temp file (created 0644 less the umask) lives in a 0700 staging directory next to `path`, the
// finished file gets 0600 there, and only then is it renamed over `path`.
Status WritePrivateFileAtomic(const std::string& path, const std::string& data) {
  StagingDir staging;
  SIFT_RETURN_IF_ERROR(staging.Create(path));
  const std::string staged = JoinPath(staging.path(), BaseName(path));
  SIFT_RETURN_IF_ERROR(WriteFileAtomic(staged, data));
  if (::chmod(staged.c_str(), 0600) != 0) return ErrnoError("chmod 0600", staged);
  if (::rename(staged.c_str(), path.c_str()) != 0) return ErrnoError("rename failed", path);
  return FsyncDirectory(ParentDir(path));
}

}  // namespace

StatusOr<PemPair> MakeCertificateAuthority(const CertificateSpec& spec) {
  SIFT_RETURN_IF_ERROR(ValidateSpec(spec));
  SIFT_ASSIGN_OR_RETURN(OsslPtr<EVP_PKEY> key, NewP256Key());
  SIFT_ASSIGN_OR_RETURN(OsslPtr<X509> cert, NewCertificate(spec, key.get(), nullptr));
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  SIFT_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE"));
  SIFT_RETURN_IF_ERROR(
      AddExtension(cert.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
  SIFT_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  SIFT_RETURN_IF_ERROR(Sign(cert.get(), key.get()));
  return ToPemPair(cert.get(), key.get());
}

StatusOr<PemPair> IssueCertificate(const PemPair& ca, const CertificateSpec& spec) {
  SIFT_ASSIGN_OR_RETURN(ParsedCa issuer, ParseCa(ca, "the CA certificate", "the CA key"));
  SIFT_RETURN_IF_ERROR(ValidateSpec(spec));
  SIFT_ASSIGN_OR_RETURN(OsslPtr<EVP_PKEY> key, NewP256Key());
  SIFT_ASSIGN_OR_RETURN(OsslPtr<X509> cert,
                        NewCertificate(spec, key.get(), X509_get_subject_name(issuer.cert.get())));
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer.cert.get(), cert.get(), nullptr, nullptr, 0);
  SIFT_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
  SIFT_RETURN_IF_ERROR(
      AddExtension(cert.get(), &ctx, NID_key_usage, "critical,digitalSignature,keyEncipherment"));
  SIFT_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_ext_key_usage, "serverAuth,clientAuth"));
  SIFT_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  // The CA's key id when it has one (ours do), else its issuer name and serial.
  SIFT_RETURN_IF_ERROR(
      AddExtension(cert.get(), &ctx, NID_authority_key_identifier, "keyid,issuer"));
  SIFT_RETURN_IF_ERROR(Sign(cert.get(), issuer.key.get()));
  return ToPemPair(cert.get(), key.get());
}

Status WriteMemberDir(const std::string& dir, const std::string& ca_cert_pem,
                      const PemPair& member) {
  SIFT_RETURN_IF_ERROR(ParseCertificate(ca_cert_pem, "the CA certificate").status());
  SIFT_RETURN_IF_ERROR(CheckPemPair(member, "the member certificate", "the member key"));
  const std::string d = WithoutTrailingSlashes(dir);
  SIFT_RETURN_IF_ERROR(MakePrivateDir(d));
  SIFT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(d, kCaCertFile), ca_cert_pem));
  SIFT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(d, kTlsCertFile), member.cert));
  return WritePrivateFileAtomic(JoinPath(d, kTlsKeyFile), member.key);
}

Status WriteCertificateAuthorityDir(const std::string& dir, const PemPair& ca) {
  SIFT_RETURN_IF_ERROR(ParseCa(ca, "the CA certificate", "the CA key").status());
  const std::string d = WithoutTrailingSlashes(dir);
  SIFT_RETURN_IF_ERROR(MakePrivateDir(d));
  SIFT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(d, kCaCertFile), ca.cert));
  return WritePrivateFileAtomic(JoinPath(d, kCaKeyFile), ca.key);
}

StatusOr<PemPair> ReadCertificateAuthority(const std::string& dir) {
  const std::string cert_path = JoinPath(dir, kCaCertFile);
  const std::string key_path = JoinPath(dir, kCaKeyFile);
  PemPair ca;
  SIFT_ASSIGN_OR_RETURN(ca.cert, ReadFileToString(cert_path));
  SIFT_ASSIGN_OR_RETURN(ca.key, ReadFileToString(key_path));
  SIFT_RETURN_IF_ERROR(ParseCa(ca, cert_path, key_path).status());
  return ca;
}

StatusOr<std::string> CertificateCommonName(const std::string& cert_pem) {
  SIFT_ASSIGN_OR_RETURN(OsslPtr<X509> cert, ParseCertificate(cert_pem, "the certificate"));
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) return absl::InvalidArgumentError("the certificate's subject has no CN");
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, data);
  if (n < 0) return InternalOpenSslError("ASN1_STRING_to_UTF8");
  OsslPtr<unsigned char> owned(utf8);
  return std::string(reinterpret_cast<const char*>(utf8), static_cast<size_t>(n));
}

StatusOr<absl::Time> CertificateNotAfter(const std::string& cert_pem) {
  SIFT_ASSIGN_OR_RETURN(OsslPtr<X509> cert, ParseCertificate(cert_pem, "the certificate"));
  struct tm tm = {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &tm) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, "the certificate's notAfter");
  }
  return absl::FromTimeT(::timegm(&tm));
}

}  // namespace sift
