// The security of one run of processes this command starts itself (`sift local --secure`,
// `sift bench ps|cluster --tls`): a fresh cluster CA, a certificate for every member, and one
// admin token for the command, in the layout of `sift certs init`. Thin; no gRPC.
#pragma once

#include <string>

#include "common/security.h"
#include "common/status.h"

namespace sift::cli {

struct RunSecurity {
  std::string dir;          // coordinator/, server-<i>/, worker-<i>/, client/
  std::string tokens_file;  // the coordinator's
  SecurityOptions client;   // this command's: client/ca.crt and the admin token
};
// Makes everything under `dir`: ca/, coordinator/, server-<i>/, worker-<i>/ (certificates naming
// 127.0.0.1 and localhost, valid 30 days), client/ (ca.crt and the token), tokens.csv (the admin
// token, user "local"). Keys and tokens mode 0600.
StatusOr<RunSecurity> MakeRunSecurity(const std::string& dir, int servers, int workers);

}  // namespace sift::cli
