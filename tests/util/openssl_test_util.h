// OpenSSL as the tests' oracle for certificates (tls_certs_test, cli_certs_test): an owning
// pointer for OpenSSL objects, PEM parsing, X509_verify_cert against one CA, and the SANs.
// Header-only; link OpenSSL::Crypto.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "gtest/gtest.h"

namespace sift::testing {

struct OpenSslFree {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
template <typename T>
using OsslPtr = std::unique_ptr<T, OpenSslFree>;

// The certificate of a PEM text (EXPECT failure and null when it does not parse).
inline OsslPtr<X509> ParseCert(const std::string& pem) {
  OsslPtr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  OsslPtr<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  EXPECT_NE(cert, nullptr) << pem;
  return cert;
}

// X509_verify_cert of `leaf_pem` against the one CA `ca_pem` for `purpose`: X509_V_OK or the
// verifier's error.
inline int VerifyCert(const std::string& ca_pem, const std::string& leaf_pem,
                      int purpose = X509_PURPOSE_SSL_SERVER) {
  OsslPtr<X509> ca = ParseCert(ca_pem);
  OsslPtr<X509> leaf = ParseCert(leaf_pem);
  OsslPtr<X509_STORE> store(X509_STORE_new());
  EXPECT_EQ(X509_STORE_add_cert(store.get(), ca.get()), 1);
  OsslPtr<X509_STORE_CTX> ctx(X509_STORE_CTX_new());
  EXPECT_EQ(X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr), 1);
  EXPECT_EQ(X509_STORE_CTX_set_purpose(ctx.get(), purpose), 1);
  if (X509_verify_cert(ctx.get()) == 1) return X509_V_OK;
  const int err = X509_STORE_CTX_get_error(ctx.get());
  return err == X509_V_OK ? X509_V_ERR_UNSPECIFIED : err;
}

// The subjectAltName entries, "DNS:name" and "IP:address" (IPv4 dotted, IPv6 as OpenSSL prints
// it), in order.
inline std::vector<std::string> CertSans(const std::string& cert_pem) {
  OsslPtr<X509> cert = ParseCert(cert_pem);
  OsslPtr<GENERAL_NAMES> names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  std::vector<std::string> out;
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names.get(), i);
    if (gn->type == GEN_DNS) {
      const ASN1_STRING* s = gn->d.dNSName;
      out.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                         static_cast<size_t>(ASN1_STRING_length(s))));
    } else if (gn->type == GEN_IPADD) {
      char* text = nullptr;
      OsslPtr<BIO> bio(BIO_new(BIO_s_mem()));
      GENERAL_NAME_print(bio.get(), const_cast<GENERAL_NAME*>(gn));
      const long n = BIO_get_mem_data(bio.get(), &text);
      const std::string printed(text, static_cast<size_t>(n));  // "IP Address:1.2.3.4"
      out.push_back("IP:" + printed.substr(printed.find(':') + 1));
    }
  }
  return out;
}

}  // namespace sift::testing
