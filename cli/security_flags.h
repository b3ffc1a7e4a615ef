// The security flags (common/security.h), one definition for every command: the same names as
// the environment variables and the job spec's `security:` block.
//   --tls-dir      SIFT_TLS_DIR      security.tls_dir      ca.crt (+ tls.crt, tls.key)
//   --tokens-file  SIFT_TOKENS_FILE  security.tokens_file  servers: the users' tokens
//   --token-file   SIFT_TOKEN_FILE   security.token_file   clients: this user's token
//   --tls-server-name SIFT_TLS_SERVER_NAME                 clients: the name the server's
//                                                          certificate must carry
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "common/security.h"

namespace sift::cli {

enum class SecurityFlagsFor {
  kServer,  // coordinator: --tls-dir, --tokens-file
  kMember,  // embedding server, worker: --tls-dir
  kClient,  // CLI job commands, health: --tls-dir, --token-file, --tls-server-name
};

inline void AddSecurityFlags(CLI::App* cmd, SecurityOptions* o, SecurityFlagsFor which) {
  const char* tls_help =
      which == SecurityFlagsFor::kClient
          ? "TLS: a directory with the cluster CA's ca.crt (`sift certs init` makes one; its "
            "client/ dir is enough for users); off when unset"
          : "TLS and mutual TLS: a directory with ca.crt (the cluster CA), tls.crt and tls.key "
            "(this member's certificate, CN coordinator / server-<i> / worker-<i>; the layout of "
            "a cert-manager Secret and of `sift certs init`); off when unset";
  cmd->add_option("--tls-dir", o->tls_dir, tls_help)->envname("SIFT_TLS_DIR");
  if (which == SecurityFlagsFor::kServer) {
    cmd->add_option("--tokens-file", o->tokens_file,
                    "Users' bearer tokens, one `token,user,role` line each (role admin, operator "
                    "or reader); re-read when it changes or on SIGHUP; needs --tls-dir; mode 0600")
        ->envname("SIFT_TOKENS_FILE");
  }
  if (which == SecurityFlagsFor::kClient) {
    cmd->add_option("--token-file", o->token_file,
                    "A file whose first line is your bearer token (needs --tls-dir; mode 0600)")
        ->envname("SIFT_TOKEN_FILE");
    cmd->add_option("--tls-server-name", o->server_name_override,
                    "The name the server's certificate must carry, when it is not the host "
                    "dialled")
        ->envname("SIFT_TLS_SERVER_NAME");
  }
}

}  // namespace sift::cli
