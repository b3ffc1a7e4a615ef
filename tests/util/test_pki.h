// TestPki: the certificates and tokens of a secured test cluster, made with common/tls_certs.h
// under one directory, in the layout of `sift certs init`:
//   <root>/ca/               the cluster CA (ca.crt, ca.key)
//   <root>/coordinator/, server-<i>/, worker-<i>/   member directories (ca.crt, tls.crt, tls.key),
//                            every certificate naming 127.0.0.1 and localhost
//   <root>/client/           ca.crt only (a user of the CLI)
//   <root>/other-ca/worker-0/    a worker certificate from another CA (with that CA as ca.crt)
//   <root>/expired/worker-0/     a worker certificate of the cluster CA that expired yesterday
//   <root>/tokens.csv        admin (admin), alice and bob (operator), rita (reader); mode 0600
//   <root>/token-<user>      each user's token file (mode 0600)
#pragma once

#include <string>

#include "common/security.h"
#include "common/status.h"

namespace sift::testing {

struct TestPki {
  // Makes everything above under `root` (created). ADD_FAILURE on errors.
  static TestPki Make(const std::string& root, int servers, int workers);

  std::string root;
  // A client's security: the CA of `dir` ("client", "worker-0", "other-ca/worker-0", ...) and the
  // token of `user` ("" = none).
  SecurityOptions As(const std::string& dir, const std::string& user = "") const;
  std::string TokenFile(const std::string& user) const { return root + "/token-" + user; }
  std::string TokensFile() const { return root + "/tokens.csv"; }
  // The token of `user` as written in tokens.csv.
  static std::string Token(const std::string& user);
};

}  // namespace sift::testing
