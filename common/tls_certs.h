// The cluster's certificates: a self-signed CA and the member certificates it signs, for TLS with
// mutual authentication on sift's gRPC endpoints. A member's identity is its certificate's Subject
// CN: `coordinator`, `server-<i>`, `worker-<i>` or `worker`. On disk a member directory follows
// cert-manager's Secret layout (`ca.crt`, `tls.crt`, `tls.key`), so the same directory works as a
// Kubernetes Secret; the CA's directory holds `ca.crt` and `ca.key`.
//
// Keys are ECDSA P-256, signatures SHA-256, private keys PEM PKCS#8 (unencrypted: protect them with
// file modes, which the writers here set). Implemented over OpenSSL's libcrypto, which no caller
// needs to include. All functions are thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/status.h"

namespace sift {

// The files of a member directory and of the CA's directory.
inline constexpr char kCaCertFile[] = "ca.crt";    // the cluster CA's certificate (PEM)
inline constexpr char kCaKeyFile[] = "ca.key";     // the CA's private key (PEM), CA directory only
inline constexpr char kTlsCertFile[] = "tls.crt";  // the member's certificate (PEM)
inline constexpr char kTlsKeyFile[] = "tls.key";   // the member's private key (PEM, mode 0600)

// A PEM certificate and its PEM private key (PKCS#8).
struct PemPair {
  std::string cert;
  std::string key;
};

// What goes into a certificate.
struct CertificateSpec {
  std::string common_name;  // Subject CN, e.g. "server-0": 1 to 64 characters
  // subjectAltName DNS entries: each [A-Za-z0-9*._-]+ (a host name, or a wildcard like *.svc).
  std::vector<std::string> dns_names;
  // subjectAltName IP entries, IPv4 or IPv6 text ("10.0.0.5", "::1").
  std::vector<std::string> ip_addresses;
  absl::Time not_before;  // validity; REQUIRES: not_before < not_after
  absl::Time not_after;
};

// A self-signed CA: a fresh ECDSA P-256 key, random 127-bit positive serial, basicConstraints
// critical CA:TRUE, keyUsage critical keyCertSign+cRLSign, a subject key id, and the spec's SANs
// if any. INVALID_ARGUMENT naming what is wrong in `spec` (empty or too long CN, not_after <=
// not_before, a bad DNS name or IP address).
StatusOr<PemPair> MakeCertificateAuthority(const CertificateSpec& spec);

// A leaf certificate signed by `ca` (SHA-256): a fresh ECDSA P-256 key, random 127-bit positive
// serial, basicConstraints critical CA:FALSE, keyUsage critical digitalSignature+keyEncipherment,
// extendedKeyUsage serverAuth+clientAuth (a member both serves and calls), the spec's SANs, subject
// and authority key ids. INVALID_ARGUMENT naming what is wrong: `ca` not a PEM certificate and key,
// not a CA certificate, a key not matching it, or a bad spec (as for MakeCertificateAuthority).
StatusOr<PemPair> IssueCertificate(const PemPair& ca, const CertificateSpec& spec);

// Writes dir/ca.crt (`ca_cert_pem`), dir/tls.crt and dir/tls.key (`member`), each atomically,
// creating `dir` (mode 0700) and its parents if missing; an existing `dir` keeps its mode. tls.key
// gets mode 0600 and is never readable by others, not even while it is written. Overwrites the
// files of an earlier member (a rotation); a reader may meet old and new files mixed in between.
// INVALID_ARGUMENT if the PEM texts do not parse or the key does not match the certificate.
Status WriteMemberDir(const std::string& dir, const std::string& ca_cert_pem,
                      const PemPair& member);

// Writes dir/ca.crt and dir/ca.key (mode 0600) of a CA made by MakeCertificateAuthority, as
// WriteMemberDir writes a member's files. INVALID_ARGUMENT as for WriteMemberDir.
Status WriteCertificateAuthorityDir(const std::string& dir, const PemPair& ca);

// Reads dir/ca.crt and dir/ca.key back (for issuing more members). NOT_FOUND naming the missing
// file; INVALID_ARGUMENT naming the file that does not parse, that is not a CA certificate, or
// the key that does not match the certificate.
StatusOr<PemPair> ReadCertificateAuthority(const std::string& dir);

// The Subject CN of a PEM certificate. INVALID_ARGUMENT if it does not parse or has no CN.
StatusOr<std::string> CertificateCommonName(const std::string& cert_pem);

// The end of a PEM certificate's validity. INVALID_ARGUMENT if it does not parse.
StatusOr<absl::Time> CertificateNotAfter(const std::string& cert_pem);

}  // namespace sift
